package barrier_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
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

// readCounter counts the reads that reach the backend.
type readCounter struct {
	*memory.Store
	reads atomic.Int64
}

func (r *readCounter) ReadResolved(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	r.reads.Add(1)
	return r.Store.ReadResolved(ctx, stream, after, limit)
}

// TestReaderRefusesBadOptions: a negative After is a bad number, a page size
// out of 0..MaxListLimit a bad count; each yields one typed error (and no
// entry) before anything is read. The largest page size is accepted.
func TestReaderRefusesBadOptions(t *testing.T) {
	t.Parallel()
	src := &readCounter{Store: memory.New(nil)}
	b := start(t, src, nil)
	for _, e := range lease(t, src, "opts", 2) {
		commit(t, src, e)
	}
	for _, c := range []struct {
		name      string
		opts      barrier.ReadOpts
		want, not error
	}{
		{"negative After", barrier.ReadOpts{After: -1}, store.ErrInvalidNumber, store.ErrInvalidCount},
		{"negative PageSize", barrier.ReadOpts{PageSize: -1}, store.ErrInvalidCount, store.ErrInvalidNumber},
		{"PageSize above MaxListLimit", barrier.ReadOpts{PageSize: store.MaxListLimit + 1}, store.ErrInvalidCount, store.ErrInvalidNumber},
		{"PageSize above MaxListLimit, following", barrier.ReadOpts{PageSize: store.MaxListLimit + 1, Follow: true}, store.ErrInvalidCount, store.ErrInvalidNumber},
	} {
		t.Run(c.name, func(t *testing.T) {
			reads := src.reads.Load()
			var errs []error
			for e, err := range b.Entries(context.Background(), "opts", &c.opts) {
				require.Zero(t, e, "an entry came with the error")
				errs = append(errs, err)
			}
			require.Len(t, errs, 1)
			require.ErrorIs(t, errs[0], c.want)
			require.ErrorIs(t, errs[0], store.ErrInvalidArgument)
			require.NotErrorIs(t, errs[0], c.not)
			require.Equal(t, reads, src.reads.Load(), "the reader read despite its bad options")
		})
	}
	var got []int64
	for e, err := range b.Entries(context.Background(), "opts", &barrier.ReadOpts{PageSize: store.MaxListLimit}) {
		require.NoError(t, err)
		got = append(got, e.Number)
	}
	require.Equal(t, []int64{1, 2}, got)
}

// TestReaderAfterAboveTheWatermark reads a stream whose 3 is still leased
// (the watermark is 2) from positions above the watermark: nothing is
// yielded past it, although 4 and 5 are committed (I5); a follower from 3
// yields 4 and 5 only once 3 resolved.
func TestReaderAfterAboveTheWatermark(t *testing.T) {
	t.Parallel()
	for name, src := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := start(t, src, nil)
			ctx := context.Background()
			es := lease(t, src, "above", 5)
			for _, i := range []int{0, 1, 3, 4} {
				commit(t, src, es[i])
			}
			for _, after := range []int64{2, 3, 4, 5, 1 << 40} {
				for e, err := range b.Entries(ctx, "above", &barrier.ReadOpts{After: after, IncludeGaps: true}) {
					require.NoError(t, err)
					t.Fatalf("after %d: yielded %d past the watermark 2", after, e.Number)
				}
			}

			var resolved atomic.Bool // set before 3 commits
			fctx, cancel := context.WithCancel(ctx)
			defer cancel()
			seen := make(chan int64)
			ended := make(chan error, 1)
			go func() {
				for e, err := range b.Entries(fctx, "above", &barrier.ReadOpts{After: 3, Follow: true}) {
					if err != nil {
						ended <- err
						return
					}
					if !resolved.Load() {
						ended <- fmt.Errorf("the follower yielded %d while 3 was leased", e.Number)
						return
					}
					seen <- e.Number
				}
				ended <- errors.New("the follower stopped without an error")
			}()
			resolved.Store(true)
			commit(t, src, es[2])
			for _, want := range []int64{4, 5} {
				select {
				case n := <-seen:
					require.Equal(t, want, n)
				case err := <-ended:
					t.Fatal(err)
				}
			}
			cancel()
			require.ErrorIs(t, <-ended, context.Canceled)
		})
	}
}
