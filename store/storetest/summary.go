package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// summarize reads the summaries of streams with p, its Now pinned at
// base+at, with the times in UTC.
func (b *bundle) summarize(streams []string, at time.Duration, p store.SummaryParams) []store.StreamSummary {
	b.t.Helper()
	p.Now = b.at(at)
	out, err := b.s.(store.StreamSummarizer).SummarizeStreams(b.ctx, streams, &p)
	require.NoError(b.t, err, "SummarizeStreams %q", streams)
	for i := range out {
		out[i].OldestUnresolvedAt = normTime(out[i].OldestUnresolvedAt)
		out[i].Throughput.Since = normTime(out[i].Throughput.Since)
	}
	return out
}

// leaseHour leases n numbers of stream for an hour at base.
func (b *bundle) leaseHour(stream string, n int) []store.Entry {
	b.t.Helper()
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = req(time.Hour, "op")
	}
	return b.lease(stream, 0, reqs...)
}

// testSummarize checks store.StreamSummarizer: each summary agrees with
// Stats, CountGaps, ListExpired and ListParked, and the throughput counts
// the resolutions of its window as store.Throughput says, exactly or by
// stride.
func testSummarize(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("figures agree with the other reads, in the order asked", func(t *testing.T) {
		b := setup(t, newStore)
		s1, s2 := b.name("-a"), b.name("-b")
		es := b.lease(s1, 0, req(time.Minute, "a"), req(time.Minute, "b"), req(time.Hour, "c"),
			req(time.Minute, "d"), req(time.Minute, "e"), req(time.Minute, "f"))
		b.commit(es[0], time.Second, nil)
		b.release(es[1], time.Second)
		b.lease(s2, 0, req(time.Hour, "x"))
		parked := int64(0)
		if _, ok := b.s.(store.Parker); ok {
			b.fail(s1, 4, 2*time.Minute, "boom", 1)
			parked = 1
		}
		now := b.at(3 * time.Minute)
		for _, limit := range []int{0, 2} {
			got := b.summarize([]string{s2, s1 + "-missing", s1}, 3*time.Minute, store.SummaryParams{ExpiredLimit: limit})
			require.Len(t, got, 2, "a missing stream is left out")
			require.Equal(t, s2, got[0].Stream)
			require.Equal(t, s1, got[1].Stream)
			for _, sum := range got {
				st, err := b.s.Stats(b.ctx, sum.Stream)
				require.NoError(t, err)
				st.OldestUnresolvedAt = normTime(st.OldestUnresolvedAt)
				require.Equal(t, st, sum.StreamStats)
				require.Equal(t, b.countGaps(sum.Stream), sum.OpenGaps)
				expired, err := b.s.ListExpired(b.ctx, &store.ListExpiredParams{Stream: sum.Stream, Now: now})
				require.NoError(t, err)
				want := int64(len(expired))
				if limit > 0 {
					want = min(want, int64(limit))
				}
				require.Equal(t, want, sum.Expired, "%s with ExpiredLimit %d", sum.Stream, limit)
				require.Zero(t, sum.Throughput.Counts, "no window, no throughput")
			}
			require.Equal(t, int64(4), got[1].Unresolved)
			require.Equal(t, int64(1), got[1].OpenGaps)
			require.Equal(t, parked, got[1].Parked)
			require.Zero(t, got[0].Parked)
		}
	})

	t.Run("throughput counts the resolutions of its window", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.leaseHour(s, 12)
		// The window is (10m, 20m], ten intervals of a minute.
		at := map[int]time.Duration{
			0: 5 * time.Minute,                   // before the window
			1: 10 * time.Minute,                  // the window's start is outside it
			2: 10*time.Minute + time.Microsecond, // interval 0
			3: 11 * time.Minute,                  // interval 0: its end is inside it
			4: 11*time.Minute + time.Microsecond, // interval 1
			5: 15*time.Minute + time.Second,      // interval 5
			6: 15*time.Minute + 2*time.Second,    // interval 5
			7: 20 * time.Minute,                  // interval 9: now is inside the window
			8: 21 * time.Minute,                  // after now: not counted
			9: 19 * time.Minute,                  // interval 8
			// 10 and 11 stay leased
		}
		for i, d := range at {
			b.commit(es[i], d, nil)
		}
		got := b.summarize([]string{s}, 20*time.Minute, store.SummaryParams{Window: 10 * time.Minute, Buckets: 10})
		require.Len(t, got, 1)
		tp := got[0].Throughput
		require.Equal(t, store.Throughput{
			Since:  b.time(10 * time.Minute).UTC(),
			Step:   time.Minute,
			Counts: []int64{2, 1, 0, 0, 0, 2, 0, 0, 1, 1},
			From:   1, // the probes (12, 11, 9, 5) found none resolved by the window's start
			Stride: 1,
		}, tp)
		require.Equal(t, int64(7), tp.Total())
		require.False(t, tp.Estimated())
	})

	t.Run("throughput probes back and misses what resolved below From", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.leaseHour(s, 110)
		for _, e := range es[:100] {
			if e.Number != 50 {
				b.commit(e, time.Minute, nil) // before the window
			}
		}
		for _, e := range es[100:] {
			b.commit(e, 15*time.Minute, nil)
		}
		b.expire(es[49], 70*time.Minute, nil) // number 50, long expired, made a gap inside the window
		got := b.summarize([]string{s}, 75*time.Minute, store.SummaryParams{Window: 10 * time.Minute, Buckets: 2})
		tp := got[0].Throughput
		require.Equal(t, int64(111), tp.From, "the first probe, 110, was resolved before the window")
		require.Equal(t, []int64{0, 0}, tp.Counts, "number 50 is below From: not counted")

		got = b.summarize([]string{s}, 20*time.Minute, store.SummaryParams{Window: 10 * time.Minute, Buckets: 2})
		tp = got[0].Throughput
		require.Equal(t, int64(96), tp.From, "probes 110, 109, 107 and 103 were in the window, 95 before it")
		require.Equal(t, []int64{10, 0}, tp.Counts, "101..110, at the end of the first interval")
	})

	t.Run("throughput samples every Stride-th number past Samples", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.leaseHour(s, 200)
		for i, e := range es {
			d := 12 * time.Minute
			if i >= 100 {
				d = 17 * time.Minute
			}
			if i%10 != 9 { // numbers 10, 20, ..., 200 stay leased: only they are sampled
				b.commit(e, d, nil)
			}
		}
		got := b.summarize([]string{s}, 20*time.Minute, store.SummaryParams{Window: 10 * time.Minute, Buckets: 2, Samples: 20})
		tp := got[0].Throughput
		require.Equal(t, int64(10), tp.Stride)
		require.Equal(t, int64(1), tp.From)
		require.Equal(t, []int64{0, 0}, tp.Counts, "the sampled numbers are leased")
		require.True(t, tp.Estimated())
		for i := 9; i < 200; i += 10 {
			b.commit(es[i], 12*time.Minute, nil)
		}
		got = b.summarize([]string{s}, 20*time.Minute, store.SummaryParams{Window: 10 * time.Minute, Buckets: 2, Samples: 20})
		require.Equal(t, []int64{200, 0}, got[0].Throughput.Counts, "each sample counts for 10")
		got = b.summarize([]string{s}, 20*time.Minute, store.SummaryParams{Window: 10 * time.Minute, Buckets: 2, Samples: 100})
		require.Equal(t, int64(2), got[0].Throughput.Stride)
		require.Equal(t, []int64{120, 80}, got[0].Throughput.Counts, "the even numbers, each for 2")
		got = b.summarize([]string{s}, 20*time.Minute, store.SummaryParams{Window: 10 * time.Minute, Buckets: 2, Samples: 200})
		require.Equal(t, []int64{110, 90}, got[0].Throughput.Counts, "200 samples read every number")
		require.Equal(t, int64(1), got[0].Throughput.Stride)
	})

	t.Run("throughput starts at the low point of a trimmed stream", func(t *testing.T) {
		b := setup(t, newStore)
		s, idle := b.name(""), b.name("-idle")
		es := b.leaseHour(s, 110)
		for _, e := range es {
			b.commit(e, 15*time.Minute, nil)
		}
		b.trim(s, 41)
		b.lease(idle, 0, req(time.Hour, "a"), req(time.Hour, "b"))
		p := store.SummaryParams{Window: 10 * time.Minute, Buckets: 2, Samples: 30}
		got := b.summarize([]string{s, idle, s}, 20*time.Minute, p)
		require.Len(t, got, 3)
		require.Equal(t, got[0], got[2], "a name given twice is summarized twice")
		tp := got[0].Throughput
		require.Equal(t, int64(41), got[0].LowPoint)
		require.Equal(t, int64(41), tp.From, "no probe found a number resolved before the window: From is the low point")
		require.Equal(t, int64(3), tp.Stride, "70 numbers, 30 samples")
		require.Equal(t, []int64{72, 0}, tp.Counts, "110, 107, ..., 41: 24 samples of 3")
		require.Equal(t, store.Throughput{Since: b.time(10 * time.Minute).UTC(), Step: 5 * time.Minute,
			Counts: []int64{0, 0}, From: 1, Stride: 1}, got[1].Throughput, "all leased: nothing resolved")

		b.trim(s, 111)
		got = b.summarize([]string{s}, 20*time.Minute, p)
		require.Equal(t, int64(111), got[0].Throughput.From, "trimmed whole: nothing to read")
		require.Equal(t, []int64{0, 0}, got[0].Throughput.Counts)
	})

	t.Run("bad input is refused", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease(s, 0, req(time.Minute, "a"))
		sum := b.s.(store.StreamSummarizer)
		for _, c := range []struct {
			streams []string
			p       store.SummaryParams
		}{
			{[]string{""}, store.SummaryParams{}},
			{[]string{s, "bad\x00name"}, store.SummaryParams{}},
			{make([]string, store.MaxListLimit+1), store.SummaryParams{}},
			{[]string{s}, store.SummaryParams{ExpiredLimit: -1}},
			{[]string{s}, store.SummaryParams{Buckets: store.MaxSummaryBuckets + 1}},
			{[]string{s}, store.SummaryParams{Samples: store.MaxListLimit + 1}},
			{[]string{s}, store.SummaryParams{Window: -time.Second}},
			{[]string{s}, store.SummaryParams{Window: 10 * time.Microsecond, Buckets: 20}},
		} {
			_, err := sum.SummarizeStreams(b.ctx, c.streams, &c.p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%q %+v", c.streams, c.p)
		}
		got, err := sum.SummarizeStreams(b.ctx, nil, nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})
}
