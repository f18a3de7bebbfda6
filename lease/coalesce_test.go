package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// gatedStore records the batch calls a Manager makes, and holds the next
// acquire (or release) call at a gate when asked to, so that the calls
// behind it queue.
type gatedStore struct {
	lease.Store
	mu       sync.Mutex
	acquires [][]string // the names of each AcquireLeases call
	releases [][]string
	ctxDone  []bool         // whether each acquire's context had ended when it began
	gates    map[bool]*gate // the next acquire's (true) or release's (false)
}

type gate struct{ open, entered chan struct{} }

func newGatedStore() *gatedStore { return &gatedStore{Store: memory.New(nil), gates: map[bool]*gate{}} }

// hold makes the next acquire call (or release call) wait until the
// returned function is called (it may be called again); entered closes
// when it starts to wait.
func (s *gatedStore) hold(acquire bool) (entered <-chan struct{}, open func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := &gate{open: make(chan struct{}), entered: make(chan struct{})}
	s.gates[acquire] = g
	return g.entered, sync.OnceFunc(func() { close(g.open) })
}

func (s *gatedStore) pass(acquire bool, ctx context.Context, names []string) {
	s.mu.Lock()
	if acquire {
		s.acquires = append(s.acquires, names)
		s.ctxDone = append(s.ctxDone, ctx.Err() != nil)
	} else {
		s.releases = append(s.releases, names)
	}
	g := s.gates[acquire]
	delete(s.gates, acquire)
	s.mu.Unlock()
	if g != nil {
		close(g.entered)
		<-g.open
	}
}

func (s *gatedStore) AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult {
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.Name
	}
	s.pass(true, ctx, names)
	return s.Store.AcquireLeases(ctx, reqs, p)
}

func (s *gatedStore) ReleaseLeases(ctx context.Context, reqs []store.LeaseHolding, p *store.LeaseBatchParams) []error {
	names := make([]string, len(reqs))
	for i, r := range reqs {
		names[i] = r.Name
	}
	s.pass(false, ctx, names)
	return s.Store.ReleaseLeases(ctx, reqs, p)
}

func (s *gatedStore) calls() (acquires, releases [][]string, ctxDone []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.acquires...), append([][]string(nil), s.releases...), append([]bool(nil), s.ctxDone...)
}

// queued waits until n acquires (or releases) of m queue behind the call
// in flight.
func queued(t *testing.T, m *lease.Manager, acquires, releases int) {
	t.Helper()
	require.Eventually(t, func() bool {
		a, r := lease.Queued(m)
		return a == acquires && r == releases
	}, 10*time.Second, time.Millisecond)
}

// TestConcurrentCallsShareBackendCalls: acquires that queue while one is in
// flight go in one backend call, each with its own outcome (a grant, the
// holder of a held name, the error of bad input); so do releases.
func TestConcurrentCallsShareBackendCalls(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newGatedStore()
	m := newManager(t, s, &lease.Config{Owner: "m"})
	other := newManager(t, s.Store, &lease.Config{Owner: "other"})
	held, err := other.TryAcquire(ctx, "held", &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)

	entered, open := s.hold(true)
	type result struct {
		l   *lease.Lease
		err error
	}
	first := make(chan result, 1)
	go func() {
		l, err := m.TryAcquire(ctx, "first", nil)
		first <- result{l, err}
	}()
	wait(t, entered, "the first acquire is in flight")
	names := []string{"a", "b", "held", "c"}
	results := make([]result, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			l, err := m.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Duration(i+1) * time.Minute})
			results[i] = result{l, err}
		})
		queued(t, m, i+1, 0)
	}
	_, err = m.TryAcquire(ctx, "bad\x00name", nil) // bad input never queues
	require.ErrorIs(t, err, lease.ErrInvalidArgument)
	open()
	wg.Wait()
	r := <-first
	require.NoError(t, r.err)

	acquires, _, _ := s.calls()
	require.Equal(t, [][]string{{"first"}, names}, acquires, "one call for the queued acquires, in order")
	for i, name := range names {
		if name == "held" {
			var he *lease.HeldError
			require.ErrorAs(t, results[i].err, &he)
			require.Equal(t, []any{"other", held.Fence()}, []any{he.Owner, he.Fence})
			continue
		}
		require.NoError(t, results[i].err, name)
		require.Equal(t, name, results[i].l.Name())
		require.Equal(t, results[i].l.AcquiredAt().Add(time.Duration(i+1)*time.Minute), results[i].l.ExpiresAt(), "%s: its own TTL", name)
	}

	entered, open = s.hold(false)
	done := make(chan error, 1)
	go func() { done <- r.l.Release(ctx) }()
	wait(t, entered, "the first release is in flight")
	for _, res := range results {
		if res.l != nil {
			_, n := lease.Queued(m)
			wg.Go(func() { noError(t, res.l.Release(ctx)) })
			queued(t, m, 0, n+1)
		}
	}
	open()
	wg.Wait()
	require.NoError(t, <-done)
	_, releases, _ := s.calls()
	require.Equal(t, [][]string{{"first"}, {"a", "b", "c"}}, releases)
	for _, name := range []string{"first", "a", "b", "c"} {
		g, err := m.Get(ctx, name)
		require.NoError(t, err)
		require.Equal(t, store.LeaseReleased, g.EndReason, name)
	}
}

