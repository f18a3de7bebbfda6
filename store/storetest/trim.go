package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// trim trims stream below below and checks that it succeeded.
func (b *bundle) trim(stream string, below int64) int64 {
	b.t.Helper()
	low, err := b.s.Trim(b.ctx, stream, below)
	require.NoError(b.t, err, "Trim %s below %d", stream, below)
	return low
}

// requireTrimmed checks that reading stream after after fails because the
// entries below low were trimmed.
func (b *bundle) requireTrimmed(stream string, after, low int64) {
	b.t.Helper()
	es, err := b.s.Read(b.ctx, stream, after, 0)
	require.Error(b.t, err, "Read after %d returned %v", after, numbers(es))
	require.ErrorIs(b.t, err, store.ErrTrimmed, "Read after %d", after)
	require.False(b.t, store.IsInvalid(err), "a trimmed read is not bad input")
	require.NotErrorIs(b.t, err, store.ErrStreamNotFound)
	var te *store.TrimmedError
	require.True(b.t, errors.As(err, &te), "Read after %d: %v is not a *store.TrimmedError", after, err)
	require.Equal(b.t, store.TrimmedError{Stream: stream, LowPoint: low}, *te)
}

// read reads stream after after and checks that it succeeded.
func (b *bundle) read(stream string, after int64, limit int) []store.Entry {
	b.t.Helper()
	es, err := b.s.Read(b.ctx, stream, after, limit)
	require.NoError(b.t, err, "Read %s after %d", stream, after)
	out := make([]store.Entry, len(es))
	for i, e := range es {
		out[i] = normGap(e)
	}
	return out
}

