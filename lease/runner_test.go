package lease_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// flakyStore fails every renewal while broken, like a cut connection.
type flakyStore struct {
	*memory.Store
	broken atomic.Bool
	renews atomic.Int64
}

func (f *flakyStore) RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error) {
	if f.broken.Load() {
		return store.NamedLease{}, errors.New("connection reset by peer")
	}
	f.renews.Add(1)
	return f.Store.RenewLease(ctx, name, owner, fence, p)
}

// TestRunnerStopsBeforeTheExpiryMemory cuts the runner's backend: its
// Context ends, with ErrLost, before the backend's clock reaches the expiry,
// so the holder stops before anyone else could take the name.
func TestRunnerStopsBeforeTheExpiryMemory(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := &flakyStore{Store: memory.New(nil)}
	m := newManager(t, s, &lease.Config{Owner: "runner"})
	l, err := m.Hold(ctx, "job", &lease.AcquireOpts{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.renews.Load() >= 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, l.Err())
	lctx := l.Context()

	s.broken.Store(true)
	wait(t, lctx.Done(), "the runner's context")
	endedAt, err := s.Now(ctx)
	require.NoError(t, err)
	info, err := s.GetLease(ctx, "job", nil)
	require.NoError(t, err)
	require.True(t, endedAt.Before(info.ExpiresAt), "ended at %v, after the expiry %v", endedAt, info.ExpiresAt)
	require.ErrorIs(t, l.Err(), lease.ErrLost)
	require.ErrorIs(t, context.Cause(lctx), lease.ErrLost)
	require.ErrorContains(t, l.Err(), "connection reset")
	// The runner releases it, best effort, so nobody waits for the expiry.
	require.Eventually(t, func() bool {
		info, err := s.GetLease(ctx, "job", nil)
		return err == nil && info.EndReason == store.LeaseReleased
	}, 10*time.Second, time.Millisecond)
}

// TestRunnerStopsBeforeTheExpiryPostgres terminates the runner's database
// connections (pg_terminate_backend) and refuses new ones: its Context ends
// before the database's clock reaches the expiry.
func TestRunnerStopsBeforeTheExpiryPostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	shared := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, shared)
	observer, err := postgres.New(shared, &postgres.Config{Schema: schema})
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.MaxConns = 2
	var cut atomic.Bool
	var mu sync.Mutex
	var pids []uint32
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if cut.Load() {
			return errors.New("network cut by the test")
		}
		return nil
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		mu.Lock()
		pids = append(pids, c.PgConn().PID())
		mu.Unlock()
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	m := newManager(t, s, &lease.Config{Owner: "runner"})
	sub := m.Subscribe()
	defer sub.Close()

	l, err := m.Hold(ctx, "job", &lease.AcquireOpts{TTL: 2 * time.Second})
	require.NoError(t, err)
	for e := range sub.C() {
		if e.Kind == lease.Renewed {
			break
		}
	}
	lctx := l.Context()

	cut.Store(true)
	mu.Lock()
	killed := append([]uint32(nil), pids...)
	mu.Unlock()
	for _, pid := range killed {
		_, err := shared.Exec(ctx, "SELECT pg_terminate_backend($1)", int64(pid))
		require.NoError(t, err)
	}
	wait(t, lctx.Done(), "the runner's context")
	endedAt, err := observer.Now(ctx)
	require.NoError(t, err)
	info, err := observer.GetLease(ctx, "job", nil)
	require.NoError(t, err)
	require.True(t, endedAt.Before(info.ExpiresAt), "ended at %v, after the expiry %v", endedAt, info.ExpiresAt)
	require.True(t, info.EndedAt.IsZero(), "the cut runner could not release it")
	require.ErrorIs(t, l.Err(), lease.ErrLost)
	t.Logf("the runner stopped %v before the database's expiry: %v", info.ExpiresAt.Sub(endedAt), l.Err())
}

