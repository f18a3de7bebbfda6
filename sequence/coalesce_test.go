package sequence_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// hookedStore runs a hook before each lease statement (Lease, LeaseMulti).
type hookedStore struct {
	*memory.Store
	mu     sync.Mutex
	before func(n int) // n counts the lease statements, from 1
	n      int
}

func (h *hookedStore) hook() {
	h.mu.Lock()
	h.n++
	n, before := h.n, h.before
	h.mu.Unlock()
	if before != nil {
		before(n)
	}
}

func (h *hookedStore) Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error) {
	h.hook()
	return h.Store.Lease(ctx, stream, reqs, p)
}

func (h *hookedStore) LeaseMulti(ctx context.Context, items []store.StreamLeases, p *store.LeaseParams) []store.LeaseResult {
	h.hook()
	return h.Store.LeaseMulti(ctx, items, p)
}

// TestAbandonedCoalescedLeaseIsNeverLeaked cancels a queued caller's context
// while the batch that carries its lease is in flight. Whatever the race
// between the caller noticing and the leader completing the batch, the
// number must either be returned to the caller or released: never left
// leased with nobody holding it (which would stall every later ordered
// commit until it expires).
func TestAbandonedCoalescedLeaseIsNeverLeaked(t *testing.T) {
	t.Parallel()
	const rounds = 200
	leaked := 0
	for round := range rounds {
		stream := fmt.Sprintf("s%d", round)
		s := &hookedStore{Store: memory.New(nil)}
		l, err := sequence.New(s, &sequence.Config{MaxLeaseBatch: sequence.DefaultMaxLeaseBatch, UnorderedOnly: true}) // coalescing, which memory turns off by default
		require.NoError(t, err)
		ctx := context.Background()
		ctxC, cancelC := context.WithCancel(ctx)
		entered, proceed := make(chan struct{}), make(chan struct{})
		s.before = func(n int) {
			switch n {
			case 1: // A's statement: hold it until B and C queued behind it
				close(entered)
				<-proceed
			case 2: // B leads the batch [B, C]: C gives up meanwhile
				cancelC()
			}
		}
		var wg sync.WaitGroup
		var a, b, c *sequence.Lease
		var errC error
		wg.Go(func() { a, err = l.Lease(ctx, stream, &sequence.LeaseOpts{TTL: time.Hour}) })
		<-entered
		var errB error
		wg.Go(func() { b, errB = l.Lease(ctx, stream, &sequence.LeaseOpts{TTL: time.Hour}) })
		require.Eventually(t, func() bool { return sequence.QueuedLeases(l) == 1 }, 10*time.Second, 10*time.Microsecond)
		wg.Go(func() { c, errC = l.Lease(ctxC, stream, &sequence.LeaseOpts{TTL: time.Hour}) })
		require.Eventually(t, func() bool { return sequence.QueuedLeases(l) == 2 }, 10*time.Second, 10*time.Microsecond)
		close(proceed)
		wg.Wait()
		require.NoError(t, err)
		require.NoError(t, errB)
		require.Equal(t, int64(1), a.Number())
		require.Equal(t, int64(2), b.Number())
		if errC == nil {
			require.Equal(t, int64(3), c.Number()) // handed to the caller: its to resolve
			continue
		}
		require.ErrorIs(t, errC, context.Canceled)
		es, err := s.Read(ctx, stream, 2, 1)
		require.NoError(t, err)
		require.Len(t, es, 1)
		if es[0].State != store.Gap {
			leaked++
		}
	}
	require.Zero(t, leaked, "numbers leased for a caller that gave up, neither returned nor released, in %d of %d rounds", leaked, rounds)
}

// TestAbandonedCoalescedLeaseReturnsAtOnce: a caller whose lease is in
// flight in another caller's batch returns as soon as its context ends,
// without waiting for the shared statement (up to WriteTimeout); the leader
// releases the number it leased for it.
func TestAbandonedCoalescedLeaseReturnsAtOnce(t *testing.T) {
	t.Parallel()
	s := &hookedStore{Store: memory.New(nil)}
	l, err := sequence.New(s, &sequence.Config{MaxLeaseBatch: sequence.DefaultMaxLeaseBatch, UnorderedOnly: true})
	require.NoError(t, err)
	ctx := context.Background()
	ctxC, cancelC := context.WithCancel(ctx)
	defer cancelC()
	entered1, proceed1 := make(chan struct{}), make(chan struct{})
	entered2, proceed2 := make(chan struct{}), make(chan struct{})
	s.before = func(n int) {
		switch n {
		case 1: // A's statement: B and C queue behind it
			close(entered1)
			<-proceed1
		case 2: // B's statement carries C's lease
			close(entered2)
			<-proceed2
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		_, err := l.Lease(ctx, "s", nil)
		require.NoError(t, err)
	})
	<-entered1
	wg.Go(func() {
		_, err := l.Lease(ctx, "s", nil)
		require.NoError(t, err)
	})
	require.Eventually(t, func() bool { return sequence.QueuedLeases(l) == 1 }, 10*time.Second, 10*time.Microsecond)
	errC := make(chan error, 1)
	go func() {
		_, err := l.Lease(ctxC, "s", nil)
		errC <- err
	}()
	require.Eventually(t, func() bool { return sequence.QueuedLeases(l) == 2 }, 10*time.Second, 10*time.Microsecond)
	close(proceed1)
	<-entered2 // B leads [B, C] and its statement hangs
	cancelC()
	select {
	case err := <-errC:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		close(proceed2)
		<-errC
		t.Fatal("the caller that gave up waited for the shared statement")
	}
	close(proceed2)
	wg.Wait()
	es, err := s.Read(ctx, "s", 2, 1)
	require.NoError(t, err)
	require.Equal(t, store.Gap, es[0].State, "the abandoned number was released")
}

// TestCoalescingStressWithCancellations runs many concurrent leases, some
// with contexts that end at random moments, through a slow statement: the
// queue never stalls (a last lease completes), and every number leased was
// either returned to its caller or released, never leaked.
func TestCoalescingStressWithCancellations(t *testing.T) {
	t.Parallel()
	s := &hookedStore{Store: memory.New(nil)}
	s.before = func(int) { time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond) }
	l, err := sequence.New(s, &sequence.Config{MaxLeaseBatch: 8, UnorderedOnly: true})
	require.NoError(t, err)
	const callers = 400
	var mu sync.Mutex
	held := map[int64]bool{}
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			ctx := context.Background()
			if i%2 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(300))*time.Microsecond)
				defer cancel()
			}
			x, err := l.Lease(ctx, "s", &sequence.LeaseOpts{TTL: time.Hour})
			if err != nil {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				return
			}
			mu.Lock()
			held[x.Number()] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last, err := l.Lease(ctx, "s", nil)
	require.NoError(t, err, "the queue stalled")
	es, err := s.Read(context.Background(), "s", 0, store.MaxListLimit)
	require.NoError(t, err)
	require.Len(t, es, int(last.Number()))
	for _, e := range es[:len(es)-1] {
		if !held[e.Number] {
			require.Equal(t, store.Gap, e.State, "number %d: leased for a caller that gave up, not released", e.Number)
		}
	}
}
