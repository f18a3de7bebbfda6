package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/chaos"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestClockSkew runs one scenario with the clients' clocks right, 10
// minutes fast and 10 minutes slow: the clock of the sequence.Leaser
// (Config.Now), of a lease.Manager (Config.Now) and, through an elector on
// that Manager, of the cleanup loop's stream leases (cleanup.Config has no
// clock of its own: expiry is the database's, and its pauses are measured
// on the monotonic clock). A second Manager has the opposite skew. Nothing
// may change: the holders' local deadlines follow the real elapsed time,
// every expiry is the database's, and each step has the same outcome.
func TestClockSkew(t *testing.T) {
	for _, skew := range []time.Duration{0, 10 * time.Minute, -10 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel()
			skewScenario(t, skew)
		})
	}
}

func skewScenario(t *testing.T, skew time.Duration) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	st, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	b, err := barrier.New(st, nil)
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	defer b.Stop()
	clock := func(d time.Duration) func() time.Time {
		return func() time.Time { return time.Now().Add(d) } // keeps the monotonic reading
	}
	l, err := sequence.New(st, &sequence.Config{Barrier: b, Now: clock(skew)})
	require.NoError(t, err)
	m1, err := lease.New(st, &lease.Config{Owner: "skewed", Now: clock(skew)})
	require.NoError(t, err)
	require.NoError(t, m1.Start(ctx))
	defer m1.Stop()
	m2, err := lease.New(st, &lease.Config{Owner: "opposite", Now: clock(-skew)})
	require.NoError(t, err)
	require.NoError(t, m2.Start(ctx))
	defer m2.Stop()
	const stream = "skew"
	acked := map[int64][]byte{}
	commit := func(x *sequence.Lease, payload string) {
		require.NoError(t, x.Commit(ctx, []byte(payload)))
		acked[x.Number()] = []byte(payload)
	}

	// A fresh lease: its holder counts on about its TTL, and commits.
	x, err := l.Lease(ctx, stream, &sequence.LeaseOpts{TTL: 2 * time.Second})
	require.NoError(t, err)
	require.Greater(t, x.Remaining(), time.Second)
	require.LessOrEqual(t, x.Remaining(), 2*time.Second)
	commit(x, "within the TTL")

	// Kept alive for two TTLs, it is still held and commits. Renewed at a
	// quarter of its TTL, each renewal has more than a second to come
	// back: with a 1 s TTL renewed at 0.6 (the default) it had about
	// 250 ms, which a loaded machine's make test missed (the chaos soak
	// runs beside this test).
	x, err = l.Lease(ctx, stream, &sequence.LeaseOpts{TTL: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, x.KeepAlive(&sequence.KeepAliveOpts{RenewShare: 0.25}))
	time.Sleep(4 * time.Second)
	require.NoError(t, x.Err())
	commit(x, "kept alive")

	// Abandoned, it is over locally after about its TTL of real time, and
	// the database refuses its commit once its clock passed the expiry.
	start := time.Now()
	x, err = l.Lease(ctx, stream, &sequence.LeaseOpts{TTL: 400 * time.Millisecond})
	require.NoError(t, err)
	<-x.Done()
	over := time.Since(start)
	require.ErrorIs(t, x.Err(), sequence.ErrExpired)
	require.Greater(t, over, 200*time.Millisecond, "over long before its TTL")
	require.Less(t, over, 5*time.Second, "over long after its TTL")
	waitDBClock(ctx, t, st, x.ExpiresAt())
	require.ErrorIs(t, x.Commit(ctx, []byte("late")), sequence.ErrExpired)

	// Abandoned leases are resolved by the cleanup, at their expiry by the
	// database clock, never before; the cleaner's stream lease is on the
	// skewed Manager.
	xs, err := l.LeaseN(ctx, stream, 4, &sequence.LeaseOpts{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	elector, err := cleanup.NewLeaseElector(m1, time.Second)
	require.NoError(t, err)
	sv, err := cleanup.New(st, &cleanup.Config{Interval: 50 * time.Millisecond, Elector: elector, Barrier: b})
	require.NoError(t, err)
	require.NoError(t, sv.Start(ctx))
	err = b.WaitFor(ctx, stream, xs[3].Number()+1)
	sv.Stop()
	require.NoError(t, err)
	es, err := st.Read(ctx, stream, 0, 100)
	require.NoError(t, err)
	for _, e := range es[x.Number()-1:] {
		require.Equal(t, store.Gap, e.State, "entry %d", e.Number)
		require.False(t, e.ResolvedAt.Before(e.ExpiresAt), "entry %d resolved before its expiry", e.Number)
	}

	// A named lease kept alive on the skewed clock stays held; the opposite
	// clock sees it held, then takes it when it is released. Kept alive for
	// two TTLs and renewed at a quarter of its TTL, each renewal has 750 ms
	// to come back: with a 300 ms TTL at the default share it had about
	// 120 ms, which a loaded make test missed once.
	a, err := m1.TryAcquire(ctx, "skew/kept", &lease.AcquireOpts{TTL: time.Second, KeepAlive: true, RenewShare: 0.25})
	require.NoError(t, err)
	time.Sleep(2 * time.Second)
	require.NoError(t, a.Err())
	_, err = m2.TryAcquire(ctx, "skew/kept", &lease.AcquireOpts{TTL: 300 * time.Millisecond})
	var held *lease.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, "skewed", held.Owner)
	require.LessOrEqual(t, held.Remaining(), time.Second)
	require.NoError(t, a.Release(ctx))
	c, err := m2.TryAcquire(ctx, "skew/kept", &lease.AcquireOpts{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, a.Fence()+1, c.Fence())
	require.NoError(t, c.Release(ctx))

	// An abandoned named lease is over locally after about its TTL of real
	// time; the opposite clock's blocked acquire gets it at the database's
	// expiry, not before.
	start = time.Now()
	a, err = m1.TryAcquire(ctx, "skew/abandoned", &lease.AcquireOpts{TTL: 400 * time.Millisecond})
	require.NoError(t, err)
	<-a.Done()
	over = time.Since(start)
	require.ErrorIs(t, a.Err(), lease.ErrExpired)
	require.Greater(t, over, 200*time.Millisecond, "over long before its TTL")
	require.Less(t, over, 5*time.Second, "over long after its TTL")
	c, err = m2.Acquire(ctx, "skew/abandoned", &lease.AcquireOpts{TTL: time.Second, Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.False(t, c.AcquiredAt().Before(a.ExpiresAt()), "taken over before the expiry")
	require.Equal(t, a.Fence()+1, c.Fence())
	require.NoError(t, c.Release(ctx))

	r, err := audit.Stream(ctx, st, stream, &audit.Options{Ordered: true, Acknowledged: acked})
	require.NoError(t, err)
	require.NoError(t, r.Err())
	events, err := st.LeaseHistory(ctx, "", nil)
	require.NoError(t, err)
	require.NotEmpty(t, events)
	require.Empty(t, chaos.CheckLeaseHistory(events))
}

// waitDBClock waits until the database's clock has passed t.
func waitDBClock(ctx context.Context, tb testing.TB, st *postgres.Store, t time.Time) {
	tb.Helper()
	for {
		now, err := st.Now(ctx)
		require.NoError(tb, err)
		if now.After(t) {
			return
		}
		require.NoError(tb, ctx.Err(), "the database clock never passed %v", t)
		time.Sleep(10 * time.Millisecond)
	}
}