// TestRunnerRenewsAndEventsArriveInOrder: the runner keeps renewing while
// the subscriber reads nothing (events queue, the loop never waits), then
// the subscriber gets every event in order, one end event last.
func TestRunnerRenewsAndEventsArriveInOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := newManager(t, b.open(t), &lease.Config{Owner: t.Name()})
		sub := m.Subscribe()
		defer sub.Close()
		l, err := m.Hold(ctx, t.Name(), &lease.AcquireOpts{TTL: 600 * time.Millisecond})
		require.NoError(t, err)
		fence := l.Fence()
		require.Eventually(t, func() bool { return l.Renewals() >= 3 }, 10*time.Second, time.Millisecond,
			"renewals go on while nobody reads the events")
		require.NoError(t, l.Err())
		require.Equal(t, fence, l.Fence())
		require.NoError(t, l.Release(ctx))

		var kinds []lease.EventKind
		var last time.Time
		for e := range sub.C() {
			require.Equal(t, t.Name(), e.Name)
			require.Equal(t, fence, e.Fence)
			if e.Kind == lease.Acquired || e.Kind == lease.Renewed {
				require.True(t, e.At.After(last), "backend times increase")
				last = e.At
			}
			kinds = append(kinds, e.Kind)
			if e.Kind == lease.Released {
				require.ErrorIs(t, e.Err, lease.ErrReleased)
				break
			}
		}
		require.Equal(t, lease.Acquired, kinds[0])
		require.Equal(t, lease.Released, kinds[len(kinds)-1])
		for _, k := range kinds[1 : len(kinds)-1] {
			require.Equal(t, lease.Renewed, k)
		}
		require.GreaterOrEqual(t, len(kinds)-2, 3)
	})
}

func TestRunnerEndsAtMaxRenewals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := newManager(t, b.open(t), &lease.Config{Owner: t.Name()})
		sub := m.Subscribe()
		defer sub.Close()
		// A TTL a loaded machine's acquire cannot outlast: a grant that came
		// after its local deadline is released and tried again, and the
		// events would not be those of one holding.
		l, err := m.Hold(ctx, t.Name(), &lease.AcquireOpts{TTL: 1500 * time.Millisecond, MaxRenewals: 2})
		require.NoError(t, err)
		wait(t, l.Done(), "the end at the maximum")
		require.ErrorIs(t, l.Err(), lease.ErrMaxRenewals)
		require.Equal(t, 2, l.Renewals())
		var kinds []lease.EventKind
		for e := range sub.C() {
			kinds = append(kinds, e.Kind)
			if e.Kind == lease.Lost {
				require.ErrorIs(t, e.Err, lease.ErrMaxRenewals)
				break
			}
		}
		require.Equal(t, []lease.EventKind{lease.Acquired, lease.Renewed, lease.Renewed, lease.Lost}, kinds)
		require.Eventually(t, func() bool {
			info, err := m.Get(ctx, t.Name())
			return err == nil && info.EndReason == store.LeaseReleased
		}, 10*time.Second, time.Millisecond, "released so the next holder need not wait")
	})
}

func TestTryRenewNow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := newManager(t, b.open(t), &lease.Config{Owner: t.Name()})
		for _, keepAlive := range []bool{false, true} {
			l, err := m.TryAcquire(ctx, fmt.Sprint(t.Name(), keepAlive), &lease.AcquireOpts{TTL: time.Hour, KeepAlive: keepAlive})
			require.NoError(t, err)
			before := l.ExpiresAt()
			require.NoError(t, l.TryRenewNow(ctx))
			require.GreaterOrEqual(t, l.Renewals(), 1) // the watch's first Reset may renew it too
			require.False(t, l.ExpiresAt().Before(before))
			require.NoError(t, l.KeepAlive(), "again: nothing")
			require.NoError(t, l.Close(ctx))
			require.ErrorIs(t, l.TryRenewNow(ctx), lease.ErrReleased)
			require.ErrorIs(t, l.KeepAlive(), lease.ErrReleased)
		}
	})
}

// TestRunLeaderElection: two Managers campaign for one name; one leads at a
// time; when the leader's Manager stops, the other takes over.
func TestRunLeaderElection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var leaders atomic.Int32
		leading := make(chan string, 4)
		var wg sync.WaitGroup
		results := make(map[string]chan error)
		managers := map[string]*lease.Manager{}
		for _, owner := range []string{"a", "b"} {
			m, err := lease.New(b.open(t), &lease.Config{Owner: owner, PollInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, m.Start(ctx))
			managers[owner] = m
			result := make(chan error, 1)
			results[owner] = result
			wg.Go(func() {
				result <- m.Run(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Second}, func(ctx context.Context, l *lease.Lease) error {
					if n := leaders.Add(1); n != 1 {
						t.Errorf("%d leaders", n)
					}
					leading <- owner
					<-ctx.Done()
					leaders.Add(-1)
					return nil
				})
			})
		}
		first := within(t, "a first leader", func() string { return <-leading })
		managers[first].Stop()
		require.ErrorIs(t, within(t, "the stopped leader's Run", func() error { return <-results[first] }), lease.ErrStopped)
		second := within(t, "a second leader", func() string { return <-leading })
		require.NotEqual(t, first, second)
		cancel()
		require.ErrorIs(t, within(t, "the second leader's Run", func() error { return <-results[second] }), context.Canceled)
		wg.Wait()
		for _, m := range managers {
			m.Stop()
		}
	})
}

