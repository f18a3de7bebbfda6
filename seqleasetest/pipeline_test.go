package seqleasetest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/seqleasetest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
)

// TestPipelineCrash is the walk-through of docs/testing.md, kept here so
// that it keeps working: a worker dies
// holding number 1 (with its partial work recorded), a healthy worker's
// commit of 2 waits behind it; the clock passes the dead lease's TTL, one
// cleanup cycle moves its work to 3, and the stream drains.
func TestPipelineCrash(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var mu sync.Mutex
	partial := map[string][]byte{}
	tracker := recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		w, ok := partial[e.OperationID]
		return w, ok, nil
	})
	st := seqleasetest.Setup(t, &seqleasetest.Config{
		Leaser:   &sequence.Config{DefaultTTL: time.Hour}, // healthy workers outlive the test's clock moves
		Recovery: &recovery.Config{WorkTracker: tracker},
	})

	// The worker of event a leases 1, records half its work, and dies.
	_, err := st.Leaser.Lease(ctx, "orders", &sequence.LeaseOpts{OperationID: "a", TTL: time.Minute})
	require.NoError(t, err)
	mu.Lock()
	partial["a"] = []byte("half of a")
	mu.Unlock()

	// The worker of event b leases 2; its ordered commit waits for 1.
	b, err := st.Leaser.Lease(ctx, "orders", &sequence.LeaseOpts{OperationID: "b"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.Commit(ctx, []byte("done b")) }()

	st.Clock.Advance(time.Minute) // a's lease is over; b's has an hour
	res, err := st.RunCleanup(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Resolved[recovery.MethodPartialWork])

	st.Drain(ctx, t, "orders")
	require.NoError(t, <-done)
	st.RequireGap(t, "orders", 1, store.ReasonRecovered)
	st.RequireCommitted(t, "orders", 2, []byte("done b"))
	st.RequireCommitted(t, "orders", 3, []byte("half of a"))
	st.RequireAllResolved(t, "orders")
}
