package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// checks records the results a Monitor reports.
type checks struct {
	mu  sync.Mutex
	got []lease.MonitorResult
	ch  chan struct{} // capacity 1: a check was reported
}

func newChecks() *checks { return &checks{ch: make(chan struct{}, 1)} }

func (c *checks) Checked(_ context.Context, r lease.MonitorResult) {
	c.mu.Lock()
	c.got = append(c.got, r)
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

// acquireAt acquires name for owner on s with the backend's clock pinned at
// at, as if the holding had begun then.
func acquireAt(t *testing.T, s lease.Store, name, owner string, at time.Time) store.NamedLease {
	t.Helper()
	rs := s.AcquireLeases(t.Context(), []store.AcquireLeaseRequest{{Name: name, Owner: owner, TTL: 2 * time.Hour}},
		&store.LeaseBatchParams{Now: &at})
	require.NoError(t, rs[0].Err)
	return rs[0].Lease
}

// TestMonitorReportsStuckHoldings: on both backends, a check reports the
// holding acquired longer ago than StuckAfter (in the result, the log's
// event stream and the Observer) and leaves the young one and, without
// ForceRelease, the stuck one alone.
func TestMonitorReportsStuckHoldings(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		m := newManager(t, s, &lease.Config{Owner: "alice"})
		now, err := s.Now(ctx)
		require.NoError(t, err)
		old := acquireAt(t, s, "old", "bob", now.Add(-10*time.Minute))
		young, err := m.TryAcquire(ctx, "young", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		obs := newChecks()
		mo, err := m.NewMonitor(&lease.MonitorConfig{StuckAfter: 5 * time.Minute, Observer: obs})
		require.NoError(t, err)
		sub := m.Subscribe()
		defer sub.Close()

		res, err := mo.Check(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Active)
		require.Len(t, res.Stuck, 1)
		require.Equal(t, "old", res.Stuck[0].Name)
		require.Equal(t, old.Fence, res.Stuck[0].Fence)
		require.Zero(t, res.Released)
		e := next(t, sub, lease.LongHeld)
		require.Equal(t, "old", e.Name)
		require.Equal(t, "bob", e.Owner)
		require.GreaterOrEqual(t, e.Waited, 10*time.Minute)
		require.NoError(t, e.Err)
		require.Len(t, obs.got, 1)
		require.Equal(t, res.Active, obs.got[0].Active)

		info, err := m.Get(ctx, "old")
		require.NoError(t, err)
		require.True(t, info.Held(), "reported, not released")
		require.NoError(t, young.Err())
		require.NoError(t, young.Close(ctx))
	})
}

// TestMonitorForceReleasesStuckHoldings: on both backends, with
// ForceRelease a check ends the stuck holdings, fenced by their tokens: a
// lease of this Manager ends with ErrForceReleased at once, another
// owner's holding is ended in the backend, and a young holding is kept.
func TestMonitorForceReleasesStuckHoldings(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		m := newManager(t, s, &lease.Config{Owner: "alice"})
		now, err := s.Now(ctx)
		require.NoError(t, err)
		acquireAt(t, s, "old", "bob", now.Add(-10*time.Minute))
		young, err := m.TryAcquire(ctx, "young", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		mo, err := m.NewMonitor(&lease.MonitorConfig{StuckAfter: 5 * time.Minute, ForceRelease: true})
		require.NoError(t, err)
		sub := m.Subscribe()
		defer sub.Close()
		res, err := mo.Check(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Released)
		e := next(t, sub, lease.LongHeld)
		require.ErrorIs(t, e.Err, lease.ErrForceReleased)
		info, err := m.Get(ctx, "old")
		require.NoError(t, err)
		require.False(t, info.Held(), "ended by the monitor")
		require.Equal(t, store.LeaseForceReleased, info.EndReason, "recorded as a force-release, not a release")
		events, err := m.History(ctx, "old", 0, 10)
		require.NoError(t, err)
		last := events[len(events)-1]
		require.Equal(t, store.LeaseForceReleased, last.Kind)
		require.Equal(t, lease.MonitorActor, last.Actor)
		require.Contains(t, last.Comment, "held longer than 5m0s")
		_, err = s.RenewLease(ctx, "old", "bob", info.Fence, &store.RenewLeaseParams{TTL: time.Minute})
		require.ErrorIs(t, err, store.ErrForceReleased, "the other owner's holder learns it was force-released")
		require.NoError(t, young.Err(), "the young holding is kept")

		// A lease of this Manager: every holding of alice is stuck after
		// a nanosecond.
		own, err := m.NewMonitor(&lease.MonitorConfig{StuckAfter: time.Nanosecond, Owner: "alice", ForceRelease: true})
		require.NoError(t, err)
		res, err = own.Check(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Released)
		wait(t, young.Done(), "the stuck lease of this Manager ends")
		require.ErrorIs(t, young.Err(), lease.ErrForceReleased)
		held, err := m.IsHeld(ctx, "young")
		require.NoError(t, err)
		require.False(t, held)
	})
}

