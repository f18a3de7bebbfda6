package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var (
	_ lease.Store = (*memory.Store)(nil)
	_ lease.Store = (*postgres.Store)(nil)
)

// backend is one store under test. open returns a handle on the same data
// as the first: on PostgreSQL through a pool of its own (another process,
// as far as the database can tell), on memory the same store.
type backend struct {
	name string
	open func(t *testing.T) lease.Store
}

// backends returns a fresh memory store and a fresh PostgreSQL schema.
func backends(t *testing.T) []backend {
	mem := memory.New(nil)
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	first := true
	return []backend{
		{name: "memory", open: func(*testing.T) lease.Store { return mem }},
		{name: "postgres", open: func(t *testing.T) lease.Store {
			p := pool
			if !first {
				var err error
				p, err = pgtest.NewPool(t.Context(), &pgtest.Options{MaxConns: 8})
				require.NoError(t, err)
				t.Cleanup(p.Close)
			}
			first = false
			s, err := postgres.New(p, &postgres.Config{Schema: schema})
			require.NoError(t, err)
			return s
		}},
	}
}

// forEachBackend runs f as a parallel subtest per backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

// inTurn runs f as a subtest per backend, one after the other, without
// t.Parallel: for the tests that load the machine for seconds, which run
// alone (the parallel tests wait for the sequential ones), so that they
// neither starve nor are starved by the others.
func inTurn(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// newManager returns a started Manager on s that Stop will stop when t ends.
func newManager(t *testing.T, s lease.Store, cfg *lease.Config) *lease.Manager {
	t.Helper()
	m, err := lease.New(s, cfg)
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(m.Stop)
	return m
}

// newListeningManager is newManager that returns once the Manager hears the
// backend's notices.
func newListeningManager(t *testing.T, s lease.Store, cfg *lease.Config) *lease.Manager {
	t.Helper()
	m, err := lease.New(s, cfg)
	require.NoError(t, err)
	listening := make(chan struct{})
	var once sync.Once
	lease.OnReset(m, func() { once.Do(func() { close(listening) }) })
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(m.Stop)
	wait(t, listening, "the watch listens")
	return m
}

// wait waits for ch to close, failing t after 10 s.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}

// within runs f, failing t if it does not return within 10 s.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
		panic("unreachable")
	}
}

// acquireWithin runs an acquire, failing t if it does not return within 10 s.
func acquireWithin(t *testing.T, what string, f func() (*lease.Lease, error)) (*lease.Lease, error) {
	t.Helper()
	type result struct {
		l   *lease.Lease
		err error
	}
	r := within(t, what, func() result { l, err := f(); return result{l, err} })
	return r.l, r.err
}

func TestTryAcquireHeldReleaseFence(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		alice := newManager(t, b.open(t), &lease.Config{Owner: "alice"})
		bob := newManager(t, b.open(t), &lease.Config{Owner: "bob"})
		name := t.Name()

		l, err := alice.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, name, l.Name())
		require.Equal(t, "alice", l.Owner())
		require.Equal(t, int64(1), l.Fence())
		require.Equal(t, l.AcquiredAt().Add(time.Minute), l.ExpiresAt(), "the backend's now and expiry")
		require.Equal(t, l.AcquiredAt(), l.RenewedAt())
		require.NoError(t, l.Err())
		require.Greater(t, l.Remaining(), 50*time.Second)

		for _, m := range []*lease.Manager{bob, alice} {
			_, err = m.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute})
			var held *lease.HeldError
			require.ErrorAs(t, err, &held, m.Owner())
			require.ErrorIs(t, err, lease.ErrHeld)
			require.Equal(t, "alice", held.Owner)
			require.Equal(t, int64(1), held.Fence)
			require.True(t, held.ExpiresAt.Equal(l.ExpiresAt()))
		}
		owner, held, err := bob.HeldBy(ctx, name)
		require.NoError(t, err)
		require.True(t, held)
		require.Equal(t, "alice", owner)

		lctx := l.Context()
		require.NoError(t, l.Release(ctx))
		wait(t, l.Done(), "Done after Release")
		require.ErrorIs(t, l.Err(), lease.ErrReleased)
		require.ErrorIs(t, context.Cause(lctx), lease.ErrReleased)
		require.Zero(t, l.Remaining())
		require.ErrorIs(t, l.Release(ctx), lease.ErrReleased, "release twice")
		require.NoError(t, l.Close(ctx), "Close after Release")
		isHeld, err := bob.IsHeld(ctx, name)
		require.NoError(t, err)
		require.False(t, isHeld)

		m, err := bob.TryAcquire(ctx, name, nil)
		require.NoError(t, err)
		require.Equal(t, int64(2), m.Fence(), "a new holder, a larger fence")
		require.Equal(t, m.AcquiredAt().Add(lease.DefaultTTL), m.ExpiresAt())
		require.NoError(t, m.Renew(ctx))
		require.Equal(t, int64(2), m.Fence(), "renewals keep the fence")
		require.Equal(t, 1, m.Renewals())
		info, err := alice.Get(ctx, name)
		require.NoError(t, err)
		require.Equal(t, "bob", info.Owner)
		require.True(t, info.Held())
		require.NoError(t, m.Close(ctx))
	})
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	_, err := lease.New(nil, nil)
	require.Error(t, err)
	for _, c := range []struct {
		field string
		cfg   lease.Config
	}{
		{"MaxTTL", lease.Config{MaxTTL: store.MaxTTL + time.Second}},
		{"MaxTTL", lease.Config{MaxTTL: -time.Second}},
		{"DefaultTTL", lease.Config{DefaultTTL: 2 * time.Hour}},
		{"DefaultTTL", lease.Config{DefaultTTL: -time.Second}},
		{"MaxRenewals", lease.Config{MaxRenewals: -1}},
		{"RenewShare", lease.Config{RenewShare: 1}},
		{"RenewShare", lease.Config{RenewShare: -0.5}},
		{"MaxJitter", lease.Config{MaxJitter: -1}},
		{"SafetyMargin", lease.Config{SafetyMargin: -1}},
		{"PollInterval", lease.Config{PollInterval: -1}},
		{"HandoffGrace", lease.Config{HandoffGrace: -1}},
		{"QueryTimeout", lease.Config{QueryTimeout: -1}},
		{"ReleaseTimeout", lease.Config{ReleaseTimeout: -1}},
		{"Owner", lease.Config{Owner: "bad\nowner"}},
		{"Owner", lease.Config{Owner: strings.Repeat("o", store.MaxNameLen+1)}},
	} {
		_, err := lease.New(s, &c.cfg)
		require.ErrorContains(t, err, "Config."+c.field, "%+v", c.cfg)
	}
	m, err := lease.New(s, nil)
	require.NoError(t, err)
	require.NotEmpty(t, m.Owner())
	other, err := lease.New(s, nil)
	require.NoError(t, err)
	require.NotEqual(t, m.Owner(), other.Owner(), "default owners differ per Manager")
}

