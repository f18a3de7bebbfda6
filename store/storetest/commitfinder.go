package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// testFindCommitted checks store.CommitFinder: the committed entries of
// some operation ids in a range of numbers, filled gaps included, in
// number order, without payloads; bad calls refused.
func testFindCommitted(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("finds the committed entries of the operations in the range", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		// 1 a released, 2 b committed, 3 a committed, 4 c committed, 5 a
		// committed, 6 x released then filled, 7 a leased.
		es := b.lease(s, 0, req(time.Hour, "a"), req(time.Hour, "b"), req(time.Hour, "a"), req(time.Hour, "c"),
			req(time.Hour, "a"), req(time.Hour, "x"), req(time.Hour, "a"))
		b.release(es[0], time.Second)
		for _, i := range []int{1, 2, 3, 4} {
			b.commit(es[i], time.Second, []byte("payload"))
		}
		b.release(es[5], time.Second)
		b.fill(s, 6, []byte("filled"), "operator", 2*time.Second)
		find := func(after, through int64, ops ...string) []int64 {
			t.Helper()
			got, err := b.s.(store.CommitFinder).FindCommitted(b.ctx, s, &store.FindCommittedParams{Operations: ops, After: after, Through: through})
			require.NoError(t, err)
			var out []int64
			for _, e := range got {
				require.Equal(t, s, e.Stream)
				require.Equal(t, store.Committed, e.State)
				require.Nil(t, e.Payload, "no payload is read")
				require.Contains(t, ops, e.OperationID)
				out = append(out, e.Number)
			}
			return out
		}
		require.Equal(t, []int64{3, 5, 6}, find(0, 7, "a", "x"))
		require.Equal(t, []int64{5}, find(3, 5, "a"))
		require.Equal(t, []int64{2, 4}, find(0, 100, "b", "c", "nothing"), "beyond the stream's end: nothing more")
		require.Empty(t, find(5, 5, "a"))
		require.Empty(t, find(0, 7, "nothing"))
	})

	t.Run("refuses bad calls and unknown streams", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease(s, 0, req(time.Hour, "a"))
		f := b.s.(store.CommitFinder)
		_, err := f.FindCommitted(b.ctx, s+"-missing", &store.FindCommittedParams{Operations: []string{"a"}, Through: 1})
		require.ErrorIs(t, err, store.ErrStreamNotFound)
		many := make([]string, store.MaxListLimit+1)
		for i := range many {
			many[i] = "op"
		}
		for name, p := range map[string]*store.FindCommittedParams{
			"nil":                 nil,
			"no operation":        {Through: 1},
			"empty operation":     {Operations: []string{""}, Through: 1},
			"control character":   {Operations: []string{"a\x00"}, Through: 1},
			"long operation":      {Operations: []string{strings.Repeat("a", store.MaxTextLen+1)}, Through: 1},
			"too many":            {Operations: many, Through: 1},
			"negative after":      {Operations: []string{"a"}, After: -1, Through: 1},
			"through below after": {Operations: []string{"a"}, After: 5, Through: 4},
			"too wide":            {Operations: []string{"a"}, After: 1, Through: 2 + store.MaxFindSpan},
		} {
			_, err := f.FindCommitted(b.ctx, s, p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		_, err = f.FindCommitted(b.ctx, "", &store.FindCommittedParams{Operations: []string{"a"}, Through: 1})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
	})
}
