package batch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend records the backend calls a Batcher makes and can hold the next
// one at a gate, so that the calls behind it queue.
type backend struct {
	decide bool // call decided before waiting at a gate

	mu      sync.Mutex
	calls   [][]int
	ctxs    []context.Context
	gate    *gate // the next call's, if any
	ctxKeys []any
}

type gate struct{ entered, open chan struct{} }

type ctxKey struct{}

// hold makes the next backend call wait until open is called; entered
// closes when it starts to wait.
func (be *backend) hold() (entered <-chan struct{}, open func()) {
	be.mu.Lock()
	defer be.mu.Unlock()
	g := &gate{entered: make(chan struct{}), open: make(chan struct{})}
	be.gate = g
	return g.entered, sync.OnceFunc(func() { close(g.open) })
}

// send answers each request r with -r.
func (be *backend) send(ctx context.Context, reqs []int, decided func()) []int {
	be.mu.Lock()
	be.calls = append(be.calls, append([]int(nil), reqs...))
	be.ctxs = append(be.ctxs, ctx)
	be.ctxKeys = append(be.ctxKeys, ctx.Value(ctxKey{}))
	g := be.gate
	be.gate = nil
	be.mu.Unlock()
	if be.decide && decided != nil {
		decided()
	}
	if g != nil {
		close(g.entered)
		<-g.open
	}
	out := make([]int, len(reqs))
	for i, r := range reqs {
		out[i] = -r
	}
	return out
}

func (be *backend) sent() [][]int {
	be.mu.Lock()
	defer be.mu.Unlock()
	return append([][]int(nil), be.calls...)
}

func (be *backend) ctx(i int) context.Context {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.ctxs[i]
}

// newBatcher returns a Batcher on be; tune adjusts its config.
func newBatcher(t *testing.T, be *backend, tune func(*Config[int, int])) *Batcher[int, int] {
	t.Helper()
	cfg := Config[int, int]{Send: be.send}
	if tune != nil {
		tune(&cfg)
	}
	b := New(cfg)
	t.Cleanup(b.Close)
	return b
}

// queued waits until n calls wait in b's queue.
func queued(t *testing.T, b *Batcher[int, int], n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.Queued() == n }, 10*time.Second, 100*time.Microsecond, "%d queued", n)
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out: %s", what)
	}
}

type result struct {
	res int
	err error
}

// do runs b.Do(ctx, req) in a goroutine of wg's and returns its result's
// channel.
func do(wg *sync.WaitGroup, b *Batcher[int, int], ctx context.Context, req int) <-chan result {
	ch := make(chan result, 1)
	wg.Go(func() {
		res, err := b.Do(ctx, req)
		ch <- result{res, err}
	})
	return ch
}

func recv(t *testing.T, ch <-chan result, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out: %s", what)
		return result{}
	}
}

// TestQueuedCallsShareOneBackendCall: calls that queue while one is in
// flight go in one backend call, in the order they queued, and each gets
// its own result.
func TestQueuedCallsShareOneBackendCall(t *testing.T) {
	ctx := t.Context()
	be := &backend{}
	b := newBatcher(t, be, nil)
	var wg sync.WaitGroup
	entered, open := be.hold()
	first := do(&wg, b, ctx, 1)
	wait(t, entered, "the first call is in flight")
	var rest []<-chan result
	for i := 2; i <= 6; i++ {
		rest = append(rest, do(&wg, b, ctx, i))
		queued(t, b, i-1)
	}
	open()
	require.Equal(t, result{-1, nil}, recv(t, first, "the first call"))
	for i, ch := range rest {
		require.Equal(t, result{-(i + 2), nil}, recv(t, ch, "a queued call"))
	}
	wg.Wait()
	require.Equal(t, [][]int{{1}, {2, 3, 4, 5, 6}}, be.sent())
}

