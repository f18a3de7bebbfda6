package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
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
		l, err := m.Hold(ctx, t.Name(), &lease.AcquireOpts{TTL: 600 * time.Millisecond, MaxRenewals: 2})
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
