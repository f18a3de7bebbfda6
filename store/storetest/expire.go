package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testResolveExpired(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("refused while live, accepted at exactly ExpiresAt", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(10*time.Second, "a"), req(10*time.Second, "b"))
		before := b.stats(s)
		for _, at := range []time.Duration{0, 10*time.Second - time.Microsecond} {
			err := b.s.ResolveExpired(b.ctx, s, 1, &store.ResolveExpiredParams{Now: b.at(at)})
			require.ErrorIs(t, err, store.ErrNotExpired, "at +%v", at)
			b.requireUnchanged(es[0])
		}
		require.Equal(t, before, b.stats(s))

		b.expire(es[0], 10*time.Second, nil)
		require.Equal(t, resolved(es[0], store.Gap, b.time(10*time.Second), nil, store.ReasonExpired, 0), b.entry(s, 1),
			"default reason, no recovery, original expiry kept")
		b.requireUnchanged(es[1])
		require.Equal(t, store.StreamStats{
			Stream: s, NextNumber: 3, Watermark: 1, Unresolved: 1,
			OldestUnresolved: 2, OldestUnresolvedAt: normTime(b.base), LowPoint: 1,
		}, b.stats(s))
	})

	t.Run("records reason and RecoveredAs", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "a"), req(time.Second, "b"))
		b.expire(es[0], time.Hour, &store.ResolveExpiredParams{Reason: "recovered: partial work", RecoveredAs: 3})
		b.expire(es[1], time.Hour+time.Microsecond, &store.ResolveExpiredParams{RecoveredAs: 4})
		require.Equal(t, resolved(es[0], store.Gap, b.time(time.Hour), nil, "recovered: partial work", 3), b.entry(s, 1))
		require.Equal(t, resolved(es[1], store.Gap, b.time(time.Hour+time.Microsecond), nil, store.ReasonExpired, 4), b.entry(s, 2))
	})

	t.Run("nil params use the backend clock", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		// Leased in the past by the backend's clock, so expired now.
		b.lease1(s, -time.Minute, time.Second)
		require.NoError(t, b.s.ResolveExpired(b.ctx, s, 1, nil))
		got := b.entry(s, 1)
		require.Equal(t, store.Gap, got.State)
		require.Equal(t, store.ReasonExpired, got.GapReason)
		require.False(t, got.ResolvedAt.Before(b.base), "ResolvedAt %v before the base %v", got.ResolvedAt, b.base)

		e2 := b.lease1(s, 0, time.Hour)
		require.ErrorIs(t, b.s.ResolveExpired(b.ctx, s, 2, nil), store.ErrNotExpired)
		b.requireUnchanged(e2)
	})

	t.Run("on a resolved entry", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "c"), req(time.Second, "r"), req(time.Second, "e"), req(time.Second, "g"))
		b.commit(es[0], 0, []byte("c"))
		b.release(es[1], 0)
		b.expire(es[2], time.Second, nil)
		b.expire(es[3], time.Second, &store.ResolveExpiredParams{Reason: "recovered", RecoveredAs: 7})
		before := b.readAll(s)
		for i, want := range []error{store.ErrCommitted, store.ErrReleased, store.ErrExpired, store.ErrGap} {
			err := b.s.ResolveExpired(b.ctx, s, es[i].Number, &store.ResolveExpiredParams{Reason: "again", RecoveredAs: 99, Now: b.at(time.Minute)})
			require.ErrorIs(t, err, want, "entry %d", es[i].Number)
		}
		require.Equal(t, before, b.readAll(s), "nothing changed")
	})

	t.Run("unknown number or stream is ErrNotFound", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, time.Second)
		err := b.s.ResolveExpired(b.ctx, s, 2, &store.ResolveExpiredParams{Now: b.at(time.Minute)})
		require.ErrorIs(t, err, store.ErrNotFound)
		b.requireUnchanged(e)
		require.Equal(t, int64(2), b.stats(s).NextNumber)
		other := b.name("-other")
		err = b.s.ResolveExpired(b.ctx, other, 1, &store.ResolveExpiredParams{Now: b.at(time.Minute)})
		require.ErrorIs(t, err, store.ErrNotFound, "unknown stream")
		b.requireNoStream(other)
	})
}