// TestAGivenUpCallDoesNotFailTheOthers: a caller whose context ends while
// its acquire waits in the queue is not sent; one whose context ends while
// its acquire is in flight returns at once, the leader of the shared call
// too, and their grants are released; the shared call does not see either
// context end, and the others get their leases.
func TestAGivenUpCallDoesNotFailTheOthers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newGatedStore()
	m := newManager(t, s, &lease.Config{Owner: "m"})

	entered, open := s.hold(true)
	t.Cleanup(open) // before Stop, should the test fail
	errs := make(chan error, 1)
	go func() {
		_, err := m.TryAcquire(ctx, "first", nil)
		errs <- err
	}()
	wait(t, entered, "the first acquire is in flight")

	queuedCtx, giveUpQueued := context.WithCancel(ctx)
	gaveUp := make(chan error, 2)
	go func() {
		_, err := m.TryAcquire(queuedCtx, "given-up-queued", nil)
		gaveUp <- err
	}()
	queued(t, m, 1, 0)
	giveUpQueued()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	queued(t, m, 0, 0)

	var wg sync.WaitGroup
	var kept *lease.Lease
	cancels := make([]context.CancelFunc, 3)
	for i := range cancels {
		var cctx context.Context
		cctx, cancels[i] = context.WithCancel(ctx)
		defer cancels[i]()
		if i < 2 { // n0 leads the shared call
			go func() {
				_, err := m.TryAcquire(cctx, fmt.Sprint("n", i), nil)
				gaveUp <- err
			}()
		} else {
			wg.Go(func() {
				l, err := m.TryAcquire(cctx, fmt.Sprint("n", i), nil)
				noError(t, err)
				kept = l
			})
		}
		queued(t, m, i+1, 0)
	}
	entered2, open2 := s.hold(true) // the shared call waits too
	t.Cleanup(open2)
	open()
	require.NoError(t, <-errs)
	wait(t, entered2, "the shared acquire is in flight")
	cancels[0]() // its leader gives up: it returns at once; the shared call goes on
	require.ErrorIs(t, within(t, "the given-up leader returns", func() error { return <-gaveUp }), context.Canceled)
	cancels[1]() // another caller gives up: it returns at once
	require.ErrorIs(t, within(t, "a given-up caller returns", func() error { return <-gaveUp }), context.Canceled)
	open2()
	wg.Wait()
	require.NotNil(t, kept)

	acquires, _, ctxDone := s.calls()
	require.Equal(t, [][]string{{"first"}, {"n0", "n1", "n2"}}, acquires, "the given-up queued call was not sent")
	require.False(t, ctxDone[1], "the shared call ran under a context that did not end")
	for _, name := range []string{"n0", "n1"} {
		require.Eventually(t, func() bool {
			g, err := m.Get(ctx, name)
			return err == nil && g.EndReason == store.LeaseReleased
		}, 10*time.Second, time.Millisecond, "the abandoned grant of %s is released", name)
	}
	_, releases, _ := s.calls()
	require.Contains(t, releases, []string{"n0", "n1"})
	require.NoError(t, kept.Release(ctx))
}