// TestBatchesAreBoundedBySize: a backend call carries at most MaxBatch by
// Size, and the first request goes even when it alone is larger.
func TestBatchesAreBoundedBySize(t *testing.T) {
	ctx := t.Context()
	be := &backend{}
	b := newBatcher(t, be, func(c *Config[int, int]) {
		c.MaxBatch = 10
		c.Size = func(r int) int { return r }
	})
	var wg sync.WaitGroup
	entered, open := be.hold()
	do(&wg, b, ctx, 1)
	wait(t, entered, "the first call is in flight")
	for i, r := range []int{3, 3, 3, 5, 20, 2} {
		do(&wg, b, ctx, r)
		queued(t, b, i+1)
	}
	open()
	wg.Wait()
	require.Equal(t, [][]int{{1}, {3, 3, 3}, {5}, {20}, {2}}, be.sent())

	be2 := &backend{}
	b2 := newBatcher(t, be2, func(c *Config[int, int]) { c.MaxBatch = 3 })
	entered, open = be2.hold()
	do(&wg, b2, ctx, 1)
	wait(t, entered, "the first call is in flight")
	for i := range 7 {
		do(&wg, b2, ctx, 10+i)
		queued(t, b2, i+1)
	}
	open()
	wg.Wait()
	require.Equal(t, [][]int{{1}, {10, 11, 12}, {13, 14, 15}, {16}}, be2.sent(), "by count without Size")
}

// TestAConsumersContextReachesTheBackend: a call alone runs under its
// caller's context; a call shared with others runs under the leader's
// values, without its cancellation, with Timeout as its deadline.
func TestAConsumersContextReachesTheBackend(t *testing.T) {
	ctx := context.WithValue(t.Context(), ctxKey{}, "leader")
	be := &backend{}
	b := newBatcher(t, be, func(c *Config[int, int]) { c.Timeout = time.Hour })
	res, err := b.Do(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, -1, res)
	require.Equal(t, ctx, be.ctx(0), "alone: the caller's own context")

	var wg sync.WaitGroup
	entered, open := be.hold()
	do(&wg, b, ctx, 2)
	wait(t, entered, "a call is in flight")
	lctx, cancel := context.WithCancel(ctx)
	do(&wg, b, lctx, 3)
	queued(t, b, 1)
	do(&wg, b, ctx, 4)
	queued(t, b, 2)
	entered, open2 := be.hold()
	open()
	wait(t, entered, "the shared call is in flight")
	cancel() // the leader's context ends; the shared call's does not
	shared := be.ctx(2)
	require.NoError(t, shared.Err())
	require.Equal(t, "leader", shared.Value(ctxKey{}))
	deadline, ok := shared.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(time.Hour), deadline, time.Minute)
	open2()
	wg.Wait()
	require.Equal(t, [][]int{{1}, {2}, {3, 4}}, be.sent())
}

// TestAQueuedCallerThatGivesUpIsNotSent: a call whose context ends while
// it waits in the queue returns at once and never reaches the backend.
func TestAQueuedCallerThatGivesUpIsNotSent(t *testing.T) {
	ctx := t.Context()
	be := &backend{}
	b := newBatcher(t, be, nil)
	var wg sync.WaitGroup
	entered, open := be.hold()
	do(&wg, b, ctx, 1)
	wait(t, entered, "the first call is in flight")
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := do(&wg, b, cctx, 2)
	queued(t, b, 1)
	kept := do(&wg, b, ctx, 3)
	queued(t, b, 2)
	cancel()
	require.ErrorIs(t, recv(t, gaveUp, "the caller that gave up").err, context.Canceled)
	queued(t, b, 1)
	open()
	require.Equal(t, result{-3, nil}, recv(t, kept, "the caller that stayed"))
	wg.Wait()
	require.Equal(t, [][]int{{1}, {3}}, be.sent())
}

// TestACallerThatGivesUpInFlightIsOrphaned: a caller whose context ends
// while its call is in another caller's batch returns at once; its result
// goes to Orphans, with the leader's context; the others get theirs.
func TestACallerThatGivesUpInFlightIsOrphaned(t *testing.T) {
	ctx := context.WithValue(t.Context(), ctxKey{}, "leader")
	be := &backend{}
	var mu sync.Mutex
	var orphans [][2][]int
	b := newBatcher(t, be, func(c *Config[int, int]) {
		c.Orphans = func(octx context.Context, reqs, res []int) {
			require.Equal(t, "leader", octx.Value(ctxKey{}))
			mu.Lock()
			orphans = append(orphans, [2][]int{reqs, res})
			mu.Unlock()
		}
	})
	var wg sync.WaitGroup
	entered, open := be.hold()
	do(&wg, b, ctx, 1)
	wait(t, entered, "the first call is in flight")
	leader := do(&wg, b, ctx, 2)
	queued(t, b, 1)
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := do(&wg, b, cctx, 3)
	queued(t, b, 2)
	entered, open2 := be.hold()
	open()
	wait(t, entered, "the shared call is in flight")
	cancel()
	require.ErrorIs(t, recv(t, gaveUp, "the caller that gave up").err, context.Canceled)
	open2()
	require.Equal(t, result{-2, nil}, recv(t, leader, "the leader"))
	wg.Wait()
	require.Equal(t, [][2][]int{{{3}, {-3}}}, orphans)
}

