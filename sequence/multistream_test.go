package sequence_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// gatedStore records the LeaseMulti and CommitMulti calls that reach the
// backend and can hold the next one at a gate (so that the calls behind it
// queue and go together). On a lostReplyStore it can lose the reply of a
// call it let through.
type gatedStore struct {
	fullStore
	mu      sync.Mutex
	leases  [][]store.StreamLeases
	commits [][]store.StreamCommit
	gate    *gate // the next call's, lease or commit
}

type gate struct{ entered, open chan struct{} }

// hold makes the next call wait until open is called.
func (g *gatedStore) hold() (entered <-chan struct{}, open func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := &gate{entered: make(chan struct{}), open: make(chan struct{})}
	g.gate = gt
	return gt.entered, sync.OnceFunc(func() { close(gt.open) })
}

func (g *gatedStore) pass() {
	g.mu.Lock()
	gt := g.gate
	g.gate = nil
	g.mu.Unlock()
	if gt != nil {
		close(gt.entered)
		<-gt.open
	}
}

func (g *gatedStore) LeaseMulti(ctx context.Context, items []store.StreamLeases, p *store.LeaseParams) []store.LeaseResult {
	g.mu.Lock()
	g.leases = append(g.leases, items)
	g.mu.Unlock()
	g.pass()
	return g.fullStore.LeaseMulti(ctx, items, p)
}

func (g *gatedStore) CommitMulti(ctx context.Context, items []store.StreamCommit, p *store.CommitMultiParams) ([]store.CommitResult, error) {
	g.mu.Lock()
	g.commits = append(g.commits, items)
	g.mu.Unlock()
	g.pass()
	return g.fullStore.CommitMulti(ctx, items, p)
}

// streamsOf returns the streams of a call's commits, in order.
func streamsOf(items []store.StreamCommit) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = fmt.Sprint(it.Stream, "/", it.Number)
	}
	return out
}

// commitTogether holds a commit of first at the gate, starts the commits of
// xs behind it, and lets them go once all queued: they share the next
// CommitMulti. It returns their errors, in order.
func commitTogether(t *testing.T, g *gatedStore, l *sequence.Leaser, first *sequence.Lease, xs ...*sequence.Lease) []error {
	t.Helper()
	ctx := context.Background()
	entered, open := g.hold()
	firstDone := commitAsync(first)
	wait(t, entered, "the first commit is in flight")
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for i, x := range xs {
		wg.Go(func() { errs[i] = x.Commit(ctx, []byte(x.Stream())) })
		require.Eventually(t, func() bool { return sequence.QueuedCommits(l) == i+1 }, 10*time.Second, 50*time.Microsecond)
	}
	open()
	wg.Wait()
	require.NoError(t, receive(t, firstDone, "the first commit"))
	return errs
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out: %s", what)
	}
}

// TestARefusedItemDoesNotFailItsNeighbours: commits of three streams share
// one backend call; the middle one's number was turned into a gap by the
// backend (expired, as the cleanup loop would) while its holder still
// believed it held: it alone fails, with ErrExpired, and the others commit.
func TestARefusedItemDoesNotFailItsNeighbours(t *testing.T) {
	t.Parallel()
	for name, s := range realBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			g := &gatedStore{fullStore: s}
			l, _ := leaserOn(t, g, sequence.Config{})
			lease := func(stream string) *sequence.Lease {
				x, err := l.Lease(ctx, stream, &sequence.LeaseOpts{TTL: time.Hour})
				require.NoError(t, err)
				return x
			}
			first, a, b, c := lease("first"), lease("a"), lease("b"), lease("c")
			at := b.ExpiresAt()
			require.NoError(t, s.ResolveExpired(ctx, "b", b.Number(), &store.ResolveExpiredParams{Now: &at}))

			errs := commitTogether(t, g, l, first, a, b, c)
			require.NoError(t, errs[0])
			require.ErrorIs(t, errs[1], sequence.ErrExpired)
			require.NoError(t, errs[2])
			require.Equal(t, []string{"a/1", "b/1", "c/1"}, streamsOf(g.commits[1]), "one call for the three streams")
			for _, stream := range []string{"a", "c"} {
				e := readAll(t, s, stream)[0]
				require.Equal(t, store.Committed, e.State)
				require.Equal(t, []byte(stream), e.Payload)
			}
			require.Equal(t, store.Gap, readAll(t, s, "b")[0].State)
		})
	}
}