// TestNoWakeUpIsLost races a release of one process with a blocked acquire
// of another that polls once an hour: every acquire must get the name,
// whether the release comes before its attempt, while it finds the name
// held and marks it wanted, or after it waits; in the last case it must
// have heard of the release (the backend's notice), not found out by
// itself (its announcement, refreshed every 3 s, would make it try again).
func TestNoWakeUpIsLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		alice := newManager(t, b.open(t), &lease.Config{Owner: "alice"})
		bob, err := lease.New(b.open(t), &lease.Config{Owner: "bob", PollInterval: time.Hour})
		require.NoError(t, err)
		var heardMu sync.Mutex
		heard := map[string]bool{}
		lease.OnFreed(bob, func(name string) {
			heardMu.Lock()
			heard[name] = true
			heardMu.Unlock()
		})
		listening := make(chan struct{})
		var once sync.Once
		lease.OnReset(bob, func() { once.Do(func() { close(listening) }) })
		require.NoError(t, bob.Start(ctx))
		t.Cleanup(bob.Stop)
		wait(t, listening, "bob's watch listens")
		paused := make(chan string, 100)
		lease.OnPaused(bob, func(name string) { paused <- name })
		for i := range 40 {
			name := fmt.Sprintf("%s-%d", t.Name(), i)
			l, err := alice.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
			require.NoError(t, err)
			type result struct {
				l   *lease.Lease
				err error
			}
			got := make(chan result, 1)
			go func() {
				m, err := bob.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
				got <- result{m, err}
			}()
			if i%2 == 0 { // after bob found it held: only the notice wakes him
				select {
				case <-paused:
				case <-time.After(10 * time.Second):
					t.Fatal("bob never found the name held")
				}
			} else { // racing bob's attempt
				time.Sleep(time.Duration(i) * 50 * time.Microsecond)
			}
			require.NoError(t, l.Release(ctx))
			r := within(t, "bob's acquire after the release", func() result { return <-got })
			require.NoError(t, r.err)
			require.Equal(t, int64(2), r.l.Fence())
			if i%2 == 0 {
				heardMu.Lock()
				require.True(t, heard[name], "bob found %s held, and got it without hearing of its release", name)
				heardMu.Unlock()
			}
			require.NoError(t, r.l.Release(ctx))
			for len(paused) > 0 {
				<-paused
			}
		}
	})
}

// TestReleasesNobodyWaitsForSendNoNotice: hand-offs inside one Manager (to a
// waiter that found the name held), and a try-acquire of another, wake
// nobody through the backend: the releases send no notice (on PostgreSQL,
// no NOTIFY, which would serialize their commits with every other
// notifying commit).
func TestReleasesNobodyWaitsForSendNoNotice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		freed := &freedCount{}
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan error, 1)
		go func() { watched <- s.WatchLeases(wctx, freed) }()
		defer func() {
			stop()
			<-watched
		}()
		m := newListeningManager(t, s, &lease.Config{Owner: "m"})
		other := newManager(t, b.open(t), &lease.Config{Owner: "other"})
		paused := make(chan struct{}, 1)
		lease.OnPaused(m, func(string) {
			select {
			case paused <- struct{}{}:
			default:
			}
		})
		for range 10 {
			l, err := m.TryAcquire(ctx, t.Name(), nil)
			require.NoError(t, err)
			_, err = other.TryAcquire(ctx, t.Name(), nil)
			require.ErrorIs(t, err, lease.ErrHeld)
			got := make(chan *lease.Lease, 1)
			go func() {
				next, err := m.Acquire(ctx, t.Name(), nil)
				noError(t, err)
				got <- next
			}()
			wait(t, paused, "the waiter found the name held")
			require.NoError(t, l.Release(ctx))
			next := within(t, "the hand-off", func() *lease.Lease { return <-got })
			require.NotNil(t, next)
			require.NoError(t, next.Release(ctx))
		}
		// A force-release always notifies: once its notice arrived, any
		// earlier one would have too.
		l, err := m.TryAcquire(ctx, t.Name()+"-forced", nil)
		require.NoError(t, err)
		_, err = other.ForceRelease(ctx, "m", nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return freed.count(t.Name()+"-forced") == 1 }, 10*time.Second, time.Millisecond)
		require.Zero(t, freed.count(t.Name()), "releases nobody waited for were announced")
		require.ErrorIs(t, l.Check(ctx), lease.ErrStaleFence)
	})
}

// noError reports err, from any goroutine.
func noError(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}

// freedCount counts the Freed notices per name.
type freedCount struct {
	mu    sync.Mutex
	names map[string]int
}

func (f *freedCount) Freed(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.names == nil {
		f.names = map[string]int{}
	}
	f.names[name]++
}
func (f *freedCount) Wanted(store.LeaseWaiter) {}
func (f *freedCount) Reset()                   {}

func (f *freedCount) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.names[name]
}
