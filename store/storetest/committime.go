package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// testCommitTime checks that a commit records the instant that decided it:
// the clock reading the expiry rule compared with, so that resolved_at <
// expires_at holds in the ledger of every commit by its holder (I3) and
// can be audited from the data alone.
func testCommitTime(t *testing.T, newStore func(t *testing.T) Store) {
	const ttl = 5 * time.Second
	last := ttl - time.Microsecond // the last instant the rule accepts

	// requireDecided checks that e's recorded time is exactly the pinned
	// decision instant, returned by the call too, and before the expiry.
	requireDecided := func(b *bundle, e store.Entry, returned time.Time, path string) {
		t := b.t
		t.Helper()
		got := b.entry(e.Stream, e.Number)
		require.Equal(t, store.Committed, got.State, path)
		requireTime(t, b.time(last), got.ResolvedAt, "%s records the pinned decision instant", path)
		requireTime(t, got.ResolvedAt, returned, "%s returns the recorded time", path)
		require.True(t, got.ResolvedAt.Before(got.ExpiresAt), "%s: resolved_at %v before expires_at %v", path, got.ResolvedAt, got.ExpiresAt)
	}

	t.Run("Commit one microsecond before expiry records that instant", func(t *testing.T) {
		b := setup(t, newStore)
		for _, ordered := range []bool{false, true} {
			e := b.lease1(b.name(""), 0, ttl)
			at, err := b.s.Commit(b.ctx, e.Stream, e.Number, e.Token, &store.CommitParams{Payload: []byte("x"), Ordered: ordered, Now: b.at(last)})
			require.NoError(t, err, "Commit ordered=%v", ordered)
			requireDecided(b, e, at, "Commit")
		}
	})

	t.Run("CommitBatch one microsecond before expiry records that instant", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(ttl, "a"), req(ttl, "b"))
		res, err := b.s.CommitBatch(b.ctx, s, []store.CommitItem{
			{Number: es[0].Number, Token: es[0].Token, Payload: []byte("a")},
			{Number: es[1].Number, Token: es[1].Token, Payload: []byte("b")},
		}, &store.CommitBatchParams{Ordered: true, Now: b.at(last)})
		require.NoError(t, err)
		for i, e := range es {
			require.NoError(t, res[i].Err)
			requireDecided(b, e, res[i].ResolvedAt, "CommitBatch")
		}
	})

	t.Run("CommitMulti one microsecond before expiry records that instant", func(t *testing.T) {
		b := setup(t, newStore)
		mc, ok := b.s.(store.MultiCommitter)
		if !ok {
			return // not claimed: nothing to check (the capability groups say which)
		}
		e1, e2 := b.lease1(b.name("a"), 0, ttl), b.lease1(b.name("b"), 0, ttl)
		res, err := mc.CommitMulti(b.ctx, []store.StreamCommit{
			{Stream: e1.Stream, Number: e1.Number, Token: e1.Token, Payload: []byte("1")},
			{Stream: e2.Stream, Number: e2.Number, Token: e2.Token, Payload: []byte("2"), Ordered: true},
		}, &store.CommitMultiParams{Now: b.at(last)})
		require.NoError(t, err)
		for i, e := range []store.Entry{e1, e2} {
			require.NoError(t, res[i].Err)
			requireDecided(b, e, res[i].ResolvedAt, "CommitMulti")
		}
	})

	t.Run("on the backend's clock the recorded time lies in the lease", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es, err := b.s.Lease(b.ctx, s, []store.LeaseRequest{req(time.Hour, "a")}, &store.LeaseParams{Owner: "o"})
		require.NoError(t, err)
		e := es[0]
		at, err := b.s.Commit(b.ctx, s, e.Number, e.Token, &store.CommitParams{Payload: []byte("x")})
		require.NoError(t, err)
		got := b.entry(s, e.Number)
		requireTime(t, at, got.ResolvedAt, "Commit returns the recorded time")
		require.False(t, got.ResolvedAt.Before(got.LeasedAt), "resolved_at %v before leased_at %v", got.ResolvedAt, got.LeasedAt)
		require.True(t, got.ResolvedAt.Before(got.ExpiresAt), "resolved_at %v before expires_at %v", got.ResolvedAt, got.ExpiresAt)
	})
}
