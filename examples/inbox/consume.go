package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// counts are what the consumers of a process saw.
type counts struct {
	Deliveries int64 // messages handled
	Applied    int64 // first receipts: credited
	Duplicates int64 // receipts the inbox knew: nothing changed
	Withheld   int64 // first receipts committed but not acked on purpose
	Failed     int64 // transactions that failed: not acked, redelivered
	// LastApplied is when the last first receipt was credited (Unix
	// nanoseconds): the end of the useful work, without the ack waits of
	// the redeliveries that follow.
	LastApplied int64
}

// consumer is the consumers of one process.
type consumer struct {
	c   config
	run string
	l   ledger
	n   struct{ deliveries, applied, duplicates, withheld, failed, lastApplied atomic.Int64 }
}

func (cn *consumer) counts() counts {
	return counts{
		Deliveries: cn.n.deliveries.Load(), Applied: cn.n.applied.Load(), Duplicates: cn.n.duplicates.Load(),
		Withheld: cn.n.withheld.Load(), Failed: cn.n.failed.Load(), LastApplied: cn.n.lastApplied.Load(),
	}
}

// consume runs c.workers workers on the run's JetStream consumer until ctx
// ends. index tells the processes' random sources apart.
func (cn *consumer) consume(ctx context.Context, js jetstream.JetStream, index int) error {
	cons, err := js.Consumer(ctx, streamName(cn.run), durable)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, cn.c.workers)
	for w := range cn.c.workers {
		r := rand.New(rand.NewPCG(cn.c.seed, uint64(index*cn.c.workers+w+1)))
		wg.Go(func() { errs[w] = cn.work(ctx, cons, r) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// work pulls messages, a few at a time, and handles them one by one until
// ctx ends.
func (cn *consumer) work(ctx context.Context, cons jetstream.Consumer, r *rand.Rand) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(8))
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer func() {
		stop()
		it.Stop()
	}()
	for {
		msg, err := it.Next()
		switch {
		case ctx.Err() != nil, errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return nil
		case err != nil: // a missed heartbeat, say: the iterator goes on
			fmt.Fprintln(os.Stderr, "inbox: next message:", err)
			continue
		}
		cn.handle(ctx, msg, r)
	}
}

// handle is the inbox consumer proper: the record and the credit in one
// transaction, then the ack. A crash between the commit and the ack (or a
// withheld ack) makes JetStream deliver the message again, and the
// redelivery finds the record: a duplicate, acked, nothing credited twice.
func (cn *consumer) handle(ctx context.Context, msg jetstream.Msg, r *rand.Rand) {
	id := msg.Headers().Get(jetstream.MsgIDHeader)
	var p payment
	if err := json.Unmarshal(msg.Data(), &p); err != nil || id == "" {
		fmt.Fprintf(os.Stderr, "inbox: malformed message %q: %v\n", id, err)
		_ = msg.Term() // never deliver it again
		cn.n.failed.Add(1)
		return
	}
	cn.n.deliveries.Add(1)
	first, err := cn.l.apply(ctx, cn.run, id, p)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "inbox: %s: %v\n", id, err)
			cn.n.failed.Add(1)
			_ = msg.Nak() // rolled back: deliver it again
		}
		return
	}
	if !first {
		cn.n.duplicates.Add(1)
		_ = msg.Ack()
		return
	}
	cn.n.applied.Add(1)
	for now := time.Now().UnixNano(); ; {
		if last := cn.n.lastApplied.Load(); last >= now || cn.n.lastApplied.CompareAndSwap(last, now) {
			break
		}
	}
	if md, err := msg.Metadata(); err == nil && md.NumDelivered == 1 && r.Float64() < cn.c.withhold {
		cn.n.withheld.Add(1) // committed, never acked: JetStream redelivers it after the ack wait
		return
	}
	_ = msg.Ack()
}
