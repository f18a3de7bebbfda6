package sequence_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
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

// failingBatchStore fails the next CommitMulti calls as a lost connection
// would (an error for the whole call), and refuses the commits of the
// numbers in refuse with errRefused.
type failingBatchStore struct {
	*memory.Store
	fail   atomic.Int64 // how many calls still fail
	refuse sync.Map     // number -> true
}

var errRefused = errors.New("refused by the test")

func (f *failingBatchStore) CommitMulti(ctx context.Context, items []store.StreamCommit, p *store.CommitMultiParams) ([]store.CommitResult, error) {
	if f.fail.Add(-1) >= 0 {
		return nil, errors.New("connection reset by peer")
	}
	out := make([]store.CommitResult, len(items))
	for i, it := range items {
		if _, ok := f.refuse.Load(it.Number); ok {
			out[i].Err = errRefused
			continue
		}
		r, err := f.Store.CommitMulti(ctx, []store.StreamCommit{it}, p)
		if err != nil {
			return nil, err
		}
		out[i] = r[0]
	}
	return out, nil
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
	s, w, _, xs := groupSetup(t, sequence.DefaultMaxGroup, 3)
	ctx := context.Background()
	c2, c3 := commitAsync(xs[1]), commitAsync(xs[2])
	waitParked(t, w, 2, 1)
	waitParked(t, w, 3, 1)
	// 1 leads the group [1 2 3]; the backend refuses it.
	s.refuse.Store(int64(1), true)
	require.ErrorIs(t, xs[0].Commit(ctx, nil), errRefused)
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

// TestWaitingCommitsEndAtTheirDeadlines parks two ordered commits behind an
// unresolved number, on fake time: the one with the earlier local deadline,
// though it begins to wait last, ends exactly at that deadline with
// ErrExpired; the other, extended while it waits, outlives its first
// deadline and commits once its turn comes. Neither handle arms a timer of
// its own (nobody asks for Done): their stream's one timer watches both.
func TestWaitingCommitsEndAtTheirDeadlines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New(nil)
		b, err := barrier.New(s, nil)
		require.NoError(t, err)
		require.NoError(t, b.Start(ctx))
		defer b.Stop()
		l, err := sequence.New(s, &sequence.Config{Barrier: b})
		require.NoError(t, err)
		lease := func(ttl time.Duration) *sequence.Lease {
			x, err := l.Lease(ctx, "d", &sequence.LeaseOpts{TTL: ttl})
			require.NoError(t, err)
			return x
		}
		first, long, short := lease(time.Hour), lease(10*time.Minute), lease(time.Minute)
		start := time.Now()

		longDone, shortDone := make(chan error, 1), make(chan error, 1)
		go func() { longDone <- long.Commit(ctx, []byte("long")) }()
		synctest.Wait() // long waits; the timer is armed for its deadline
		go func() { shortDone <- short.Commit(ctx, []byte("short")) }()
		synctest.Wait() // short waits too, with the earlier deadline

		require.ErrorIs(t, <-shortDone, sequence.ErrExpired)
		require.Equal(t, time.Minute-time.Second, time.Since(start), "short ends at its local deadline: TTL minus the margin")
		require.ErrorIs(t, short.Err(), sequence.ErrExpired)
		require.NoError(t, long.Err(), "long is still held")

		require.NoError(t, long.Extend(ctx, time.Hour))
		time.Sleep(10 * time.Minute) // past long's first deadline
		synctest.Wait()
		select {
		case err := <-longDone:
			t.Fatalf("long's commit ended before its turn: %v", err)
		default:
		}
		require.NoError(t, first.Commit(ctx, []byte("first")))
		require.NoError(t, <-longDone)
		require.ErrorIs(t, long.Err(), sequence.ErrCommitted)
	})
}

// wrappedMemory embeds a *memory.Store and counts its Lease and Commit
// calls.
type wrappedMemory struct {
	*memory.Store
	leases, commits atomic.Int64
}

func (c *wrappedMemory) Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error) {
	c.leases.Add(1)
	return c.Store.Lease(ctx, stream, reqs, p)
}

func (c *wrappedMemory) Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error) {
	c.commits.Add(1)
	return c.Store.Commit(ctx, stream, number, token, p)
}

// TestAWrapperHidesTheCapabilitiesItDoesNotWrap: a type that embeds a
// *memory.Store gets its capabilities, whose calls bypass the wrapper's
// Lease and Commit (store/capability.go); one that embeds the Leaser's
// interface instead hides them, and every lease, ordered commit and
// Complete goes through its wrappers.
func TestAWrapperHidesTheCapabilitiesItDoesNotWrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	embedded := &wrappedMemory{Store: memory.New(nil)}
	l, _ := leaserOn(t, embedded, sequence.Config{})
	for range 3 {
		x, err := l.Lease(ctx, "w", nil)
		require.NoError(t, err)
		require.NoError(t, x.Commit(ctx, []byte("ordered")))
		y, err := l.Lease(ctx, "w", nil)
		require.NoError(t, err)
		require.NoError(t, y.Complete(ctx, []byte("unordered")))
	}
	require.Zero(t, embedded.leases.Load(), "store.OneByOne bypassed the wrapper")
	require.Zero(t, embedded.commits.Load())

	hidden := &wrappedMemory{Store: memory.New(nil)}
	l, err := sequence.New(struct{ sequence.Store }{hidden}, &sequence.Config{Barrier: startBarrier(t, hidden.Store)})
	require.NoError(t, err)
	for range 3 {
		x, err := l.Lease(ctx, "w", nil)
		require.NoError(t, err)
		require.NoError(t, x.Commit(ctx, []byte("ordered")))
		y, err := l.Lease(ctx, "w", nil)
		require.NoError(t, err)
		require.NoError(t, y.Complete(ctx, []byte("unordered")))
	}
	require.Equal(t, int64(6), hidden.leases.Load())
	require.Equal(t, int64(6), hidden.commits.Load())
}
