package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// TestStopWaitsForTheAcquiresInFlight: Stop waits for an acquire whose
// backend call is out; the grant, which arrives once Stop began, is
// released, the acquire fails with ErrStopped, and when Stop returns the
// Manager holds nothing in the backend.
func TestStopWaitsForTheAcquiresInFlight(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newGatedStore()
	m, err := lease.New(s, &lease.Config{Owner: "m"})
	require.NoError(t, err)
	entered, open := s.hold(true)
	acquired := make(chan error, 1)
	go func() {
		_, err := m.TryAcquire(ctx, "x", &lease.AcquireOpts{TTL: time.Hour})
		acquired <- err
	}()
	wait(t, entered, "the acquire is in flight")
	drained := make(chan struct{})
	lease.OnDrain(m, func() { close(drained) })
	stopped := make(chan struct{})
	go func() {
		m.Stop()
		close(stopped)
	}()
	select {
	case <-drained: // Stop waits for the acquire: let its backend call return
	case <-stopped:
		open()
		t.Fatal("Stop returned while an acquire was in flight")
	}
	open()
	wait(t, stopped, "Stop")
	require.ErrorIs(t, within(t, "the acquire", func() error { return <-acquired }), lease.ErrStopped)
	info, err := s.GetLease(ctx, "x", nil)
	require.NoError(t, err)
	require.False(t, info.Held(), "held after Stop returned")
	require.Equal(t, store.LeaseReleased, info.EndReason)
}

// silentWithdrawals is a backend whose withdrawals of announcements hang
// until their context ends, like a database that stopped answering.
type silentWithdrawals struct {
	*memory.Store
	entered chan struct{} // closed when a withdrawal starts
	once    atomic.Bool
	ended   chan error // capacity 1: why the withdrawal's context ended
}

func (s *silentWithdrawals) AnnounceLeaseWaiter(ctx context.Context, w store.LeaseWaiter) error {
	if !w.Withdrawn() {
		return s.Store.AnnounceLeaseWaiter(ctx, w)
	}
	if s.once.CompareAndSwap(false, true) {
		close(s.entered)
	}
	<-ctx.Done()
	s.ended <- context.Cause(ctx)
	return ctx.Err()
}

// TestAGivenUpAcquireDoesNotWaitForItsWithdrawal: a blocking acquire whose
// Timeout passes returns ErrTimeout at once, though the withdrawal of its
// announcement hangs (bounded only by an hour's QueryTimeout); Stop ends
// the withdrawal and waits for it.
func TestAGivenUpAcquireDoesNotWaitForItsWithdrawal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	mem := memory.New(nil)
	s := &silentWithdrawals{Store: mem, entered: make(chan struct{}), ended: make(chan error, 1)}
	holder := newManager(t, mem, &lease.Config{Owner: "holder"})
	m, err := lease.New(s, &lease.Config{Owner: "waiter", QueryTimeout: time.Hour})
	require.NoError(t, err)
	h, err := holder.TryAcquire(ctx, "x", &lease.AcquireOpts{TTL: time.Hour})
	require.NoError(t, err)
	_, err = acquireWithin(t, "the acquire's timeout", func() (*lease.Lease, error) {
		return m.Acquire(ctx, "x", &lease.AcquireOpts{Timeout: 100 * time.Millisecond})
	})
	require.ErrorIs(t, err, lease.ErrTimeout)
	wait(t, s.entered, "the withdrawal")
	within(t, "Stop", func() bool { m.Stop(); return true })
	require.ErrorIs(t, <-s.ended, lease.ErrStopped, "Stop ended the withdrawal")
	require.NoError(t, h.Close(ctx))
}
