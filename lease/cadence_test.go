package lease_test

import (
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// TestOneManagerServesTwoCadences: leases of one Manager renew at the share
// of the TTL their AcquireOpts ask for. On synctest's fake clock each first
// renewal comes at its share of the TTL (jitter is at most a nanosecond).
func TestOneManagerServesTwoCadences(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		m, err := lease.New(memory.New(nil), &lease.Config{Owner: "alice", MaxJitter: time.Nanosecond})
		require.NoError(t, err)
		defer m.Stop()
		sub := m.Subscribe()
		defer sub.Close()
		fast, err := m.Hold(ctx, "fast", &lease.AcquireOpts{TTL: 10 * time.Second, RenewShare: 0.25})
		require.NoError(t, err)
		slow, err := m.Hold(ctx, "slow", &lease.AcquireOpts{TTL: 10 * time.Second, RenewShare: 0.75})
		require.NoError(t, err)
		firsts := map[string]time.Duration{}
		acquired := map[string]time.Time{}
		for len(firsts) < 2 {
			e := <-sub.C()
			switch e.Kind {
			case lease.Acquired:
				acquired[e.Name] = e.At
			case lease.Renewed:
				if _, ok := firsts[e.Name]; !ok {
					firsts[e.Name] = e.At.Sub(acquired[e.Name])
				}
			}
		}
		require.InDelta(t, 2500*time.Millisecond, firsts["fast"], float64(time.Microsecond))
		require.InDelta(t, 7500*time.Millisecond, firsts["slow"], float64(time.Microsecond))
		require.NoError(t, fast.Close(ctx))
		require.NoError(t, slow.Close(ctx))
	})
}

// TestTwoCadencesShareForceReleaseAndListByOwner: on both backends, a
// lease renewed often and one renewed rarely are held by one Manager, so
// one ListByOwner lists both and one ForceRelease ends both.
func TestTwoCadencesShareForceReleaseAndListByOwner(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		// Listening first: the watch's start renews every kept-alive lease.
		m := newListeningManager(t, b.open(t), &lease.Config{Owner: "alice", MaxJitter: time.Microsecond})
		fast, err := m.Hold(ctx, "fast", &lease.AcquireOpts{TTL: 2 * time.Second, RenewShare: 0.05})
		require.NoError(t, err)
		slow, err := m.Hold(ctx, "slow", &lease.AcquireOpts{TTL: 2 * time.Second, RenewShare: 0.9})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return fast.Renewals() >= 3 }, 10*time.Second, 10*time.Millisecond)
		// The fast lease renewed three times in ~300 ms; the slow one
		// renews first at 1.8 s.
		require.Zero(t, slow.Renewals(), "the slow lease keeps its own cadence")
		ls, err := m.ListByOwner(ctx, "alice")
		require.NoError(t, err)
		require.Len(t, ls, 2)
		ended, err := m.ForceRelease(ctx, "alice", nil)
		require.NoError(t, err)
		require.Len(t, ended, 2)
		for _, l := range []*lease.Lease{fast, slow} {
			wait(t, l.Done(), l.Name()+" ends")
			require.ErrorIs(t, l.Err(), lease.ErrForceReleased)
		}
	})
}

// TestRenewWithANewTTL: on both backends, RenewWith's TTL moves the expiry
// to the backend's now + the new TTL, and becomes the lease's TTL.
func TestRenewWithANewTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := newManager(t, b.open(t), &lease.Config{Owner: "alice"})
		l, err := m.TryAcquire(ctx, "x", &lease.AcquireOpts{TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, l.RenewWith(ctx, &lease.RenewOpts{TTL: 10 * time.Minute}))
		require.Equal(t, 10*time.Minute, l.TTL())
		require.Equal(t, 10*time.Minute, l.ExpiresAt().Sub(l.RenewedAt()))
		require.Greater(t, l.Remaining(), time.Minute)
		info, err := m.Get(ctx, "x")
		require.NoError(t, err)
		require.Equal(t, l.ExpiresAt(), info.ExpiresAt)
		require.NoError(t, l.Renew(ctx), "a later renewal asks for the new TTL")
		require.Equal(t, 10*time.Minute, l.ExpiresAt().Sub(l.RenewedAt()))
		require.NoError(t, l.RenewWith(ctx, &lease.RenewOpts{TTL: 30 * time.Second}))
		require.LessOrEqual(t, l.Remaining(), 30*time.Second)
		require.NoError(t, l.Close(ctx))
	})
}

// TestRenewWithShorterTTLReschedulesTheKeepAlive: a kept-alive lease whose
// TTL RenewWith shortens is renewed by the new TTL's cadence, not the old
// one's, so it is not lost.
func TestRenewWithShorterTTLReschedulesTheKeepAlive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		m, err := lease.New(memory.New(nil), &lease.Config{Owner: "alice", MaxJitter: time.Nanosecond})
		require.NoError(t, err)
		defer m.Stop()
		l, err := m.Hold(ctx, "x", &lease.AcquireOpts{TTL: time.Hour, RenewShare: 0.5})
		require.NoError(t, err)
		synctest.Wait() // the keep-alive waits for its first renewal, 30 min away
		require.NoError(t, l.RenewWith(ctx, &lease.RenewOpts{TTL: 10 * time.Second}))
		time.Sleep(time.Minute) // fake time: the old cadence would renew at 30 min
		require.NoError(t, l.Err())
		require.GreaterOrEqual(t, l.Renewals(), 6, "renewed every 5 s")
		require.NoError(t, l.Close(ctx))
	})
}

// TestBadCadenceOptions: bad per-lease options fail with an error that
// matches ErrInvalidArgument and names the field, and change nothing.
func TestBadCadenceOptions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := newManager(t, b.open(t), &lease.Config{Owner: "alice", MaxTTL: time.Hour})
		for _, tc := range []struct {
			opts  lease.AcquireOpts
			field string
		}{
			{lease.AcquireOpts{RenewShare: -0.1}, "RenewShare"},
			{lease.AcquireOpts{RenewShare: 1}, "RenewShare"},
			{lease.AcquireOpts{RenewShare: math.NaN()}, "RenewShare"},
			{lease.AcquireOpts{MaxJitter: -time.Second}, "MaxJitter"},
		} {
			_, err := m.TryAcquire(ctx, "x", &tc.opts)
			require.ErrorIs(t, err, lease.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.field)
		}
		_, err := m.Get(ctx, "x")
		require.ErrorIs(t, err, lease.ErrLeaseNotFound, "nothing was acquired")

		l, err := m.TryAcquire(ctx, "x", &lease.AcquireOpts{TTL: time.Minute})
		require.NoError(t, err)
		before, err := m.Get(ctx, "x")
		require.NoError(t, err)
		for _, ttl := range []time.Duration{-time.Second, time.Nanosecond, 2 * time.Hour} {
			err := l.RenewWith(ctx, &lease.RenewOpts{TTL: ttl})
			require.ErrorIs(t, err, lease.ErrInvalidArgument)
			require.ErrorIs(t, err, store.ErrInvalidTTL)
			require.ErrorContains(t, err, "RenewOpts.TTL")
		}
		after, err := m.Get(ctx, "x")
		require.NoError(t, err)
		require.Equal(t, before.ExpiresAt, after.ExpiresAt)
		require.Equal(t, before.Renewals, after.Renewals)
		require.Equal(t, time.Minute, l.TTL())
		require.NoError(t, l.Err())
		require.False(t, errors.Is(l.Close(ctx), lease.ErrInvalidArgument))
	})
}