// TestBadInput checks every bad input and refusal of the Manager and the
// Lease: a typed error, and nothing changed in the backend.
func TestBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		m := newManager(t, s, &lease.Config{Owner: "alice", MaxTTL: time.Hour, PollInterval: time.Hour, CleanupInterval: -1})
		other := newManager(t, s, &lease.Config{Owner: "bob", CleanupInterval: -1})
		prefix := t.Name() + "/"

		live, err := m.TryAcquire(ctx, prefix+"live", &lease.AcquireOpts{TTL: time.Hour, MaxRenewals: 1})
		require.NoError(t, err)
		require.NoError(t, live.Renew(ctx))
		released, err := m.TryAcquire(ctx, prefix+"released", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		require.NoError(t, released.Release(ctx))
		expired, err := m.TryAcquire(ctx, prefix+"expired", &lease.AcquireOpts{TTL: 300 * time.Millisecond})
		require.NoError(t, err)
		wait(t, expired.Done(), "the short lease's local deadline")
		require.Eventually(t, func() bool { held, err := m.IsHeld(ctx, expired.Name()); return err == nil && !held }, 10*time.Second, time.Millisecond)
		superseded, err := m.TryAcquire(ctx, prefix+"superseded", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		_, err = other.ForceRelease(ctx, "alice-is-not-me", nil) // nothing
		require.NoError(t, err)

		snapshot := func() []any {
			var out []any
			for _, n := range []string{"live", "released", "expired", "superseded", "fresh"} {
				info, err := m.Get(ctx, prefix+n)
				info.AsOf = time.Time{}
				out = append(out, info, errors.Is(err, lease.ErrLeaseNotFound))
			}
			h, err := m.History(ctx, "", 0, 0)
			require.NoError(t, err)
			return append(out, h)
		}

		cases := []struct {
			name    string
			want    error
			invalid bool
			call    func() error
		}{
			{"empty name", store.ErrInvalidLeaseName, true, func() error { _, err := m.TryAcquire(ctx, "", nil); return err }},
			{"name too long", store.ErrInvalidLeaseName, true, func() error {
				_, err := m.Acquire(ctx, strings.Repeat("n", store.MaxNameLen+1), nil)
				return err
			}},
			{"name of invalid UTF-8", store.ErrInvalidLeaseName, true, func() error { _, err := m.TryAcquire(ctx, "bad-\xff", nil); return err }},
			{"name with a control character", store.ErrInvalidLeaseName, true, func() error { _, err := m.Hold(ctx, "a\tb", nil); return err }},
			{"negative TTL", store.ErrInvalidTTL, true, func() error {
				_, err := m.TryAcquire(ctx, prefix+"fresh", &lease.AcquireOpts{TTL: -time.Second})
				return err
			}},
			{"TTL above MaxTTL", store.ErrInvalidTTL, true, func() error {
				_, err := m.Acquire(ctx, prefix+"fresh", &lease.AcquireOpts{TTL: 2 * time.Hour})
				return err
			}},
			{"negative Timeout", store.ErrInvalidTTL, true, func() error {
				_, err := m.Acquire(ctx, prefix+"fresh", &lease.AcquireOpts{Timeout: -time.Second})
				return err
			}},
			{"MaxRenewals below -1", store.ErrInvalidCount, true, func() error {
				_, err := m.TryAcquire(ctx, prefix+"fresh", &lease.AcquireOpts{MaxRenewals: -2})
				return err
			}},
			{"AcquireAll of a name twice", store.ErrInvalidLeaseName, true, func() error {
				_, err := m.AcquireAll(ctx, []string{prefix + "fresh", prefix + "fresh"}, nil)
				return err
			}},
			{"AcquireAll of nothing", store.ErrInvalidCount, true, func() error { _, err := m.AcquireAll(ctx, nil, nil); return err }},
			{"ListLongHeld of zero", store.ErrInvalidTTL, true, func() error { _, err := m.ListLongHeld(ctx, 0); return err }},
			{"ListByOwner of nobody", store.ErrInvalidOwner, true, func() error { _, err := m.ListByOwner(ctx, ""); return err }},
			{"ForceRelease of a bad owner", store.ErrInvalidOwner, true, func() error { _, err := m.ForceRelease(ctx, "bad\x00", nil); return err }},
			{"acquire of a held name", lease.ErrHeld, false, func() error { _, err := other.TryAcquire(ctx, prefix+"live", nil); return err }},
			{"renew past MaxRenewals", lease.ErrMaxRenewals, false, func() error { return live.Renew(ctx) }},
			{"renew after expiry", lease.ErrExpired, false, func() error { return expired.Renew(ctx) }},
			{"renew after release", lease.ErrReleased, false, func() error { return released.Renew(ctx) }},
			{"release twice", lease.ErrReleased, false, func() error { return released.Release(ctx) }},
			{"renew by a non-holder", lease.ErrNotHolder, false, func() error {
				_, err := s.RenewLease(ctx, prefix+"superseded", "bob", superseded.Fence(), &store.RenewLeaseParams{TTL: time.Minute})
				return err
			}},
		}
		for _, c := range cases {
			before := snapshot()
			err := c.call()
			require.ErrorIs(t, err, c.want, c.name)
			require.Equal(t, c.invalid, errors.Is(err, lease.ErrInvalidArgument), "%s: %v", c.name, err)
			require.Equal(t, before, snapshot(), "%s changed something", c.name)
		}
		require.NoError(t, live.Err(), "a refused renewal past MaxRenewals leaves the lease held until its deadline")
		require.NoError(t, superseded.Close(ctx))
		require.NoError(t, live.Close(ctx))
	})
}