// TestMonitorLoopStartsAndStops: Start runs a first check at once, Stop
// waits for the loop (goleak checks in TestMain), and both are safe in
// any order and twice.
func TestMonitorLoopStartsAndStops(t *testing.T) {
	t.Parallel()
	m := newManager(t, memory.New(nil), &lease.Config{Owner: "alice"})
	obs := newChecks()
	mo, err := m.NewMonitor(&lease.MonitorConfig{Observer: obs, Interval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, mo.Start(t.Context()))
	require.NoError(t, mo.Start(t.Context()))
	wait(t, obs.ch, "the first check")
	mo.Stop()
	mo.Stop()
	require.ErrorIs(t, mo.Start(t.Context()), lease.ErrStopped)

	for range 20 { // start/stop stress
		mo, err := m.NewMonitor(&lease.MonitorConfig{Interval: time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, mo.Start(t.Context()))
		mo.Stop()
	}
	never, err := m.NewMonitor(nil)
	require.NoError(t, err)
	never.Stop() // before Start
}

// TestMonitorBadConfig: bad settings fail with an error matching
// ErrInvalidArgument that names the field.
func TestMonitorBadConfig(t *testing.T) {
	t.Parallel()
	m := newManager(t, memory.New(nil), &lease.Config{Owner: "alice"})
	for _, tc := range []struct {
		cfg   lease.MonitorConfig
		field string
	}{
		{lease.MonitorConfig{StuckAfter: -time.Second}, "StuckAfter"},
		{lease.MonitorConfig{Interval: -time.Second}, "Interval"},
		{lease.MonitorConfig{Owner: "bad\x00owner"}, "Owner"},
	} {
		_, err := m.NewMonitor(&tc.cfg)
		require.ErrorIs(t, err, lease.ErrInvalidArgument)
		require.ErrorContains(t, err, "MonitorConfig."+tc.field)
	}
}

// TestMonitorCountsExpiredAndPending: on both backends, a check counts the
// holdings past their expiry that maintenance has not marked (expired, not
// active, never stuck) and the waiters (pending), of Owner if set, and
// tells the Observer.
func TestMonitorCountsExpiredAndPending(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		m := newManager(t, s, &lease.Config{Owner: "alice", CleanupInterval: -1}) // no maintenance: nothing marked
		now, err := s.Now(ctx)
		require.NoError(t, err)
		at := now.Add(-3 * time.Hour)
		rs := s.AcquireLeases(ctx, []store.AcquireLeaseRequest{{Name: "gone", Owner: "bob", TTL: time.Hour}},
			&store.LeaseBatchParams{Now: &at})
		require.NoError(t, rs[0].Err)
		live, err := m.TryAcquire(ctx, "live", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		defer live.Close(ctx)
		for _, w := range []string{"carol", "dave"} {
			require.NoError(t, s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: "live", Waiter: w, Since: now, Fence: live.Fence()}))
		}

		obs := newChecks()
		mo, err := m.NewMonitor(&lease.MonitorConfig{StuckAfter: time.Minute, Observer: obs})
		require.NoError(t, err)
		res, err := mo.Check(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Active, "the expired holding is not active")
		require.Equal(t, 1, res.Expired)
		require.Empty(t, res.Stuck, "an expired holding is not stuck, however old")
		require.Equal(t, 2, res.Pending)
		require.Equal(t, res, obs.got[0])

		mo, err = m.NewMonitor(&lease.MonitorConfig{Owner: "dave"})
		require.NoError(t, err)
		res, err = mo.Check(ctx)
		require.NoError(t, err)
		require.Equal(t, lease.MonitorResult{Pending: 1}, res, "dave holds nothing and waits once")
	})
}
