package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a relayed message. Nats-Msg-Id (jetstream.MsgIDHeader) is
// "<stream>#<number>": JetStream drops a second message with the same id
// within the stream's duplicate window. The others are for consumers and for
// the check at the end.
const (
	hdrNumber = "Outbox-Number" // the entry's number in its seqlease stream
	hdrFence  = "Outbox-Fence"  // the fencing token of the relay's lease
	hdrRelay  = "Outbox-Relay"  // the owner of the relay's lease
)

// publishTimeout bounds one publish and its ack.
const publishTimeout = 5 * time.Second

// errFenced reports a publish that JetStream refused because the subject's
// last message is not the one the relay expected: someone else (a relay
// that lost its lease, or this relay's own earlier attempt whose ack was
// lost) published on the subject since. The relay learns its position
// afresh and goes on.
var errFenced = errors.New("outbox: subject moved on since the relay's last publish")

// route is one outbox stream: its seqlease stream, the JetStream subject
// its messages go to, and the named lease its relay holds.
type route struct {
	index   int
	stream  string // seqlease stream
	subject string // JetStream subject
	lease   string // named lease of its relay
}

// names are a run's names, derived from its id, so that runs on one
// database and one broker never meet.
type names struct {
	run     string
	streams int
}

func newNames() names {
	return names{run: strconv.FormatInt(time.Now().UnixNano(), 36)}
}

// route returns stream i's names.
func (n names) route(i int) route {
	return route{
		index:   i,
		stream:  fmt.Sprintf("outbox-%s-%02d", n.run, i),
		subject: fmt.Sprintf("outbox.%s.%02d", n.run, i), // under the stream's outbox.<run>.>
		lease:   fmt.Sprintf("outbox/relay/%s-%02d", n.run, i),
	}
}

// routes returns every stream's names.
func (n names) routes() []route {
	rs := make([]route, n.streams)
	for i := range rs {
		rs[i] = n.route(i)
	}
	return rs
}

// jsStream is the run's JetStream stream, which holds every subject.
func (n names) jsStream() string { return "OUTBOX-" + n.run }

// msgID is the Nats-Msg-Id of entry number of stream.
func msgID(stream string, number int64) string {
	return stream + "#" + strconv.FormatInt(number, 10)
}

// parseMsgID parses a Nats-Msg-Id of stream.
func parseMsgID(stream, id string) (int64, error) {
	s, num, ok := strings.Cut(id, "#")
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || s != stream || err != nil || n < 1 {
		return 0, fmt.Errorf("outbox: message id %q is not one of stream %s", id, stream)
	}
	return n, nil
}

// broker is a connection to JetStream and the run's stream on it.
type broker struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	name   string           // the JetStream stream
	stream jetstream.Stream // its handle, once created or looked up
}

// dialBroker connects to url; the run's JetStream stream is created
// (create) or looked up.
func dialBroker(ctx context.Context, url string, n names, create bool, dedupe time.Duration) (*broker, error) {
	name := n.jsStream()
	// Reconnect for ever, every quarter second, and buffer nothing while
	// disconnected: a publish either reaches the server now or fails, and
	// the relay retries it from what JetStream holds.
	nc, err := nats.Connect(url, nats.Name("seqlease-outbox"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	b := &broker{nc: nc, name: name}
	if b.js, err = jetstream.New(nc); err == nil {
		if create {
			b.stream, err = b.js.CreateStream(ctx, jetstream.StreamConfig{
				Name:       name,
				Subjects:   []string{"outbox." + n.run + ".>"},
				Storage:    jetstream.FileStorage,
				Duplicates: dedupe,
			})
		} else {
			b.stream, err = b.js.Stream(ctx, name)
		}
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream stream %s: %w", name, err)
	}
	return b, nil
}

// close closes the connection.
func (b *broker) close() { b.nc.Close() }

// last returns the JetStream sequence and the Nats-Msg-Id of the last
// message on subject; 0 and "" when it has none.
func (b *broker) last(ctx context.Context, subject string) (uint64, string, error) {
	m, err := b.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	return m.Sequence, m.Header.Get(jetstream.MsgIDHeader), nil
}

// publish publishes payload as entry number of r's stream and waits for
// JetStream's ack. expect is the JetStream sequence of the subject's last
// message as the relay knows it (0: none): JetStream refuses the message if
// anything else was published on the subject since (errFenced), which fences
// off a relay that lost its lease and did not notice yet. A message whose id
// JetStream has seen within its duplicate window is acked as a duplicate and
// not stored again.
func (b *broker) publish(ctx context.Context, r route, number int64, payload []byte, expect uint64, fence int64, owner string) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	m := nats.NewMsg(r.subject)
	m.Data = payload
	m.Header.Set(hdrNumber, strconv.FormatInt(number, 10))
	m.Header.Set(hdrFence, strconv.FormatInt(fence, 10))
	m.Header.Set(hdrRelay, owner)
	ack, err := b.js.PublishMsg(ctx, m,
		jetstream.WithMsgID(msgID(r.stream, number)),
		jetstream.WithExpectLastSequencePerSubject(expect))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return nil, fmt.Errorf("%w: %w", errFenced, err)
	}
	return ack, err
}

// messages returns how many messages the stream holds now.
func (b *broker) messages(ctx context.Context) (uint64, error) {
	info, err := b.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}
