package sequence_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store/memory"
)

// TestErrReportsLocalDeadline: once the local deadline passed, Err says
// ErrExpired even if nobody asked for Done or Context (which arm the timer
// that closes them), and Done and Context agree with it.
func TestErrReportsLocalDeadline(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := memory.New(&memory.Config{Now: c.Now})
	l, err := sequence.New(s, &sequence.Config{Now: c.Now, UnorderedOnly: true})
	require.NoError(t, err)
	x, err := l.Lease(context.Background(), "d", &sequence.LeaseOpts{TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, x.Err())
	c.Advance(time.Minute)
	require.True(t, x.IsExpired())
	require.ErrorIs(t, x.Err(), sequence.ErrExpired, "IsExpired but Err is nil")
	select {
	case <-x.Done():
	default:
		t.Fatal("Err is ErrExpired but Done is open")
	}
	require.ErrorIs(t, context.Cause(x.Context()), sequence.ErrExpired)
	require.ErrorIs(t, x.KeepAlive(nil), sequence.ErrExpired)
}

// TestMarginIsCappedAtHalfTheTTL: a Config.Margin longer than a lease's TTL
// leaves the lease half its TTL, not nothing.
func TestMarginIsCappedAtHalfTheTTL(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := memory.New(&memory.Config{Now: c.Now})
	l, err := sequence.New(s, &sequence.Config{Now: c.Now, Margin: 20 * time.Minute, UnorderedOnly: true})
	require.NoError(t, err)
	x, err := l.Lease(context.Background(), "m", &sequence.LeaseOpts{TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, x.Remaining())
	long, err := l.Lease(context.Background(), "m", &sequence.LeaseOpts{TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, 40*time.Minute, long.Remaining(), "below half the TTL, the margin applies whole")
	c.Advance(30 * time.Second)
	require.ErrorIs(t, x.Err(), sequence.ErrExpired)
}

// TestLeaseEndRacesObservers ends leases while other goroutines call Done,
// Context, Err and KeepAlive: whoever sees Done closed finds Err set, and
// every context handed out is cancelled with Err as its cause (run with
// -race).
func TestLeaseEndRacesObservers(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	b := startBarrier(t, s)
	l, err := sequence.New(s, &sequence.Config{Barrier: b})
	require.NoError(t, err)
	ctx := context.Background()
	for range 200 {
		x, err := l.Lease(ctx, "r", &sequence.LeaseOpts{TTL: time.Hour})
		require.NoError(t, err)
		var wg sync.WaitGroup
		ctxs := make(chan context.Context, 4)
		for range 4 {
			wg.Go(func() {
				ctxs <- x.Context()
				<-x.Done()
				require.ErrorIs(t, x.Err(), sequence.ErrReleased)
			})
		}
		wg.Go(func() { _ = x.KeepAlive(nil) })
		wg.Go(func() { require.NoError(t, x.Release(ctx)) })
		wg.Wait()
		close(ctxs)
		for c := range ctxs {
			<-c.Done()
			require.ErrorIs(t, context.Cause(c), sequence.ErrReleased)
		}
		x.StopKeepAlive()
	}
}
