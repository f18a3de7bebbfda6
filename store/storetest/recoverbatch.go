package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testRecoverExpiredBatch(t *testing.T, newStore func(t *testing.T) Store) {
	item := func(n int64, typ string) store.RecoverItem {
		return store.RecoverItem{Number: n, Payload: fmt.Appendf(nil, "work %d", n), RecoveryType: typ}
	}

	t.Run("moves in item order, each move whole", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "1"), req(time.Second, "2"), req(time.Second, "3"),
			req(time.Second, "4"), req(time.Second, "5"), req(time.Minute, "6"), req(time.Second, "7"))
		b.commit(es[1], 0, nil)
		b.release(es[2], 0)
		got, err := b.s.RecoverExpiredBatch(b.ctx, s, []store.RecoverItem{
			item(1, "partial-work"), item(2, "retry"), item(3, "retry"), item(4, "retry"),
			item(5, "partial-work"), item(6, "retry"), item(99, "retry"),
		}, &store.RecoverBatchParams{Owner: "cleaner", Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		require.Len(t, got, 7)
		require.Equal(t, []int64{8, 0, 0, 9, 10, 0, 0}, []int64{got[0].Moved, got[1].Moved, got[2].Moved,
			got[3].Moved, got[4].Moved, got[5].Moved, got[6].Moved}, "consecutive new numbers in item order")
		require.NoError(t, got[0].Err)
		require.ErrorIs(t, got[1].Err, store.ErrCommitted)
		require.ErrorIs(t, got[2].Err, store.ErrReleased)
		require.NoError(t, got[3].Err)
		require.NoError(t, got[4].Err)
		require.ErrorIs(t, got[5].Err, store.ErrNotExpired)
		require.ErrorIs(t, got[6].Err, store.ErrNotFound)

		for old, moved := range map[int64]int64{1: 8, 4: 9, 5: 10} {
			o := b.entry(s, old)
			require.Equal(t, store.Gap, o.State)
			require.Equal(t, store.ReasonRecovered, o.GapReason)
			require.Equal(t, moved, o.RecoveredAs)
			requireTime(t, b.time(2*time.Second), o.ResolvedAt)
			m := b.entry(s, moved)
			require.Equal(t, store.Committed, m.State)
			require.Equal(t, fmt.Appendf(nil, "work %d", old), m.Payload)
			require.Equal(t, es[old-1].OperationID, m.OperationID)
			require.Equal(t, es[old-1].Kind, m.Kind)
			require.Equal(t, "cleaner", m.Owner)
			require.Equal(t, old, m.RecoveredFrom)
			requireTime(t, b.time(2*time.Second), m.ResolvedAt)
			require.False(t, m.Token.IsZero())
		}
		require.Equal(t, "partial-work", b.entry(s, 8).RecoveryType)
		require.Equal(t, "retry", b.entry(s, 9).RecoveryType)
		b.requireUnchanged(es[5])
		b.requireUnchanged(es[6]) // expired, but not asked for
		st := b.stats(s)
		require.Equal(t, int64(11), st.NextNumber)
		require.Equal(t, int64(2), st.Unresolved)
		require.Equal(t, int64(5), st.Watermark)

		// Again: the work moved already; no second copy.
		again, err := b.s.RecoverExpiredBatch(b.ctx, s, []store.RecoverItem{item(1, "retry"), item(4, "retry")},
			&store.RecoverBatchParams{Now: b.at(3 * time.Second)})
		require.NoError(t, err)
		require.ErrorIs(t, again[0].Err, store.ErrGap)
		require.ErrorIs(t, again[1].Err, store.ErrGap)
		require.Zero(t, again[0].Moved)
		require.Equal(t, int64(11), b.stats(s).NextNumber)
		_, err = b.s.Commit(b.ctx, s, 1, es[0].Token, &store.CommitParams{Now: b.at(0)})
		require.ErrorIs(t, err, store.ErrGap, "the late holder cannot commit")
	})

	t.Run("records the reason; an unknown stream moves nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease(s, 0, req(time.Second, "1"))
		got, err := b.s.RecoverExpiredBatch(b.ctx, s, []store.RecoverItem{item(1, "retry")},
			&store.RecoverBatchParams{Reason: "handed over", Now: b.at(time.Second)})
		require.NoError(t, err)
		require.Equal(t, int64(2), got[0].Moved, "at exactly the expiry")
		require.Equal(t, "handed over", b.entry(s, 1).GapReason)

		got, err = b.s.RecoverExpiredBatch(b.ctx, b.name("-none"), []store.RecoverItem{item(1, "retry")}, nil)
		require.NoError(t, err)
		require.ErrorIs(t, got[0].Err, store.ErrNotFound)
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "1"), req(time.Second, "2"))
		many := make([]store.RecoverItem, store.MaxBatch+1)
		for i := range many {
			many[i] = item(int64(i+1), "retry")
		}
		for name, c := range map[string]struct {
			stream string
			items  []store.RecoverItem
			p      *store.RecoverBatchParams
		}{
			"no items":            {s, nil, nil},
			"too many":            {s, many, nil},
			"descending":          {s, []store.RecoverItem{item(2, "retry"), item(1, "retry")}, nil},
			"duplicate":           {s, []store.RecoverItem{item(1, "retry"), item(1, "retry")}, nil},
			"number 0":            {s, []store.RecoverItem{item(0, "retry")}, nil},
			"empty recovery type": {s, []store.RecoverItem{item(1, "")}, nil},
			"reason released":     {s, []store.RecoverItem{item(1, "retry")}, &store.RecoverBatchParams{Reason: store.ReasonReleased}},
			"owner not UTF-8":     {s, []store.RecoverItem{item(1, "retry")}, &store.RecoverBatchParams{Owner: "\xff"}},
			"empty stream":        {"", []store.RecoverItem{item(1, "retry")}, nil},
		} {
			_, err := b.s.RecoverExpiredBatch(b.ctx, c.stream, c.items, c.p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		b.requireUnchanged(es[0])
		b.requireUnchanged(es[1])
		require.Equal(t, int64(3), b.stats(s).NextNumber)
	})

	t.Run("concurrent batches move each entry once", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		const n, callers = 60, 4
		reqs := make([]store.LeaseRequest, n)
		for i := range reqs {
			reqs[i] = req(time.Second, fmt.Sprint(i+1))
		}
		b.lease(s, 0, reqs...)
		results := make([][]store.RecoverResult, callers)
		items := make([][]store.RecoverItem, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for c := range callers {
			for i := int64(1 + c%2); i <= n; i++ { // overlapping sets
				items[c] = append(items[c], item(i, "retry"))
			}
			wg.Go(func() {
				<-start
				results[c], errs[c] = b.s.RecoverExpiredBatch(b.ctx, s, items[c], &store.RecoverBatchParams{Now: b.at(2 * time.Second)})
			})
		}
		close(start)
		wg.Wait()
		movedTo := map[int64]int64{} // old -> new
		for c := range callers {
			require.NoError(t, errs[c])
			var mine []int64
			for i, r := range results[c] {
				if r.Moved == 0 {
					require.ErrorIs(t, r.Err, store.ErrGap, "refused only because another batch moved it")
					continue
				}
				_, dup := movedTo[items[c][i].Number]
				require.False(t, dup, "%d moved twice", items[c][i].Number)
				movedTo[items[c][i].Number] = r.Moved
				mine = append(mine, r.Moved)
			}
			for i := 1; i < len(mine); i++ {
				require.Equal(t, mine[i-1]+1, mine[i], "one batch takes consecutive numbers in item order")
			}
		}
		require.Len(t, movedTo, n, "every entry moved")
		require.Equal(t, int64(2*n+1), b.stats(s).NextNumber, "exactly one new number per entry")
		for old, moved := range movedTo {
			require.Equal(t, moved, b.entry(s, old).RecoveredAs)
			require.Equal(t, old, b.entry(s, moved).RecoveredFrom)
		}
	})

	t.Run("races the holders' commits at the deadline: one wins", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		const n = 40
		reqs := make([]store.LeaseRequest, n)
		items := make([]store.RecoverItem, n)
		for i := range reqs {
			reqs[i] = req(time.Second, "op")
			items[i] = item(int64(i+1), "retry")
		}
		es := b.lease(s, 0, reqs...)
		var wg sync.WaitGroup
		start := make(chan struct{})
		commitErr := make([]error, n)
		var got []store.RecoverResult
		var batchErr error
		for i, e := range es {
			wg.Go(func() {
				<-start
				_, commitErr[i] = b.s.Commit(b.ctx, s, e.Number, e.Token, &store.CommitParams{Now: b.at(time.Second - time.Microsecond)})
			})
		}
		wg.Go(func() {
			<-start
			got, batchErr = b.s.RecoverExpiredBatch(b.ctx, s, items, &store.RecoverBatchParams{Now: b.at(time.Second)})
		})
		close(start)
		wg.Wait()
		require.NoError(t, batchErr)
		moved := 0
		for i := range es {
			require.True(t, (commitErr[i] == nil) != (got[i].Moved != 0), "number %d: commit %v, moved %d (%v)", i+1, commitErr[i], got[i].Moved, got[i].Err)
			if got[i].Moved != 0 {
				moved++
				require.ErrorIs(t, commitErr[i], store.ErrGap)
			} else {
				require.ErrorIs(t, got[i].Err, store.ErrCommitted)
			}
		}
		require.Equal(t, int64(n+moved+1), b.stats(s).NextNumber, "exactly one new number per move")
	})
}