// TestLocalDeadlineEndsTheLease: without a keep-alive, the lease ends (with
// ErrExpired) at its local deadline, before the backend's expiry.
func TestLocalDeadlineEndsTheLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		// A margin wide enough that reading the database clock after the
		// lease ended cannot outlast it on a loaded machine.
		m := newManager(t, s, &lease.Config{Owner: "alice", SafetyMargin: time.Second})
		l, err := m.TryAcquire(ctx, t.Name(), &lease.AcquireOpts{TTL: 1500 * time.Millisecond})
		require.NoError(t, err)
		lctx := l.Context()
		wait(t, l.Done(), "the local deadline")
		now, err := s.Now(ctx)
		require.NoError(t, err)
		require.True(t, now.Before(l.ExpiresAt()), "ended at %v, after the expiry %v", now, l.ExpiresAt())
		require.ErrorIs(t, l.Err(), lease.ErrExpired)
		require.ErrorIs(t, context.Cause(lctx), lease.ErrExpired)
		require.NoError(t, l.Release(ctx), "release after expiry is safe")
	})
}

// TestAcquireWaitsAndIsWokenByRelease: a blocked Acquire (polling disabled)
// is woken by the release in another Manager, through the backend's notice.
func TestAcquireWaitsAndIsWokenByRelease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		alice := newManager(t, b.open(t), &lease.Config{Owner: "alice"})
		bob := newListeningManager(t, b.open(t), &lease.Config{Owner: "bob", PollInterval: time.Hour})
		l, err := alice.TryAcquire(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		waiting := make(chan struct{})
		lease.OnWaiting(bob, func(string, int) { close(waiting) })
		got := make(chan *lease.Lease, 1)
		go func() {
			m, err := bob.Acquire(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Minute})
			if err != nil {
				t.Error(err)
			}
			got <- m
		}()
		wait(t, waiting, "bob waits")
		require.NoError(t, l.Release(ctx))
		m := within(t, "bob's acquire after the release", func() *lease.Lease { return <-got })
		require.Equal(t, int64(2), m.Fence())
		require.NoError(t, m.Close(ctx))
	})
}

// TestAcquireWaitsForTheExpiry: with no release and no poll, the waiter
// tries again at the holder's expiry.
func TestAcquireWaitsForTheExpiry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		alice := newManager(t, s, &lease.Config{Owner: "alice"})
		bob := newManager(t, b.open(t), &lease.Config{Owner: "bob", PollInterval: time.Hour})
		l, err := alice.TryAcquire(ctx, t.Name(), &lease.AcquireOpts{TTL: 300 * time.Millisecond})
		require.NoError(t, err)
		m, err := acquireWithin(t, "acquire at the expiry", func() (*lease.Lease, error) { return bob.Acquire(ctx, t.Name(), nil) })
		require.NoError(t, err)
		require.NotNil(t, m)
		require.False(t, m.AcquiredAt().Before(l.ExpiresAt()), "acquired at %v, before the expiry %v", m.AcquiredAt(), l.ExpiresAt())
		require.Equal(t, int64(2), m.Fence())
		history, err := bob.History(ctx, t.Name(), 0, 0)
		require.NoError(t, err)
		kinds := []store.LeaseEventKind{}
		for _, e := range history {
			kinds = append(kinds, e.Kind)
		}
		require.Equal(t, []store.LeaseEventKind{store.LeaseAcquired, store.LeaseExpired, store.LeaseAcquired}, kinds)
		require.NoError(t, m.Close(ctx))
	})
}

func TestAcquireTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		alice := newManager(t, b.open(t), &lease.Config{Owner: "alice"})
		bob := newManager(t, b.open(t), &lease.Config{Owner: "bob", PollInterval: 20 * time.Millisecond})
		l, err := alice.TryAcquire(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		// Long enough for the first attempt to find the name held on a
		// loaded machine (100 ms was not, under make test).
		_, err = bob.Acquire(ctx, t.Name(), &lease.AcquireOpts{Timeout: time.Second})
		require.ErrorIs(t, err, lease.ErrTimeout)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var held *lease.HeldError
		require.ErrorAs(t, err, &held)
		require.Equal(t, "alice", held.Owner)

		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = bob.Acquire(cctx, t.Name(), nil)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, lease.ErrTimeout)
		require.NoError(t, l.Close(ctx))
	})
}

