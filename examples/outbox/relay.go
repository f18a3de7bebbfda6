package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
)

// A process's relays. For every stream the process campaigns for the
// stream's named lease (lease.Manager.Run: a blocking acquire, then the
// renewing runner); the holder relays the stream until it loses the lease
// or stops, and at most one process holds it at any moment. A relay that
// dies stops renewing, its lease expires after the TTL, and a relay of
// another process takes over, with a larger fencing token.
//
// Holding the lease, the relay learns its position (position.Load: from
// JetStream) and the JetStream sequence of the subject's last message, and
// sets its seqlease checkpoint (reader outbox-relay) to that position,
// saying so at error level if the checkpoint was ahead (the broker lost
// messages, which the relay publishes again). Then it follows the stream
// in order up to the watermark (barrier.Entries, Follow): each committed
// entry is published and its ack awaited before the next is read; each gap
// is skipped and counted. Every publish tells JetStream which message it
// expects to be the subject's last: a relay that lost its lease without
// noticing (paused past its TTL) finds its publish refused once the new
// holder has published, and never reorders or repeats the subject. A
// refused publish, or one whose outcome is unknown, sends the relay back to
// ask JetStream where the subject stands. The checkpoint follows the acked
// publishes and skipped gaps in the background (checkpointer), so that the
// relay's lag shows in `seqlease readers` and the seqlease.reader.lag
// metric; the relay never resumes from it.

// relayCounts are what a process's relays did; a relay process prints them
// when it ends.
type relayCounts struct {
	Published  int64 // messages JetStream stored
	Duplicates int64 // publishes JetStream acked as duplicates (not stored again)
	Fenced     int64 // publishes refused: the subject had moved on
	Gaps       int64 // gaps skipped (each counted once per process)
	Takeovers  int64 // leases taken (a stream's relay started)
	Errors     int64 // other failures, retried
}

func (c *relayCounts) add(o relayCounts) {
	c.Published += o.Published
	c.Duplicates += o.Duplicates
	c.Fenced += o.Fenced
	c.Gaps += o.Gaps
	c.Takeovers += o.Takeovers
	c.Errors += o.Errors
}

// relaySource is what the relays need of a backend: a barrier's source (to
// read entries in order), a named-lease store, and reader checkpoints.
type relaySource interface {
	barrier.Source
	lease.Store
	checkpoints
}

// relayConfig configures startRelays.
type relayConfig struct {
	owner string        // the lease owner: this process
	ttl   time.Duration // the named leases' TTL
	// later, if set, says which streams this process campaigns for only
	// after holdBack, so that at the start the streams spread over the
	// relay processes rather than all going to the first to start.
	later    func(route) bool
	holdBack time.Duration
	// errs, if set, is told of every failure the relays retry, without
	// blocking (a full channel misses some): for tests.
	errs chan<- error
	// logger gets what the relays' checkpoints have to say (nil: text on
	// standard error).
	logger *slog.Logger
}

