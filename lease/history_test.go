package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// lostStore answers every acquire with lost history, as the PostgreSQL
// store does after a failover that lost the name's fences, and counts the
// acquires.
type lostStore struct {
	*memory.Store
	calls atomic.Int32
}

func (s *lostStore) AcquireLeases(_ context.Context, reqs []store.AcquireLeaseRequest, _ *store.LeaseBatchParams) []store.AcquireLeaseResult {
	s.calls.Add(1)
	out := make([]store.AcquireLeaseResult, len(reqs))
	for i, r := range reqs {
		out[i].Err = &store.HistoryLostError{Name: r.Name, What: store.LostFence, Seen: 8, Got: 6}
	}
	return out
}

// TestAcquireStopsAtLostHistory checks that a blocking Acquire returns
// store.ErrHistoryLost at once, the *store.HistoryLostError intact, instead
// of retrying it as a transient error until its timeout; TryAcquire too.
func TestAcquireStopsAtLostHistory(t *testing.T) {
	t.Parallel()
	s := &lostStore{Store: memory.New(nil)}
	m := newManager(t, s, &lease.Config{Owner: "alice"})
	_, err := m.Acquire(t.Context(), "x", &lease.AcquireOpts{TTL: time.Minute, Timeout: 5 * time.Second})
	require.ErrorIs(t, err, store.ErrHistoryLost)
	var lost *store.HistoryLostError
	require.ErrorAs(t, err, &lost)
	require.Equal(t, int64(6), lost.Got)
	require.Equal(t, int32(1), s.calls.Load(), "one attempt, no retry")

	_, err = m.TryAcquire(t.Context(), "x", &lease.AcquireOpts{TTL: time.Minute})
	require.ErrorIs(t, err, store.ErrHistoryLost)
}