// TestWaitersOfOneProcessGoFirstComeFirstServed queues waiters one after the
// other behind a holder; each release hands the name to the next in order.
func TestWaitersOfOneProcessGoFirstComeFirstServed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := newManager(t, b.open(t), &lease.Config{Owner: "alice", PollInterval: time.Hour})
		name := t.Name()
		holder, err := m.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		const n = 6
		joined := make(chan int, n)
		lease.OnWaiting(m, func(_ string, queued int) { joined <- queued })
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				l, err := m.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			})
			require.Equal(t, i+1, within(t, "join", func() int { return <-joined }), "waiter %d joins in order", i)
		}
		require.NoError(t, holder.Release(ctx))
		within(t, "every waiter", func() bool { wg.Wait(); return true })
		require.Equal(t, []int{0, 1, 2, 3, 4, 5}, order)
	})
}

// TestNoProcessStarves: one process keeps acquiring and releasing a name
// in a tight loop from several goroutines; a waiter of another process still
// gets it, again and again.
func TestNoProcessStarves(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		hot := newManager(t, b.open(t), &lease.Config{Owner: "hot", PollInterval: time.Hour})
		cold := newManager(t, b.open(t), &lease.Config{Owner: "cold", PollInterval: time.Hour})
		name := t.Name()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var hotWins atomic.Int64
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := hot.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute, Timeout: 10 * time.Second})
					if err != nil {
						t.Error(err)
						return
					}
					hotWins.Add(1)
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		for i := range 5 {
			// Let the hot loop run before each turn of the cold waiter.
			from := hotWins.Load()
			require.Eventually(t, func() bool { return hotWins.Load() >= from+20 }, 10*time.Second, time.Millisecond)
			l, err := cold.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute, Timeout: 20 * time.Second})
			require.NoError(t, err, "the cold waiter's turn %d", i)
			require.NoError(t, l.Release(ctx))
		}
		close(stop)
		wg.Wait()
		t.Logf("cold won 5 times while hot won %d times", hotWins.Load())
	})
}

func TestAcquireAllIsAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := newManager(t, b.open(t), &lease.Config{Owner: "alice", PollInterval: 20 * time.Millisecond})
		other := newManager(t, b.open(t), &lease.Config{Owner: "bob"})
		p := t.Name() + "/"
		names := []string{p + "c", p + "a", p + "b"}

		blocker, err := other.TryAcquire(ctx, p+"b", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		_, err = m.TryAcquireAll(ctx, names, nil)
		var held *lease.HeldError
		require.ErrorAs(t, err, &held)
		require.Equal(t, p+"b", held.Name)
		_, err = m.AcquireAll(ctx, names, &lease.AcquireOpts{Timeout: 100 * time.Millisecond})
		require.ErrorIs(t, err, lease.ErrTimeout)
		isHeld, err := m.IsHeld(ctx, p+"c")
		require.NoError(t, err)
		require.False(t, isHeld, "c was never taken")
		// a was acquired (by TryAcquireAll, at least), then released. Under
		// load the Timeout can pass while a's acquire statement runs, and
		// PostgreSQL commit it after AcquireAll returned: the Manager then
		// releases that grant in the background.
		require.Eventually(t, func() bool {
			info, err := m.Get(ctx, p+"a")
			return err == nil && !info.Held() && info.EndReason == store.LeaseReleased
		}, 10*time.Second, 5*time.Millisecond, "a was rolled back")

		require.NoError(t, blocker.Release(ctx))
		ls, err := m.AcquireAll(ctx, names, &lease.AcquireOpts{TTL: time.Minute, Timeout: 10 * time.Second})
		require.NoError(t, err)
		require.Equal(t, []string{p + "a", p + "b", p + "c"}, []string{ls[0].Name(), ls[1].Name(), ls[2].Name()})
		for _, l := range ls {
			require.NoError(t, l.Close(ctx))
		}
	})
}

func TestTTLPolicy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		var asked []time.Duration
		var mu sync.Mutex
		m := newManager(t, b.open(t), &lease.Config{Owner: "alice", TTLPolicy: lease.TTLPolicyFunc(
			func(_ context.Context, name string, requested time.Duration) time.Duration {
				mu.Lock()
				asked = append(asked, requested)
				mu.Unlock()
				if strings.HasSuffix(name, "/broken") {
					return -time.Second
				}
				return requested / 2
			})})
		l, err := m.TryAcquire(ctx, t.Name()+"/ok", &lease.AcquireOpts{TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, 30*time.Second, l.TTL())
		require.Equal(t, l.AcquiredAt().Add(30*time.Second), l.ExpiresAt())
		require.NoError(t, l.Renew(ctx))
		require.Equal(t, l.RenewedAt().Add(30*time.Second), l.ExpiresAt(), "renewals keep the holding's TTL")
		_, err = m.TryAcquire(ctx, t.Name()+"/broken", nil)
		require.ErrorIs(t, err, lease.ErrInvalidArgument)
		require.ErrorContains(t, err, "TTLPolicy")
		require.Equal(t, []time.Duration{time.Minute, lease.DefaultTTL}, asked)
		require.NoError(t, l.Close(ctx))
	})
}

