package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
)

// wakeSpecs measure how long the ordered commit of n waits after the commit
// of n-1: in-process (one Leaser, whose own resolution wakes the waiter) and
// across two pools (two Leasers with their own barriers, as two processes
// would be: the waiter learns of n-1 through NOTIFY).
func wakeSpecs() []spec {
	var out []spec
	for _, cross := range []bool{false, true} {
		key, name := "wake/inprocess", "wake latency, in-process (PostgreSQL, one Leaser)"
		if cross {
			key, name = "wake/cross", "wake latency, across two pools (LISTEN/NOTIFY)"
		}
		out = append(out, spec{
			key:     key,
			section: secWake,
			name:    name,
			metrics: []metric{{key: "p50", label: "p50", unit: "µs"}, {key: "p99", label: "p99", unit: "µs"},
				{key: "early", label: "woken before the committer had its reply", unit: "% of samples"}},
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				return wake(ctx, e, cross)
			},
		})
	}
	return out
}

// commitClock records when a Leaser's commits reach its store and when they
// return from it. It hides the store's capabilities: the Leaser sends every
// commit alone, through Commit.
type commitClock struct {
	sequence.Store
	mu       sync.Mutex
	called   map[int64]time.Time
	returned map[int64]time.Time
}

func newCommitClock(s sequence.Store) *commitClock {
	return &commitClock{Store: s, called: map[int64]time.Time{}, returned: map[int64]time.Time{}}
}

func (c *commitClock) Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error) {
	called := time.Now()
	t, err := c.Store.Commit(ctx, stream, number, token, p)
	returned := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.called[number], c.returned[number] = called, returned
	return t, err
}

func (c *commitClock) at(m map[int64]time.Time, n int64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := m[n]
	return t, ok
}

// startSignal tells when a Leaser starts an ordered commit (just before it
// parks at the barrier).
type startSignal struct {
	ch chan int64
}

func (o startSignal) StartLease(ctx context.Context, _, _ string, _ int) (context.Context, func(int64, error)) {
	return ctx, func(int64, error) {}
}

func (o startSignal) StartCommit(ctx context.Context, _, _ string, n int64, ordered bool) (context.Context, func(error)) {
	if ordered {
		o.ch <- n
	}
	return ctx, func(error) {}
}

func (startSignal) CommitReady(context.Context, string, string, time.Duration) {}
func (startSignal) Released(context.Context, string, string, error)            {}
func (startSignal) Extended(context.Context, string, string, error)            {}

// wake measures samples of: lease n-1 (committer) and n (waiter), park the
// ordered commit of n, commit n-1; the latency is from the moment the
// committer's store call for n-1 returned (the commit is durable and
// acknowledged) to the moment the waiter's store call for n began (it woke
// and went to commit). Group commit is off, so n cannot ride along with n-1.
// The in-process waiter may also hear the NOTIFY before the committer's
// reply arrives: such samples count as 0.
func wake(ctx context.Context, e *env, cross bool) (map[string]float64, error) {
	samples := 500
	if e.smoke {
		samples = 30
	}
	schema, drop, err := e.newSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	signal := startSignal{ch: make(chan int64, 4)}
	var committerClock, waiterClock *commitClock
	wrapC := func(s sequence.Store) sequence.Store { committerClock = newCommitClock(s); return committerClock }
	wrapW := func(s sequence.Store) sequence.Store { waiterClock = newCommitClock(s); return waiterClock }
	cfg := sequence.Config{MaxGroup: 1, Observer: signal}
	a, err := newSeqEnv(ctx, e, schema, 4, cfg, wrapC)
	if err != nil {
		return nil, err
	}
	defer a.close()
	waiter := a
	waiterClock = committerClock
	if cross {
		if waiter, err = newSeqEnv(ctx, e, schema, 4, cfg, wrapW); err != nil {
			return nil, err
		}
		defer waiter.close()
	}
	opts := &sequence.LeaseOpts{TTL: leaseTTL}
	lat := make([]time.Duration, 0, samples+1)
	early := 0
	for range samples + 1 { // the first sample warms up and is dropped
		prev, err := a.leaser.Lease(ctx, "bench", opts)
		if err != nil {
			return nil, err
		}
		next, err := waiter.leaser.Lease(ctx, "bench", opts)
		if err != nil {
			return nil, err
		}
		if next.Number() != prev.Number()+1 {
			return nil, fmt.Errorf("leased %d then %d", prev.Number(), next.Number())
		}
		done := make(chan error, 1)
		go func() { done <- next.Commit(ctx, payload) }()
		for n := range signal.ch { // the waiter's commit has started
			if n == next.Number() {
				break
			}
		}
		time.Sleep(500 * time.Microsecond) // and has parked at the barrier
		if err := prev.Commit(ctx, payload); err != nil {
			return nil, err
		}
		<-signal.ch // prev's own StartCommit
		if err := <-done; err != nil {
			return nil, err
		}
		t0, ok0 := committerClock.at(committerClock.returned, prev.Number())
		t1, ok1 := waiterClock.at(waiterClock.called, next.Number())
		if !ok0 || !ok1 {
			return nil, fmt.Errorf("commit times of %d and %d not recorded", prev.Number(), next.Number())
		}
		if len(lat) > 0 && t1.Before(t0) { // not the warm-up
			early++
		}
		lat = append(lat, max(t1.Sub(t0), 0))
	}
	lat = lat[1:]
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	return map[string]float64{"p50": us(percentile(lat, 50)), "p99": us(percentile(lat, 99)),
		"early": 100 * float64(early) / float64(len(lat))}, nil
}
