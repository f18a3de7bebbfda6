package postgres

import (
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestRounds drives the statement rounds of AcquireLeases and ReleaseLeases
// with a scripted statement: distinct names per statement (a name twice
// waits for the next), a deadlock of a statement of several items retried
// one item per statement, items retried at most maxLeaseAttempts times, and an
// error that ends the call given to every item left.
func TestRounds(t *testing.T) {
	names := []string{"a", "b", "a", "c"}
	name := func(i int) string { return names[i] }
	type run struct {
		calls  [][]int
		failed map[int]error
	}
	drive := func(stmt func(round []int) ([]int, error)) run {
		r := run{failed: map[int]error{}}
		rounds([]int{0, 1, 2, 3}, name, func(round []int) ([]int, error) {
			r.calls = append(r.calls, slices.Clone(round))
			return stmt(round)
		}, func(i int, err error) { r.failed[i] = err })
		return r
	}

	r := drive(func([]int) ([]int, error) { return nil, nil })
	require.Equal(t, [][]int{{0, 1, 3}, {2}}, r.calls)
	require.Empty(t, r.failed)

	deadlock := &pgconn.PgError{Code: "40P01"}
	r = drive(func(round []int) ([]int, error) {
		if len(round) > 1 {
			return nil, deadlock
		}
		return nil, nil
	})
	require.Equal(t, [][]int{{0, 1, 3}, {0}, {1}, {3}, {2}}, r.calls)
	require.Empty(t, r.failed)

	r = drive(func(round []int) ([]int, error) {
		return slices.DeleteFunc(slices.Clone(round), func(i int) bool { return i != 1 }), nil
	})
	want := [][]int{{0, 1, 3}, {1, 2}}
	for len(want) < maxLeaseAttempts {
		want = append(want, []int{1})
	}
	require.Equal(t, want, r.calls, "item 1 changes under every statement")
	require.Equal(t, map[int]error{1: nil}, r.failed, "given up after maxLeaseAttempts")

	lost := errors.New("connection lost")
	r = drive(func([]int) ([]int, error) { return nil, lost })
	require.Equal(t, [][]int{{0, 1, 3}}, r.calls)
	require.Equal(t, map[int]error{0: lost, 1: lost, 2: lost, 3: lost}, r.failed)
}