func TestQueries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		alice := newManager(t, s, &lease.Config{Owner: t.Name() + "-alice"})
		bob := newManager(t, s, &lease.Config{Owner: t.Name() + "-bob"})
		p := t.Name() + "/"
		a1, err := alice.TryAcquire(ctx, p+"a1", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		a2, err := alice.TryAcquire(ctx, p+"a2", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		b1, err := bob.TryAcquire(ctx, p+"b1", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)

		mine, err := bob.ListByOwner(ctx, alice.Owner())
		require.NoError(t, err)
		require.Len(t, mine, 2)
		require.Equal(t, []string{p + "a1", p + "a2"}, []string{mine[0].Name, mine[1].Name})
		require.Equal(t, a1.Fence(), mine[0].Fence)
		lease.SetListPage(bob, 1) // one holding per statement: it pages
		paged, err := bob.ListByOwner(ctx, alice.Owner())
		require.NoError(t, err)
		require.Len(t, paged, 2)
		require.Equal(t, []string{p + "a1", p + "a2"}, []string{paged[0].Name, paged[1].Name})

		// Long-held: everything acquired at least a moment ago.
		require.Eventually(t, func() bool {
			long, err := alice.ListLongHeld(ctx, 50*time.Millisecond)
			if err != nil {
				return false
			}
			n := 0
			for _, l := range long {
				if strings.HasPrefix(l.Name, p) {
					n++
				}
			}
			return n == 3
		}, 10*time.Second, 5*time.Millisecond)
		long, err := alice.ListLongHeld(ctx, time.Hour)
		require.NoError(t, err)
		for _, l := range long {
			require.False(t, strings.HasPrefix(l.Name, p), "%s is not an hour old", l.Name)
		}
		_, _ = a2, b1
	})
}

func TestForceRelease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		crashed := newListeningManager(t, b.open(t), &lease.Config{Owner: t.Name() + "-crashed"})
		operator := newManager(t, b.open(t), &lease.Config{Owner: t.Name() + "-operator"})
		p := t.Name() + "/"
		kept, err := crashed.Hold(ctx, p+"kept-alive", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		plain, err := crashed.TryAcquire(ctx, p+"plain", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)

		got, err := operator.ForceRelease(ctx, crashed.Owner(), nil)
		require.NoError(t, err)
		require.Len(t, got, 2)
		wait(t, kept.Done(), "the kept-alive lease hears of it")
		require.ErrorIs(t, kept.Err(), lease.ErrForceReleased)
		require.NoError(t, plain.Err(), "a lease without keep-alive learns at its next renewal")
		require.ErrorIs(t, plain.Renew(ctx), lease.ErrForceReleased)
		require.ErrorIs(t, plain.Err(), lease.ErrForceReleased)
		require.NoError(t, plain.Release(ctx), "release after force-release is safe")

		// The owner's own Manager ends its handles at once.
		mine, err := crashed.TryAcquire(ctx, p+"mine", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		_, err = crashed.ForceRelease(ctx, crashed.Owner(), nil)
		require.NoError(t, err)
		require.ErrorIs(t, mine.Err(), lease.ErrForceReleased)
	})
}

// TestCheck: Check confirms a live holding and ends a deposed one.
func TestCheck(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		alice := newManager(t, b.open(t), &lease.Config{Owner: t.Name() + "-alice"})
		bob := newManager(t, b.open(t), &lease.Config{Owner: t.Name() + "-bob"})
		l, err := alice.TryAcquire(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		require.NoError(t, l.Check(ctx))
		_, err = bob.ForceRelease(ctx, alice.Owner(), nil)
		require.NoError(t, err)
		m, err := bob.TryAcquire(ctx, t.Name(), nil)
		require.NoError(t, err)
		err = l.Check(ctx)
		var fe *lease.FenceError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "superseded", fe.Reason)
		require.Equal(t, m.Fence(), fe.Current)
		require.ErrorIs(t, l.Err(), lease.ErrLost)
		require.NoError(t, m.Close(ctx))
	})
}

