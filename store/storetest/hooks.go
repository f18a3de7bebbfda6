package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// hookQueue returns b's store as a store.HookQueue.
func (b *bundle) hookQueue() store.HookQueue { return b.s.(store.HookQueue) }

// claim claims the due hooks at base+at for claimFor.
func (b *bundle) claim(at, claimFor time.Duration) []store.PendingHook {
	b.t.Helper()
	hs, err := b.hookQueue().ClaimHooks(b.ctx, &store.ClaimHooksParams{For: claimFor, Now: b.at(at)})
	require.NoError(b.t, err, "ClaimHooks")
	for i := range hs {
		hs[i].Entry = norm(hs[i].Entry)
		hs[i].CreatedAt = normTime(hs[i].CreatedAt)
	}
	return hs
}

// refs returns the numbers of the hook records hs.
func refs(hs []store.PendingHook) []int64 {
	out := make([]int64, len(hs))
	for i, h := range hs {
		out[i] = h.Entry.Number
	}
	return out
}

// asExpired is e as a hook record keeps it: the leased entry, before its
// resolution.
func asExpired(e store.Entry) store.Entry {
	e = norm(e)
	e.Payload = nil
	return e
}

func testHooks(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("each resolving call records a hook per entry it resolved, only with Hook", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "1"), req(time.Second, "2"), req(time.Second, "3"),
			req(time.Second, "4"), req(time.Second, "5"), req(time.Second, "6"), req(time.Minute, "7"),
			req(time.Second, "8"))
		at := b.at(2 * time.Second)
		// without Hook: no record
		require.NoError(t, b.s.ResolveExpired(b.ctx, s, 8, &store.ResolveExpiredParams{Now: at}))
		// each call with Hook; 7 is live: refused, so no record of it
		require.NoError(t, b.s.ResolveExpired(b.ctx, s, 1, &store.ResolveExpiredParams{Hook: true, Now: at}))
		got, err := b.s.ResolveExpiredBatch(b.ctx, s, []int64{2, 3, 7}, &store.ResolveExpiredParams{Hook: true, Now: at})
		require.NoError(t, err)
		require.Equal(t, []int64{2, 3}, got)
		moved, err := b.s.RecoverExpired(b.ctx, s, 4, &store.RecoverParams{Payload: []byte("w4"), RecoveryType: "retry", Hook: true, Now: at})
		require.NoError(t, err)
		require.Equal(t, int64(9), moved)
		res, err := b.s.RecoverExpiredBatch(b.ctx, s, []store.RecoverItem{
			{Number: 5, Payload: []byte("w5"), RecoveryType: "retry"},
			{Number: 6, Payload: []byte("w6"), RecoveryType: "retry"},
			{Number: 7, Payload: []byte("w7"), RecoveryType: "retry"},
		}, &store.RecoverBatchParams{Hook: true, Now: at})
		require.NoError(t, err)
		require.Equal(t, []int64{10, 11, 0}, []int64{res[0].Moved, res[1].Moved, res[2].Moved})

		st, err := b.hookQueue().HookStats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(6), st.Pending)
		require.Zero(t, st.Failing)
		requireTime(t, b.time(2*time.Second), st.OldestAt)

		hs := b.claim(3*time.Second, time.Minute)
		require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, refs(hs), "the old numbers, not the new ones, nor 7 or 8")
		for i, h := range hs {
			require.Equal(t, asExpired(es[i]), h.Entry, "the entry as it was found expired")
			require.Equal(t, 1, h.Attempts)
			requireTime(t, b.time(2*time.Second), h.CreatedAt, "created with the resolution")
			require.Empty(t, h.LastError)
		}
	})

	t.Run("a claim keeps others off until it ends; an ack is fenced by the claim", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease(s, 0, req(time.Second, "1"), req(time.Second, "2"))
		_, err := b.s.ResolveExpiredBatch(b.ctx, s, []int64{1, 2}, &store.ResolveExpiredParams{Hook: true, Now: b.at(time.Second)})
		require.NoError(t, err)
		require.Empty(t, b.claim(500*time.Millisecond, time.Minute), "not due before its resolution")

		first := b.claim(2*time.Second, 10*time.Second)
		require.Equal(t, []int64{1, 2}, refs(first))
		require.Empty(t, b.claim(11*time.Second, time.Minute), "claimed until 12s")
		again := b.claim(12*time.Second, 10*time.Second) // the first claimer died: due again
		require.Equal(t, []int64{1, 2}, refs(again))
		require.Equal(t, 2, again[0].Attempts)

		q := b.hookQueue()
		ok, err := q.AckHook(b.ctx, s, 1, 1)
		require.NoError(t, err)
		require.False(t, ok, "the lapsed claim's ack deletes nothing")
		ok, err = q.AckHook(b.ctx, s, 1, 2)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = q.AckHook(b.ctx, s, 1, 2)
		require.NoError(t, err)
		require.False(t, ok, "gone")
		st, err := q.HookStats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Pending)

		ok, err = q.AckHook(b.ctx, s, 2, 2)
		require.NoError(t, err)
		require.True(t, ok)
		st, err = q.HookStats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, store.HookStats{}, st, "empty")
		require.Empty(t, b.claim(time.Hour, time.Minute))
	})

	t.Run("a failed delivery is due again after its delay, with its error", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, time.Second)
		b.expire(e, time.Second, &store.ResolveExpiredParams{Hook: true})
		hs := b.claim(time.Second, time.Minute)
		require.Len(t, hs, 1)
		q := b.hookQueue()
		ok, err := q.RetryHook(b.ctx, s, e.Number, 1, time.Hour, "boom\x00\xff")
		require.NoError(t, err)
		require.True(t, ok)
		st, err := q.HookStats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Pending)
		require.Equal(t, int64(1), st.Failing)
		require.Empty(t, b.claim(2*time.Second, time.Minute), "claimed anew only after the delay")
		hs = b.claim(3*time.Hour, time.Minute)
		require.Len(t, hs, 1)
		require.Equal(t, 2, hs[0].Attempts)
		require.Equal(t, "boom\uFFFD", hs[0].LastError, "kept as valid text")
		ok, err = q.RetryHook(b.ctx, s, e.Number, 1, 0, "late")
		require.NoError(t, err)
		require.False(t, ok, "fenced: a later claim holds it")
	})

	t.Run("AddHooks records resolved entries without one", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "1"), req(time.Second, "2"), req(time.Minute, "3"))
		b.expire(es[0], time.Second, nil)
		b.expire(es[1], time.Second, &store.ResolveExpiredParams{Hook: true})
		q := b.hookQueue()
		added, err := q.AddHooks(b.ctx, s, []int64{1, 2, 3, 99})
		require.NoError(t, err)
		require.Equal(t, []int64{1}, added, "2 has one, 3 is leased, 99 does not exist")
		hs := b.claim(time.Hour, time.Minute)
		require.Equal(t, []int64{1, 2}, refs(hs))
		require.Equal(t, asExpired(es[0]), hs[0].Entry)
		added, err = q.AddHooks(b.ctx, b.name("none"), []int64{1})
		require.NoError(t, err)
		require.Empty(t, added, "no stream")
	})

	t.Run("bad input is refused and changes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, time.Second)
		b.expire(e, time.Second, &store.ResolveExpiredParams{Hook: true})
		q := b.hookQueue()
		for _, p := range []*store.ClaimHooksParams{nil, {}, {For: -1}, {For: store.MaxHookClaim + 1}, {For: time.Second, Limit: -1},
			{For: time.Second, Limit: store.MaxListLimit + 1}} {
			_, err := q.ClaimHooks(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", p)
		}
		_, err := q.AckHook(b.ctx, s, 1, 0)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = q.AckHook(b.ctx, "", 1, 1)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = q.AckHook(b.ctx, s, 0, 1)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = q.RetryHook(b.ctx, s, 1, 1, -time.Second, "")
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = q.AddHooks(b.ctx, s, nil)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		_, err = q.AddHooks(b.ctx, s, []int64{0})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		hs := b.claim(2*time.Second, time.Minute)
		require.Len(t, hs, 1)
		require.Equal(t, 1, hs[0].Attempts, "no claim was counted by a refused call")
	})

	t.Run("concurrent claimers never share a record", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		const n = 200
		reqs := make([]store.LeaseRequest, n)
		for i := range reqs {
			reqs[i] = req(time.Second, "op")
		}
		b.lease(s, 0, reqs...)
		_, err := b.s.ResolveExpiredBatch(b.ctx, s, span(1, n), &store.ResolveExpiredParams{Hook: true, Now: b.at(time.Second)})
		require.NoError(t, err)
		q := b.hookQueue()
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					hs, err := q.ClaimHooks(b.ctx, &store.ClaimHooksParams{Limit: 7, For: time.Hour, Now: b.at(2 * time.Second)})
					if err != nil || len(hs) == 0 {
						require.NoError(t, err)
						return
					}
					mu.Lock()
					for _, h := range hs {
						seen[h.Entry.Number]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Len(t, seen, n)
		for num, c := range seen {
			require.Equal(t, 1, c, "record %d claimed %d times", num, c)
		}
	})
}
