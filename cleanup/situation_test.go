package cleanup_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// TestSelectorSeesSituation: a SituationSelector sees the time since
// expiry by the database clock, and the kind's recovery history, which the
// loop keeps in the store: a new Service and Pipeline on the same store (a
// restart) sees the failure its predecessor recorded before trying anything.
func TestSelectorSeesSituation(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := &downTracker{}
			d.down.Store(true)
			var mu sync.Mutex
			var seen []recovery.Situation
			newService := func() *cleanup.Service {
				partial := recovery.PartialWork(s, d.tracker(), recovery.DefaultOwner)
				gap := recovery.Gap(s)
				sel := recovery.SituationFunc(func(sit recovery.Situation) recovery.Steps {
					mu.Lock()
					seen = append(seen, sit)
					mu.Unlock()
					return recovery.Steps{partial, gap}
				})
				sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{Selector: sel})})
				require.NoError(t, err)
				t.Cleanup(sv.Stop)
				return sv
			}
			es := leaseExpired(t, s, "sit", 1)
			sv := newService()
			_, err := sv.RunOnce(ctx)
			require.Error(t, err, "the tracker is down")
			sv.Stop()

			mu.Lock()
			require.Len(t, seen, 1)
			first := seen[0]
			seen = nil
			mu.Unlock()
			require.Equal(t, es[0].Number, first.Entry.Number)
			require.False(t, first.Now.IsZero(), "the database clock")
			require.Positive(t, first.SinceExpiry)
			require.Equal(t, first.Now.Sub(first.Entry.ExpiresAt), first.SinceExpiry)
			require.Empty(t, first.History, "nothing recorded yet")

			d.down.Store(false)
			res, err := newService().RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, map[string]int{recovery.MethodPartialWork: 1}, res.Resolved)
			mu.Lock()
			require.Len(t, seen, 1)
			again := seen[0]
			mu.Unlock()
			pw := again.History[recovery.MethodPartialWork]
			require.Equal(t, int64(1), pw.Failed, "the restart read the failure back from the store")
			require.Equal(t, int64(0), pw.Recovered)
			require.False(t, pw.LastFailedAt.IsZero())
			require.Greater(t, again.SinceExpiry, first.SinceExpiry, "later by the database clock")

			stats, err := s.(store.RecoveryHistory).ListRecoveryStats(ctx, nil)
			require.NoError(t, err)
			require.Len(t, stats, 1, "the gap step was never reached")
			require.Equal(t, "orders", stats[0].Kind)
			require.Equal(t, recovery.MethodPartialWork, stats[0].Method)
			require.Equal(t, [3]int64{1, 0, 1}, [3]int64{stats[0].Recovered, stats[0].Declined, stats[0].Failed},
				"the cycle's success was written after it")
		})
	}
}