// TestStartStopStress starts and stops Managers while their leases renew,
// acquires block and subscribers read, from many goroutines, under -race;
// goleak (TestMain) checks that every goroutine ended.
func TestStartStopStress(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for j := range 5 {
					m, err := lease.New(s, &lease.Config{Owner: fmt.Sprintf("%s-%d-%d", t.Name(), i, j), PollInterval: 5 * time.Millisecond, CleanupInterval: 10 * time.Millisecond})
					if err != nil {
						t.Error(err)
						return
					}
					if j%2 == 0 {
						m.Stop() // before Start
						continue
					}
					if err := m.Start(ctx); err != nil {
						t.Error(err)
						return
					}
					sub := m.Subscribe()
					var inner sync.WaitGroup
					inner.Go(func() {
						for range sub.C() {
						}
					})
					name := fmt.Sprint(t.Name(), "/", i%3)
					inner.Go(func() {
						l, err := m.Acquire(ctx, name, &lease.AcquireOpts{TTL: 50 * time.Millisecond, KeepAlive: true, Timeout: 2 * time.Second})
						if err == nil {
							_ = l.TryRenewNow(ctx)
						} else if !errors.Is(err, lease.ErrStopped) && !errors.Is(err, lease.ErrTimeout) {
							t.Error(err)
						}
					})
					inner.Go(func() { m.Stop() })
					m.Stop()
					inner.Wait()
				}
			})
		}
		wg.Wait()
	})
}

// TestRunnerEndsAtTheDeadlineWithoutSpinning: the keep-alive finds the
// local deadline already passed (the local clock jumped past it before the
// deadline's timer fired, as it can when renewals time out at the deadline
// just before that timer): it ends the lease with ErrLost at once rather
// than loop with no pause until the timer fires.
func TestRunnerEndsAtTheDeadlineWithoutSpinning(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	s := &flakyStore{Store: memory.New(nil)}
	m := newManager(t, s, &lease.Config{Owner: "runner", Now: now})
	l, err := m.TryAcquire(ctx, "job", &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)
	skew.Store(int64(time.Hour)) // the deadline timer, an hour of real time away, has not fired
	require.Zero(t, l.Remaining())
	require.NoError(t, l.Err())
	require.NoError(t, l.KeepAlive())
	wait(t, l.Done(), "the lease ends")
	require.ErrorIs(t, l.Err(), lease.ErrLost)
}

