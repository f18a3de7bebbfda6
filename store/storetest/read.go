package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testRead(t *testing.T, newStore func(t *testing.T) Store) {
	// populate leases ten entries at base and resolves some, returning what
	// Read must show:
	//
	//	1 committed, 2 released, 3 leased, 4 expired gap recovered as 9,
	//	5 committed with no payload, 6 leased and extended, 7 gap with a
	//	custom reason, 8 leased, 9 committed, 10 leased
	populate := func(b *bundle) (string, []store.Entry) {
		b.t.Helper()
		s := b.name("")
		reqs := make([]store.LeaseRequest, 10)
		for i := range reqs {
			reqs[i] = store.LeaseRequest{OperationID: string(rune('a' + i)), Kind: "k", TTL: time.Duration(i+1) * time.Second}
		}
		es := b.lease(s, 0, reqs...)
		want := normAll(es)
		at := b.time(time.Second / 2)
		want[0] = resolved(es[0], store.Committed, at, []byte("one"), "", 0)
		b.commit(es[0], time.Second/2, []byte("one"))
		want[1] = resolved(es[1], store.Gap, at, nil, store.ReasonReleased, 0)
		b.release(es[1], time.Second/2)
		want[3] = resolved(es[3], store.Gap, b.time(time.Minute), nil, store.ReasonExpired, 9)
		b.expire(es[3], time.Minute, &store.ResolveExpiredParams{RecoveredAs: 9})
		want[4] = resolved(es[4], store.Committed, at, nil, "", 0)
		b.commit(es[4], time.Second/2, nil)
		_, _, err := b.s.Extend(b.ctx, s, 6, es[5].Token, &store.ExtendParams{TTL: time.Hour, Now: b.at(time.Second / 2)})
		require.NoError(b.t, err)
		want[5].ExpiresAt = b.time(time.Hour + time.Second/2)
		want[5].Renewals = 1
		want[6] = resolved(es[6], store.Gap, b.time(time.Minute), nil, "operator", 0)
		b.expire(es[6], time.Minute, &store.ResolveExpiredParams{Reason: "operator"})
		want[8] = resolved(es[8], store.Committed, at, []byte{0, 1, 2, 0xff}, "", 0)
		b.commit(es[8], time.Second/2, []byte{0, 1, 2, 0xff})
		return s, want
	}
	read := func(b *bundle, s string, after int64, limit int) []store.Entry {
		b.t.Helper()
		es, err := b.s.Read(b.ctx, s, after, limit)
		require.NoError(b.t, err, "Read after %d limit %d", after, limit)
		return normAll(es)
	}

	t.Run("every state with every field", func(t *testing.T) {
		b := setup(t, newStore)
		s, want := populate(b)
		require.Equal(t, want, read(b, s, 0, 0))
	})

	t.Run("after and limit", func(t *testing.T) {
		b := setup(t, newStore)
		s, want := populate(b)
		for _, c := range []struct {
			after int64
			limit int
			want  []store.Entry
		}{
			{0, 0, want},
			{0, 1, want[:1]},
			{0, 10, want},
			{0, 11, want},
			{0, store.MaxListLimit, want},
			{3, 4, want[3:7]},
			{3, 0, want[3:]},
			{9, 0, want[9:]},
			{9, 5, want[9:]},
			{10, 0, nil},
			{11, 3, nil},
			{1 << 40, 0, nil},
		} {
			got := read(b, s, c.after, c.limit)
			require.Equal(t, c.want, got, "after %d limit %d", c.after, c.limit)
		}
	})

	t.Run("default limit", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		reqs := make([]store.LeaseRequest, store.DefaultListLimit+1)
		for i := range reqs {
			reqs[i] = store.LeaseRequest{TTL: time.Minute}
		}
		b.lease(s, 0, reqs...)
		require.Equal(t, span(1, store.DefaultListLimit), numbers(read(b, s, 0, 0)))
		require.Equal(t, []int64{store.DefaultListLimit + 1}, numbers(read(b, s, store.DefaultListLimit, 0)))
		require.Len(t, read(b, s, 0, store.DefaultListLimit+1), store.DefaultListLimit+1)
	})

	t.Run("unknown stream is ErrStreamNotFound", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease1(s, 0, time.Minute)
		for _, other := range []string{s + "-other", strings.ToUpper(s)} {
			_, err := b.s.Read(b.ctx, other, 0, 0)
			require.ErrorIs(t, err, store.ErrStreamNotFound, other)
		}
	})

	t.Run("returned payloads are copies", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.commit(b.lease1(s, 0, time.Minute), time.Second, []byte("stored"))
		es, err := b.s.Read(b.ctx, s, 0, 0)
		require.NoError(t, err)
		require.Len(t, es, 1)
		copy(es[0].Payload, "XXXXXX")
		require.Equal(t, []byte("stored"), b.entry(s, 1).Payload)
	})
}