// TestAnAsyncLeaderReturnsWithItsContext: with Async, a leader whose
// context ends while its batch of several is in flight returns at once;
// the batch goes on in a goroutine that Close waits for, and the leader's
// result is an orphan.
func TestAnAsyncLeaderReturnsWithItsContext(t *testing.T) {
	ctx := t.Context()
	be := &backend{}
	orphaned := make(chan []int, 1)
	b := New(Config[int, int]{Send: be.send, Async: true, Orphans: func(_ context.Context, reqs, _ []int) { orphaned <- reqs }})
	var wg sync.WaitGroup
	entered, open := be.hold()
	do(&wg, b, ctx, 1)
	wait(t, entered, "the first call is in flight")
	lctx, cancel := context.WithCancel(ctx)
	leader := do(&wg, b, lctx, 2)
	queued(t, b, 1)
	other := do(&wg, b, ctx, 3)
	queued(t, b, 2)
	entered, open2 := be.hold()
	open()
	wait(t, entered, "the shared call is in flight")
	cancel()
	require.ErrorIs(t, recv(t, leader, "the leader").err, context.Canceled)

	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was in flight")
	case <-time.After(20 * time.Millisecond):
	}
	open2()
	wait(t, closed, "Close returns once the batch did")
	require.Equal(t, result{-3, nil}, recv(t, other, "the other caller"))
	require.Equal(t, []int{2}, <-orphaned)
	wg.Wait()

	// After Close, a batch of several is sent from its leader's goroutine.
	entered, open = be.hold()
	do(&wg, b, ctx, 4)
	wait(t, entered, "a call is in flight")
	do(&wg, b, ctx, 5)
	queued(t, b, 1)
	do(&wg, b, ctx, 6)
	queued(t, b, 2)
	open()
	wg.Wait()
	require.Equal(t, [][]int{{1}, {2, 3}, {4}, {5, 6}}, be.sent())
}

// TestALeaderStaysWithoutAsync: without Async, a leader whose context ends
// while its batch is in flight stays until the batch returns, and gets its
// result (nothing is orphaned).
func TestALeaderStaysWithoutAsync(t *testing.T) {
	ctx := t.Context()
	be := &backend{}
	b := newBatcher(t, be, func(c *Config[int, int]) {
		c.Orphans = func(context.Context, []int, []int) { t.Error("nothing is abandoned") }
	})
	var wg sync.WaitGroup
	entered, open := be.hold()
	do(&wg, b, ctx, 1)
	wait(t, entered, "the first call is in flight")
	lctx, cancel := context.WithCancel(ctx)
	leader := do(&wg, b, lctx, 2)
	queued(t, b, 1)
	do(&wg, b, ctx, 3)
	queued(t, b, 2)
	entered, open2 := be.hold()
	open()
	wait(t, entered, "the shared call is in flight")
	cancel()
	select {
	case r := <-leader:
		t.Fatalf("the leader returned %v while its batch was in flight", r)
	case <-time.After(20 * time.Millisecond):
	}
	open2()
	require.Equal(t, result{-2, nil}, recv(t, leader, "the leader"))
	wg.Wait()
}