func TestMaintenance(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var mu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	s := memory.New(&memory.Config{Now: now})
	m := newManager(t, s, &lease.Config{Owner: "alice", HistoryRetention: 24 * time.Hour, CleanupInterval: -1})
	quiet := newManager(t, s, &lease.Config{Owner: "bob", DisableHistory: true, CleanupInterval: -1})

	old, err := m.TryAcquire(ctx, "old", &lease.AcquireOpts{TTL: time.Minute})
	require.NoError(t, err)
	advance(25 * time.Hour)
	young, err := m.TryAcquire(ctx, "young", &lease.AcquireOpts{TTL: time.Minute})
	require.NoError(t, err)
	q, err := quiet.TryAcquire(ctx, "quiet", &lease.AcquireOpts{TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, q.Release(ctx))
	advance(2 * time.Minute)

	res, err := m.Maintain(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.MaintenanceResult{Expired: 2, HistoryDeleted: 2}, res, "old and young expired; old's events are past the retention")
	h, err := m.History(ctx, "", 0, 0)
	require.NoError(t, err)
	var got []string
	for _, e := range h {
		got = append(got, e.Name+" "+string(e.Kind))
	}
	require.Equal(t, []string{"young acquired", "young expired"}, got, "nothing of bob's")
	_, _ = old, young
}

func TestStopReleasesEveryLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		m, err := lease.New(s, &lease.Config{Owner: t.Name(), PollInterval: time.Hour})
		require.NoError(t, err)
		m.Stop() // before Start: safe
		m, err = lease.New(s, &lease.Config{Owner: t.Name(), PollInterval: time.Hour})
		require.NoError(t, err)
		require.NoError(t, m.Start(ctx))
		require.NoError(t, m.Start(ctx), "twice")
		sub := m.Subscribe()
		p := t.Name() + "/"
		var ls []*lease.Lease
		for i := range 3 {
			l, err := m.TryAcquire(ctx, fmt.Sprint(p, i), &lease.AcquireOpts{TTL: time.Hour, KeepAlive: i%2 == 0})
			require.NoError(t, err)
			ls = append(ls, l)
		}
		other := newManager(t, s, &lease.Config{Owner: t.Name() + "-other"})
		blocker, err := other.TryAcquire(ctx, p+"blocked", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		blocked := make(chan error, 1)
		waiting := make(chan struct{})
		lease.OnWaiting(m, func(string, int) { close(waiting) })
		go func() { _, err := m.Acquire(ctx, p+"blocked", nil); blocked <- err }()
		wait(t, waiting, "the blocked acquire waits")

		// A receiver that keeps reading gets every event, then C closes.
		kindsCh := make(chan []lease.EventKind, 1)
		go func() {
			var kinds []lease.EventKind
			for e := range sub.C() {
				if e.Kind != lease.Renewed { // the watch's first Reset may renew the kept-alive leases
					kinds = append(kinds, e.Kind)
				}
			}
			kindsCh <- kinds
		}()
		m.Stop()
		m.Stop() // twice: safe
		require.ErrorIs(t, within(t, "the blocked acquire", func() error { return <-blocked }), lease.ErrStopped)
		for _, l := range ls {
			require.ErrorIs(t, l.Err(), lease.ErrReleased)
			info, err := other.Get(ctx, l.Name())
			require.NoError(t, err)
			require.Equal(t, store.LeaseReleased, info.EndReason, l.Name())
		}
		_, err = m.TryAcquire(ctx, p+"after", nil)
		require.ErrorIs(t, err, lease.ErrStopped)
		require.ErrorIs(t, m.Start(ctx), lease.ErrStopped)

		kinds := within(t, "the subscription closes", func() []lease.EventKind { return <-kindsCh })
		require.Equal(t, []lease.EventKind{lease.Acquired, lease.Acquired, lease.Acquired, lease.Released, lease.Released, lease.Released}, kinds,
			"every event delivered, then C closed")
		sub.Close()
		late := m.Subscribe()
		_, open := <-late.C()
		require.False(t, open, "a subscription after Stop is closed")
		require.NoError(t, blocker.Close(ctx))
	})
}

// TestHandoffGraceGivesTheAnnouncedWaiterItsTurn: once a waiter of another
// process that asked earlier announced itself, the next release of that
// name here holds the local waiter back for HandoffGrace, and the other
// process takes the name.
func TestHandoffGraceGivesTheAnnouncedWaiterItsTurn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		hot := newListeningManager(t, s, &lease.Config{Owner: "hot", PollInterval: time.Hour, HandoffGrace: time.Hour})
		cold := newManager(t, b.open(t), &lease.Config{Owner: "cold"})
		name := t.Name()
		h, err := hot.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		waiting := make(chan struct{})
		var once sync.Once
		lease.OnPaused(hot, func(string) { once.Do(func() { close(waiting) }) })
		wanted := make(chan string, 1)
		lease.OnWanted(hot, func(w store.LeaseWaiter) { wanted <- w.Waiter })
		next := make(chan error, 1)
		go func() {
			l, err := hot.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute, Timeout: 20 * time.Second})
			if err == nil {
				err = l.Close(ctx)
			}
			next <- err
		}()
		wait(t, waiting, "the local waiter found the name held and waits")

		now, err := s.Now(ctx)
		require.NoError(t, err)
		// What a waiter of cold that asked an hour ago would say.
		require.NoError(t, s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: name, Waiter: "cold", Since: now.Add(-time.Hour)}))
		require.Equal(t, "cold", within(t, "the announcement", func() string { return <-wanted }))
		require.NoError(t, h.Release(ctx))
		c, err := cold.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute})
		require.NoError(t, err, "the local waiter held back")
		require.Equal(t, int64(2), c.Fence())
		require.NoError(t, c.Release(ctx))
		select {
		case err := <-next:
			t.Fatalf("the local waiter did not hold back: %v", err)
		default:
		}
	})
}

// observed records what an Observer is told.
type observed struct {
	mu    sync.Mutex
	calls []string
}

func (o *observed) add(s string) { o.mu.Lock(); o.calls = append(o.calls, s); o.mu.Unlock() }

func (o *observed) Acquire(_ context.Context, kind string, err error) {
	o.add(fmt.Sprintf("acquire %s held=%v err=%v", kind, errors.Is(err, lease.ErrHeld), err != nil))
}
func (o *observed) Renew(_ context.Context, kind string, err error) {
	o.add(fmt.Sprintf("renew %s err=%v", kind, err != nil))
}
func (o *observed) Lost(_ context.Context, kind string, held time.Duration) {
	o.add(fmt.Sprintf("lost %s %v", kind, held > 0))
}
func (o *observed) Released(_ context.Context, kind string, held time.Duration) {
	o.add(fmt.Sprintf("released %s %v", kind, held > 0))
}
func (o *observed) Held(kind string) func() {
	o.add("held " + kind)
	return func() { o.add("end " + kind) }
}

func TestObserver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	obs := &observed{}
	s := memory.New(nil)
	m := newManager(t, s, &lease.Config{Owner: "alice", Observer: obs})
	l, err := m.TryAcquire(ctx, "x", &lease.AcquireOpts{TTL: time.Hour, Kind: "migration"})
	require.NoError(t, err)
	_, err = m.TryAcquire(ctx, "x", &lease.AcquireOpts{Kind: "migration"})
	require.ErrorIs(t, err, lease.ErrHeld)
	require.NoError(t, l.Renew(ctx))
	require.NoError(t, l.Release(ctx))
	short, err := m.TryAcquire(ctx, "y", &lease.AcquireOpts{TTL: 50 * time.Millisecond, Kind: "cleanup"})
	require.NoError(t, err)
	wait(t, short.Done(), "the short lease ends")
	_, err = m.TryAcquire(ctx, "z", &lease.AcquireOpts{Kind: "bad\nkind"})
	require.ErrorIs(t, err, lease.ErrInvalidArgument)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, []string{
		"held migration",
		"acquire migration held=false err=false",
		"acquire migration held=true err=true",
		"renew migration err=false",
		"end migration",
		"released migration true",
		"held cleanup",
		"acquire cleanup held=false err=false",
		"end cleanup",
		"lost cleanup true",
	}, obs.calls)
}

