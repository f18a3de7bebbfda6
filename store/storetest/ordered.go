package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// ordered commits e with Ordered set at base+at.
func (b *bundle) ordered(e store.Entry, at time.Duration) error {
	_, err := b.s.Commit(b.ctx, e.Stream, e.Number, e.Token, &store.CommitParams{Ordered: true, Now: b.at(at), Payload: []byte("p")})
	return err
}

func testOrdered(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("waits for every earlier number (I4)", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Minute, "3"))
		require.ErrorIs(t, b.ordered(es[2], time.Second), store.ErrNotReady)
		require.ErrorIs(t, b.ordered(es[1], time.Second), store.ErrNotReady)
		b.requireUnchanged(es[1])
		b.requireUnchanged(es[2])
		require.NoError(t, b.ordered(es[0], time.Second))
		require.ErrorIs(t, b.ordered(es[2], time.Second), store.ErrNotReady)
		require.NoError(t, b.ordered(es[1], time.Second))
		require.NoError(t, b.ordered(es[2], time.Second))
		require.NoError(t, b.ordered(es[2], 2*time.Second), "the holder's retry")
	})

	t.Run("gaps count as resolved", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "1"), req(time.Minute, "2"), req(time.Minute, "3"))
		require.ErrorIs(t, b.ordered(es[1], 2*time.Second), store.ErrNotReady, "1 expired but unresolved")
		b.expire(es[0], 2*time.Second, nil)
		require.NoError(t, b.ordered(es[1], 2*time.Second))
		es2 := b.lease(s, 0, req(time.Minute, "4"))
		b.release(es[2], 3*time.Second)
		require.NoError(t, b.ordered(es2[0], 3*time.Second))
	})

	t.Run("expiry wins over not ready", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Second, "2"))
		require.ErrorIs(t, b.ordered(es[1], time.Second), store.ErrExpired)
	})

	t.Run("unordered commit does not wait", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"))
		b.commit(es[1], time.Second, nil)
		require.Equal(t, store.Committed, b.entry(s, 2).State)
		require.Equal(t, int64(0), b.stats(s).Watermark)
	})
}

func testCommitBatch(t *testing.T, newStore func(t *testing.T) Store) {
	items := func(es []store.Entry) []store.CommitItem {
		out := make([]store.CommitItem, len(es))
		for i, e := range es {
			out[i] = store.CommitItem{Number: e.Number, Token: e.Token, Payload: []byte(fmt.Sprint("p", e.Number))}
		}
		return out
	}

	t.Run("ordered run commits together", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Minute, "3"))
		res, err := b.s.CommitBatch(b.ctx, s, items(es), &store.CommitBatchParams{Ordered: true, Now: b.at(time.Second)})
		require.NoError(t, err)
		require.Len(t, res, 3)
		for i, r := range res {
			require.NoError(t, r.Err, "item %d", i)
			requireTime(t, b.time(time.Second), r.ResolvedAt)
			require.Equal(t, []byte(fmt.Sprint("p", i+1)), b.entry(s, int64(i+1)).Payload)
		}
		require.Equal(t, int64(3), b.stats(s).Watermark)

		again, err := b.s.CommitBatch(b.ctx, s, items(es), &store.CommitBatchParams{Ordered: true, Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		for i, r := range again {
			require.NoError(t, r.Err, "retry of item %d reports the first outcome", i)
			requireTime(t, b.time(time.Second), r.ResolvedAt)
		}
	})

	t.Run("a failed item holds back the ordered items after it", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Second, "2"), req(time.Minute, "3"), req(time.Minute, "4"))
		its := items(es)
		its[2].Token = store.NewToken()
		res, err := b.s.CommitBatch(b.ctx, s, its, &store.CommitBatchParams{Ordered: true, Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.ErrorIs(t, res[1].Err, store.ErrExpired)
		require.ErrorIs(t, res[2].Err, store.ErrTokenMismatch)
		require.ErrorIs(t, res[3].Err, store.ErrNotReady)
		require.Equal(t, store.Committed, b.entry(s, 1).State)
		b.requireUnchanged(es[1])
		b.requireUnchanged(es[2])
		b.requireUnchanged(es[3])
	})

	t.Run("unordered items are independent", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "1"), req(time.Minute, "2"))
		res, err := b.s.CommitBatch(b.ctx, s, items(es), &store.CommitBatchParams{Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		require.ErrorIs(t, res[0].Err, store.ErrExpired)
		require.NoError(t, res[1].Err)
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"))
		for name, its := range map[string][]store.CommitItem{
			"no items":           nil,
			"descending numbers": {items(es)[1], items(es)[0]},
			"duplicate numbers":  {items(es)[0], items(es)[0]},
			"zero token":         {{Number: 1}},
			"number 0":           {{Number: 0, Token: es[0].Token}},
			"too many items":     make([]store.CommitItem, store.MaxBatch+1),
		} {
			_, err := b.s.CommitBatch(b.ctx, s, its, nil)
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		_, err := b.s.CommitBatch(b.ctx, "", items(es), nil)
		require.ErrorIs(t, err, store.ErrInvalidStream)
		b.requireUnchanged(es[0])
		b.requireUnchanged(es[1])
	})
}