// TestADecidedBatchHandsTheLeadOn: once the backend has decided a batch
// (its commit still out), the next batch is sent without waiting for the
// first to return; with MaxInFlight out, the next waits for one of them.
// A batch of one whose predecessor was alone gets no early lead: nobody
// could use it.
func TestADecidedBatchHandsTheLeadOn(t *testing.T) {
	ctx := t.Context()
	be := &backend{decide: true}
	b := newBatcher(t, be, func(c *Config[int, int]) { c.MaxInFlight = 2 })
	var wg sync.WaitGroup
	entered, open := be.hold()
	do(&wg, b, ctx, 0) // alone: not early
	wait(t, entered, "0 is in flight")
	do(&wg, b, ctx, 1)
	queued(t, b, 1)
	do(&wg, b, ctx, 2)
	queued(t, b, 2)
	require.Equal(t, 1, b.InFlight(), "0 alone got no early lead")
	entered2, open2 := be.hold()
	open()
	wait(t, entered2, "1 and 2 are in flight, decided")

	entered3, open3 := be.hold()
	do(&wg, b, ctx, 3)
	wait(t, entered3, "3 is sent while 1 and 2 are still out")
	do(&wg, b, ctx, 4)
	queued(t, b, 1)
	require.Equal(t, 2, b.InFlight(), "4 waits: two backend calls are out")

	entered4, open4 := be.hold()
	open2()
	wait(t, entered4, "4 is sent once 1 and 2 returned")
	open3()
	open4()
	wg.Wait()
	require.Equal(t, [][]int{{0}, {1, 2}, {3}, {4}}, be.sent())
}

// TestDirectSendsEachCallAlone: with Direct every call goes at once, alone,
// from its own goroutine, whatever is in flight.
func TestDirectSendsEachCallAlone(t *testing.T) {
	ctx := t.Context()
	be := &backend{}
	b := newBatcher(t, be, func(c *Config[int, int]) { c.Direct = true })
	var wg sync.WaitGroup
	entered, open := be.hold()
	first := do(&wg, b, ctx, 1)
	wait(t, entered, "the first call is in flight")
	for i := 2; i <= 4; i++ {
		require.Equal(t, result{-i, nil}, recv(t, do(&wg, b, ctx, i), "a direct call"))
	}
	open()
	require.Equal(t, result{-1, nil}, recv(t, first, "the first call"))
	wg.Wait()
	require.Equal(t, [][]int{{1}, {2}, {3}, {4}}, be.sent())
}

// testClock is a clock the test moves (for the wave's window).
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestCallersAnsweredTogetherAreSentTogether: callers that one backend call
// answered and that call again at once, on another Batcher sharing the
// wave, go in one backend call, rather than the first to arrive alone and
// the others after it.
func TestCallersAnsweredTogetherAreSentTogether(t *testing.T) {
	ctx := t.Context()
	clock := newTestClock()
	w := NewWave()
	w.SetClock(clock.now)
	w.SetMinWait(10 * time.Second) // the leader waits for all of them, however slow the machine
	first, second := &backend{}, &backend{}
	b1 := newBatcher(t, first, func(c *Config[int, int]) { c.Wave = w })
	b2 := newBatcher(t, second, func(c *Config[int, int]) { c.Wave = w })

	var wg sync.WaitGroup
	entered, open := first.hold()
	lone := do(&wg, b1, ctx, 0)
	wait(t, entered, "the first call is in flight")
	for i := 1; i <= 4; i++ {
		wg.Go(func() {
			res, err := b1.Do(ctx, i)
			if err == nil && res == -i {
				_, err = b2.Do(ctx, 10+i) // at once, like a release after an acquire
			}
			if err != nil {
				t.Error(err)
			}
		})
		queued(t, b1, i)
	}
	open()
	wg.Wait()
	require.Equal(t, result{-0, nil}, recv(t, lone, "the lone call"))
	require.Equal(t, [][]int{{0}, {1, 2, 3, 4}}, first.sent())
	require.Len(t, second.sent(), 1, "the four second calls in one backend call")
	require.ElementsMatch(t, []int{11, 12, 13, 14}, second.sent()[0])
}

