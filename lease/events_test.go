package lease_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store/memory"
)

// next returns the next event of sub of one of kinds, skipping the others.
func next(t *testing.T, sub *lease.Subscription, kinds ...lease.EventKind) lease.Event {
	t.Helper()
	for {
		select {
		case e, ok := <-sub.C():
			require.True(t, ok, "the subscription ended")
			for _, k := range kinds {
				if e.Kind == k {
					return e
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %v event within 10s", kinds)
		}
	}
}

// TestEventsCarryWaitAndRenewals: on synctest's fake clock, an acquire
// that waited 30 s behind a holder says so in its Acquired event, its
// Renewed events count the renewals, its end event carries the count, and
// acquires that did not get the name send Refused events with their wait
// and the holder's error.
func TestEventsCarryWaitAndRenewals(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := memory.New(nil)
		bob, err := lease.New(s, &lease.Config{Owner: "bob"})
		require.NoError(t, err)
		defer bob.Stop()
		m, err := lease.New(s, &lease.Config{Owner: "alice", PollInterval: time.Second})
		require.NoError(t, err)
		defer m.Stop()
		sub := m.Subscribe()
		defer sub.Close()

		held, err := bob.TryAcquire(ctx, "x", &lease.AcquireOpts{TTL: 30 * time.Second})
		require.NoError(t, err)

		_, err = m.TryAcquire(ctx, "x", nil)
		require.ErrorIs(t, err, lease.ErrHeld)
		e := next(t, sub, lease.Refused)
		require.Equal(t, "x", e.Name)
		require.Equal(t, "alice", e.Owner)
		require.ErrorIs(t, e.Err, lease.ErrHeld)
		require.Equal(t, held.ExpiresAt(), e.ExpiresAt)
		require.Zero(t, e.Waited, "a try does not wait")

		_, err = m.Acquire(ctx, "x", &lease.AcquireOpts{Timeout: 5 * time.Second})
		require.ErrorIs(t, err, lease.ErrTimeout)
		e = next(t, sub, lease.Refused)
		require.ErrorIs(t, e.Err, lease.ErrTimeout)
		require.ErrorIs(t, e.Err, lease.ErrHeld)
		require.Equal(t, 5*time.Second, e.Waited)

		// Bob's lease expires 25 s later (30 s after its grant, 5 s
		// spent): the blocking acquire gets it by polling.
		l, err := m.Acquire(ctx, "x", &lease.AcquireOpts{TTL: 10 * time.Second, KeepAlive: true, RenewShare: 0.5})
		require.NoError(t, err)
		e = next(t, sub, lease.Acquired)
		require.GreaterOrEqual(t, e.Waited, 25*time.Second)
		require.Less(t, e.Waited, 27*time.Second)
		require.Zero(t, e.Renewals)
		for i := 1; i <= 3; i++ {
			e = next(t, sub, lease.Renewed)
			require.Equal(t, i, e.Renewals)
		}
		require.NoError(t, l.Close(ctx))
		e = next(t, sub, lease.Released)
		require.Equal(t, l.Renewals(), e.Renewals)
		require.GreaterOrEqual(t, e.Renewals, 3)
	})
}

// TestRefusedEventOnBothBackends: a TryAcquire of a held name sends a
// Refused event on either backend; a successful one sends none.
func TestRefusedEventOnBothBackends(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		bob := newManager(t, s, &lease.Config{Owner: "bob"})
		m := newManager(t, s, &lease.Config{Owner: "alice"})
		sub := m.Subscribe()
		defer sub.Close()
		_, err := bob.TryAcquire(ctx, "x", nil)
		require.NoError(t, err)
		_, err = m.TryAcquire(ctx, "x", nil)
		require.ErrorIs(t, err, lease.ErrHeld)
		l, err := m.TryAcquire(ctx, "y", nil)
		require.NoError(t, err)
		e := next(t, sub, lease.Refused, lease.Acquired)
		require.Equal(t, lease.Refused, e.Kind)
		require.Equal(t, "x", e.Name)
		var he *lease.HeldError
		require.ErrorAs(t, e.Err, &he)
		require.Equal(t, "bob", he.Owner)
		e = next(t, sub, lease.Refused, lease.Acquired)
		require.Equal(t, lease.Acquired, e.Kind)
		require.Equal(t, "y", e.Name)
		require.NoError(t, l.Close(ctx))
	})
}
