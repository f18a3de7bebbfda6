package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
)

// TestForceReleaseRecordsWhoAndWhy: ForceRelease records its Actor and
// Reason in the history, Get reads the status, and a bad Reason ends
// nothing.
func TestForceReleaseRecordsWhoAndWhy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		holder := newManager(t, b.open(t), &lease.Config{Owner: t.Name() + "-holder"})
		operator := newManager(t, b.open(t), &lease.Config{Owner: t.Name() + "-operator"})
		l, err := holder.TryAcquire(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		info, err := operator.Get(ctx, t.Name())
		require.NoError(t, err)
		require.Equal(t, store.LeaseStatusActive, info.Status())
		require.Greater(t, info.Remaining(), 59*time.Minute)

		_, err = operator.ForceRelease(ctx, holder.Owner(), &lease.ForceReleaseParams{Actor: "jane", Reason: "bad\x1bterminal"})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		require.ErrorContains(t, err, "Reason")
		require.NoError(t, l.Check(ctx), "nothing ended")

		_, err = operator.ForceRelease(ctx, holder.Owner(), &lease.ForceReleaseParams{Actor: "jane", Reason: "stuck since the deploy"})
		require.NoError(t, err)
		info, err = operator.Get(ctx, t.Name())
		require.NoError(t, err)
		require.Equal(t, store.LeaseStatusForceReleased, info.Status())
		evs, err := operator.History(ctx, t.Name(), 0, 0)
		require.NoError(t, err)
		last := evs[len(evs)-1]
		require.Equal(t, store.LeaseEvent{Kind: store.LeaseForceReleased, Reason: store.LeaseReasonForceReleased, Actor: "jane", Comment: "stuck since the deploy"},
			store.LeaseEvent{Kind: last.Kind, Reason: last.Reason, Actor: last.Actor, Comment: last.Comment})
	})
}

// waiterLister is the backends' listing of waiters.
type waiterLister interface {
	ListLeaseWaiters(ctx context.Context, p *store.ListLeaseWaitersParams) ([]store.LeaseWaiter, error)
}

// TestBlockedAcquireIsVisible: a blocked Acquire of a name another process
// holds shows in the backend's waiters until it gets the name.
func TestBlockedAcquireIsVisible(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		holder := newListeningManager(t, s, &lease.Config{Owner: t.Name() + "-holder"})
		waiting := newListeningManager(t, b.open(t), &lease.Config{Owner: t.Name() + "-waiter"})
		l, err := holder.TryAcquire(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			w, err := waiting.Acquire(ctx, t.Name(), &lease.AcquireOpts{TTL: time.Hour, Timeout: time.Minute})
			if err == nil {
				err = w.Release(context.Background())
			}
			got <- err
		}()
		list := func() []store.LeaseWaiter {
			ws, err := s.(waiterLister).ListLeaseWaiters(ctx, &store.ListLeaseWaitersParams{Name: t.Name()})
			require.NoError(t, err)
			return ws
		}
		require.Eventually(t, func() bool { return len(list()) == 1 }, 30*time.Second, 5*time.Millisecond, "the waiter shows")
		w := list()[0]
		require.Equal(t, waiting.Owner(), w.Waiter)
		require.Equal(t, l.Fence(), w.Fence)
		require.False(t, w.Since.IsZero())
		require.NoError(t, l.Release(ctx))
		require.NoError(t, <-got)
		require.Empty(t, list(), "it got its turn")
	})
}
