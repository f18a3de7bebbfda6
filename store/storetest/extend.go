package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testExtend(t *testing.T, newStore func(t *testing.T) Store) {
	// extend extends e at base+at by ttl and checks the result.
	extend := func(b *bundle, e store.Entry, at, ttl time.Duration) {
		b.t.Helper()
		now, exp, err := b.s.Extend(b.ctx, e.Stream, e.Number, e.Token, &store.ExtendParams{TTL: ttl, Now: b.at(at)})
		require.NoError(b.t, err, "Extend at +%v by %v", at, ttl)
		requireTime(b.t, b.time(at), now, "Extend returns the backend's now")
		requireTime(b.t, b.time(at+ttl), exp, "Extend returns now + TTL")
	}

	t.Run("moves the expiry to now plus TTL and counts renewals", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(10*time.Second, "a"), req(10*time.Second, "b"))
		e := es[0]

		extend(b, e, 2*time.Second, 30*time.Second)
		want := norm(e)
		want.ExpiresAt = b.time(32 * time.Second)
		want.Renewals = 1
		require.Equal(t, want, b.entry(s, 1))

		extend(b, e, 31*time.Second, 5*time.Second)
		want.ExpiresAt = b.time(36 * time.Second)
		want.Renewals = 2
		require.Equal(t, want, b.entry(s, 1))
		b.requireUnchanged(es[1])

		// The old expiries are gone: live at the new ExpiresAt-1µs, and
		// ResolveExpired refuses it until then.
		err := b.s.ResolveExpired(b.ctx, s, 1, &store.ResolveExpiredParams{Now: b.at(36*time.Second - time.Microsecond)})
		require.ErrorIs(t, err, store.ErrNotExpired)
		at := b.commit(e, 36*time.Second-time.Microsecond, []byte("p"))
		got := b.entry(s, 1)
		require.Equal(t, resolved(want, store.Committed, at, []byte("p"), "", 0), got, "commit keeps the renewals and expiry")
	})

	t.Run("sets the expiry even when it shortens it", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, time.Hour)
		extend(b, e, time.Second, time.Second)
		requireTime(t, b.time(2*time.Second), b.entry(s, 1).ExpiresAt)
		_, err := b.s.Commit(b.ctx, s, 1, e.Token, &store.CommitParams{Now: b.at(2 * time.Second)})
		require.ErrorIs(t, err, store.ErrExpired)
	})

	t.Run("sub-microsecond parts of a TTL are dropped", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, time.Minute)
		now, exp, err := b.s.Extend(b.ctx, s, 1, e.Token, &store.ExtendParams{TTL: 10*time.Second + 999*time.Nanosecond, Now: b.at(time.Second)})
		require.NoError(t, err)
		requireTime(t, b.time(time.Second), now)
		requireTime(t, b.time(11*time.Second), exp, "Extend's expiry")
		requireTime(t, b.time(11*time.Second), b.entry(s, 1).ExpiresAt, "stored ExpiresAt")
		_, err = b.s.Commit(b.ctx, s, 1, e.Token, &store.CommitParams{Now: b.at(11 * time.Second)})
		require.ErrorIs(t, err, store.ErrExpired)
	})

	t.Run("at or after expiry is ErrExpired", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		for _, at := range []time.Duration{10 * time.Second, time.Minute} {
			_, _, err := b.s.Extend(b.ctx, s, 1, e.Token, &store.ExtendParams{TTL: time.Minute, Now: b.at(at)})
			require.ErrorIs(t, err, store.ErrExpired, "extend at +%v", at)
			b.requireUnchanged(e)
		}
		extend(b, e, 10*time.Second-time.Microsecond, time.Minute)
	})

	t.Run("foreign token refused", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(10*time.Second, "a"), req(10*time.Second, "b"))
		for name, tok := range map[string]store.Token{"random": store.NewToken(), "of another entry": es[1].Token} {
			_, _, err := b.s.Extend(b.ctx, s, 1, tok, &store.ExtendParams{TTL: time.Minute, Now: b.at(time.Second)})
			require.ErrorIs(t, err, store.ErrTokenMismatch, "token %s", name)
		}
		b.requireUnchanged(es[0])
		b.requireUnchanged(es[1])
	})

	t.Run("unknown number or stream is ErrNotFound", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		_, _, err := b.s.Extend(b.ctx, s, 2, e.Token, &store.ExtendParams{TTL: time.Minute, Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrNotFound)
		b.requireUnchanged(e)
		other := b.name("-other")
		_, _, err = b.s.Extend(b.ctx, other, 1, e.Token, &store.ExtendParams{TTL: time.Minute, Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrNotFound, "unknown stream")
		b.requireNoStream(other)
	})

	t.Run("after a resolution", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(10*time.Second, "c"), req(10*time.Second, "r"), req(10*time.Second, "e"), req(10*time.Second, "g"))
		b.commit(es[0], time.Second, []byte("c"))
		b.release(es[1], time.Second)
		b.expire(es[2], 10*time.Second, nil)
		b.expire(es[3], 10*time.Second, &store.ResolveExpiredParams{Reason: "recovered", RecoveredAs: 5})
		before := b.readAll(s)
		for i, want := range []error{store.ErrCommitted, store.ErrReleased, store.ErrExpired, store.ErrGap} {
			// Pinned before the expiry: the state, not the clock, refuses.
			_, _, err := b.s.Extend(b.ctx, s, es[i].Number, es[i].Token, &store.ExtendParams{TTL: time.Minute, Now: b.at(2 * time.Second)})
			require.ErrorIs(t, err, want, "entry %d", es[i].Number)
		}
		require.Equal(t, before, b.readAll(s))
	})

	t.Run("bad TTL is ErrInvalidTTL", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, 10*time.Second)
		for name, p := range map[string]*store.ExtendParams{
			"nil params":       nil,
			"zero TTL":         {Now: b.at(time.Second)},
			"negative TTL":     {TTL: -time.Second, Now: b.at(time.Second)},
			"TTL under 1µs":    {TTL: time.Nanosecond, Now: b.at(time.Second)},
			"TTL above MaxTTL": {TTL: store.MaxTTL + time.Microsecond, Now: b.at(time.Second)},
		} {
			_, _, err := b.s.Extend(b.ctx, s, 1, e.Token, p)
			require.ErrorIs(t, err, store.ErrInvalidTTL, name)
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
			b.requireUnchanged(e)
		}
		extend(b, e, time.Second, store.MaxTTL)
	})
}