// TestALeaderWaitingForAWaveReturnsWithItsContext: a leader that waits for
// callers answered a moment ago returns at once when its context ends,
// and sends nothing; the next call is not held up once the wave is over.
func TestALeaderWaitingForAWaveReturnsWithItsContext(t *testing.T) {
	ctx := t.Context()
	clock := newTestClock()
	w := NewWave()
	w.SetClock(clock.now)
	w.SetMinWait(10 * time.Second)
	be := &backend{}
	b := newBatcher(t, be, func(c *Config[int, int]) { c.Wave = w })
	var wg sync.WaitGroup
	entered, open := be.hold()
	do(&wg, b, ctx, 0)
	wait(t, entered, "the first call is in flight")
	do(&wg, b, ctx, 1)
	queued(t, b, 1)
	do(&wg, b, ctx, 2)
	queued(t, b, 2)
	open()
	wg.Wait() // 1 and 2 were answered together, and do not call again

	cctx, cancel := context.WithCancel(ctx)
	gaveUp := do(&wg, b, cctx, 3)
	queued(t, b, 1) // 3 leads, and waits for 1 and 2
	cancel()
	require.ErrorIs(t, recv(t, gaveUp, "the leader that gave up").err, context.Canceled)
	queued(t, b, 0)

	clock.advance(time.Second)
	res, err := b.Do(ctx, 4)
	require.NoError(t, err)
	require.Equal(t, -4, res)
	require.Equal(t, [][]int{{0}, {1, 2}, {4}}, be.sent(), "3 was never sent")
}

// TestLoopingCallersWaitForTheCallsOut: while the callers come back at
// once (a loop), a leader waits for the backend calls still out, whose
// callers are about to call too; otherwise it sends at once.
func TestLoopingCallersWaitForTheCallsOut(t *testing.T) {
	ctx := t.Context()
	w := NewWave()
	w.SetMinWait(10 * time.Second)
	w.SetLoop(1)
	first, second := &backend{}, &backend{}
	b1 := newBatcher(t, first, func(c *Config[int, int]) { c.Wave = w })
	b2 := newBatcher(t, second, func(c *Config[int, int]) { c.Wave = w })
	var wg sync.WaitGroup
	entered, open := first.hold()
	out := do(&wg, b1, ctx, 1)
	wait(t, entered, "a call is out")
	next := do(&wg, b2, ctx, 2)
	queued(t, b2, 1) // 2 leads, and waits for the call out
	require.Empty(t, second.sent())
	open()
	require.Equal(t, result{-1, nil}, recv(t, out, "the call out"))
	require.Equal(t, result{-2, nil}, recv(t, next, "the waiting leader"))

	w.SetLoop(0)
	entered, open = first.hold()
	out = do(&wg, b1, ctx, 3)
	wait(t, entered, "a call is out")
	require.Equal(t, result{-4, nil}, recv(t, do(&wg, b2, ctx, 4), "no loop: it goes at once"))
	open()
	require.Equal(t, result{-3, nil}, recv(t, out, "the call out"))
	wg.Wait()
}

// TestStress has many goroutines call at once, some giving up at random
// moments, on a backend that sometimes decides early and takes its time:
// every caller that returned a result got its own, no request is sent
// twice, and every request sent for a caller that gave up reaches Orphans
// exactly once.
func TestStress(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			t.Parallel()
			var sent, orphaned sync.Map // req -> count
			w := NewWave()
			b := New(Config[int, int]{
				MaxBatch:    7,
				MaxInFlight: 2,
				Async:       async,
				Wave:        w,
				Send: func(ctx context.Context, reqs []int, decided func()) []int {
					for _, r := range reqs {
						if _, dup := sent.LoadOrStore(r, true); dup {
							t.Errorf("request %d sent twice", r)
						}
					}
					if decided != nil && rand.IntN(2) == 0 {
						decided()
					}
					if rand.IntN(4) == 0 {
						time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
					}
					out := make([]int, len(reqs))
					for i, r := range reqs {
						out[i] = -r
					}
					return out
				},
				Orphans: func(_ context.Context, reqs, res []int) {
					for i, r := range reqs {
						if res[i] != -r {
							t.Errorf("orphan %d has result %d", r, res[i])
						}
						if _, dup := orphaned.LoadOrStore(r, true); dup {
							t.Errorf("request %d orphaned twice", r)
						}
					}
				},
			})
			var gaveUp sync.Map
			var wg sync.WaitGroup
			const goroutines, calls = 32, 200
			for g := range goroutines {
				wg.Go(func() {
					for i := range calls {
						req := g*calls + i + 1
						ctx, cancel := context.WithCancel(t.Context())
						if rand.IntN(5) == 0 {
							time.AfterFunc(time.Duration(rand.IntN(100))*time.Microsecond, cancel)
						}
						res, err := b.Do(ctx, req)
						cancel()
						switch {
						case errors.Is(err, context.Canceled):
							gaveUp.Store(req, true)
						case err != nil:
							t.Errorf("request %d: %v", req, err)
						case res != -req:
							t.Errorf("request %d got %d", req, res)
						}
					}
				})
			}
			wg.Wait()
			b.Close()
			require.Zero(t, b.Queued())
			require.Zero(t, b.InFlight())
			sent.Range(func(k, _ any) bool {
				_, gave := gaveUp.Load(k)
				_, orph := orphaned.Load(k)
				if gave != orph {
					t.Errorf("request %v: gave up %v, orphaned %v", k, gave, orph)
				}
				return true
			})
			orphaned.Range(func(k, _ any) bool {
				if _, ok := sent.Load(k); !ok {
					t.Errorf("request %v orphaned but never sent", k)
				}
				return true
			})
		})
	}
}

