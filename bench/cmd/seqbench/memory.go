package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// memTTL is the TTL of the in-memory leases: nothing expires in a run.
const memTTL = time.Hour

// memorySpecs are the in-memory backend's ordered commits, their limit
// (the bare ordered ticket), and the scaling check.
func memorySpecs() []spec {
	var out []spec
	for _, w := range []int{1, 8, 64} {
		out = append(out, spec{
			key:     fmt.Sprintf("mem/ordered/w=%d", w),
			section: secMemory,
			name:    "memory: lease + ordered commit, " + plural(w, "worker"),
			metrics: []metric{{key: "rate", unit: "ops/s"}, {key: "allocs", label: "allocations", unit: "allocs/op"}},
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				return withMemory(ctx, func(l *sequence.Leaser) (map[string]float64, error) {
					r, err := loop(ctx, loopOpts{workers: w, warm: e.warm / 4, dur: e.memD, memStats: true}, func(ctx context.Context, _ int) error {
						x, err := l.Lease(ctx, "bench", &sequence.LeaseOpts{TTL: memTTL})
						if err != nil {
							return err
						}
						return x.Commit(ctx, payload)
					})
					return map[string]float64{"rate": r.perSecond(), "allocs": r.allocsPerOp()}, err
				})
			},
		})
	}
	out = append(out, spec{
		key:     "mem/ordered-trimmed/w=8",
		section: secMemory,
		name:    "memory: lease + ordered commit, 8 workers, ledger trimmed every 10 ms",
		metrics: []metric{{key: "rate", unit: "ops/s"}, {key: "allocs", label: "allocations", unit: "allocs/op"}},
		run: func(ctx context.Context, e *env) (map[string]float64, error) {
			return withMemoryTrimmed(ctx, 10*time.Millisecond, func(l *sequence.Leaser) (map[string]float64, error) {
				r, err := loop(ctx, loopOpts{workers: 8, warm: e.warm / 4, dur: e.memD, memStats: true}, func(ctx context.Context, _ int) error {
					x, err := l.Lease(ctx, "bench", &sequence.LeaseOpts{TTL: memTTL})
					if err != nil {
						return err
					}
					return x.Commit(ctx, payload)
				})
				return map[string]float64{"rate": r.perSecond(), "allocs": r.allocsPerOp()}, err
			})
		},
	})
	for _, w := range []int{1, 8, 64} {
		out = append(out, spec{
			key:     fmt.Sprintf("mem/ticket/w=%d", w),
			section: secMemory,
			name:    "bare ordered ticket (the in-process limit), " + plural(w, "worker"),
			metrics: []metric{{key: "rate", unit: "ops/s"}, {key: "allocs", label: "allocations", unit: "allocs/op"}},
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				t := newTicket()
				r, err := loop(ctx, loopOpts{workers: w, warm: e.warm / 4, dur: e.memD, memStats: true}, func(context.Context, int) error {
					t.commit(t.take())
					return nil
				})
				return map[string]float64{"rate": r.perSecond(), "allocs": r.allocsPerOp()}, err
			},
		})
	}
	for _, k := range []int{10, 1000, 100_000} {
		out = append(out, spec{
			key:     fmt.Sprintf("mem/inflight/%d", k),
			section: secMemory,
			name:    fmt.Sprintf("memory: lease + ordered commit with %s leases in flight, 1 worker", group(strconv.Itoa(k))),
			metrics: []metric{{key: "ns", label: "cost", unit: "ns/op"}},
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				return withMemory(ctx, func(l *sequence.Leaser) (map[string]float64, error) {
					return inFlight(ctx, e, l, k)
				})
			},
		})
	}
	return out
}

// withMemory runs fn with a Leaser on a fresh in-memory store and a started
// barrier.
func withMemory(ctx context.Context, fn func(*sequence.Leaser) (map[string]float64, error)) (map[string]float64, error) {
	return withMemoryTrimmed(ctx, 0, fn)
}

// withMemoryTrimmed is withMemory with, if every is not zero, the resolved
// prefix of stream "bench" trimmed (retention) that often, as a long-running
// pipeline whose readers keep up would do.
func withMemoryTrimmed(ctx context.Context, every time.Duration, fn func(*sequence.Leaser) (map[string]float64, error)) (map[string]float64, error) {
	s := memory.New(nil)
	if every > 0 {
		tctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-tctx.Done():
					return
				case <-t.C:
					_, _ = s.Trim(tctx, "bench", math.MaxInt64) // up to the watermark; "not found" before the first lease
				}
			}
		})
	}
	b, err := barrier.New(s, nil)
	if err != nil {
		return nil, err
	}
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	defer b.Stop()
	l, err := sequence.New(s, &sequence.Config{Barrier: b})
	if err != nil {
		return nil, err
	}
	return fn(l)
}

// inFlight keeps k leases in flight on one stream (a sliding window: lease
// one at the back, commit the one at the front, whose turn has come) and
// measures the cost of one lease + ordered commit.
func inFlight(ctx context.Context, e *env, l *sequence.Leaser, k int) (map[string]float64, error) {
	window := make([]*sequence.Lease, 0, k+1)
	for len(window) < k {
		xs, err := l.LeaseN(ctx, "bench", min(k-len(window), store.MaxBatch), &sequence.LeaseOpts{TTL: memTTL})
		if err != nil {
			return nil, err
		}
		window = append(window, xs...)
	}
	head := 0
	r, err := loop(ctx, loopOpts{workers: 1, warm: e.warm / 4, dur: e.memD}, func(ctx context.Context, _ int) error {
		x, err := l.Lease(ctx, "bench", &sequence.LeaseOpts{TTL: memTTL})
		if err != nil {
			return err
		}
		window = append(window, x)
		if err := window[head].Commit(ctx, payload); err != nil {
			return err
		}
		window[head] = nil
		head++
		if head >= k { // compact: keep the k in flight at the front
			window = append(window[:0], window[head:]...)
			head = 0
		}
		return nil
	})
	if r.ops() == 0 {
		return nil, fmt.Errorf("no operation finished: %v", err)
	}
	return map[string]float64{"ns": float64(r.dur.Nanoseconds()) / float64(r.ops())}, err
}

// ticket is the least any in-process ordered commit can cost: a mutex, a
// counter, and a channel per ticket that has to wait for its turn.
type ticket struct {
	mu      sync.Mutex
	next    int64 // the last ticket handed out
	done    int64 // every ticket up to done has committed
	waiting map[int64]chan struct{}
}

func newTicket() *ticket { return &ticket{waiting: map[int64]chan struct{}{}} }

func (t *ticket) take() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	return t.next
}

// commit waits until every earlier ticket committed, then commits n.
func (t *ticket) commit(n int64) {
	t.mu.Lock()
	if t.done != n-1 {
		ch := make(chan struct{})
		t.waiting[n] = ch
		t.mu.Unlock()
		<-ch
		t.mu.Lock()
	}
	t.done = n
	if ch, ok := t.waiting[n+1]; ok {
		delete(t.waiting, n+1)
		close(ch)
	}
	t.mu.Unlock()
}
