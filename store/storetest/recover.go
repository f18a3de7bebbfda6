package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testRecoverExpired(t *testing.T, newStore func(t *testing.T) Store) {
	recover := func(b *bundle, s string, n int64, at time.Duration) (int64, error) {
		return b.s.RecoverExpired(b.ctx, s, n, &store.RecoverParams{
			Payload: []byte("work"), RecoveryType: "partial-work", Owner: "cleaner", Now: b.at(at)})
	}

	t.Run("moves the work to a new number atomically", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "op-1"), req(time.Minute, "op-2"))
		moved, err := recover(b, s, 1, 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, int64(3), moved)

		old := b.entry(s, 1)
		require.Equal(t, store.Gap, old.State)
		require.Equal(t, store.ReasonRecovered, old.GapReason)
		require.Equal(t, int64(3), old.RecoveredAs)
		requireTime(t, b.time(2*time.Second), old.ResolvedAt)

		got := b.entry(s, 3)
		require.Equal(t, store.Committed, got.State)
		require.Equal(t, []byte("work"), got.Payload)
		require.Equal(t, "op-1", got.OperationID, "the original operation")
		require.Equal(t, es[0].Kind, got.Kind)
		require.Equal(t, "cleaner", got.Owner)
		require.Equal(t, int64(1), got.RecoveredFrom)
		require.Equal(t, "partial-work", got.RecoveryType)
		requireTime(t, b.time(2*time.Second), got.ResolvedAt)
		require.False(t, got.Token.IsZero())

		st := b.stats(s)
		require.Equal(t, int64(4), st.NextNumber)
		require.Equal(t, int64(1), st.Watermark, "2 is still leased")
		require.Equal(t, int64(1), st.Unresolved)
		b.requireUnchanged(es[1])
	})

	t.Run("a gap whose work moved cannot be filled", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease(s, 0, req(time.Second, "op-1"))
		moved, err := recover(b, s, 1, 2*time.Second)
		require.NoError(t, err)
		err = b.s.FillGap(b.ctx, s, 1, &store.FillParams{Payload: []byte("copy"), FilledBy: "ops"})
		require.ErrorIs(t, err, store.ErrNotGap)
		require.ErrorContains(t, err, "moved to")
		old := b.entry(s, 1)
		require.Equal(t, store.Gap, old.State, "unchanged")
		require.Nil(t, old.Payload)
		require.True(t, old.FilledAt.IsZero())
		require.Equal(t, moved, old.RecoveredAs)
	})

	t.Run("refusals change nothing and never copy twice", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "1"), req(time.Second, "2"), req(time.Second, "3"), req(time.Minute, "4"))
		b.commit(es[1], 0, nil)
		b.release(es[2], 0)
		_, err := recover(b, s, 4, 2*time.Second)
		require.ErrorIs(t, err, store.ErrNotExpired)
		_, err = recover(b, s, 2, 2*time.Second)
		require.ErrorIs(t, err, store.ErrCommitted)
		_, err = recover(b, s, 3, 2*time.Second)
		require.ErrorIs(t, err, store.ErrReleased)
		_, err = recover(b, s, 9, 2*time.Second)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Equal(t, int64(5), b.stats(s).NextNumber, "nothing appended")

		moved, err := recover(b, s, 1, time.Second)
		require.NoError(t, err, "at exactly the expiry")
		require.Equal(t, int64(5), moved)
		_, err = recover(b, s, 1, 3*time.Second)
		require.ErrorIs(t, err, store.ErrGap, "a second run finds the work moved")
		_, err = b.s.Commit(b.ctx, s, 1, es[0].Token, &store.CommitParams{Now: b.at(0)})
		require.ErrorIs(t, err, store.ErrGap, "the late holder cannot commit")
		require.Equal(t, int64(6), b.stats(s).NextNumber, "one copy")
	})

	t.Run("ResolveExpiredBatch resolves what is expired and leased", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "1"), req(time.Second, "2"), req(time.Minute, "3"), req(time.Second, "4"))
		b.commit(es[1], 0, nil)
		got, err := b.s.ResolveExpiredBatch(b.ctx, s, []int64{4, 1, 2, 3, 99}, &store.ResolveExpiredParams{Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, []int64{1, 4}, got, "committed 2, live 3 and missing 99 left alone")
		require.Equal(t, store.ReasonExpired, b.entry(s, 1).GapReason)
		requireTime(t, b.time(2*time.Second), b.entry(s, 4).ResolvedAt)
		b.requireUnchanged(es[2])
		require.Equal(t, store.Committed, b.entry(s, 2).State)
		got, err = b.s.ResolveExpiredBatch(b.ctx, s, []int64{1, 4}, &store.ResolveExpiredParams{Now: b.at(3 * time.Second)})
		require.NoError(t, err)
		require.Empty(t, got, "twice: nothing left")
		for name, c := range map[string]struct {
			nums []int64
			p    *store.ResolveExpiredParams
		}{
			"no numbers":      {nil, nil},
			"number 0":        {[]int64{0}, nil},
			"recovered as":    {[]int64{3}, &store.ResolveExpiredParams{RecoveredAs: 7}},
			"reason released": {[]int64{3}, &store.ResolveExpiredParams{Reason: store.ReasonReleased}},
		} {
			_, err := b.s.ResolveExpiredBatch(b.ctx, s, c.nums, c.p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		b.requireUnchanged(es[2])
	})

	t.Run("bad input", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease(s, 0, req(time.Second, "1"))
		for name, p := range map[string]*store.RecoverParams{
			"nil params":          nil,
			"empty recovery type": {Payload: []byte("x")},
			"reason released":     {RecoveryType: "retry", Reason: store.ReasonReleased},
			"control in type":     {RecoveryType: "a\nb"},
			"owner not UTF-8":     {RecoveryType: "retry", Owner: "\xff"},
		} {
			_, err := b.s.RecoverExpired(b.ctx, s, 1, p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		_, err := b.s.RecoverExpired(b.ctx, "", 1, &store.RecoverParams{RecoveryType: "retry"})
		require.ErrorIs(t, err, store.ErrInvalidStream)
		_, err = b.s.RecoverExpired(b.ctx, s, 0, &store.RecoverParams{RecoveryType: "retry"})
		require.ErrorIs(t, err, store.ErrInvalidNumber)
		require.Equal(t, int64(2), b.stats(s).NextNumber)
	})

	t.Run("races the holder's commit at the deadline: one wins", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		const n = 40
		reqs := make([]store.LeaseRequest, n)
		for i := range reqs {
			reqs[i] = req(time.Second, "op")
		}
		es := b.lease(s, 0, reqs...)
		var wg sync.WaitGroup
		start := make(chan struct{})
		commitErr := make([]error, n)
		recoverErr := make([]error, n)
		for i, e := range es {
			wg.Go(func() {
				<-start
				_, commitErr[i] = b.s.Commit(b.ctx, s, e.Number, e.Token, &store.CommitParams{Now: b.at(time.Second - time.Microsecond)})
			})
			wg.Go(func() {
				<-start
				_, recoverErr[i] = recover(b, s, e.Number, time.Second)
			})
		}
		close(start)
		wg.Wait()
		recovered := 0
		for i := range es {
			require.True(t, (commitErr[i] == nil) != (recoverErr[i] == nil), "number %d: commit %v, recover %v", i+1, commitErr[i], recoverErr[i])
			if recoverErr[i] == nil {
				recovered++
				require.ErrorIs(t, commitErr[i], store.ErrGap)
			} else {
				require.ErrorIs(t, recoverErr[i], store.ErrCommitted)
			}
		}
		require.Equal(t, int64(n+recovered+1), b.stats(s).NextNumber, "exactly one new number per recovery")
	})
}
