package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testCommit(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("before expiry stores the payload", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(10*time.Second, "a"), req(10*time.Second, "b"))
		payload := []byte("hello\x00world")
		at := b.commit(es[0], time.Second, payload)
		requireTime(t, b.time(time.Second), at, "Commit returns the resolution time, the pinned now")

		want := resolved(es[0], store.Committed, b.time(time.Second), payload, "", 0)
		require.Equal(t, want, b.entry(s, 1))
		b.requireUnchanged(es[1])
		require.Equal(t, store.StreamStats{
			Stream: s, NextNumber: 3, Watermark: 1, Unresolved: 1,
			OldestUnresolved: 2, OldestUnresolvedAt: normTime(b.base), LowPoint: 1,
		}, b.stats(s))
	})

	t.Run("an empty payload reads back as it was given", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.commit(b.lease1(s, 0, 10*time.Second), time.Second, nil)
		b.commit(b.lease1(s, 0, 10*time.Second), time.Second, []byte{})
		es, err := b.s.Read(b.ctx, s, 0, 2)
		require.NoError(t, err)
		require.Len(t, es, 2)
		require.Nil(t, es[0].Payload, "nil reads back as nil")
		require.NotNil(t, es[1].Payload, "[]byte{} reads back as empty, not nil")
		require.Empty(t, es[1].Payload)
	})

	t.Run("nil payload stays empty", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		ts, err := b.s.Commit(b.ctx, s, e.Number, e.Token, nil)
		require.NoError(t, err, "Commit with nil params")
		require.False(t, ts.IsZero())
		got := b.entry(s, 1)
		require.Equal(t, store.Committed, got.State)
		require.Empty(t, got.Payload)
		requireTime(t, ts, got.ResolvedAt)

		e2 := b.lease1(s, 0, 10*time.Second)
		b.commit(e2, time.Second, nil)
		require.Empty(t, b.entry(s, 2).Payload)
		require.Equal(t, store.Committed, b.entry(s, 2).State)
	})

	t.Run("caller's payload slice is not retained", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		payload := []byte("original")
		b.commit(e, time.Second, payload)
		copy(payload, "XXXXXXXX")
		require.Equal(t, []byte("original"), b.entry(s, 1).Payload)
	})

	t.Run("at exactly ExpiresAt refused, one microsecond before accepted", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 5*time.Second)
		before := b.stats(s)

		_, err := b.s.Commit(b.ctx, s, e.Number, e.Token, &store.CommitParams{Payload: []byte("late"), Now: b.at(5 * time.Second)})
		require.ErrorIs(t, err, store.ErrExpired)
		b.requireUnchanged(e)
		require.Equal(t, before, b.stats(s))

		_, err = b.s.Commit(b.ctx, s, e.Number, e.Token, &store.CommitParams{Payload: []byte("later"), Now: b.at(time.Minute)})
		require.ErrorIs(t, err, store.ErrExpired, "after ExpiresAt")
		b.requireUnchanged(e)

		at := b.commit(e, 5*time.Second-time.Microsecond, []byte("just in time"))
		requireTime(t, b.time(5*time.Second-time.Microsecond), at)
		require.Equal(t, resolved(e, store.Committed, at, []byte("just in time"), "", 0), b.entry(s, 1))
	})

	t.Run("foreign token refused", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(10*time.Second, "a"), req(10*time.Second, "b"))
		for name, tok := range map[string]store.Token{"random": store.NewToken(), "of another entry": es[1].Token} {
			_, err := b.s.Commit(b.ctx, s, 1, tok, &store.CommitParams{Payload: []byte("x"), Now: b.at(time.Second)})
			require.ErrorIs(t, err, store.ErrTokenMismatch, "token %s", name)
		}
		b.requireUnchanged(es[0])
		b.requireUnchanged(es[1])

		// The fence comes before the state: a committed entry refuses a
		// foreign token with ErrTokenMismatch too.
		b.commit(es[0], time.Second, []byte("mine"))
		_, err := b.s.Commit(b.ctx, s, 1, es[1].Token, &store.CommitParams{Payload: []byte("x"), Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrTokenMismatch, "foreign token on a committed entry")
		require.Equal(t, []byte("mine"), b.entry(s, 1).Payload)
	})

	t.Run("unknown number or stream is ErrNotFound", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		_, err := b.s.Commit(b.ctx, s, 2, e.Token, &store.CommitParams{Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrNotFound, "number never handed out")
		_, err = b.s.Commit(b.ctx, s, 1<<40, e.Token, &store.CommitParams{Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrNotFound, "number far beyond")
		b.requireUnchanged(e)
		require.Equal(t, int64(2), b.stats(s).NextNumber, "a refused commit hands out nothing")

		other := b.name("-other")
		_, err = b.s.Commit(b.ctx, other, 1, e.Token, &store.CommitParams{Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrNotFound, "unknown stream")
		b.requireNoStream(other)
	})

	t.Run("after release is ErrReleased", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		b.release(e, time.Second)
		want := b.entry(s, 1)
		_, err := b.s.Commit(b.ctx, s, 1, e.Token, &store.CommitParams{Payload: []byte("x"), Now: b.at(2 * time.Second)})
		require.ErrorIs(t, err, store.ErrReleased)
		require.Equal(t, want, b.entry(s, 1))
	})

	t.Run("after ResolveExpired is ErrExpired", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		b.expire(e, 10*time.Second, nil)
		want := b.entry(s, 1)
		// Even with a clock pinned before the expiry: the entry is a gap.
		for _, at := range []time.Duration{time.Second, 11 * time.Second} {
			_, err := b.s.Commit(b.ctx, s, 1, e.Token, &store.CommitParams{Payload: []byte("x"), Now: b.at(at)})
			require.ErrorIs(t, err, store.ErrExpired, "commit at +%v", at)
			require.Equal(t, want, b.entry(s, 1))
		}
	})

	t.Run("after a gap with a custom reason is ErrGap", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		b.expire(e, 10*time.Second, &store.ResolveExpiredParams{Reason: "recovered", RecoveredAs: 9})
		want := b.entry(s, 1)
		_, err := b.s.Commit(b.ctx, s, 1, e.Token, &store.CommitParams{Payload: []byte("x"), Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrGap)
		require.NotErrorIs(t, err, store.ErrExpired)
		require.NotErrorIs(t, err, store.ErrReleased)
		require.Equal(t, want, b.entry(s, 1))
	})

	t.Run("repeated commit by the holder returns the first outcome", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		first := b.commit(e, time.Second, []byte("first"))
		want := b.entry(s, 1)
		stats := b.stats(s)
		// A retry with the same payload, later, after the expiry: I7.
		for _, at := range []time.Duration{2 * time.Second, time.Hour} {
			again, err := b.s.Commit(b.ctx, s, 1, e.Token, &store.CommitParams{Payload: []byte("first"), Now: b.at(at)})
			require.NoError(t, err, "retry at +%v", at)
			requireTime(t, first, again, "retry returns the first resolution time")
			require.Equal(t, want, b.entry(s, 1), "retry writes nothing")
		}
		require.Equal(t, stats, b.stats(s))
	})

	t.Run("repeated commit with another payload is ErrPayloadMismatch", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(10*time.Second, "a"), req(10*time.Second, "b"))
		b.commit(es[0], time.Second, []byte("first"))
		b.commit(es[1], time.Second, nil)
		want, stats := b.entry(s, 1), b.stats(s)
		for _, c := range []struct {
			at      time.Duration
			payload []byte
		}{
			{2 * time.Second, []byte("second")},
			{time.Hour, []byte("firs")},
			{3 * time.Second, nil},
		} {
			_, err := b.s.Commit(b.ctx, s, 1, es[0].Token, &store.CommitParams{Payload: c.payload, Now: b.at(c.at)})
			require.ErrorIs(t, err, store.ErrPayloadMismatch, "retry at +%v with %q", c.at, c.payload)
			require.NotErrorIs(t, err, store.ErrInvalidArgument)
		}
		_, err := b.s.Commit(b.ctx, s, 1, es[0].Token, nil)
		require.ErrorIs(t, err, store.ErrPayloadMismatch, "retry with nil params")
		require.Equal(t, want, b.entry(s, 1), "a mismatch writes nothing")

		// No payload: a retry with none, or an empty one, is the same.
		_, err = b.s.Commit(b.ctx, s, 2, es[1].Token, &store.CommitParams{Payload: []byte{}, Now: b.at(2 * time.Second)})
		require.NoError(t, err, "empty is nil")
		_, err = b.s.Commit(b.ctx, s, 2, es[1].Token, &store.CommitParams{Payload: []byte("x"), Now: b.at(2 * time.Second)})
		require.ErrorIs(t, err, store.ErrPayloadMismatch)
		require.Equal(t, stats, b.stats(s))
	})
}
