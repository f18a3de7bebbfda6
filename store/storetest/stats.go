package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testStats(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("scripted sequence", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		stats := func(next, watermark, unresolved, oldest int64, oldestAt time.Duration) store.StreamStats {
			st := store.StreamStats{Stream: s, NextNumber: next, Watermark: watermark, Unresolved: unresolved, OldestUnresolved: oldest, LowPoint: 1}
			if oldest != 0 {
				st.OldestUnresolvedAt = normTime(b.time(oldestAt))
			}
			return st
		}

		es := b.lease(s, 0, req(10*time.Second, "1"), req(10*time.Second, "2"), req(10*time.Second, "3"))
		require.Equal(t, stats(4, 0, 3, 1, 0), b.stats(s), "three leased")

		b.commit(es[1], time.Second, nil)
		require.Equal(t, stats(4, 0, 2, 1, 0), b.stats(s), "2 committed behind a leased 1")

		b.release(es[0], time.Second)
		require.Equal(t, stats(4, 2, 1, 3, 0), b.stats(s), "1 released: the watermark jumps over 2")

		more := b.lease(s, 5*time.Second, req(10*time.Second, "4"), req(10*time.Second, "5"), req(10*time.Second, "6"))
		require.Equal(t, stats(7, 2, 4, 3, 0), b.stats(s), "three more leased")

		b.expire(es[2], 10*time.Second, nil)
		require.Equal(t, stats(7, 3, 3, 4, 5*time.Second), b.stats(s), "3 expired")

		b.commit(more[1], 11*time.Second, []byte("5"))
		b.release(more[2], 11*time.Second)
		require.Equal(t, stats(7, 3, 1, 4, 5*time.Second), b.stats(s), "5 and 6 resolved behind a leased 4")

		last := b.lease1(s, 12*time.Second, time.Minute)
		require.Equal(t, stats(8, 3, 2, 4, 5*time.Second), b.stats(s), "7 leased")

		b.commit(more[0], 12*time.Second, nil)
		require.Equal(t, stats(8, 6, 1, 7, 12*time.Second), b.stats(s), "4 committed: the watermark reaches 6")

		b.expire(last, time.Hour, &store.ResolveExpiredParams{Reason: "recovered", RecoveredAs: 8})
		require.Equal(t, stats(8, 7, 0, 0, 0), b.stats(s), "everything resolved")
		require.True(t, b.stats(s).OldestUnresolvedAt.IsZero())

		b.lease1(s, time.Hour, time.Minute)
		require.Equal(t, stats(9, 7, 1, 8, time.Hour), b.stats(s), "8 leased")
	})

	t.Run("unknown stream is ErrStreamNotFound", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.requireNoStream(s)
		b.lease1(s, 0, time.Minute)
		_, err := b.s.Stats(b.ctx, s+"-other")
		require.ErrorIs(t, err, store.ErrStreamNotFound)
		require.Equal(t, int64(2), b.stats(s).NextNumber)
	})
}

func testStreams(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("lists stream names in byte order", func(t *testing.T) {
		b := setup(t, newStore)
		names, err := b.s.Streams(b.ctx, "", 0)
		require.NoError(t, err)
		require.Empty(t, names)
		for _, s := range []string{"b", "a", "B", "é", "a-1"} {
			b.lease1(s, 0, time.Minute)
		}
		names, err = b.s.Streams(b.ctx, "", 0)
		require.NoError(t, err)
		require.Equal(t, []string{"B", "a", "a-1", "b", "é"}, names)
		names, err = b.s.Streams(b.ctx, "a", 2)
		require.NoError(t, err)
		require.Equal(t, []string{"a-1", "b"}, names)
		_, err = b.s.Streams(b.ctx, "", -1)
		require.ErrorIs(t, err, store.ErrInvalidCount)
	})
}