func testTrim(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("a fresh stream's low point is 1", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease(s, 0, req(time.Minute, "a"), req(time.Minute, "b"))
		require.Equal(t, int64(1), b.stats(s).LowPoint)
		require.Equal(t, int64(1), b.trim(s, 1), "below 1 trims nothing")
		require.Equal(t, int64(1), b.trim(s, 100), "1 is leased: nothing is resolved to trim")
		require.Len(t, b.read(s, 0, 0), 2)
	})

	t.Run("never removes an unresolved entry nor passes the watermark", func(t *testing.T) {
		// Lease 1..10; resolve 1-4, 6 and 8; 5, 7, 9 and 10 stay leased.
		b := setup(t, newStore)
		s := b.name("")
		reqs := make([]store.LeaseRequest, 10)
		for i := range reqs {
			reqs[i] = req(time.Hour, fmt.Sprint(i+1))
		}
		es := b.lease(s, 0, reqs...)
		b.commit(es[0], time.Second, []byte("1"))
		b.release(es[1], time.Second)
		b.commit(es[2], time.Second, nil)
		b.expire(es[3], time.Hour, &store.ResolveExpiredParams{Reason: "r"})
		b.release(es[5], time.Second)
		b.commit(es[7], time.Second, []byte("8"))
		kept := b.read(s, 4, 0)
		stats := b.stats(s)
		require.Equal(t, int64(4), stats.Watermark)

		require.Equal(t, int64(5), b.trim(s, 100), "the low point stops at watermark+1")
		require.Equal(t, kept, b.read(s, 4, 0), "5..10 are all still there")
		stats.LowPoint = 5
		require.Equal(t, stats, b.stats(s))
		b.requireTrimmed(s, 0, 5)
		b.requireTrimmed(s, 3, 5)

		// The unresolved entries still work.
		b.commit(es[4], 2*time.Second, []byte("5"))
		require.Equal(t, int64(6), b.stats(s).Watermark)
		require.Equal(t, int64(7), b.trim(s, 100))
		require.Equal(t, kept[2:], b.read(s, 6, 0))
		b.release(es[6], 2*time.Second)
		b.commit(es[8], 2*time.Second, nil)
		b.commit(es[9], 2*time.Second, nil)
		require.Equal(t, int64(11), b.trim(s, 100))
		require.Empty(t, b.read(s, 10, 0))
		b.requireTrimmed(s, 9, 11)
		require.Equal(t, store.StreamStats{Stream: s, NextNumber: 11, Watermark: 10, LowPoint: 11}, b.stats(s))
	})

	t.Run("below bounds the trim", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		reqs := make([]store.LeaseRequest, 10)
		for i := range reqs {
			reqs[i] = req(time.Hour, fmt.Sprint(i+1))
		}
		for _, e := range b.lease(s, 0, reqs...) {
			b.commit(e, time.Second, fmt.Append(nil, e.Number))
		}
		kept := b.read(s, 3, 0)
		require.Equal(t, int64(4), b.trim(s, 4))
		require.Equal(t, kept, b.read(s, 3, 0))
		require.Equal(t, kept[:2], b.read(s, 3, 2))
		b.requireTrimmed(s, 2, 4)
		require.Equal(t, store.StreamStats{Stream: s, NextNumber: 11, Watermark: 10, LowPoint: 4}, b.stats(s))
	})

	t.Run("the low point never goes back", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		reqs := make([]store.LeaseRequest, 10)
		for i := range reqs {
			reqs[i] = req(time.Hour, fmt.Sprint(i+1))
		}
		for _, e := range b.lease(s, 0, reqs...) {
			b.release(e, time.Second)
		}
		for _, c := range []struct{ below, want int64 }{
			{6, 6}, {3, 6}, {1, 6}, {6, 6}, {7, 7}, {1 << 40, 11}, {5, 11}, {1 << 62, 11},
		} {
			require.Equal(t, c.want, b.trim(s, c.below), "Trim below %d", c.below)
			require.Equal(t, c.want, b.stats(s).LowPoint, "after Trim below %d", c.below)
		}
	})

	t.Run("trimming everything, then leasing on", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Hour, "1"), req(time.Hour, "2"), req(time.Hour, "3"))
		for _, e := range es {
			b.commit(e, time.Second, nil)
		}
		require.Equal(t, int64(4), b.trim(s, 1<<40))
		require.Empty(t, b.read(s, 3, 0))
		b.requireTrimmed(s, 2, 4)
		next := b.lease1(s, time.Minute, time.Hour)
		require.Equal(t, int64(4), next.Number, "numbering goes on densely")
		require.Equal(t, []store.Entry{normGap(next)}, b.read(s, 3, 0))
		require.Equal(t, int64(4), b.trim(s, 1<<40), "4 is leased")
		b.commit(next, 2*time.Minute, []byte("4"))
		require.Equal(t, int64(5), b.trim(s, 1<<40))
		require.Equal(t, store.StreamStats{Stream: s, NextNumber: 5, Watermark: 4, LowPoint: 5}, b.stats(s))
		again := b.lease(s, 3*time.Minute, req(time.Hour, "5"), req(time.Hour, "6"))
		require.Equal(t, []int64{5, 6}, numbers(again))
		require.Equal(t, []int64{5, 6}, numbers(b.read(s, 4, 0)))
	})

	t.Run("a holder's retry on a trimmed number says trimmed", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"))
		b.commit(es[0], 0, []byte("one"))
		b.commit(es[1], 0, []byte("two"))
		require.Equal(t, int64(3), b.trim(s, 3))
		// The entry is gone: nothing says whether the retried commit took
		// effect, so the store says why it cannot tell.
		_, err := b.s.Commit(b.ctx, s, 1, es[0].Token, &store.CommitParams{Payload: []byte("one"), Now: b.at(0)})
		var te *store.TrimmedError
		require.ErrorAs(t, err, &te)
		require.ErrorIs(t, err, store.ErrTrimmed)
		require.Equal(t, int64(3), te.LowPoint)
		require.ErrorIs(t, b.s.Release(b.ctx, s, 2, es[1].Token, &store.ReleaseParams{Now: b.at(0)}), store.ErrTrimmed)
		_, _, err = b.s.Extend(b.ctx, s, 2, es[1].Token, &store.ExtendParams{TTL: time.Minute, Now: b.at(0)})
		require.ErrorIs(t, err, store.ErrTrimmed)
	})

	t.Run("unknown stream is ErrStreamNotFound", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease1(s, 0, time.Minute)
		_, err := b.s.Trim(b.ctx, s+"-other", 5)
		require.ErrorIs(t, err, store.ErrStreamNotFound)
		b.requireNoStream(s + "-other")
	})

	t.Run("trimmed gaps are neither listed, counted nor fillable", func(t *testing.T) {
		// 1, 2 and 5 released, 3 and 4 committed, 6 leased.
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Hour, "1"), req(time.Hour, "2"), req(time.Hour, "3"),
			req(time.Hour, "4"), req(time.Hour, "5"), req(time.Hour, "6"))
		for _, i := range []int{0, 1, 4} {
			b.release(es[i], time.Second)
		}
		b.commit(es[2], time.Second, nil)
		b.commit(es[3], time.Second, nil)
		b.fill(s, 1, []byte("filled"), "op", time.Minute)
		require.Equal(t, []int64{1, 2, 5}, numbers(b.listGaps(s, &store.ListGapsParams{IncludeFilled: true})))
		require.Equal(t, int64(3), b.trim(s, 3))
		require.Equal(t, []int64{5}, numbers(b.listGaps(s, nil)))
		require.Equal(t, []int64{5}, numbers(b.listGaps(s, &store.ListGapsParams{IncludeFilled: true})))
		require.Equal(t, int64(1), b.countGaps(s))
		err := b.s.FillGap(b.ctx, s, 2, &store.FillParams{FilledBy: "op", Now: b.at(time.Minute)})
		require.ErrorIs(t, err, store.ErrTrimmed)
		var te *store.TrimmedError
		require.True(t, errors.As(err, &te), "%v", err)
		require.Equal(t, int64(3), te.LowPoint)
		b.fill(s, 5, nil, "op", time.Minute)
		require.Zero(t, b.countGaps(s))
	})

	t.Run("concurrent leases, resolutions and trims", func(t *testing.T) {
		// Workers lease and resolve numbers, holding some unresolved to the
		// end, while trimmers trim as far as they may. No trim may remove an
		// unresolved entry (I6) or pass the watermark, and each trimmer sees
		// its low point only rise.
		b := setup(t, newStore)
		s := b.name("")
		const workers, rounds, trimmers = 6, 15, 2
		held := make([][]store.Entry, workers)
		errs := make([]error, workers+trimmers)
		start, done := make(chan struct{}), make(chan struct{})
		var wg, wwg sync.WaitGroup
		for w := range workers {
			wwg.Add(1)
			wg.Go(func() {
				defer wwg.Done()
				<-start
				errs[w] = func() error {
					for r := range rounds {
						es, err := b.s.Lease(b.ctx, s, []store.LeaseRequest{req(time.Hour, "a"), req(time.Hour, "b")},
							&store.LeaseParams{Now: b.at(0)})
						if err != nil {
							return fmt.Errorf("worker %d: lease: %w", w, err)
						}
						for i, e := range es {
							switch {
							case i == 1 && r%5 == w%5:
								held[w] = append(held[w], e)
							case (e.Number+int64(r))%3 == 0:
								err = b.s.Release(b.ctx, s, e.Number, e.Token, &store.ReleaseParams{Now: b.at(time.Second)})
							default:
								_, err = b.s.Commit(b.ctx, s, e.Number, e.Token, &store.CommitParams{Now: b.at(time.Second)})
							}
							if err != nil {
								return fmt.Errorf("worker %d: resolve %d: %w", w, e.Number, err)
							}
						}
					}
					return nil
				}()
			})
		}
		for tr := range trimmers {
			wg.Go(func() {
				<-start
				errs[workers+tr] = func() error {
					var last int64
					for {
						low, err := b.s.Trim(b.ctx, s, 1<<62)
						switch {
						case errors.Is(err, store.ErrStreamNotFound):
							continue // no worker has leased yet
						case err != nil:
							return fmt.Errorf("trimmer %d: %w", tr, err)
						case low < last:
							return fmt.Errorf("trimmer %d: low point went back from %d to %d", tr, last, low)
						}
						last = low
						select {
						case <-done:
							return nil
						default:
						}
					}
				}()
			})
		}
		close(start)
		wwg.Wait()
		close(done)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}

		stats := b.stats(s)
		require.LessOrEqual(t, stats.LowPoint, stats.Watermark+1)
		got := b.read(s, stats.LowPoint-1, store.MaxListLimit)
		require.Equal(t, span(stats.LowPoint, stats.NextNumber-1), numbers(got), "dense from the low point")
		var count int
		for w := range workers {
			for _, e := range held[w] {
				require.GreaterOrEqual(t, e.Number, stats.LowPoint, "held entry %d", e.Number)
				require.Equal(t, normGap(e), got[e.Number-stats.LowPoint], "held entry %d", e.Number)
				b.commit(e, 2*time.Second, nil)
				count++
			}
		}
		require.Positive(t, count)
		require.Equal(t, stats.NextNumber, b.trim(s, 1<<62), "everything resolved: trimmed up to the end")
		require.Empty(t, b.read(s, stats.NextNumber-1, 0))
	})
}
