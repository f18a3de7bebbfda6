package sequence_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// countingWaiter counts the Ready calls per number: a Commit calls Ready
// once each time it parks, so the count tells the test who is parked.
type countingWaiter struct {
	sequence.Waiter
	mu    sync.Mutex
	calls map[int64]int
}

func (w *countingWaiter) Ready(ctx context.Context, stream string, n int64) (<-chan struct{}, func(), error) {
	w.mu.Lock()
	w.calls[n]++
	w.mu.Unlock()
	return w.Waiter.Ready(ctx, stream, n)
}

func (w *countingWaiter) parked(n int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[n]
}

// failingBatchStore fails the next CommitBatch calls as a lost connection
// would: an error for the whole call.
type failingBatchStore struct {
	*memory.Store
	fail atomic.Int64 // how many calls still fail
}

func (f *failingBatchStore) CommitBatch(ctx context.Context, stream string, items []store.CommitItem, p *store.CommitBatchParams) ([]store.CommitResult, error) {
	if f.fail.Add(-1) >= 0 {
		return nil, errors.New("connection reset by peer")
	}
	return f.Store.CommitBatch(ctx, stream, items, p)
}

func groupSetup(t *testing.T, maxGroup, n int) (*failingBatchStore, *countingWaiter, *sequence.Leaser, []*sequence.Lease) {
	s := &failingBatchStore{Store: memory.New(nil)}
	w := &countingWaiter{Waiter: startBarrier(t, s), calls: map[int64]int{}}
	l, err := sequence.New(s, &sequence.Config{Barrier: w, MaxGroup: maxGroup})
	require.NoError(t, err)
	xs, err := l.LeaseN(context.Background(), "g", n, &sequence.LeaseOpts{TTL: time.Hour})
	require.NoError(t, err)
	return s, w, l, xs
}

// commitAsync commits x in the background; the error arrives on the channel.
func commitAsync(x *sequence.Lease) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- x.Commit(context.Background(), nil) }()
	return ch
}

func waitParked(t *testing.T, w *countingWaiter, n int64, times int) {
	t.Helper()
	require.Eventually(t, func() bool { return w.parked(n) >= times }, 10*time.Second, 10*time.Microsecond,
		"number %d did not park %d times", n, times)
}

func receive(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: still parked", what)
		return nil
	}
}

// TestRequeuedItemsWakeWhenTheFailedItemResolves: items grouped behind an
// item that fails go back to waiting (errRequeue) and commit once the failed
// number is resolved; they are not parked forever.
func TestRequeuedItemsWakeWhenTheFailedItemResolves(t *testing.T) {
	t.Parallel()
	_, w, _, xs := groupSetup(t, sequence.DefaultMaxGroup, 3)
	ctx := context.Background()
	c2, c3 := commitAsync(xs[1]), commitAsync(xs[2])
	waitParked(t, w, 2, 1)
	waitParked(t, w, 3, 1)
	// 1 leads the group [1 2 3]; the memory backend refuses its function.
	err := sequence.CommitTx(ctx, xs[0], nil, func(context.Context, any) error { return nil })
	require.ErrorIs(t, err, store.ErrUnsupported)
	waitParked(t, w, 2, 2) // requeued
	waitParked(t, w, 3, 2)
	require.NoError(t, xs[0].Release(ctx))
	require.NoError(t, receive(t, c2, "2"))
	require.NoError(t, receive(t, c3, "3"))
}

// TestFailedGroupCallCompletesEveryItem: when the group's backend call fails
// as a whole, every item of the group returns (outcome unknown), the items
// parked behind the group keep waiting, and retries with the same leases
// commit everything.
func TestFailedGroupCallCompletesEveryItem(t *testing.T) {
	t.Parallel()
	s, w, _, xs := groupSetup(t, 3, 4)
	ctx := context.Background()
	var chs []<-chan error
	for i := 1; i < 4; i++ {
		chs = append(chs, commitAsync(xs[i]))
		waitParked(t, w, int64(i+1), 1)
	}
	s.fail.Store(1)
	err := xs[0].Commit(ctx, nil) // leads [1 2 3]; 4 stays parked
	require.ErrorContains(t, err, "connection reset")
	for i, ch := range chs[:2] {
		require.ErrorContains(t, receive(t, ch, "grouped item"), "connection reset", "item %d", i+2)
	}
	select {
	case err := <-chs[2]:
		t.Fatalf("4 returned %v before 3 resolved", err)
	default:
	}
	for _, x := range xs[:3] { // retry with the same leases
		require.NoError(t, x.Commit(ctx, nil))
	}
	require.NoError(t, receive(t, chs[2], "4")) // grouped with the retry of 3, or alone
}
