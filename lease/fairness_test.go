package lease_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// heardLog records the announcements a Manager heard.
type heardLog struct {
	mu     sync.Mutex
	since  map[string][]time.Time // waiter -> distinct Since values, in arrival order
	all    []store.LeaseWaiter    // every announcement and withdrawal, in arrival order
	signal chan struct{}
}

func hearing(m *lease.Manager) *heardLog {
	h := &heardLog{since: map[string][]time.Time{}, signal: make(chan struct{}, 1)}
	lease.OnWanted(m, func(w store.LeaseWaiter) {
		h.mu.Lock()
		if !w.Withdrawn() && !slices.ContainsFunc(h.since[w.Waiter], w.Since.Equal) {
			h.since[w.Waiter] = append(h.since[w.Waiter], w.Since)
		}
		h.all = append(h.all, w)
		h.mu.Unlock()
		select {
		case h.signal <- struct{}{}:
		default:
		}
	})
	return h
}

// waitFor waits until h heard n distinct waiters (tickets) of owner.
func (h *heardLog) waitFor(t *testing.T, owner string, n int) {
	t.Helper()
	h.waitUntil(t, fmt.Sprintf("%d announcements of %s", n, owner), func() bool { return len(h.since[owner]) >= n })
}

// waitForAfterWithdrawal waits until h heard a withdrawal of owner and,
// after it, an announcement of owner.
func (h *heardLog) waitForAfterWithdrawal(t *testing.T, owner string) {
	t.Helper()
	h.waitUntil(t, "an announcement of "+owner+" after its withdrawal", func() bool {
		withdrawn := false
		for _, w := range h.all {
			switch {
			case w.Waiter != owner:
			case w.Withdrawn():
				withdrawn = true
			case withdrawn:
				return true
			}
		}
		return false
	})
}

// waitUntil waits until ok, called under h.mu, holds, for up to 10 s.
func (h *heardLog) waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		h.mu.Lock()
		done := ok()
		h.mu.Unlock()
		if done {
			return
		}
		select {
		case <-h.signal:
		case <-timeout:
			t.Fatalf("not heard within 10s: %s", what)
		}
	}
}

// TestWaitersAcrossProcessesGoFirstComeFirstServed: blocked acquires of two
// processes (on PostgreSQL, two pools) get the name in the order they
// asked, alternating between the processes, not process by process.
// HandoffGrace is a minute: a waiter that held back for the wrong rival
// would stall the test.
func TestWaitersAcrossProcessesGoFirstComeFirstServed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		cfg := func(owner string) *lease.Config {
			return &lease.Config{Owner: owner, PollInterval: time.Hour, HandoffGrace: time.Minute}
		}
		s := b.open(t)
		p1 := newListeningManager(t, s, cfg("p1"))
		p2 := newListeningManager(t, b.open(t), cfg("p2"))
		heard1, heard2 := hearing(p1), hearing(p2)
		queued := map[*lease.Manager]chan int{p1: make(chan int, 4), p2: make(chan int, 4)}
		for m, ch := range queued {
			lease.OnWaiting(m, func(_ string, n int) { ch <- n })
		}
		name := t.Name()
		h, err := p1.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)

		order := make(chan string, 4)
		release := map[string]chan struct{}{}
		var wg sync.WaitGroup
		t.Cleanup(wg.Wait) // after a failure: ctx ends, and the waiters return
		start := func(m *lease.Manager, label string) {
			release[label] = make(chan struct{})
			wg.Go(func() {
				l, err := m.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour, Timeout: 30 * time.Second})
				if err != nil {
					t.Error(label, err)
					order <- label + " failed"
					return
				}
				order <- label
				select {
				case <-release[label]:
				case <-ctx.Done():
				}
				if err := l.Release(ctx); err != nil {
					t.Error(label, err)
				}
			})
		}
		next := func() string { return within(t, "the next holder", func() string { return <-order }) }

		start(p2, "a") // waits behind p1's holder: announces itself
		require.Equal(t, 1, <-queued[p2])
		heard1.waitFor(t, "p2", 1)
		apart(t, s)
		start(p1, "b") // waits behind its own process's holder, knowing a rival: announces itself
		require.Equal(t, 1, <-queued[p1])
		heard2.waitFor(t, "p1", 1)
		apart(t, s)
		start(p2, "c")
		require.Equal(t, 2, <-queued[p2])
		apart(t, s)
		start(p1, "d")
		require.Equal(t, 2, <-queued[p1])

		require.NoError(t, h.Release(ctx))
		require.Equal(t, "a", next(), "a asked first, though b's process released")
		heard1.waitFor(t, "p2", 2) // c, p2's new first waiter, announced itself
		close(release["a"])
		require.Equal(t, "b", next())
		heard2.waitFor(t, "p1", 2) // d
		close(release["b"])
		require.Equal(t, "c", next(), "though d's process released")
		close(release["c"])
		require.Equal(t, "d", next())
		close(release["d"])
		wg.Wait()
	})
}

