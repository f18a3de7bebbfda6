package barrier_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/store/memory"
)

// TestIdleStreamsAreEvicted waits on many short-lived streams and checks
// that the barrier drops their state once they are idle, so its memory is
// bounded by the streams in use; a stream used again is read afresh.
func TestIdleStreamsAreEvicted(t *testing.T) {
	t.Parallel()
	src := memory.New(nil)
	b := start(t, src, &barrier.Config{PollInterval: 5 * time.Millisecond})
	ctx := context.Background()
	const streams = 200
	for i := range streams {
		name := fmt.Sprint("short-", i)
		es := lease(t, src, name, 2)
		commit(t, src, es[0])
		require.NoError(t, b.WaitFor(ctx, name, 2))
	}
	require.Eventually(t, func() bool { return barrier.StreamCount(b) == 0 }, 10*time.Second, time.Millisecond)

	w, err := b.Watermark(ctx, "short-7")
	require.NoError(t, err)
	require.Equal(t, int64(1), w, "read afresh after eviction")
}

// TestEvictionLosesNoWaiter races waiters that arrive on streams the
// refresher is evicting (a poll interval of a millisecond) against the
// commits that wake them: every waiter wakes.
func TestEvictionLosesNoWaiter(t *testing.T) {
	t.Parallel()
	src := memory.New(nil)
	b := start(t, src, &barrier.Config{PollInterval: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const streams, rounds = 8, 200
	var wg sync.WaitGroup
	for i := range streams {
		name := fmt.Sprint("busy-", i)
		es := lease(t, src, name, rounds+1)
		wg.Go(func() {
			for r := range rounds {
				if r%10 == 0 {
					time.Sleep(2 * time.Millisecond) // idle long enough to be evicted
				}
				ready, withdraw, err := b.Ready(ctx, name, int64(r+2))
				if !assert.NoError(t, err) {
					return
				}
				commit(t, src, es[r])
				select {
				case <-ready:
				case <-ctx.Done():
					assert.Failf(t, "lost wake-up", "%s: waiter for %d never woke", name, r+2)
					withdraw()
					return
				}
				withdraw()
			}
		})
	}
	wg.Wait()
}