// TestStopDropsWhatASubscriberDoesNotRead: a subscriber that stopped
// reading does not hold Stop up beyond Config.ReleaseTimeout; its C is
// closed and its goroutine gone (goleak checks at the end of the package).
func TestStopDropsWhatASubscriberDoesNotRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m, err := lease.New(memory.New(nil), &lease.Config{Owner: "alice", ReleaseTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, m.Start(ctx))
	stuck := m.Subscribe() // never read until Stop returned
	reader := m.Subscribe()
	got := make(chan int, 1)
	go func() {
		n := 0
		for range reader.C() {
			n++
		}
		got <- n
	}()
	for i := range 3 {
		l, err := m.TryAcquire(ctx, fmt.Sprint("x", i), &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	within(t, "Stop", func() bool { m.Stop(); return true })
	require.Equal(t, 6, within(t, "the reader's events", func() int { return <-got }), "the reader got everything")
	n := 0
	for range stuck.C() { // closed: whatever is left was dropped
		n++
	}
	require.Zero(t, n, "the stuck subscriber's queue was dropped")
	stuck.Close()
	reader.Close()
}

// hangStore makes every renewal hang, once hang is called, until its
// context ends; entered receives each hung call as it starts.
type hangStore struct {
	*memory.Store
	hanging atomic.Bool
	entered chan struct{} // capacity 1
	ended   chan error    // capacity 16: each hung call's context error
}

func newHangStore() *hangStore {
	return &hangStore{Store: memory.New(nil), entered: make(chan struct{}, 1), ended: make(chan error, 16)}
}

func (s *hangStore) RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error) {
	if !s.hanging.Load() {
		return s.Store.RenewLease(ctx, name, owner, fence, p)
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	s.ended <- ctx.Err()
	return store.NamedLease{}, ctx.Err()
}

// TestTryRenewNowIsBoundedByTheLocalDeadline: a TryRenewNow whose backend
// call hangs (a black-holed database) and whose context has no end stops at
// the lease's local deadline: the keep-alive is free again, ends the lease
// (ErrLost) and releases it, and Stop returns.
func TestTryRenewNowIsBoundedByTheLocalDeadline(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newHangStore()
	m, err := lease.New(s, &lease.Config{Owner: "runner"})
	require.NoError(t, err)
	l, err := m.Hold(ctx, "job", &lease.AcquireOpts{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	s.hanging.Store(true)
	err = within(t, "TryRenewNow", func() error { return l.TryRenewNow(ctx) })
	require.Error(t, err)
	wait(t, l.Done(), "the local deadline")
	require.ErrorIs(t, l.Err(), lease.ErrLost)
	require.Error(t, within(t, "the hung renewal ends", func() error { return <-s.ended }), "at the local deadline, or with the lease that ends there")
	require.Eventually(t, func() bool {
		info, err := s.GetLease(ctx, "job", nil)
		return err == nil && info.EndReason == store.LeaseReleased
	}, 10*time.Second, time.Millisecond, "the keep-alive, out of the renewal, released the lost lease")
	within(t, "Stop", func() bool { m.Stop(); return true })
}

// TestStopEndsAKeepAliveStuckInARenewal: a lease that ended (here: its own
// Manager force-released it) while its keep-alive waits for a renewal that
// hangs is not among the live leases Stop releases; the renewal ends with
// the lease (its context is cancelled), and Stop returns. TryRenewNow on
// the lease returns its end at once rather than wait for the stuck loop.
func TestStopEndsAKeepAliveStuckInARenewal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newHangStore()
	m, err := lease.New(s, &lease.Config{Owner: "runner"})
	require.NoError(t, err)
	l, err := m.Hold(ctx, "job", &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)
	s.hanging.Store(true)
	renewed := make(chan error, 1)
	go func() { renewed <- l.TryRenewNow(ctx) }() // bounded by an hour: the local deadline
	wait(t, s.entered, "the keep-alive's renewal hangs")
	_, err = m.ForceRelease(ctx, m.Owner(), nil)
	require.NoError(t, err)
	require.ErrorIs(t, l.Err(), lease.ErrForceReleased)
	require.ErrorIs(t, within(t, "the pending TryRenewNow", func() error { return <-renewed }), lease.ErrForceReleased)
	require.ErrorIs(t, within(t, "TryRenewNow of a lease that is over", func() error { return l.TryRenewNow(ctx) }), lease.ErrForceReleased)
	within(t, "Stop", func() bool { m.Stop(); return true })
	require.ErrorIs(t, <-s.ended, context.Canceled, "the hung renewal was cancelled")
}

// onRenewWaits returns a channel that closes when a renewal of one of m's
// leases first waits for the renewal in progress.
func onRenewWaits(m *lease.Manager) <-chan struct{} {
	waits := make(chan struct{})
	var once sync.Once
	lease.OnRenewWaits(m, func(string) { once.Do(func() { close(waits) }) })
	return waits
}

// TestAHungRenewalOfTheHolderDoesNotHoldUpStop: while a Renew of the
// holder's own hangs in the backend (its context lasts an hour, and so does
// the lease), the keep-alive's renewal (here asked for by TryRenewNow)
// waits for its turn; Stop stops the keep-alive at once all the same,
// releases the lease, and the hung Renew ends with the lease.
func TestAHungRenewalOfTheHolderDoesNotHoldUpStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newHangStore()
	m, err := lease.New(s, &lease.Config{Owner: "runner", ReleaseTimeout: time.Hour})
	require.NoError(t, err)
	waits := onRenewWaits(m)
	l, err := m.Hold(ctx, "job", &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)
	s.hanging.Store(true)
	renewed := make(chan error, 1)
	go func() { renewed <- l.Renew(ctx) }()
	wait(t, s.entered, "the holder's renewal hangs")
	tried := make(chan error, 1)
	go func() { tried <- l.TryRenewNow(ctx) }()
	wait(t, waits, "the keep-alive's renewal waits for its turn")
	within(t, "Stop", func() bool { m.Stop(); return true })
	require.ErrorIs(t, l.Err(), lease.ErrReleased)
	info, err := s.GetLease(ctx, "job", nil)
	require.NoError(t, err)
	require.Equal(t, store.LeaseReleased, info.EndReason, "Stop released it")
	require.ErrorIs(t, within(t, "the hung Renew", func() error { return <-renewed }), lease.ErrReleased)
	require.ErrorIs(t, within(t, "TryRenewNow", func() error { return <-tried }), lease.ErrReleased)
	require.ErrorIs(t, <-s.ended, context.Canceled, "the end of the lease cancelled the hung renewal")
}

// TestARenewalWithoutAKeepAliveIsBounded: without a keep-alive,
// TryRenewNow renews directly, and like every Renew it is bounded by the
// local deadline (a backend call that hangs, under a context with no end,
// returns when the lease ends at its deadline) and by its context, also
// while it waits for the turn of another renewal.
func TestARenewalWithoutAKeepAliveIsBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newHangStore()
	m, err := lease.New(s, &lease.Config{Owner: "holder"})
	require.NoError(t, err)
	defer m.Stop()
	waits := onRenewWaits(m)
	short, err := m.TryAcquire(ctx, "short", &lease.AcquireOpts{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	long, err := m.TryAcquire(ctx, "long", &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)
	s.hanging.Store(true)

	require.Error(t, within(t, "TryRenewNow at the local deadline", func() error { return short.TryRenewNow(ctx) }))
	wait(t, short.Done(), "the local deadline")
	require.ErrorIs(t, short.Err(), lease.ErrExpired)
	require.Error(t, within(t, "the hung renewal ends", func() error { return <-s.ended }), "at the deadline, or with the lease")

	renewed := make(chan error, 1)
	go func() { renewed <- long.Renew(ctx) }()
	wait(t, s.entered, "the first renewal hangs")
	tctx, cancel := context.WithCancel(ctx)
	tried := make(chan error, 1)
	go func() { tried <- long.TryRenewNow(tctx) }()
	wait(t, waits, "TryRenewNow waits for its turn")
	cancel()
	require.ErrorIs(t, within(t, "TryRenewNow, its context ended", func() error { return <-tried }), context.Canceled)
	require.NoError(t, long.Err(), "a renewal given up leaves the lease as it was")
	require.NoError(t, long.Release(ctx))
	require.ErrorIs(t, within(t, "the hung Renew", func() error { return <-renewed }), lease.ErrReleased)
}

// TestEndEventsAreDelivered: a lease that reaches its local deadline emits
// Expired, one force-released emits ForceReleased, each after its Acquired
// and exactly once, with its cause; none is dropped while the subscriber
// does not read.
func TestEndEventsAreDelivered(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := newManager(t, b.open(t), &lease.Config{Owner: t.Name()})
		sub := m.Subscribe()
		defer sub.Close()
		p := t.Name() + "/"
		forced, err := m.TryAcquire(ctx, p+"forced", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		_, err = m.ForceRelease(ctx, m.Owner(), nil)
		require.NoError(t, err)
		short, err := m.TryAcquire(ctx, p+"short", &lease.AcquireOpts{TTL: 300 * time.Millisecond})
		require.NoError(t, err)
		wait(t, short.Done(), "the short lease's local deadline")
		released, err := m.TryAcquire(ctx, p+"released", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		require.NoError(t, released.Release(ctx)) // the last event: every one before it was queued

		type got struct {
			kind  lease.EventKind
			fence int64
		}
		byName := map[string][]got{}
		for e := range sub.C() {
			switch e.Kind {
			case lease.Expired:
				require.ErrorIs(t, e.Err, lease.ErrExpired)
			case lease.ForceReleased:
				require.ErrorIs(t, e.Err, lease.ErrForceReleased)
			}
			byName[e.Name] = append(byName[e.Name], got{e.Kind, e.Fence})
			if e.Name == p+"released" && e.Kind == lease.Released {
				break
			}
		}
		require.Equal(t, map[string][]got{
			p + "short":    {{lease.Acquired, short.Fence()}, {lease.Expired, short.Fence()}},
			p + "forced":   {{lease.Acquired, forced.Fence()}, {lease.ForceReleased, forced.Fence()}},
			p + "released": {{lease.Acquired, released.Fence()}, {lease.Released, released.Fence()}},
		}, byName)
	})
}

// TestRunnerRenewsAtItsShareOfTheTTL: on synctest's fake clock, the runner
// renews at RenewShare of the TTL after the grant, and then after each
// renewal, plus a jitter of at most MaxJitter (and a tenth of the TTL).
// The backend's times of the events (the memory store reads the fake clock)
// give the intervals exactly.
func TestRunnerRenewsAtItsShareOfTheTTL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ttl    time.Duration
		share  float64
		jitter time.Duration // Config.MaxJitter; 0: the default
		spread time.Duration // the jitter that applies
	}{
		{10 * time.Second, 0, 0, lease.DefaultMaxJitter}, // the defaults
		{10 * time.Second, 0.25, 200 * time.Millisecond, 200 * time.Millisecond},
		{time.Second, 0.5, 0, time.Second / 10}, // the jitter is capped at a tenth of the TTL
	} {
		t.Run(fmt.Sprint(c.ttl, "/", c.share), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				m, err := lease.New(memory.New(nil), &lease.Config{Owner: "runner", RenewShare: c.share, MaxJitter: c.jitter})
				require.NoError(t, err)
				defer m.Stop()
				sub := m.Subscribe()
				defer sub.Close()
				l, err := m.Hold(ctx, "job", &lease.AcquireOpts{TTL: c.ttl})
				require.NoError(t, err)
				share := time.Duration(float64(c.ttl) * cmp.Or(c.share, lease.DefaultRenewShare))
				require.Equal(t, lease.Acquired, (<-sub.C()).Kind)
				last := l.AcquiredAt()
				for range 5 {
					e := <-sub.C()
					require.Equal(t, lease.Renewed, e.Kind)
					took := e.At.Sub(last)
					require.GreaterOrEqual(t, took, share, "renewed before its share of the TTL")
					require.LessOrEqual(t, took, share+c.spread, "renewed after its share of the TTL and the jitter")
					last = e.At
				}
				require.NoError(t, l.Release(ctx))
			})
		})
	}
}

