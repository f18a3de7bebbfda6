package main

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// apply folds ops into a fresh read model in the order given.
func apply(ops []op) readModel {
	m := readModel{}
	for _, o := range ops {
		m.apply(o)
	}
	return m
}

// sourceOps are the operations of events in source order.
func sourceOps(events []event) []op {
	ops := make([]op, len(events))
	for i, e := range events {
		ops[i] = project(e)
	}
	return ops
}

// TestReadModelIsOrderSensitive shows that the comparison the demo ends with
// catches operations applied out of order: the same operations shuffled do
// not match the sequential replay, in order they do.
func TestReadModelIsOrderSensitive(t *testing.T) {
	events := generate(1, 2000, 50)
	want := replay(events)
	require.Zero(t, want.refused(), "the source never breaks the state machine")
	ops := sourceOps(events)

	require.True(t, apply(ops).equal(want), "in order")

	shuffled := slices.Clone(ops)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	got := apply(shuffled)
	require.False(t, got.equal(want), "shuffled")
	require.NotZero(t, got.refused(), "a shuffle breaks transitions: paid before placed, shipped before paid")
}

// TestReadModelSwapInOneAccount swaps two operations of one account that the
// state machine accepts in either order (two orders placed one after the
// other): the counts and statuses come out the same, and the account's hash
// chain still tells the orders apart.
func TestReadModelSwapInOneAccount(t *testing.T) {
	events := generate(1, 2000, 50)
	want := replay(events)
	ops := sourceOps(events)
	i, j := adjacentPlacements(t, ops)
	ops[i], ops[j] = ops[j], ops[i]
	got := apply(ops)
	require.Zero(t, got.refused())
	a, b := got[ops[i].Account], want[ops[i].Account]
	require.Equal(t, b.Orders, a.Orders)
	require.Equal(t, b.Counts, a.Counts)
	require.Equal(t, b.Revenue, a.Revenue)
	require.NotEqual(t, b.Chain, a.Chain)
	require.False(t, got.equal(want))
}

// adjacentPlacements finds two placements of one account with none of that
// account's operations between them.
func adjacentPlacements(t *testing.T, ops []op) (int, int) {
	t.Helper()
	last := map[int]int{} // account -> index of its latest operation
	for j, o := range ops {
		if i, ok := last[o.Account]; ok && ops[i].Status == "placed" && o.Status == "placed" {
			return i, j
		}
		last[o.Account] = j
	}
	t.Fatal("no account places two orders in a row")
	return 0, 0
}

// TestReadModelAcrossAccounts interleaves the accounts differently (each
// account's operations kept in their order, as the pipeline keeps them):
// the read model matches the replay, so the comparison asks for exactly the
// order the pipeline promises and no more.
func TestReadModelAcrossAccounts(t *testing.T) {
	events := generate(1, 2000, 50)
	ops := sourceOps(events)
	byAccount := slices.Clone(ops)
	slices.SortStableFunc(byAccount, func(a, b op) int { return b.Account - a.Account })
	require.NotEqual(t, ops, byAccount)
	require.True(t, apply(byAccount).equal(replay(events)))
}

// TestSuccessors checks the chain of events per account the pipeline
// schedules by: following next from each first event visits every event
// once, in source order within its account.
func TestSuccessors(t *testing.T) {
	events := generate(3, 500, 7)
	next, first := successors(events)
	require.Len(t, first, 7)
	seen := 0
	for _, i := range first {
		for ; i >= 0; i = next[i] {
			seen++
			if n := next[i]; n >= 0 {
				require.Greater(t, n, i)
				require.Equal(t, events[i].Account, events[n].Account)
				for k := i + 1; k < n; k++ {
					require.NotEqual(t, events[i].Account, events[k].Account, "next skips none of the account's events")
				}
			}
		}
	}
	require.Equal(t, len(events), seen)
}
