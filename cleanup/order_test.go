package cleanup_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// TestLaterExpiryWaitsForEarlier: a later number that expires before an
// earlier, live one waits for it, so the earlier one's work gets the
// earlier new number (no inversion across scans).
func TestLaterExpiryWaitsForEarlier(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: partialFor()})})
			require.NoError(t, err)
			defer sv.Stop()
			es := leaseWith(t, s, "inv", []store.LeaseRequest{
				{TTL: 500 * time.Millisecond, OperationID: "op-1"}, {TTL: time.Microsecond, OperationID: "op-2"},
			})
			res, err := sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, 1, res.Expired)
			require.Equal(t, 1, res.Deferred, "2 waits behind the live 1")
			require.Empty(t, res.Resolved)
			require.Equal(t, store.Leased, readAll(t, s, "inv")[1].State)

			waitExpired(t, s, es[0])
			res, err = sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, map[string]int{"partial-work": 2}, res.Resolved)
			got := readAll(t, s, "inv")
			require.Equal(t, int64(3), got[0].RecoveredAs, "1 moves first")
			require.Equal(t, int64(4), got[1].RecoveredAs, "then 2")
		})
	}
}

// TestDeferredStreamRunsAtBlockerExpiry: the loop walks a deferred stream
// again when its blocking lease expires, without waiting for the interval.
func TestDeferredStreamRunsAtBlockerExpiry(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			sv, err := cleanup.New(s, &cleanup.Config{Interval: time.Hour, Observer: rec, Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: partialFor()})})
			require.NoError(t, err)
			leaseWith(t, s, "d", []store.LeaseRequest{
				{TTL: time.Microsecond, OperationID: "op-1"}, {TTL: 2 * time.Second, OperationID: "op-2"},
				{TTL: time.Microsecond, OperationID: "op-3"},
			})
			require.NoError(t, sv.Start(context.Background()))
			defer sv.Stop()
			first := rec.firstCycle(t)
			require.Equal(t, 1, first.Deferred)
			require.Equal(t, map[string]int{"partial-work": 1}, first.Resolved)

			// 2's holder is dead: at its expiry 2 and then 3 move, in order.
			require.Eventually(t, func() bool { return readAll(t, s, "d")[2].State == store.Gap }, 20*time.Second, time.Millisecond)
			got := readAll(t, s, "d")
			require.Equal(t, []int64{4, 5, 6}, []int64{got[0].RecoveredAs, got[1].RecoveredAs, got[2].RecoveredAs})
		})
	}
}

// TestDeferredStreamRunsWhenBlockerResolves: with a barrier, the loop walks
// a deferred stream again as soon as its blocking lease commits, long before
// the lease's expiry or the interval.
func TestDeferredStreamRunsWhenBlockerResolves(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := barrier.New(s, nil)
			require.NoError(t, err)
			require.NoError(t, b.Start(context.Background()))
			defer b.Stop()
			rec := &recorder{}
			sv, err := cleanup.New(s, &cleanup.Config{Interval: time.Hour, Barrier: b, Observer: rec, Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: partialFor()})})
			require.NoError(t, err)
			es := leaseWith(t, s, "w", []store.LeaseRequest{
				{TTL: time.Microsecond, OperationID: "op-1"}, {TTL: time.Hour, OperationID: "op-2"},
				{TTL: time.Microsecond, OperationID: "op-3"},
			})
			require.NoError(t, sv.Start(context.Background()))
			defer sv.Stop()
			require.Equal(t, 1, rec.firstCycle(t).Deferred)
			require.Equal(t, store.Gap, readAll(t, s, "w")[0].State)
			require.Equal(t, store.Leased, readAll(t, s, "w")[2].State, "3 waits behind the live 2")

			_, err = s.Commit(context.Background(), "w", 2, es[1].Token, nil)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return readAll(t, s, "w")[2].State == store.Gap }, 10*time.Second, time.Millisecond,
				"3 is handled once 2 committed, though the interval is an hour")
			got := readAll(t, s, "w")
			require.Equal(t, int64(4), got[0].RecoveredAs)
			require.Equal(t, int64(5), got[2].RecoveredAs)

			// The first cycle was a full scan; the one that moved 3 a re-run
			// of the stream, reported as such.
			require.Eventually(t, func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				for _, c := range rec.cycles[1:] {
					if c.Resolved["partial-work"] == 1 {
						return !c.Full
					}
				}
				return false
			}, 10*time.Second, time.Millisecond)
			require.True(t, rec.firstCycle(t).Full)
		})
	}
}