func testListExpired(t *testing.T, newStore func(t *testing.T) Store) {
	// populate builds two streams, sa < sb, in a fresh store and returns
	// them with the entries ListExpired must return at base+1m, in order.
	//
	//	sa: 1 expired, 2 live, 3 expired, 4 committed, 5 resolved expired,
	//	    6 released after its expiry, 7 expired, 8 extended past +1m,
	//	    9 expires at exactly +1m
	//	sb: 1 expired, 2 expired, 3 live
	populate := func(b *bundle) (sa, sb string, want []store.Entry) {
		b.t.Helper()
		prefix := b.name("")
		sa, sb = prefix+"/a", prefix+"/b"
		ea := b.lease(sa, 0,
			req(time.Second, "1"), req(time.Hour, "2"), req(2*time.Second, "3"),
			req(time.Second, "4"), req(time.Second, "5"), req(time.Second, "6"),
			req(3*time.Second, "7"), req(time.Second, "8"), req(time.Minute, "9"))
		b.commit(ea[3], 0, []byte("4"))
		b.expire(ea[4], 30*time.Second, nil)
		b.release(ea[5], 30*time.Second)
		_, _, err := b.s.Extend(b.ctx, sa, 8, ea[7].Token, &store.ExtendParams{TTL: time.Hour, Now: b.at(0)})
		require.NoError(b.t, err)
		eb := b.lease(sb, 0, req(time.Second, "1"), req(time.Second, "2"), req(time.Hour, "3"))
		return sa, sb, normAll([]store.Entry{ea[0], ea[2], ea[6], ea[8], eb[0], eb[1]})
	}
	list := func(b *bundle, p store.ListExpiredParams) []store.Entry {
		b.t.Helper()
		if p.Now == nil {
			p.Now = b.at(time.Minute)
		}
		es, err := b.s.ListExpired(b.ctx, &p)
		require.NoError(b.t, err, "ListExpired %+v", p)
		return normAll(es)
	}

	t.Run("returns exactly the expired leased entries in order", func(t *testing.T) {
		b := setup(t, newStore)
		_, _, want := populate(b)
		require.Equal(t, want, list(b, store.ListExpiredParams{}))
	})

	t.Run("follows the clock", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb, want := populate(b)
		type at = struct {
			streams []string
			numbers []int64
		}
		for _, c := range []struct {
			at   time.Duration
			want at
		}{
			{time.Second - time.Microsecond, at{}},
			// Resolutions are not undone by an earlier pinned clock: sa/5
			// and sa/6 stay out.
			{time.Second, at{[]string{sa, sb, sb}, []int64{1, 1, 2}}},
			{2 * time.Second, at{[]string{sa, sa, sb, sb}, []int64{1, 3, 1, 2}}},
			{3 * time.Second, at{[]string{sa, sa, sa, sb, sb}, []int64{1, 3, 7, 1, 2}}},
			{time.Minute - time.Microsecond, at{[]string{sa, sa, sa, sb, sb}, []int64{1, 3, 7, 1, 2}}},
			{time.Minute, at{streamsOf(want), numbers(want)}},
			{2 * time.Hour, at{[]string{sa, sa, sa, sa, sa, sa, sb, sb, sb}, []int64{1, 2, 3, 7, 8, 9, 1, 2, 3}}},
		} {
			got := list(b, store.ListExpiredParams{Now: b.at(c.at)})
			require.Equal(t, len(c.want.numbers), len(got), "at +%v: %v", c.at, numbers(got))
			if len(got) > 0 {
				require.Equal(t, c.want, at{streamsOf(got), numbers(got)}, "at +%v", c.at)
			}
		}
	})

	t.Run("excludes resolved entries", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb, want := populate(b)
		b.expire(want[0], time.Minute, nil)
		b.commit(want[3], time.Minute-time.Microsecond, nil)
		b.release(want[4], time.Minute)
		got := list(b, store.ListExpiredParams{})
		require.Equal(t, []string{sa, sa, sb}, streamsOf(got))
		require.Equal(t, []store.Entry{want[1], want[2], want[5]}, got)
	})

	t.Run("stream filter", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb, want := populate(b)
		require.Equal(t, want[:4], list(b, store.ListExpiredParams{Stream: sa}))
		require.Equal(t, want[4:], list(b, store.ListExpiredParams{Stream: sb}))
		require.Empty(t, list(b, store.ListExpiredParams{Stream: sb + "-none"}), "an unknown stream has nothing expired")
		require.Equal(t, want[5:], list(b, store.ListExpiredParams{Stream: sb, AfterStream: sb, AfterNumber: 1}))
		require.Equal(t, want[4:], list(b, store.ListExpiredParams{Stream: sb, AfterStream: sa, AfterNumber: 5}),
			"a cursor in an earlier stream starts the filtered stream from its beginning")
		require.Empty(t, list(b, store.ListExpiredParams{Stream: sa, AfterStream: sb, AfterNumber: 0}),
			"a cursor in a later stream leaves nothing of the filtered stream")
	})

	t.Run("cursor", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb, want := populate(b)
		for _, c := range []struct {
			name   string
			stream string
			number int64
			want   []store.Entry
		}{
			{"before every stream", "", 0, want},
			{"start of the first stream", sa, 0, want},
			{"inside the first stream", sa, 1, want[1:]},
			{"between numbers of the first stream", sa, 4, want[2:]},
			{"on the last expired of the first stream", sa, 9, want[4:]},
			{"past every number of the first stream", sa, 1 << 40, want[4:]},
			{"between the streams", sa + "z", 0, want[4:]},
			{"inside the second stream", sb, 1, want[5:]},
			{"at the end", sb, 2, nil},
			{"after every stream", sb + "z", 0, nil},
		} {
			got := list(b, store.ListExpiredParams{AfterStream: c.stream, AfterNumber: c.number})
			require.Equal(t, c.want, got, c.name)
		}
	})

	t.Run("limit and paging", func(t *testing.T) {
		b := setup(t, newStore)
		_, _, want := populate(b)
		require.Equal(t, want[:1], list(b, store.ListExpiredParams{Limit: 1}))
		require.Equal(t, want[:4], list(b, store.ListExpiredParams{Limit: 4}))
		require.Equal(t, want, list(b, store.ListExpiredParams{Limit: store.MaxListLimit}))
		for _, limit := range []int{1, 2, 3, 4, 5} {
			var got []store.Entry
			p := store.ListExpiredParams{Limit: limit}
			for range 10 {
				page := list(b, p)
				require.LessOrEqual(t, len(page), limit)
				got = append(got, page...)
				if len(page) < limit {
					break
				}
				last := page[len(page)-1]
				p.AfterStream, p.AfterNumber = last.Stream, last.Number
			}
			require.Equal(t, want, got, "pages of %d", limit)
		}
	})

	t.Run("default limit", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		reqs := make([]store.LeaseRequest, store.DefaultListLimit+5)
		for i := range reqs {
			reqs[i] = store.LeaseRequest{TTL: time.Second}
		}
		b.lease(s, 0, reqs...)
		got := list(b, store.ListExpiredParams{})
		require.Equal(t, span(1, store.DefaultListLimit), numbers(got))
		got = list(b, store.ListExpiredParams{AfterStream: s, AfterNumber: store.DefaultListLimit})
		require.Equal(t, span(store.DefaultListLimit+1, store.DefaultListLimit+5), numbers(got))
	})

	t.Run("stream names in byte order", func(t *testing.T) {
		// The cursor compares names by their bytes, so the order must too:
		// "B" (0x42) < "a" (0x61) < "é" (0xc3 0xa9), whatever a database
		// collation would say.
		b := setup(t, newStore)
		prefix := b.name("")
		names := []string{prefix + "-B", prefix + "-a", prefix + "-b", prefix + "-é"}
		for _, i := range []int{3, 1, 0, 2} {
			b.lease1(names[i], 0, time.Second)
		}
		got := list(b, store.ListExpiredParams{})
		require.Equal(t, names, streamsOf(got))
		got = list(b, store.ListExpiredParams{AfterStream: names[0], AfterNumber: 1})
		require.Equal(t, names[1:], streamsOf(got))
		got = list(b, store.ListExpiredParams{AfterStream: names[2], AfterNumber: 1})
		require.Equal(t, names[3:], streamsOf(got))
	})
}

func streamsOf(es []store.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Stream
	}
	return out
}
