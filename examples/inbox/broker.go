package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// dedupeWindow is the stream's deduplication window, the shortest
// JetStream accepts: a payment published again with the same Nats-Msg-Id
// after it is stored as a new message, which the consumers receive as a
// duplicate.
const dedupeWindow = 100 * time.Millisecond

// maxInflight bounds the payments published and not yet acked by JetStream.
const maxInflight = 256

// durable is the name of the JetStream consumer every consumer process
// pulls from: JetStream spreads the messages among them.
const durable = "payments"

// payment is one message: credit Amount to Account.
type payment struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// payments returns the payments of a run and which of them the producer
// publishes twice; the same seed gives the same ones.
func payments(c config) (pays []payment, twice []bool) {
	r := rand.New(rand.NewPCG(c.seed, 0))
	pays, twice = make([]payment, c.payments), make([]bool, c.payments)
	for i := range pays {
		pays[i] = payment{Account: fmt.Sprintf("acct-%03d", r.IntN(c.accounts)), Amount: 1 + r.Int64N(10_000)}
		twice[i] = r.Float64() < c.republish
	}
	return pays, twice
}

// paymentID is the message id of payment i of run: its Nats-Msg-Id, and
// the id the inbox records.
func paymentID(run string, i int) string { return fmt.Sprintf("pay-%s-%06d", run, i) }

// names are the JetStream names of a run: each run has a stream of its own.
func streamName(run string) string { return "INBOX_DEMO_" + run }
func subject(run string) string    { return "inbox-demo." + run + ".payments" }

// connect connects to the NATS server at url and returns its JetStream.
func connect(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name("seqlease-inbox-demo"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w (is a server with JetStream running there? leave -nats empty for an embedded one)", url, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2*maxInflight))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// setupStream creates the run's stream (in memory, with the shortest
// dedupe window) and its durable consumer: explicit acks, redelivery
// after ackWait, no limit on deliveries.
func setupStream(ctx context.Context, js jetstream.JetStream, run string, ackWait time.Duration) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: streamName(run), Subjects: []string{subject(run)},
		Storage: jetstream.MemoryStorage, Duplicates: dedupeWindow,
	})
	if err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	_, err = js.CreateOrUpdateConsumer(ctx, streamName(run), jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		MaxAckPending: 1000,
	})
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	return nil
}

// produce publishes every payment with its id as Nats-Msg-Id, without
// waiting for each ack (at most maxInflight in flight), then the ones
// marked twice again with the same id. A second publish inside the dedupe
// window is dropped by JetStream (the ack says Duplicate), so it is
// repeated, a window later, until the stream stored it: the consumers then
// really receive that payment twice. It returns how many payments were stored
// twice.
func produce(ctx context.Context, js jetstream.JetStream, run string, pays []payment, twice []bool) (int, error) {
	body := func(i int) []byte {
		b, _ := json.Marshal(pays[i]) // two plain fields: cannot fail
		return b
	}
	type inflight struct {
		i int
		f jetstream.PubAckFuture
	}
	var window []inflight // the publishes not yet acked, oldest first
	acked := func() error {
		p := window[0]
		window = window[1:]
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.f.Ok():
			return nil
		case err := <-p.f.Err():
			return fmt.Errorf("publish %s: %w", paymentID(run, p.i), err)
		}
	}
	var again []int
	for i := range pays {
		if len(window) == maxInflight { // wait for the oldest: the client never stalls
			if err := acked(); err != nil {
				return 0, err
			}
		}
		f, err := js.PublishAsync(subject(run), body(i), jetstream.WithMsgID(paymentID(run, i)))
		if err != nil {
			return 0, fmt.Errorf("publish %s: %w", paymentID(run, i), err)
		}
		window = append(window, inflight{i, f})
		if twice[i] {
			again = append(again, i)
		}
	}
	for len(window) > 0 {
		if err := acked(); err != nil {
			return 0, err
		}
	}
	stored := len(again)
	for len(again) > 0 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(dedupeWindow):
		}
		left := again[:0]
		for _, i := range again {
			ack, err := js.Publish(ctx, subject(run), body(i), jetstream.WithMsgID(paymentID(run, i)))
			if err != nil {
				return 0, fmt.Errorf("publish %s again: %w", paymentID(run, i), err)
			}
			if ack.Duplicate { // still inside the window: try again later
				left = append(left, i)
			}
		}
		again = left
	}
	return stored, nil
}

// drained reports whether the consumer has delivered every message of the
// stream and had every delivery acked.
func drained(ctx context.Context, js jetstream.JetStream, run string) (bool, error) {
	cons, err := js.Consumer(ctx, streamName(run), durable)
	if err != nil {
		return false, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return false, err
	}
	return info.NumPending == 0 && info.NumAckPending == 0, nil
}