// apart waits until the backend's clock moved 100 ms on, so that the
// acquires before and after were asked further apart than the tickets'
// precision (the waiters' times are estimated from the backend's clock
// readings, to within about a round trip: a few milliseconds, but tens on
// a machine loaded by make test, where 5 ms was seen to reorder them).
func apart(t *testing.T, s lease.Store) {
	t.Helper()
	from, err := s.Now(t.Context())
	require.NoError(t, err)
	for {
		now, err := s.Now(t.Context())
		require.NoError(t, err)
		if now.Sub(from) >= 100*time.Millisecond {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// gatedWithdrawal holds the first withdrawal of an announcement back until
// open closes (a slow statement on another connection).
type gatedWithdrawal struct {
	*memory.Store
	entered chan struct{} // closed when the first withdrawal starts
	open    chan struct{}
	once    atomic.Bool
}

func (s *gatedWithdrawal) AnnounceLeaseWaiter(ctx context.Context, w store.LeaseWaiter) error {
	if w.Withdrawn() && s.once.CompareAndSwap(false, true) {
		close(s.entered)
		select {
		case <-s.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.AnnounceLeaseWaiter(ctx, w)
}

// TestALateWithdrawalDoesNotHideANewWaiter: an acquire that gave up
// withdraws its process's announcement in the background; its caller tries
// again at once, and the new waiter announces itself before the withdrawal
// reaches the other process (held back here until then). The new waiter
// announces itself again once the withdrawal is through, so the other
// process still knows of it and, when the name is released, holds its own,
// newer waiter back: the older gets the name first. p1's clock stands
// still, so its waiter never refreshes its announcement (every 3 s) on its
// own: only that second announcement can tell p2.
func TestALateWithdrawalDoesNotHideANewWaiter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	mem := memory.New(nil)
	gated := &gatedWithdrawal{Store: mem, entered: make(chan struct{}), open: make(chan struct{})}
	cfg := func(owner string) *lease.Config {
		return &lease.Config{Owner: owner, PollInterval: time.Hour, HandoffGrace: time.Minute}
	}
	frozen := time.Now()
	c1 := cfg("p1")
	c1.Now = func() time.Time { return frozen }
	p1 := newListeningManager(t, gated, c1)
	p2 := newListeningManager(t, mem, cfg("p2"))
	heard := hearing(p2)
	paused := make(chan struct{})
	var once sync.Once
	lease.OnPaused(p2, func(string) { once.Do(func() { close(paused) }) })
	const name = "x"
	h, err := p2.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)

	_, err = acquireWithin(t, "the acquire that gives up", func() (*lease.Lease, error) {
		return p1.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour, Timeout: 100 * time.Millisecond})
	})
	require.ErrorIs(t, err, lease.ErrTimeout)
	heard.waitFor(t, "p1", 1)
	wait(t, gated.entered, "the withdrawal is out")

	order := make(chan string, 2)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after a failure: ctx ends, and the acquires return
	take := func(m *lease.Manager, label string) {
		wg.Go(func() {
			l, err := m.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour, Timeout: 30 * time.Second})
			if err != nil {
				t.Error(label, err)
				order <- label + " failed"
				return
			}
			order <- label
			if err := l.Release(ctx); err != nil {
				t.Error(label, err)
			}
		})
	}
	next := func() string { return within(t, "the next holder", func() string { return <-order }) }
	apart(t, mem)
	take(p1, "older") // the caller tries again at once
	heard.waitFor(t, "p1", 2)
	close(gated.open)
	heard.waitForAfterWithdrawal(t, "p1")
	apart(t, mem)
	take(p2, "newer")
	wait(t, paused, "the newer waiter found the name held")
	require.NoError(t, h.Release(ctx))
	require.Equal(t, "older", next())
	require.Equal(t, "newer", next())
	wg.Wait() // the newer holder's Release, while ctx is still live
}

