package barrier_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/store"
)

// TestFollowerEndsOnCancel follows a stream, sees the entries committed so
// far, blocks at the watermark, and ends with the context's error once its
// context is cancelled.
func TestFollowerEndsOnCancel(t *testing.T) {
	t.Parallel()
	for name, src := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := start(t, src, nil)
			es := lease(t, src, "follow", 3)
			commit(t, src, es[0])
			commit(t, src, es[1])

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			seen := make(chan int64)
			ended := make(chan error, 1)
			go func() {
				for e, err := range b.Entries(ctx, "follow", &barrier.ReadOpts{Follow: true}) {
					if err != nil {
						ended <- err
						return
					}
					seen <- e.Number
				}
				ended <- errors.New("the follower stopped without an error")
			}()
			require.Equal(t, int64(1), <-seen)
			require.Equal(t, int64(2), <-seen)
			select {
			case n := <-seen:
				t.Fatalf("the follower passed the watermark: %d", n)
			case err := <-ended:
				t.Fatalf("the follower ended early: %v", err)
			default:
			}
			cancel()
			require.ErrorIs(t, <-ended, context.Canceled)
		})
	}
}

// trimmer is a backend with retention.
type trimmer interface {
	// Trim removes the resolved entries below below and returns the new
	// low point.
	Trim(ctx context.Context, stream string, below int64) (int64, error)
}

// TestReaderBelowTheLowPoint trims a stream and reads it from before and
// after the retention low point: below it the reader fails with ErrTrimmed
// instead of silently skipping entries; from it on it yields the rest.
func TestReaderBelowTheLowPoint(t *testing.T) {
	t.Parallel()
	for name, src := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := start(t, src, nil)
			ctx := context.Background()
			es := lease(t, src, "trim", 5)
			for _, e := range es {
				commit(t, src, e)
			}
			low, err := src.(trimmer).Trim(ctx, "trim", 3)
			require.NoError(t, err)
			require.Equal(t, int64(3), low, "1 and 2 removed")

			var got []int64
			var readErr error
			for e, err := range b.Entries(ctx, "trim", nil) {
				if err != nil {
					readErr = err
					break
				}
				got = append(got, e.Number)
			}
			require.ErrorIs(t, readErr, store.ErrTrimmed)
			var te *store.TrimmedError
			require.ErrorAs(t, readErr, &te)
			require.Empty(t, got, "nothing yielded below the low point")

			got = nil
			for e, err := range b.Entries(ctx, "trim", &barrier.ReadOpts{After: 2}) {
				require.NoError(t, err)
				got = append(got, e.Number)
			}
			require.Equal(t, []int64{3, 4, 5}, got)
		})
	}
}