// TestALostReplyOfAMultiStreamBatchIsRetried: the reply of a backend call
// carrying the commits of several streams is lost, after the call took
// effect or before: every caller gets the error (the outcome is unknown),
// and each retry with its lease reports the truth and commits at most once
// (I7).
func TestALostReplyOfAMultiStreamBatchIsRetried(t *testing.T) {
	t.Parallel()
	for name, s := range realBackends(t) {
		for _, committed := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/committed=%v", name, committed), func(t *testing.T) {
				ctx := context.Background()
				lost := &lostReplyStore{fullStore: s, after: committed}
				g := &gatedStore{fullStore: lost}
				l, _ := leaserOn(t, g, sequence.Config{})
				prefix := fmt.Sprint("lost-", committed, "-")
				var xs []*sequence.Lease
				for _, stream := range []string{"first", "a", "b", "c"} {
					x, err := l.Lease(ctx, prefix+stream, &sequence.LeaseOpts{TTL: time.Hour})
					require.NoError(t, err)
					xs = append(xs, x)
				}
				lost.lose.Store(2) // the first call's reply and the shared one's
				entered, open := g.hold()
				firstDone := commitAsync(xs[0])
				wait(t, entered, "the first commit is in flight")
				errs := make([]error, 3)
				var wg sync.WaitGroup
				for i, x := range xs[1:] {
					wg.Go(func() { errs[i] = x.Commit(ctx, []byte("v")) })
					require.Eventually(t, func() bool { return sequence.QueuedCommits(l) == i+1 }, 10*time.Second, 50*time.Microsecond)
				}
				open()
				wg.Wait()
				require.ErrorIs(t, receive(t, firstDone, "the first commit"), errConnReset)
				for i, err := range errs {
					require.ErrorIs(t, err, errConnReset, "caller %d: the outcome is unknown", i)
				}
				require.Len(t, g.commits[1], 3, "the three streams in one call")
				for i, x := range xs { // the retries, with the payload of the first attempt
					p := []byte("v")
					if i == 0 {
						p = nil // commitAsync's
					}
					require.NoError(t, x.Commit(ctx, p))
					require.NoError(t, x.Commit(ctx, p), "a retry of a retry")
				}
				for _, x := range xs {
					es := readAll(t, s, x.Stream())
					require.Len(t, es, 1)
					require.Equal(t, store.Committed, es[0].State)
				}
			})
		}
	}
}

// TestBadInputNeverJoinsABatch: Lease calls with bad input fail at once
// with their typed error and never reach the shared statement; the calls
// queued with them on other streams each get their own lease.
func TestBadInputNeverJoinsABatch(t *testing.T) {
	t.Parallel()
	for name, s := range realBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			g := &gatedStore{fullStore: s}
			l, _ := leaserOn(t, g, sequence.Config{})
			entered, open := g.hold()
			var wg sync.WaitGroup
			wg.Go(func() {
				_, err := l.Lease(ctx, "first", nil)
				require.NoError(t, err)
			})
			wait(t, entered, "the first lease is in flight")
			got := make([]*sequence.Lease, 3)
			for i := range got {
				wg.Go(func() {
					x, err := l.Lease(ctx, fmt.Sprint("s", i), &sequence.LeaseOpts{TTL: time.Duration(i+1) * time.Minute})
					require.NoError(t, err)
					got[i] = x
				})
				require.Eventually(t, func() bool { return sequence.QueuedLeases(l) == i+1 }, 10*time.Second, 50*time.Microsecond)
			}
			_, err := l.Lease(ctx, "bad\x00stream", nil)
			require.ErrorIs(t, err, sequence.ErrInvalidStream)
			_, err = l.Lease(ctx, "s0", &sequence.LeaseOpts{TTL: -time.Second})
			require.ErrorIs(t, err, sequence.ErrInvalidTTL)
			_, err = l.Lease(ctx, "s0", &sequence.LeaseOpts{Kind: string(make([]byte, store.MaxTextLen+1))})
			require.ErrorIs(t, err, sequence.ErrInvalidArgument)
			require.Equal(t, 3, sequence.QueuedLeases(l), "bad input never queued")
			open()
			wg.Wait()
			require.Len(t, g.leases[1], 3, "one statement for the three streams")
			for i, x := range got {
				require.Equal(t, fmt.Sprint("s", i), x.Stream())
				require.Equal(t, int64(1), x.Number())
				require.Equal(t, time.Duration(i+1)*time.Minute, x.ExpiresAt().Sub(x.LeasedAt()), "its own TTL")
			}
		})
	}
}

// TestACommitSentAloneTakesNoParkedCommitAlong: a CommitTx whose lease is
// over by the holder's local estimate goes to the database alone, through
// the engine of its transaction type; the commit parked behind it must not
// be taken along into a run that nobody completes (it hung forever), and
// commits once its turn comes.
func TestACommitSentAloneTakesNoParkedCommitAlong(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	pg, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
	require.NoError(t, err)
	w := &countingWaiter{Waiter: startBarrier(t, pg), calls: map[int64]int{}}
	l, err := sequence.New(pg, &sequence.Config{Barrier: w, Margin: 300 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	first, err := l.Lease(ctx, "alone", &sequence.LeaseOpts{TTL: 2 * time.Second})
	require.NoError(t, err)
	second, err := l.Lease(ctx, "alone", &sequence.LeaseOpts{TTL: time.Minute})
	require.NoError(t, err)
	parked := commitAsync(second)
	waitParked(t, w, 2, 1)
	wait(t, first.Done(), "the first lease's local deadline")
	require.ErrorIs(t, first.Err(), sequence.ErrExpired)
	// Over by the local estimate, live by the database's clock for another
	// 300 ms: the database decides, and commits it.
	err = sequence.CommitTx(ctx, first, []byte("first"), func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	require.NoError(t, err)
	require.NoError(t, receive(t, parked, "the parked commit of 2"))
	requireOrderedLedger(t, readAll(t, pg, "alone"), 2)
}