// relays are one process's relays, one campaign per stream.
type relays struct {
	cfg     relayConfig
	broker  *broker
	pos     position
	cp      checkpoints
	barrier *barrier.Barrier
	leases  *lease.Manager
	seen    []atomic.Int64 // per route: the highest number handled here
	n       struct{ published, duplicates, fenced, gaps, takeovers, errors atomic.Int64 }
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startRelays starts the campaigns for routes; stop ends them.
func startRelays(ctx context.Context, src relaySource, b *broker, routes []route, cfg relayConfig) (*relays, error) {
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	r := &relays{cfg: cfg, broker: b, pos: brokerPosition{b}, cp: src, seen: make([]atomic.Int64, len(routes))}
	var err error
	if r.barrier, err = barrier.New(src, nil); err != nil {
		return nil, err
	}
	if err := r.barrier.Start(ctx); err != nil {
		return nil, err
	}
	if r.leases, err = lease.New(src, &lease.Config{Owner: cfg.owner, DefaultTTL: cfg.ttl}); err == nil {
		err = r.leases.Start(ctx)
	}
	if err != nil {
		r.barrier.Stop()
		return nil, err
	}
	ctx, r.cancel = context.WithCancel(ctx)
	for i, rt := range routes {
		r.wg.Go(func() { r.campaign(ctx, i, rt) })
	}
	return r, nil
}

// stop ends the campaigns (a held lease is released), and waits for them.
func (r *relays) stop() relayCounts {
	r.cancel()
	r.wg.Wait()
	r.leases.Stop()
	r.barrier.Stop()
	return relayCounts{
		Published: r.n.published.Load(), Duplicates: r.n.duplicates.Load(), Fenced: r.n.fenced.Load(),
		Gaps: r.n.gaps.Load(), Takeovers: r.n.takeovers.Load(), Errors: r.n.errors.Load(),
	}
}

// campaign relays rt whenever this process holds its lease, until ctx ends.
func (r *relays) campaign(ctx context.Context, i int, rt route) {
	if r.cfg.later != nil && r.cfg.later(rt) && !sleep(ctx, r.cfg.holdBack) {
		return
	}
	for {
		err := r.leases.Run(ctx, rt.lease, &lease.AcquireOpts{Kind: "outbox-relay"}, func(ctx context.Context, l *lease.Lease) error {
			r.relay(ctx, l, i, rt)
			return nil
		})
		if ctx.Err() != nil || errors.Is(err, lease.ErrStopped) {
			return
		}
		r.n.errors.Add(1)
		fmt.Fprintf(os.Stderr, "outbox: %s: relay %s: %v\n", r.cfg.owner, rt.stream, err)
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

// relay relays rt while l is held (ctx ends when it is not).
func (r *relays) relay(ctx context.Context, l *lease.Lease, i int, rt route) {
	r.n.takeovers.Add(1)
	const minWait, maxWait = 20 * time.Millisecond, time.Second
	wait := minWait
	for ctx.Err() == nil {
		err := r.follow(ctx, l, i, rt)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, errFenced):
			r.n.fenced.Add(1) // ask JetStream where the subject stands, at once
		default:
			r.n.errors.Add(1)
			fmt.Fprintf(os.Stderr, "outbox: %s: relay %s: %v (retrying in %v)\n", r.cfg.owner, rt.stream, err, wait)
			select {
			case r.cfg.errs <- err:
			default: // nil, or full
			}
			if !sleep(ctx, wait) {
				return
			}
			wait = min(2*wait, maxWait)
			continue
		}
		wait = minWait
	}
}

// follow resumes rt where JetStream has it and publishes the stream's
// entries in order until ctx ends or a publish fails; the seqlease
// checkpoint follows.
func (r *relays) follow(ctx context.Context, l *lease.Lease, i int, rt route) error {
	// The checkpoint before JetStream's position: read after it, the
	// checkpoint could be ahead merely because a deposed relay published
	// and saved in between.
	saved, err := r.cp.Checkpoint(ctx, relayReader, rt.stream)
	if err != nil {
		return fmt.Errorf("load checkpoint: %w", err)
	}
	after, err := r.pos.Load(ctx, rt)
	if err != nil {
		return fmt.Errorf("load position: %w", err)
	}
	cp, err := startCheckpointer(ctx, r.cp, rt, saved, after, r.cfg.logger)
	if err != nil {
		return fmt.Errorf("align checkpoint: %w", err)
	}
	defer cp.stop(ctx)
	expect, _, err := r.broker.last(ctx, rt.subject)
	if err != nil {
		return fmt.Errorf("last message of %s: %w", rt.subject, err)
	}
	for e, err := range r.barrier.Entries(ctx, rt.stream, &barrier.ReadOpts{After: after, Follow: true, IncludeGaps: true}) {
		if err != nil {
			return err
		}
		first := r.seen[i].Load() < e.Number
		if first {
			r.seen[i].Store(e.Number) // one relay per stream in this process
		}
		if e.State == store.Gap {
			if first {
				r.n.gaps.Add(1) // never published
			}
			cp.advance(e.Number)
			continue
		}
		if ctx.Err() != nil {
			break // the lease is over, or the relay stops: publish nothing more
		}
		// Once sent, the message is JetStream's to store or not, whatever
		// happens here: wait for the ack even if ctx ends meanwhile, so the
		// counts say what was stored (publish bounds the wait).
		ack, err := r.broker.publish(context.WithoutCancel(ctx), rt, e.Number, e.Payload, expect, l.Fence(), r.cfg.owner)
		if err != nil {
			return fmt.Errorf("publish %s: %w", msgID(rt.stream, e.Number), err)
		}
		if ack.Duplicate {
			r.n.duplicates.Add(1) // stored before: the subject's last is unchanged
		} else {
			r.n.published.Add(1)
			expect = ack.Sequence
		}
		if err := r.pos.Save(ctx, rt, e.Number); err != nil {
			return fmt.Errorf("save position: %w", err)
		}
		cp.advance(e.Number)
	}
	return ctx.Err()
}

// sleep waits for d or for ctx to end, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