// TestTakenAddsToABatch: Taken sees the requests of a batch when its
// leader takes them, before they are sent, and what it adds to them is
// sent with them.
func TestTakenAddsToABatch(t *testing.T) {
	ctx := t.Context()
	type req struct{ items []int }
	var mu sync.Mutex
	var sent [][]int
	late := []int{7, 8}
	b := New(Config[*req, int]{
		Send: func(_ context.Context, reqs []*req, _ func()) []int {
			out := make([]int, len(reqs))
			mu.Lock()
			defer mu.Unlock()
			for i, r := range reqs {
				sent = append(sent, r.items)
				out[i] = len(r.items)
			}
			return out
		},
		Taken: func(reqs []*req) {
			reqs[0].items = append(reqs[0].items, late...) // what joined since it queued
			late = nil
		},
	})
	defer b.Close()
	n, err := b.Do(ctx, &req{items: []int{1}})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = b.Do(ctx, &req{items: []int{2}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, [][]int{{1, 7, 8}, {2}}, sent)
}

// TestCallersWhoArriveElsewhere: a request that answers several callers
// (Callers) opens a wave of that many, and callers that count their
// arrival themselves (ArriveElsewhere, Wave.Arrive) close it: a leader
// waits for them, and not for its own call.
func TestCallersWhoArriveElsewhere(t *testing.T) {
	ctx := t.Context()
	clock := newTestClock()
	w := NewWave()
	w.SetClock(clock.now)
	w.SetMinWait(10 * time.Second)
	type run struct{ callers int }
	be := &backend{}
	b := New(Config[*run, int]{
		Send: func(ctx context.Context, reqs []*run, decided func()) []int {
			ints := make([]int, len(reqs))
			for i, r := range reqs {
				ints[i] = r.callers
			}
			return be.send(ctx, ints, decided)
		},
		Wave:            w,
		Callers:         func(r *run) int { return r.callers },
		ArriveElsewhere: true,
	})
	defer b.Close()
	var wg sync.WaitGroup
	entered, open := be.hold()
	wg.Go(func() { _, _ = b.Do(ctx, &run{callers: 1}) })
	wait(t, entered, "the first run is in flight")
	wg.Go(func() { _, _ = b.Do(ctx, &run{callers: 3}) }) // answers three callers
	require.Eventually(t, func() bool { return b.Queued() == 1 }, 10*time.Second, 100*time.Microsecond)
	open()
	wg.Wait()

	// The three callers come back: the next leader waits until all three
	// arrived, and its own call does not count as one of them.
	done := make(chan struct{})
	go func() {
		_, _ = b.Do(ctx, &run{callers: 1})
		close(done)
	}()
	require.Eventually(t, func() bool { return b.Queued() == 1 }, 10*time.Second, 100*time.Microsecond)
	w.Arrive()
	w.Arrive()
	select {
	case <-done:
		t.Fatal("the leader went before the third caller arrived")
	case <-time.After(20 * time.Millisecond):
	}
	w.Arrive()
	wait(t, done, "the leader goes once the third arrived")
	require.Equal(t, [][]int{{1}, {3}, {1}}, be.sent())
}