// TestStopEndsASupersededLease: a lease force-released elsewhere, which its
// holder has not noticed yet (no keep-alive) while the same Manager took the
// name again, is still ended by Stop.
func TestStopEndsASupersededLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m, err := lease.New(b.open(t), &lease.Config{Owner: t.Name()})
		require.NoError(t, err)
		operator := newManager(t, b.open(t), &lease.Config{Owner: t.Name() + "-operator"})
		old, err := m.TryAcquire(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		_, err = operator.ForceRelease(ctx, m.Owner(), nil)
		require.NoError(t, err)
		cur, err := m.TryAcquire(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		require.NoError(t, old.Err(), "it has not noticed")
		m.Stop()
		require.Error(t, old.Err())
		require.ErrorIs(t, cur.Err(), lease.ErrReleased)
	})
}

// TestAcquireAllKeepsWhatItHoldsWhileItWaits: the leases AcquireAll took
// are renewed while it waits for a later name, past their first local
// deadline; it returns them all held, and (without KeepAlive) no longer
// renewed: they then end at their local deadline.
func TestAcquireAllKeepsWhatItHoldsWhileItWaits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memory.New(nil)
	m := newListeningManager(t, s, &lease.Config{Owner: "alice", PollInterval: time.Hour})
	other := newManager(t, s, &lease.Config{Owner: "bob"})
	blocker, err := other.TryAcquire(ctx, "b", &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)
	sub := m.Subscribe()
	defer sub.Close()
	type result struct {
		ls  []*lease.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		ls, err := m.AcquireAll(ctx, []string{"b", "a"}, &lease.AcquireOpts{TTL: 300 * time.Millisecond})
		done <- result{ls, err}
	}()
	renewals := 0
	for renewals < 2 { // twice: past the local deadline of the grant
		e := within(t, "an event of a", func() lease.Event { return <-sub.C() })
		require.Equal(t, "a", e.Name)
		switch e.Kind {
		case lease.Acquired:
		case lease.Renewed:
			renewals++
		default:
			t.Fatalf("a ended while AcquireAll waited for b: %v", e.Err)
		}
	}
	require.NoError(t, blocker.Release(ctx))
	r := within(t, "AcquireAll", func() result { return <-done })
	require.NoError(t, r.err)
	require.Len(t, r.ls, 2)
	for _, l := range r.ls {
		require.NoError(t, l.Err(), l.Name())
	}
	a := r.ls[0]
	wait(t, a.Done(), "a's local deadline, no longer renewed")
	require.ErrorIs(t, a.Err(), lease.ErrExpired)
	require.NoError(t, r.ls[1].Close(ctx))
}

// TestAcquireAllFailsWhenALeaseItHoldsEnds: a lease AcquireAll took ends
// (force-released) while it waits for a later name: it stops waiting and
// fails with that lease's error, and holds nothing.
func TestAcquireAllFailsWhenALeaseItHoldsEnds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memory.New(nil)
	m := newListeningManager(t, s, &lease.Config{Owner: "alice", PollInterval: time.Hour})
	other := newManager(t, s, &lease.Config{Owner: "bob"})
	blocker, err := other.TryAcquire(ctx, "b", &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)
	paused := make(chan struct{})
	var once sync.Once
	lease.OnPaused(m, func(string) { once.Do(func() { close(paused) }) })
	done := make(chan error, 1)
	go func() {
		_, err := m.AcquireAll(ctx, []string{"a", "b"}, &lease.AcquireOpts{TTL: time.Hour})
		done <- err
	}()
	wait(t, paused, "AcquireAll holds a and waits for b")
	_, err = other.ForceRelease(ctx, m.Owner(), nil) // a, as an operator would: the notice ends it
	require.NoError(t, err)
	err = within(t, "AcquireAll", func() error { return <-done })
	require.ErrorIs(t, err, lease.ErrForceReleased)
	require.ErrorContains(t, err, `"a" ended`)
	mine, err := m.ListByOwner(ctx, m.Owner())
	require.NoError(t, err)
	require.Empty(t, mine)
	require.NoError(t, blocker.Close(ctx))
}

// lateStore makes its next late acquires return after the Manager's
// clock (now) moved an hour, as if each had taken that long.
type lateStore struct {
	*memory.Store
	skew atomic.Int64
	late atomic.Int32 // how many acquires to come are late

	mu    sync.Mutex
	calls []time.Time // when each acquire began, by time.Now
}

func (s *lateStore) now() time.Time { return time.Now().Add(time.Duration(s.skew.Load())) }

func (s *lateStore) AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult {
	s.mu.Lock()
	s.calls = append(s.calls, time.Now())
	s.mu.Unlock()
	res := s.Store.AcquireLeases(ctx, reqs, p)
	if s.late.Add(-1) >= 0 {
		s.skew.Add(int64(time.Hour))
	}
	return res
}

