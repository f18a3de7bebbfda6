package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// received is a message read back from JetStream.
type received struct {
	subject string
	number  int64  // Outbox-Number
	id      string // Nats-Msg-Id
	data    []byte
	fence   int64  // Outbox-Fence
	relay   string // Outbox-Relay
	at      time.Time
}

// collector reads the run's JetStream stream back as it fills, in stream
// order, through an ordered consumer: the check at the end works on what
// JetStream holds, not on what the relays say they sent.
type collector struct {
	cc      jetstream.ConsumeContext
	mu      sync.Mutex
	msgs    []received
	last    map[string]int64 // subject -> number of its last message
	bad     error            // the first malformed message
	changed chan struct{}    // closed and replaced on every message
}

// collect starts reading b's stream from its start.
func collect(ctx context.Context, b *broker) (*collector, error) {
	cons, err := b.js.OrderedConsumer(ctx, b.name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("ordered consumer: %w", err)
	}
	c := &collector{last: map[string]int64{}, changed: make(chan struct{})}
	if c.cc, err = cons.Consume(c.handle); err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	return c, nil
}

func (c *collector) handle(m jetstream.Msg) {
	h := m.Headers()
	r := received{subject: m.Subject(), id: h.Get(jetstream.MsgIDHeader), relay: h.Get(hdrRelay), data: slices.Clone(m.Data()), at: time.Now()}
	var err1, err2 error
	r.number, err1 = strconv.ParseInt(h.Get(hdrNumber), 10, 64)
	r.fence, err2 = strconv.ParseInt(h.Get(hdrFence), 10, 64)
	c.mu.Lock()
	defer c.mu.Unlock()
	if (err1 != nil || err2 != nil) && c.bad == nil {
		c.bad = fmt.Errorf("message %s on %s: bad headers %v", r.id, r.subject, h)
	}
	c.msgs = append(c.msgs, r)
	c.last[r.subject] = r.number
	close(c.changed)
	c.changed = make(chan struct{})
}

// count returns how many messages were read.
func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

// wait waits until cond holds of what was read, or ctx ends. cond runs
// under the collector's lock.
func (c *collector) wait(ctx context.Context, cond func(c *collector) bool) error {
	for {
		c.mu.Lock()
		ok, changed := cond(c), c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// result returns what was read, and the first malformed message.
func (c *collector) result() ([]received, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs), c.bad
}

// stop stops reading and waits until it stopped.
func (c *collector) stop() {
	c.cc.Stop()
	<-c.cc.Closed()
}
