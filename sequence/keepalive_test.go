package sequence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// flakyStore fails every Extend while broken, like a cut connection.
type flakyStore struct {
	*memory.Store
	broken  atomic.Bool
	extends atomic.Int64
}

func (f *flakyStore) Extend(ctx context.Context, stream string, number int64, token store.Token, p *store.ExtendParams) (time.Time, time.Time, error) {
	if f.broken.Load() {
		return time.Time{}, time.Time{}, errors.New("connection reset by peer")
	}
	f.extends.Add(1)
	return f.Store.Extend(ctx, stream, number, token, p)
}

// TestKeepAliveStopsBeforeExpiry cuts the keep-alive's backend: the lease's
// Done closes, with ErrLost, before the backend's clock reaches its expiry,
// so the holder stops before the number could be handed to recovery.
func TestKeepAliveStopsBeforeExpiry(t *testing.T) {
	t.Parallel()
	s := &flakyStore{Store: memory.New(nil)}
	b := startBarrier(t, s)
	l, err := sequence.New(s, &sequence.Config{Barrier: b})
	require.NoError(t, err)
	ctx := context.Background()
	x, err := l.Lease(ctx, "ka", &sequence.LeaseOpts{TTL: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, x.KeepAlive(nil))
	require.Eventually(t, func() bool { return s.extends.Load() >= 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, x.Err())
	lctx := x.Context()

	s.broken.Store(true)
	select {
	case <-x.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close")
	}
	endedAt, err := s.Now(ctx)
	require.NoError(t, err)
	es, err := s.Read(ctx, "ka", 0, 1)
	require.NoError(t, err)
	require.True(t, endedAt.Before(es[0].ExpiresAt), "ended at %v, after the expiry %v", endedAt, es[0].ExpiresAt)
	require.ErrorIs(t, x.Err(), sequence.ErrLost)
	require.ErrorIs(t, context.Cause(lctx), sequence.ErrLost)
	require.ErrorContains(t, x.Err(), "connection reset")
}

func TestKeepAliveEndsWithCommitAndRelease(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	b := startBarrier(t, s)
	l, err := sequence.New(s, &sequence.Config{Barrier: b})
	require.NoError(t, err)
	ctx := context.Background()
	a, err := l.Lease(ctx, "ka", &sequence.LeaseOpts{TTL: time.Second})
	require.NoError(t, err)
	c, err := l.Lease(ctx, "ka", &sequence.LeaseOpts{TTL: time.Second})
	require.NoError(t, err)
	require.NoError(t, a.KeepAlive(nil))
	require.NoError(t, c.KeepAlive(&sequence.KeepAliveOpts{RenewShare: 0.5}))
	require.NoError(t, a.Commit(ctx, nil))
	require.NoError(t, c.Release(ctx))
	<-a.Done()
	<-c.Done()
	require.ErrorIs(t, a.Err(), sequence.ErrCommitted)
	require.ErrorIs(t, c.Err(), sequence.ErrReleased)
	require.ErrorIs(t, a.KeepAlive(&sequence.KeepAliveOpts{RenewShare: 1.5}), sequence.ErrInvalidArgument)
}

func TestLocalDeadlineEndsLease(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	l, err := sequence.New(s, &sequence.Config{UnorderedOnly: true})
	require.NoError(t, err)
	x, err := l.Lease(context.Background(), "d", &sequence.LeaseOpts{TTL: 30 * time.Millisecond})
	require.NoError(t, err)
	<-x.Context().Done()
	require.ErrorIs(t, x.Err(), sequence.ErrExpired)
	require.True(t, x.IsExpired())
}
