package barrier_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/store/memory"
)

// TestStartStopStress runs Start, Stop, WaitFor, Ready, Watermark and
// resolutions concurrently on many barriers (run with -race; goleak in
// TestMain checks that Stop leaves no goroutine behind).
func TestStartStopStress(t *testing.T) {
	t.Parallel()
	src := memory.New(nil)
	const (
		rounds  = 50
		workers = 8
	)
	for round := range rounds {
		stream := fmt.Sprintf("s%d", round)
		es := lease(t, src, stream, workers)
		b, err := barrier.New(src, &barrier.Config{PollInterval: time.Millisecond})
		require.NoError(t, err)
		parent, cancelParent := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() { // starters and stoppers
				if i%2 == 0 {
					if err := b.Start(parent); err != nil {
						require.ErrorIs(t, err, barrier.ErrStopped)
					}
				} else {
					b.Stop()
				}
			})
			wg.Go(func() { // waiters
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(5))*time.Millisecond)
				defer cancel()
				err := b.WaitFor(ctx, stream, int64(i+1))
				switch {
				case err == nil, errors.Is(err, barrier.ErrNotStarted), errors.Is(err, barrier.ErrStopped),
					errors.Is(err, context.DeadlineExceeded):
				default:
					t.Errorf("WaitFor: unexpected error %v", err)
				}
				if ch, withdraw, err := b.Ready(ctx, stream, int64(i+2)); err == nil {
					select {
					case <-ch:
					case <-ctx.Done():
					}
					withdraw()
				}
				_, _ = b.Watermark(ctx, stream)
			})
			wg.Go(func() { // resolvers
				commit(t, src, es[i])
				b.Resolved(stream, es[i].Number)
			})
		}
		if round%3 == 0 {
			cancelParent() // a parent cancel racing Stop
		}
		wg.Wait()
		b.Stop()
		b.Stop()
		require.ErrorIs(t, b.Start(context.Background()), barrier.ErrStopped)
		cancelParent()
	}
}

// TestParentCancelStopsWaits: when Start's context ends, nothing listens any
// more, so new waits fail instead of hanging.
func TestParentCancelStopsWaits(t *testing.T) {
	t.Parallel()
	src := memory.New(nil)
	b, err := barrier.New(src, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, b.Start(ctx))
	defer b.Stop()
	cancel()
	require.ErrorIs(t, b.WaitFor(context.Background(), "s", 5), barrier.ErrStopped)
}
