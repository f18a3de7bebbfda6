package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testRelease(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("becomes a released gap", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(10*time.Second, "a"), req(10*time.Second, "b"))
		b.release(es[0], 2*time.Second)
		require.Equal(t, resolved(es[0], store.Gap, b.time(2*time.Second), nil, store.ReasonReleased, 0), b.entry(s, 1),
			"a gap keeps its original expiry")
		b.requireUnchanged(es[1])
		require.Equal(t, store.StreamStats{
			Stream: s, NextNumber: 3, Watermark: 1, Unresolved: 1,
			OldestUnresolved: 2, OldestUnresolvedAt: normTime(b.base), LowPoint: 1,
		}, b.stats(s))
	})

	t.Run("nil params use the backend clock", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e, err := b.s.Lease(b.ctx, s, []store.LeaseRequest{req(time.Hour, "a")}, nil)
		require.NoError(t, err)
		require.NoError(t, b.s.Release(b.ctx, s, 1, e[0].Token, nil))
		got := b.entry(s, 1)
		require.Equal(t, store.Gap, got.State)
		require.Equal(t, store.ReasonReleased, got.GapReason)
		require.False(t, got.ResolvedAt.Before(got.LeasedAt), "ResolvedAt %v before LeasedAt %v", got.ResolvedAt, got.LeasedAt)
	})

	t.Run("repeated release returns nil and writes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		b.release(e, time.Second)
		want := b.entry(s, 1)
		stats := b.stats(s)
		for _, at := range []time.Duration{2 * time.Second, time.Hour} {
			b.release(e, at)
			require.Equal(t, want, b.entry(s, 1), "release again at +%v", at)
		}
		require.Equal(t, stats, b.stats(s))
	})

	t.Run("after commit is ErrCommitted", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		b.commit(e, time.Second, []byte("done"))
		want := b.entry(s, 1)
		err := b.s.Release(b.ctx, s, 1, e.Token, &store.ReleaseParams{Now: b.at(2 * time.Second)})
		require.ErrorIs(t, err, store.ErrCommitted)
		require.Equal(t, want, b.entry(s, 1))
	})

	t.Run("foreign token refused", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(10*time.Second, "a"), req(10*time.Second, "b"))
		for name, tok := range map[string]store.Token{"random": store.NewToken(), "of another entry": es[1].Token} {
			err := b.s.Release(b.ctx, s, 1, tok, &store.ReleaseParams{Now: b.at(time.Second)})
			require.ErrorIs(t, err, store.ErrTokenMismatch, "token %s", name)
		}
		b.requireUnchanged(es[0])
		b.requireUnchanged(es[1])

		b.release(es[0], time.Second)
		want := b.entry(s, 1)
		err := b.s.Release(b.ctx, s, 1, es[1].Token, &store.ReleaseParams{Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrTokenMismatch, "foreign token on a released entry")
		require.Equal(t, want, b.entry(s, 1))
	})

	t.Run("unknown number or stream is ErrNotFound", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		err := b.s.Release(b.ctx, s, 2, e.Token, &store.ReleaseParams{Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrNotFound)
		b.requireUnchanged(e)
		require.Equal(t, int64(2), b.stats(s).NextNumber)

		other := b.name("-other")
		err = b.s.Release(b.ctx, other, 1, e.Token, &store.ReleaseParams{Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrNotFound, "unknown stream")
		b.requireNoStream(other)
	})

	t.Run("after expiry but before ResolveExpired is accepted", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		for _, at := range []time.Duration{10 * time.Second, time.Minute} {
			_, err := b.s.Commit(b.ctx, s, 1, e.Token, &store.CommitParams{Now: b.at(at)})
			require.ErrorIs(t, err, store.ErrExpired, "the lease is expired at +%v", at)
		}
		b.release(e, time.Minute)
		require.Equal(t, resolved(e, store.Gap, b.time(time.Minute), nil, store.ReasonReleased, 0), b.entry(s, 1))

		// Released first, the entry is no longer expired-and-leased.
		err := b.s.ResolveExpired(b.ctx, s, 1, &store.ResolveExpiredParams{Now: b.at(2 * time.Minute)})
		require.ErrorIs(t, err, store.ErrReleased)
		require.Equal(t, store.ReasonReleased, b.entry(s, 1).GapReason)
	})

	t.Run("after ResolveExpired is ErrExpired", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		b.expire(e, 10*time.Second, nil)
		want := b.entry(s, 1)
		err := b.s.Release(b.ctx, s, 1, e.Token, &store.ReleaseParams{Now: b.at(11 * time.Second)})
		require.ErrorIs(t, err, store.ErrExpired)
		require.Equal(t, want, b.entry(s, 1))
	})

	t.Run("after a gap with a custom reason is ErrGap", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		b.expire(e, 10*time.Second, &store.ResolveExpiredParams{Reason: "recovered", RecoveredAs: 2})
		want := b.entry(s, 1)
		err := b.s.Release(b.ctx, s, 1, e.Token, &store.ReleaseParams{Now: b.at(11 * time.Second)})
		require.ErrorIs(t, err, store.ErrGap)
		require.NotErrorIs(t, err, store.ErrReleased)
		require.Equal(t, want, b.entry(s, 1))
	})
}
