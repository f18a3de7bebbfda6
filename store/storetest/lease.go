package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testLease(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("numbers start at 1 and are consecutive across calls and within a batch", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		var got []int64
		got = append(got, numbers(b.lease(s, 0, req(time.Second, "a")))...)
		got = append(got, numbers(b.lease(s, 0, req(time.Second, "b"), req(time.Second, "c"), req(time.Second, "d")))...)
		got = append(got, numbers(b.lease(s, 0, req(time.Second, "e")))...)
		got = append(got, numbers(b.lease(s, 0, req(time.Second, "f"), req(time.Second, "g")))...)
		require.Equal(t, span(1, 7), got)
		require.Equal(t, span(1, 7), numbers(b.readAll(s)))
		require.Equal(t, int64(8), b.stats(s).NextNumber)
	})

	t.Run("entry fields", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		reqs := []store.LeaseRequest{
			{OperationID: "op-1", Kind: "projection.orders", TTL: 10 * time.Second},
			{OperationID: "op-2", Kind: "projection.users", TTL: time.Microsecond},
			{OperationID: "", Kind: "", TTL: 3*time.Hour + 7*time.Microsecond},
		}
		es, err := b.s.Lease(b.ctx, s, reqs, &store.LeaseParams{Owner: "worker-7", Now: b.at(time.Minute)})
		require.NoError(t, err)
		require.Len(t, es, len(reqs))
		leasedAt := b.time(time.Minute)
		seen := map[store.Token]bool{}
		for i, e := range es {
			require.Equal(t, s, e.Stream, "entry %d", i)
			require.Equal(t, int64(i+1), e.Number, "entry %d", i)
			require.Equal(t, store.Leased, e.State, "entry %d", i)
			require.False(t, e.Token.IsZero(), "entry %d has the zero token", i)
			require.False(t, seen[e.Token], "entry %d reuses a token", i)
			seen[e.Token] = true
			require.Equal(t, "worker-7", e.Owner, "entry %d", i)
			require.Equal(t, reqs[i].OperationID, e.OperationID, "entry %d", i)
			require.Equal(t, reqs[i].Kind, e.Kind, "entry %d", i)
			requireTime(t, leasedAt, e.LeasedAt, "entry %d LeasedAt", i)
			requireTime(t, leasedAt.Add(reqs[i].TTL), e.ExpiresAt, "entry %d ExpiresAt", i)
			require.Zero(t, e.Renewals, "entry %d", i)
			require.True(t, e.ResolvedAt.IsZero(), "entry %d ResolvedAt", i)
			require.Empty(t, e.Payload, "entry %d", i)
			require.Empty(t, e.GapReason, "entry %d", i)
			require.Zero(t, e.RecoveredAs, "entry %d", i)
		}
		// Read shows what Lease returned.
		require.Equal(t, normAll(es), b.readAll(s))
	})

	t.Run("tokens are distinct across calls and streams", func(t *testing.T) {
		b := setup(t, newStore)
		s1, s2 := b.name("-1"), b.name("-2")
		seen := map[store.Token]string{}
		for _, s := range []string{s1, s2, s1, s2} {
			for _, e := range b.lease(s, 0, req(time.Second, "a"), req(time.Second, "b")) {
				require.False(t, e.Token.IsZero())
				prev, dup := seen[e.Token]
				require.False(t, dup, "token of %s/%d already given to %s", s, e.Number, prev)
				seen[e.Token] = s
			}
		}
	})

	t.Run("nil params record no owner", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es, err := b.s.Lease(b.ctx, s, []store.LeaseRequest{req(time.Minute, "a")}, nil)
		require.NoError(t, err)
		require.Len(t, es, 1)
		require.Equal(t, int64(1), es[0].Number)
		require.Empty(t, es[0].Owner)
		require.Empty(t, b.entry(s, 1).Owner)
	})

	t.Run("unpinned lease uses the backend clock", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		before, err := b.s.Now(b.ctx)
		require.NoError(t, err)
		es, err := b.s.Lease(b.ctx, s, []store.LeaseRequest{req(time.Minute, "a")}, &store.LeaseParams{Owner: "o"})
		require.NoError(t, err)
		after, err := b.s.Now(b.ctx)
		require.NoError(t, err)
		e := es[0]
		require.False(t, e.LeasedAt.Before(store.Micro(before)), "LeasedAt %v before Now %v", e.LeasedAt, before)
		require.False(t, e.LeasedAt.After(after), "LeasedAt %v after Now %v", e.LeasedAt, after)
		requireTime(t, e.LeasedAt.Add(time.Minute), e.ExpiresAt)
		requireTime(t, store.Micro(e.LeasedAt), e.LeasedAt, "LeasedAt keeps microseconds only")
	})

	t.Run("streams are independent", func(t *testing.T) {
		b := setup(t, newStore)
		s1, s2 := b.name("-1"), b.name("-2")
		a := b.lease(s1, 0, req(time.Second, "a"), req(time.Second, "b"), req(time.Second, "c"))
		require.Equal(t, span(1, 3), numbers(a))
		b.requireNoStream(s2)

		c := b.lease(s2, 0, req(time.Second, "x"))
		require.Equal(t, []int64{1}, numbers(c), "a new stream starts at 1 whatever other streams hold")
		b.commit(a[0], 0, []byte("a1"))
		b.release(a[1], 0)

		require.Equal(t, store.StreamStats{
			Stream: s2, NextNumber: 2, Watermark: 0, Unresolved: 1,
			OldestUnresolved: 1, OldestUnresolvedAt: normTime(b.base), LowPoint: 1,
		}, b.stats(s2), "resolving in one stream does not move another")
		require.Equal(t, []int64{1}, numbers(b.readAll(s2)))

		require.Equal(t, []int64{4}, numbers(b.lease(s1, 0, req(time.Second, "d"))))
		require.Equal(t, []int64{2}, numbers(b.lease(s2, 0, req(time.Second, "y"))))
		require.Equal(t, int64(2), b.stats(s1).Watermark)
		require.Equal(t, int64(0), b.stats(s2).Watermark)
	})

	t.Run("accepts the limits", func(t *testing.T) {
		b := setup(t, newStore)
		// The longest valid name, in multi-byte runes, and text fields at
		// their limit.
		s := b.name("")
		s += strings.Repeat("é", (store.MaxNameLen-len(s))/2)
		s += strings.Repeat("x", store.MaxNameLen-len(s))
		require.Len(t, s, store.MaxNameLen)
		long := strings.Repeat("ü", store.MaxTextLen/2)
		es, err := b.s.Lease(b.ctx, s, []store.LeaseRequest{
			{OperationID: long, Kind: long, TTL: store.MaxTTL},
			{OperationID: "min", Kind: "min", TTL: time.Microsecond},
		}, &store.LeaseParams{Owner: long, Now: b.at(0)})
		require.NoError(t, err)
		require.Equal(t, []int64{1, 2}, numbers(es))
		got := b.readAll(s)
		require.Equal(t, normAll(es), got)
		require.Equal(t, s, got[0].Stream)
		require.Equal(t, long, got[0].Owner)
		require.Equal(t, long, got[0].OperationID)
		require.Equal(t, long, got[0].Kind)
		requireTime(t, b.time(store.MaxTTL), got[0].ExpiresAt)
		requireTime(t, b.time(time.Microsecond), got[1].ExpiresAt)
	})

	t.Run("sub-microsecond parts of a TTL are dropped", func(t *testing.T) {
		// Backends keep microseconds: ExpiresAt is LeasedAt + TTL truncated
		// to the microsecond, and the deadline is that stored instant.
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second+999*time.Nanosecond)
		requireTime(t, b.time(10*time.Second), e.ExpiresAt, "Lease's ExpiresAt")
		requireTime(t, b.time(10*time.Second), b.entry(s, 1).ExpiresAt, "stored ExpiresAt")
		_, err := b.s.Commit(b.ctx, s, 1, e.Token, &store.CommitParams{Now: b.at(10 * time.Second)})
		require.ErrorIs(t, err, store.ErrExpired)
	})

	t.Run("accepts a batch of MaxBatch", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease1(s, 0, time.Minute)
		reqs := make([]store.LeaseRequest, store.MaxBatch)
		for i := range reqs {
			reqs[i] = store.LeaseRequest{TTL: time.Duration(i+1) * time.Millisecond}
		}
		es := b.lease(s, 0, reqs...)
		require.Equal(t, span(2, store.MaxBatch+1), numbers(es))
		require.Equal(t, int64(store.MaxBatch+2), b.stats(s).NextNumber)
		last := es[len(es)-1]
		requireTime(t, b.time(store.MaxBatch*time.Millisecond), last.ExpiresAt)
		require.Equal(t, norm(last), b.entry(s, store.MaxBatch+1))
	})
}