// downUntilStore fails every renewal until the clock reaches back (unix
// nanoseconds), as a database that refuses connections during a failover.
type downUntilStore struct {
	*memory.Store
	back atomic.Int64
}

func (s *downUntilStore) RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error) {
	if time.Now().UnixNano() < s.back.Load() {
		return store.NamedLease{}, fmt.Errorf("renew lease: %w", store.NotSent(errors.New("dial tcp 127.0.0.1:5432: connection refused")))
	}
	return s.Store.RenewLease(ctx, name, owner, fence, p)
}

// TestAKeptAliveLeaseSurvivesADatabaseBackBeforeItsDeadline: the renewals
// of kept-alive leases (the defaults: TTL 30 s, renewed at 60% plus up to
// 1 s of jitter, safety margin 1 s) fail from their grant on, and the
// database answers again shortly before their local deadline. The retries
// go on to that deadline, their pauses cut to the time left, so every
// lease is renewed and kept. On synctest's fake clock, where the grant,
// the deadline and the database's return are exact.
func TestAKeptAliveLeaseSurvivesADatabaseBackBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	for _, early := range []time.Duration{700 * time.Millisecond, 280 * time.Millisecond, 100 * time.Millisecond, 10 * time.Millisecond} {
		t.Run(fmt.Sprintf("back %v before the deadline", early), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				s := &downUntilStore{Store: memory.New(nil)}
				m, err := lease.New(s, &lease.Config{Owner: "alice"})
				require.NoError(t, err)
				defer m.Stop()
				var ls []*lease.Lease
				for i := range 20 {
					l, err := m.Hold(ctx, fmt.Sprint("x", i), nil)
					require.NoError(t, err)
					ls = append(ls, l)
				}
				deadline := time.Now().Add(ls[0].Remaining())
				require.Equal(t, 29*time.Second, ls[0].Remaining(), "TTL 30 s less the 1 s margin")
				s.back.Store(deadline.Add(-early).UnixNano())
				time.Sleep(time.Until(deadline) + time.Second) // fake time
				lost := 0
				for _, l := range ls {
					if l.Err() != nil {
						lost++
					} else {
						require.Equal(t, 1, l.Renewals())
					}
				}
				require.Zero(t, lost, "leases lost of 20")
				for _, l := range ls {
					require.NoError(t, l.Close(ctx))
				}
			})
		})
	}
}
