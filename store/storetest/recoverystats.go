package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// history returns b's store as a store.RecoveryHistory.
func (b *bundle) history() store.RecoveryHistory { return b.s.(store.RecoveryHistory) }

// recoveryStats lists every recovery record, times normalized.
func (b *bundle) recoveryStats(p *store.ListRecoveryStatsParams) []store.RecoveryStat {
	b.t.Helper()
	got, err := b.history().ListRecoveryStats(b.ctx, p)
	require.NoError(b.t, err, "ListRecoveryStats")
	for i := range got {
		got[i].LastRecoveredAt = normTime(got[i].LastRecoveredAt)
		got[i].LastFailedAt = normTime(got[i].LastFailedAt)
		got[i].UpdatedAt = normTime(got[i].UpdatedAt)
	}
	return got
}

// testRecoveryHistory checks store.RecoveryHistory: the recovery record of
// each kind and method, its sums and last times, paging and refusals.
func testRecoveryHistory(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("tallies add up per kind and method, with the last times", func(t *testing.T) {
		b := setup(t, newStore)
		require.Empty(t, b.recoveryStats(nil), "a fresh store has no record")
		add := func(at time.Duration, ts ...store.RecoveryTally) {
			t.Helper()
			require.NoError(t, b.history().AddRecoveryStats(b.ctx, ts, &store.AddRecoveryStatsParams{Now: b.at(at)}))
		}
		add(time.Second,
			store.RecoveryTally{Kind: "orders", Method: "retry", Recovered: 2, Failed: 1},
			store.RecoveryTally{Kind: "orders", Method: "gap", Recovered: 1},
			store.RecoveryTally{Kind: "orders", Method: "retry", Declined: 3}, // summed with the first
			store.RecoveryTally{Kind: "", Method: "gap", Declined: 1})
		add(2*time.Second, store.RecoveryTally{Kind: "orders", Method: "retry", Failed: 4})
		add(3*time.Second, store.RecoveryTally{Kind: "orders", Method: "gap", Declined: 1})
		add(time.Millisecond, store.RecoveryTally{Kind: "orders", Method: "gap", Recovered: 1}) // an earlier clock: times stay
		add(4 * time.Second)                                                                    // nothing: a no-op
		want := []store.RecoveryStat{
			{Kind: "", Method: "gap", Declined: 1, UpdatedAt: b.time(time.Second)},
			{Kind: "orders", Method: "gap", Recovered: 2, Declined: 1, LastRecoveredAt: b.time(time.Second), UpdatedAt: b.time(3 * time.Second)},
			{Kind: "orders", Method: "retry", Recovered: 2, Declined: 3, Failed: 5, LastRecoveredAt: b.time(time.Second),
				LastFailedAt: b.time(2 * time.Second), UpdatedAt: b.time(2 * time.Second)},
		}
		require.Equal(t, want, b.recoveryStats(nil))
		require.Equal(t, int64(10), want[2].Attempts())

		require.Equal(t, want[:1], b.recoveryStats(&store.ListRecoveryStatsParams{Limit: 1}), "limit")
		require.Equal(t, want[1:], b.recoveryStats(&store.ListRecoveryStatsParams{AfterKind: "", AfterMethod: "gap"}), "after the cursor")
		require.Equal(t, want[2:], b.recoveryStats(&store.ListRecoveryStatsParams{AfterKind: "orders", AfterMethod: "gap"}))
		require.Empty(t, b.recoveryStats(&store.ListRecoveryStatsParams{AfterKind: "orders", AfterMethod: "retry"}))
	})

	t.Run("bad input is refused and changes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		good := store.RecoveryTally{Kind: "k", Method: "m", Recovered: 1}
		for name, ts := range map[string][]store.RecoveryTally{
			"empty method":        {good, {Kind: "k"}},
			"control in kind":     {good, {Kind: "a\x00b", Method: "m"}},
			"control in method":   {good, {Kind: "k", Method: "m\n"}},
			"long method":         {good, {Kind: "k", Method: strings.Repeat("m", store.MaxTextLen+1)}},
			"negative recovered":  {good, {Kind: "k", Method: "m", Recovered: -1}},
			"negative declined":   {good, {Kind: "k", Method: "m", Declined: -1}},
			"negative failed":     {good, {Kind: "k", Method: "m", Failed: -1}},
			"count above the max": {good, {Kind: "k", Method: "m", Failed: store.MaxRecoveryTally + 1}},
			"too many tallies":    make([]store.RecoveryTally, store.MaxListLimit+1),
		} {
			err := b.history().AddRecoveryStats(b.ctx, ts, nil)
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		for name, p := range map[string]*store.ListRecoveryStatsParams{
			"negative limit": {Limit: -1},
			"huge limit":     {Limit: store.MaxListLimit + 1},
			"bad cursor":     {AfterKind: "\x01"},
		} {
			_, err := b.history().ListRecoveryStats(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		}
		require.Empty(t, b.recoveryStats(nil), "refusals changed nothing")
	})
}