// TestASilentRivalCostsOneGrace: an older waiter of another process that
// announced itself but does not take the name (its process died) holds a
// release here back once, for HandoffGrace; after that it is passed over
// until it announces anew.
func TestASilentRivalCostsOneGrace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		m := newListeningManager(t, s, &lease.Config{Owner: "alive", PollInterval: time.Hour, HandoffGrace: 100 * time.Millisecond})
		heard := hearing(m)
		var mu sync.Mutex
		holds := 0
		lease.OnHolding(m, func(string) { mu.Lock(); holds++; mu.Unlock() })
		paused := make(chan struct{}, 8)
		lease.OnPaused(m, func(string) { paused <- struct{}{} })
		name := t.Name()
		h, err := m.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		got := make(chan *lease.Lease, 2)
		for range 2 {
			go func() {
				l, err := m.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour, Timeout: 20 * time.Second})
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
		}
		wait(t, chanDone(paused), "the first waiter found the name held")
		now, err := s.Now(ctx)
		require.NoError(t, err)
		require.NoError(t, s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: name, Waiter: "dead", Since: now.Add(-time.Hour), Fence: h.Fence()}))
		heard.waitFor(t, "dead", 1)

		require.NoError(t, h.Release(ctx))
		first := within(t, "the first waiter, after one grace", func() *lease.Lease { return <-got })
		require.NotNil(t, first)
		require.NoError(t, first.Release(ctx))
		second := within(t, "the second waiter", func() *lease.Lease { return <-got })
		require.NotNil(t, second)
		require.NoError(t, second.Release(ctx))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, holds, "held back once for the silent rival, not at the second release")
	})
}

// chanDone turns one receive from ch into a closed channel.
func chanDone(ch <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		<-ch
		close(done)
	}()
	return done
}

// TestRivalsAreForgotten: a Manager keeps other processes' announcements
// only for names it holds or waits for, and forgets them when it no longer
// does, with or without its maintenance loop (CleanupInterval < 0).
func TestRivalsAreForgotten(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		m := newListeningManager(t, s, &lease.Config{Owner: "me", CleanupInterval: -1})
		heard := hearing(m)
		now, err := s.Now(ctx)
		require.NoError(t, err)
		announce := func(name, waiter string) {
			require.NoError(t, s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: name, Waiter: waiter, Since: now}))
			heard.waitFor(t, waiter, 1)
		}
		announce(t.Name()+"/unrelated", "other-1")
		require.Zero(t, lease.Rivals(m), "a name this process neither holds nor waits for")

		l, err := m.TryAcquire(ctx, t.Name()+"/mine", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		announce(t.Name()+"/mine", "other-2")
		require.Equal(t, 1, lease.Rivals(m), "a name this process holds")
		require.NoError(t, l.Release(ctx))
		require.Zero(t, lease.Rivals(m), "released")
	})
}

// TestFairnessAcrossProcesses: 16 goroutines in two Managers (on
// PostgreSQL, two pools) acquire and release one name for three seconds
// (alone: see inTurn).
// Every goroutine gets it, and about equally often: the spread is logged
// (docs/internals/leases.md quotes it) and the fewest wins must be at least a third
// of the most.
func TestFairnessAcrossProcesses(t *testing.T) {
	inTurn(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		b.open(t) // the shared pool: each Manager gets a pool of its own
		managers := []*lease.Manager{
			newListeningManager(t, b.open(t), &lease.Config{Owner: "p1"}),
			newListeningManager(t, b.open(t), &lease.Config{Owner: "p2"}),
		}
		const per = 8
		wins := make([]int, 2*per)
		deadline := time.Now().Add(3 * time.Second)
		var wg sync.WaitGroup
		for mi, m := range managers {
			for g := range per {
				wg.Go(func() {
					for time.Now().Before(deadline) {
						l, err := m.Acquire(ctx, "x", &lease.AcquireOpts{TTL: time.Minute, Timeout: 20 * time.Second})
						if err != nil {
							t.Error(err)
							return
						}
						wins[mi*per+g]++
						if err := l.Release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
		}
		wg.Wait()
		total := 0
		for _, w := range wins {
			total += w
		}
		sorted := slices.Sorted(slices.Values(wins))
		t.Logf("%d cycles in 3 s; wins per goroutine: p1 %v, p2 %v; fewest %d, most %d",
			total, wins[:per], wins[per:], sorted[0], sorted[len(sorted)-1])
		require.GreaterOrEqual(t, 3*sorted[0], sorted[len(sorted)-1], "no goroutine gets less than a third of the luckiest's share")
	})
}