// TestALateGrantIsNotHandedBack: an acquire attempt that outlasted the
// lease's local deadline does not return a lease that is over: TryAcquire
// fails with ErrExpired, Acquire tries again; the late grant is released.
func TestALateGrantIsNotHandedBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := &lateStore{Store: memory.New(nil)}
	m := newManager(t, s, &lease.Config{Owner: "alice", Now: s.now})
	s.late.Store(1)
	_, err := m.TryAcquire(ctx, "x", &lease.AcquireOpts{TTL: time.Minute})
	require.ErrorIs(t, err, lease.ErrExpired)
	info, err := m.Get(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, store.LeaseReleased, info.EndReason, "the late grant was released")

	s.late.Store(1)
	l, err := m.Acquire(ctx, "x", &lease.AcquireOpts{TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, l.Err())
	require.Positive(t, l.Remaining())
	require.Equal(t, info.Fence+2, l.Fence(), "the second grant of the retry")
	require.NoError(t, l.Close(ctx))
}

// TestALateGrantIsRetriedAfterAPause: a blocking Acquire whose grant came
// late releases it and tries again after its pause for a failed attempt
// (backoff), not at once: releasing the grant woke its own waiter, which
// is no news of the name. On synctest's fake clock, which moves only while
// every goroutine waits, the retry comes strictly after the late attempt.
func TestALateGrantIsRetriedAfterAPause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := &lateStore{Store: memory.New(nil)}
		m, err := lease.New(s, &lease.Config{Owner: "alice", Now: s.now})
		require.NoError(t, err)
		defer m.Stop()
		s.late.Store(1)
		l, err := m.Acquire(ctx, "x", &lease.AcquireOpts{TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, l.Close(ctx))
		s.mu.Lock()
		defer s.mu.Unlock()
		require.Len(t, s.calls, 2, "the late attempt and the retry")
		require.Positive(t, s.calls[1].Sub(s.calls[0]), "the retry waited its pause")
	})
}

// TestConcurrentReleasesOneWins: of Releases of one lease made at once,
// one returns nil and the others ErrReleased.
func TestConcurrentReleasesOneWins(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newGatedStore()
	m := newManager(t, s, &lease.Config{Owner: "alice"})
	l, err := m.TryAcquire(ctx, "x", nil)
	require.NoError(t, err)
	entered, open := s.hold(false)
	t.Cleanup(open) // before Stop, should the test fail
	const n = 5
	errs := make(chan error, n)
	go func() { errs <- l.Release(ctx) }()
	wait(t, entered, "the first release is in flight")
	var started sync.WaitGroup
	for range n - 1 {
		started.Add(1)
		go func() {
			started.Done()
			errs <- l.Release(ctx)
		}()
	}
	started.Wait()
	open()
	var ok, again int
	for range n {
		switch err := within(t, "a release", func() error { return <-errs }); {
		case err == nil:
			ok++
		case errors.Is(err, lease.ErrReleased):
			again++
		default:
			t.Fatal(err)
		}
	}
	require.Equal(t, []int{1, n - 1}, []int{ok, again})
}

// TestAcquireTimeoutIsNotTheCallersDeadline: a blocking acquire ended by
// its caller's deadline reports context.DeadlineExceeded, not ErrTimeout,
// which is for AcquireOpts.Timeout.
func TestAcquireTimeoutIsNotTheCallersDeadline(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memory.New(nil)
	m := newManager(t, s, &lease.Config{Owner: "alice", PollInterval: 20 * time.Millisecond})
	other := newManager(t, s, &lease.Config{Owner: "bob"})
	h, err := other.TryAcquire(ctx, "x", &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = m.Acquire(dctx, "x", &lease.AcquireOpts{Timeout: time.Hour})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, lease.ErrTimeout)
	_, err = m.AcquireAll(dctx, []string{"w", "x"}, &lease.AcquireOpts{Timeout: time.Hour})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, lease.ErrTimeout)
	_, err = m.AcquireAll(ctx, []string{"w", "x"}, &lease.AcquireOpts{Timeout: 100 * time.Millisecond})
	require.ErrorIs(t, err, lease.ErrTimeout)
	require.NoError(t, h.Close(ctx))
}

// gateOnName holds the acquire calls that carry name until open closes;
// entered closes when the first arrives.
type gateOnName struct {
	lease.Store
	name          string
	entered, open chan struct{}
	once          sync.Once
}

func (s *gateOnName) AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult {
	for _, r := range reqs {
		if r.Name == s.name {
			s.once.Do(func() { close(s.entered) })
			<-s.open
		}
	}
	return s.Store.AcquireLeases(ctx, reqs, p)
}

// TestTryAcquireAllFailsWhenALeaseItHoldsEnds: a lease TryAcquireAll took
// ends while it acquires the next name: it fails with that lease's error
// and releases what it took.
func TestTryAcquireAllFailsWhenALeaseItHoldsEnds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := &gateOnName{Store: memory.New(nil), name: "b", entered: make(chan struct{}), open: make(chan struct{})}
	m := newManager(t, s, &lease.Config{Owner: "alice"})
	done := make(chan error, 1)
	go func() {
		_, err := m.TryAcquireAll(ctx, []string{"a", "b"}, &lease.AcquireOpts{TTL: time.Hour})
		done <- err
	}()
	wait(t, s.entered, "a is held, b's acquire in flight")
	_, err := m.ForceRelease(ctx, m.Owner(), nil)
	require.NoError(t, err)
	close(s.open)
	err = within(t, "TryAcquireAll", func() error { return <-done })
	require.ErrorIs(t, err, lease.ErrForceReleased)
	mine, err := m.ListByOwner(ctx, m.Owner())
	require.NoError(t, err)
	require.Empty(t, mine, "b was released")
}
