package sequence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// fullStore is a backend with everything the tests read and write, and the
// capabilities both real backends have (a wrapper that embeds it forwards
// them).
type fullStore interface {
	sequence.Store
	store.MultiLeaser
	store.MultiCommitter
	barrier.Source
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
	ResolveExpired(ctx context.Context, stream string, number int64, p *store.ResolveExpiredParams) error
	ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error)
}

// realBackends returns a memory store on the real clock and a PostgreSQL
// store on a fresh schema.
func realBackends(t *testing.T) map[string]fullStore {
	pool := pgtest.Shared(t, false)
	pg, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
	require.NoError(t, err)
	return map[string]fullStore{"memory": memory.New(nil), "postgres": pg}
}

func leaserOn(t testing.TB, s fullStore, cfg sequence.Config) (*sequence.Leaser, *barrier.Barrier) {
	b := startBarrier(t, s)
	cfg.Barrier = b
	l, err := sequence.New(s, &cfg)
	require.NoError(t, err)
	return l, b
}

func readAll(t *testing.T, s fullStore, stream string) []store.Entry {
	var out []store.Entry
	for {
		es, err := s.Read(context.Background(), stream, int64(len(out)), store.MaxListLimit)
		require.NoError(t, err)
		out = append(out, es...)
		if len(es) < store.MaxListLimit {
			return out
		}
	}
}

// requireOrderedLedger checks I1 (dense, all resolved) and I4 on the ledger:
// every committed entry resolved no earlier than every entry before it.
func requireOrderedLedger(t *testing.T, es []store.Entry, n int) {
	t.Helper()
	require.Len(t, es, n)
	var latest time.Time
	for i, e := range es {
		require.Equal(t, int64(i+1), e.Number, "dense")
		require.True(t, e.State.Resolved(), "%d unresolved", e.Number)
		if e.State == store.Committed {
			require.False(t, e.ResolvedAt.Before(latest), "%d committed at %v, before an earlier number resolved at %v", e.Number, e.ResolvedAt, latest)
		}
		if e.ResolvedAt.After(latest) {
			latest = e.ResolvedAt
		}
	}
}

// committedNumbers reads the stream through the ordered reader.
func collect(t *testing.T, b *barrier.Barrier, stream string, opts *barrier.ReadOpts) []store.Entry {
	var out []store.Entry
	for e, err := range b.Entries(context.Background(), stream, opts) {
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

// TestReverseOrderCommits commits numbers from many goroutines in reverse
// and random order with random delays, releasing some: every ordered commit
// happens after all earlier numbers resolved (I4), and the reader yields
// exactly the committed entries in order (I5).
func TestReverseOrderCommits(t *testing.T) {
	t.Parallel()
	for name, s := range realBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l, b := leaserOn(t, s, sequence.Config{})
			const n = 80
			leases, err := l.LeaseN(ctx, "rev", n, &sequence.LeaseOpts{TTL: time.Minute})
			require.NoError(t, err)
			var wg sync.WaitGroup
			for i := n - 1; i >= 0; i-- {
				x := leases[i]
				wg.Go(func() {
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					if x.Number()%7 == 0 {
						assert.NoError(t, x.Release(ctx))
						return
					}
					assert.NoError(t, x.Commit(ctx, fmt.Appendf(nil, "v%d", x.Number())))
				})
			}
			wg.Wait()
			requireOrderedLedger(t, readAll(t, s, "rev"), n)

			var want []int64
			for i := int64(1); i <= n; i++ {
				if i%7 != 0 {
					want = append(want, i)
				}
			}
			got := collect(t, b, "rev", nil)
			require.Equal(t, want, numbersOf(got))
			for _, e := range got {
				require.Equal(t, fmt.Appendf(nil, "v%d", e.Number), e.Payload)
			}
		})
	}
}

func numbersOf(es []store.Entry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.Number
	}
	return out
}

// TestLateCommitAfterGap stalls a holder past its TTL, declares the number a
// gap, and then lets the holder commit: exactly one of the two wins.
func TestLateCommitAfterGap(t *testing.T) {
	t.Parallel()
	for name, s := range realBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l, _ := leaserOn(t, s, sequence.Config{})
			x, err := l.Lease(ctx, "late", &sequence.LeaseOpts{TTL: 20 * time.Millisecond})
			require.NoError(t, err)
			next, err := l.Lease(ctx, "late", &sequence.LeaseOpts{TTL: time.Minute})
			require.NoError(t, err)
			waitExpired(t, s, "late", 1)
			require.NoError(t, s.ResolveExpired(ctx, "late", 1, nil))
			require.ErrorIs(t, x.Commit(ctx, []byte("late")), sequence.ErrExpired)
			require.NoError(t, next.Commit(ctx, []byte("next")), "the gap released the barrier")
			es := readAll(t, s, "late")
			require.Equal(t, store.Gap, es[0].State)
			require.Equal(t, store.ReasonExpired, es[0].GapReason)
			require.Nil(t, es[0].Payload)
			require.Equal(t, store.Committed, es[1].State)
		})
	}
}

// waitExpired waits until number of stream is past its expiry by the
// backend's clock.
func waitExpired(t *testing.T, s fullStore, stream string, number int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		es, err := s.ListExpired(context.Background(), &store.ListExpiredParams{Stream: stream})
		require.NoError(t, err)
		return slices.ContainsFunc(es, func(e store.Entry) bool { return e.Number == number })
	}, 10*time.Second, time.Millisecond)
}

// TestCommitTxRacesGapDeclaration opens the holder's committing transaction
// (its conditional write done, its function running) and declares the
// number a gap meanwhile: the declaration waits for the row lock, and
// exactly one side wins: the commit if the function succeeds, the gap if it
// fails.
func TestCommitTxRacesGapDeclaration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	l, _ := leaserOn(t, s, sequence.Config{})
	_, err = pool.Exec(ctx, "CREATE TABLE "+schema+".read_model (n bigint PRIMARY KEY)")
	require.NoError(t, err)

	for _, fnFails := range []bool{false, true} {
		x, err := l.Lease(ctx, "tx", &sequence.LeaseOpts{TTL: time.Minute})
		require.NoError(t, err)
		after := x.ExpiresAt().Add(time.Second) // the declaration's pinned clock: past the expiry
		declared := make(chan error, 1)
		err = sequence.CommitTx(ctx, x, []byte("tx"), func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".read_model VALUES ($1)", x.Number()); err != nil {
				return err
			}
			go func() {
				declared <- s.ResolveExpired(context.Background(), "tx", x.Number(), &store.ResolveExpiredParams{Now: &after})
			}()
			// Wait until the declaration is blocked on our row lock.
			require.Eventually(t, func() bool {
				var waiting bool
				err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%gap_reason%' AND datname = current_database())`).Scan(&waiting)
				return err == nil && waiting
			}, 10*time.Second, time.Millisecond)
			if fnFails {
				return errors.New("projection failed")
			}
			return nil
		})
		declErr := <-declared
		var inModel bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+schema+".read_model WHERE n = $1)", x.Number()).Scan(&inModel))
		if fnFails {
			require.ErrorContains(t, err, "projection failed")
			require.NoError(t, declErr, "the gap wins")
			require.False(t, inModel, "the function's writes rolled back with the commit")
			require.ErrorIs(t, x.Commit(ctx, nil), sequence.ErrExpired)
		} else {
			require.NoError(t, err, "the commit wins")
			require.ErrorIs(t, declErr, store.ErrCommitted)
			require.True(t, inModel)
		}
	}
}

// TestSlowVersusDead: a slow holder that keeps its lease alive holds the
// barrier past its original TTL, while a dead one is released by expiry, and
// each holds back exactly the number after it. Number 1 is slow, 2 dead, 3
// waits: once 1 has renewed twice (past its original TTL) and 2 has expired,
// the database lists only 2 as expired and refuses to resolve 1; the turn of
// 2 (W >= 1) comes only when 1 commits, and the turn of 3 (W >= 2) only when
// 2 is resolved, though 2 was expired long before.
func TestSlowVersusDead(t *testing.T) {
	t.Parallel()
	for name, s := range realBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l, b := leaserOn(t, s, sequence.Config{})
			// The slow lease renews at 60% of its TTL (plus jitter); its
			// TTL leaves room for a loaded machine between renewals.
			const slowTTL, deadTTL = time.Second, 100 * time.Millisecond
			slow, err := l.Lease(ctx, "sd", &sequence.LeaseOpts{TTL: slowTTL})
			require.NoError(t, err)
			require.NoError(t, slow.KeepAlive(nil))
			dead, err := l.Lease(ctx, "sd", &sequence.LeaseOpts{TTL: deadTTL})
			require.NoError(t, err)
			last, err := l.Lease(ctx, "sd", &sequence.LeaseOpts{TTL: time.Minute})
			require.NoError(t, err)

			afterSlow, cancel2, err := b.Ready(ctx, "sd", 2)
			require.NoError(t, err)
			defer cancel2()
			afterDead, cancel3, err := b.Ready(ctx, "sd", 3)
			require.NoError(t, err)
			defer cancel3()
			committed := make(chan error, 1)
			go func() { committed <- last.Commit(ctx, []byte("last")) }()

			// The slow holder renews twice, which takes it past its original
			// TTL; the dead one expires meanwhile.
			require.Eventually(t, func() bool {
				es, err := s.Read(ctx, "sd", 0, 1)
				return err == nil && len(es) == 1 && es[0].Renewals >= 2
			}, 10*time.Second, time.Millisecond)
			waitExpired(t, s, "sd", 2)
			require.Nil(t, slow.Err(), "still held")
			expired, err := s.ListExpired(ctx, &store.ListExpiredParams{Stream: "sd"})
			require.NoError(t, err)
			require.Equal(t, []int64{2}, numbersOf(expired), "only the dead lease is expired")
			require.ErrorIs(t, s.ResolveExpired(ctx, "sd", 1, nil), store.ErrNotExpired)
			require.False(t, closed(afterSlow), "the turn of 2 came while 1 was held")
			require.False(t, closed(afterDead))

			require.NoError(t, slow.Commit(ctx, []byte("slow")))
			require.ErrorIs(t, slow.Err(), sequence.ErrCommitted)
			waitClosed(t, afterSlow, "the turn of 2 after 1 committed")
			// 2 is expired but unresolved: it still holds back 3.
			require.False(t, closed(afterDead), "the turn of 3 came while 2 was unresolved")
			select {
			case err := <-committed:
				t.Fatalf("3 committed while 2 was unresolved: %v", err)
			default:
			}

			// The dead holder never comes back; resolving its expiry lets 3 go.
			require.NoError(t, s.ResolveExpired(ctx, "sd", 2, nil))
			waitClosed(t, afterDead, "the turn of 3 after 2 was resolved")
			require.NoError(t, receive(t, committed, "commit of 3"))
			require.ErrorIs(t, dead.Commit(ctx, nil), sequence.ErrExpired)
			es := readAll(t, s, "sd")
			requireOrderedLedger(t, es, 3)
			require.Equal(t, []byte("slow"), es[0].Payload)
			require.Equal(t, store.ReasonExpired, es[1].GapReason)
			require.Equal(t, []byte("last"), es[2].Payload)
		})
	}
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitClosed waits for ch, failing the test after a generous bound.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not woken", what)
	}
}

// TestReplayEqualsLive: a live follower started before the writers, and a
// replay from 0 and a replay from a checkpoint started while the writers are
// halfway (W >= n/4, numbers above n/2 held back and in flight), all
// following the stream until its last number, yield the same sequence; a
// plain replay taken at that moment is a prefix of it, and a committed-only
// follower yields its committed entries. Pages are so small that gaps fall
// on their boundaries: every third number is a gap (the last of each page of
// 3 from 0), every fourth too (the first of each page of 4 from the
// checkpoint 47), and 101..105 (a whole page of 5) are all gaps.
func TestReplayEqualsLive(t *testing.T) {
	t.Parallel()
	const n = 200
	isGap := func(k int64) bool { return k%3 == 0 || k%4 == 0 || (101 <= k && k <= 105) }
	lastCommitted := int64(n)
	for isGap(lastCommitted) {
		lastCommitted--
	}
	for name, s := range realBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l, b := leaserOn(t, s, sequence.Config{})
			followCtx, stopFollow := context.WithTimeout(ctx, 2*time.Minute)
			defer stopFollow()
			live := follow(t, followCtx, b, "rl", &barrier.ReadOpts{Follow: true, IncludeGaps: true, PageSize: 3}, n)

			// Writers hold the numbers above n/2 until the mid-flight
			// readers have started.
			resume := make(chan struct{})
			var wg sync.WaitGroup
			var next atomic.Int64
			for range 8 {
				wg.Go(func() {
					for next.Add(1) <= n {
						x, err := l.Lease(ctx, "rl", &sequence.LeaseOpts{TTL: time.Minute})
						if !assert.NoError(t, err) {
							return
						}
						if x.Number() > n/2 {
							<-resume
						}
						if isGap(x.Number()) {
							assert.NoError(t, x.Release(ctx))
						} else {
							assert.NoError(t, x.Commit(ctx, fmt.Appendf(nil, "%d", x.Number())))
						}
					}
				})
			}

			require.NoError(t, b.WaitFor(followCtx, "rl", n/4+1))
			replayFollow := follow(t, followCtx, b, "rl", &barrier.ReadOpts{Follow: true, IncludeGaps: true, PageSize: 3}, n)
			checkpointFollow := follow(t, followCtx, b, "rl", &barrier.ReadOpts{After: 47, Follow: true, IncludeGaps: true, PageSize: 4}, n)
			committedFollow := follow(t, followCtx, b, "rl", &barrier.ReadOpts{Follow: true, PageSize: 5}, lastCommitted)
			mid := collect(t, b, "rl", &barrier.ReadOpts{IncludeGaps: true, PageSize: 3})
			close(resume)
			wg.Wait()
			if t.Failed() {
				stopFollow() // a writer failed: the followers would wait for n forever
			}

			followed := <-live
			require.GreaterOrEqual(t, len(mid), n/4, "the mid-flight replay stopped before the watermark")
			require.LessOrEqual(t, len(mid), n/2, "the mid-flight replay passed a number still in flight")
			require.Len(t, followed, n)
			require.Equal(t, key(followed[:len(mid)]), key(mid), "the mid-flight replay is a prefix")
			require.Equal(t, key(followed), key(<-replayFollow))
			require.Equal(t, key(followed[47:]), key(<-checkpointFollow))
			var want []string
			for i, e := range followed {
				require.Equal(t, int64(i+1), e.Number)
				if isGap(e.Number) {
					require.Equal(t, store.Gap, e.State, "%d", e.Number)
					continue
				}
				require.Equal(t, store.Committed, e.State, "%d", e.Number)
				require.Equal(t, fmt.Sprint(e.Number), string(e.Payload))
				want = append(want, fmt.Sprint(e.Number, e.State, string(e.Payload)))
			}
			require.Equal(t, want, key(<-committedFollow))
			require.Equal(t, key(followed), key(collect(t, b, "rl", &barrier.ReadOpts{IncludeGaps: true, PageSize: 3})), "a replay after the writers")
			requireOrderedLedger(t, readAll(t, s, "rl"), n)
		})
	}
}

// follow reads stream with opts in the background until it yields the
// entry numbered last (or fails, or ctx ends); what it read arrives on the
// channel. The test's cleanup ends and waits for it.
func follow(t *testing.T, ctx context.Context, b *barrier.Barrier, stream string, opts *barrier.ReadOpts, last int64) <-chan []store.Entry {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan []store.Entry, 1)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		var got []store.Entry
		for e, err := range b.Entries(ctx, stream, opts) {
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("follower %+v: %v", *opts, err)
				}
				break
			}
			got = append(got, e)
			if e.Number >= last {
				break
			}
		}
		out <- got
	}()
	return out
}

func key(es []store.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprint(e.Number, e.State, string(e.Payload))
	}
	return out
}

// countingStore counts the calls that reach the backend, and the numbers
// they lease and commit; it forwards CommitTx to a backend that has it.
type countingStore struct {
	fullStore
	leaseCalls, leased, commitCalls, committed atomic.Int64
	multiStream                                atomic.Int64 // commit batches of more than one stream
}

func (c *countingStore) Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error) {
	c.leaseCalls.Add(1)
	c.leased.Add(int64(len(reqs)))
	return c.fullStore.Lease(ctx, stream, reqs, p)
}

func (c *countingStore) LeaseMulti(ctx context.Context, items []store.StreamLeases, p *store.LeaseParams) []store.LeaseResult {
	c.leaseCalls.Add(1)
	for _, it := range items {
		c.leased.Add(int64(len(it.Requests)))
	}
	return c.fullStore.LeaseMulti(ctx, items, p)
}

func (c *countingStore) Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error) {
	c.commitCalls.Add(1)
	c.committed.Add(1)
	return c.fullStore.Commit(ctx, stream, number, token, p)
}

func (c *countingStore) CommitMulti(ctx context.Context, items []store.StreamCommit, p *store.CommitMultiParams) ([]store.CommitResult, error) {
	c.countCommits(len(items), func(i int) string { return items[i].Stream })
	return c.fullStore.CommitMulti(ctx, items, p)
}

func (c *countingStore) CommitTx(ctx context.Context, items []store.TxCommit[pgx.Tx], p *store.CommitMultiParams) ([]store.CommitResult, error) {
	tc, ok := c.fullStore.(store.TxCommitter[pgx.Tx])
	if !ok {
		return nil, store.ErrUnsupported
	}
	c.countCommits(len(items), func(i int) string { return items[i].Stream })
	return tc.CommitTx(ctx, items, p)
}

func (c *countingStore) countCommits(n int, stream func(int) string) {
	c.commitCalls.Add(1)
	c.committed.Add(int64(n))
	for i := 1; i < n; i++ {
		if stream(i) != stream(0) {
			c.multiStream.Add(1)
			return
		}
	}
}

// TestGroupCommitMatchesOneByOne runs the same randomized workload with
// group commit and lease coalescing on and off: the ledgers of every stream
// are identical but for times and tokens, and the grouped run really
// grouped, in batches that span streams.
func TestGroupCommitMatchesOneByOne(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	for _, backend := range []string{"memory", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			ledgers := map[bool][]string{}
			for _, grouped := range []bool{false, true} {
				var s fullStore = memory.New(nil)
				if backend == "postgres" {
					pg, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
					require.NoError(t, err)
					s = pg
				}
				cs := &countingStore{fullStore: s}
				cfg := sequence.Config{MaxGroup: 1, MaxLeaseBatch: 1}
				if grouped {
					cfg = sequence.Config{}
				}
				l, _ := leaserOn(t, cs, cfg)
				ledgers[grouped] = runWorkload(t, l, cs, 4, 120, 16)
				if grouped {
					t.Logf("%s: %d leases in %d statements, %d commits in %d batches, %d of them across streams",
						backend, cs.leased.Load(), cs.leaseCalls.Load(), cs.committed.Load(), cs.commitCalls.Load(), cs.multiStream.Load())
					require.Less(t, cs.commitCalls.Load(), cs.committed.Load(), "group commit grouped nothing")
					if backend == "postgres" {
						require.Less(t, cs.leaseCalls.Load(), cs.leased.Load(), "lease coalescing coalesced nothing")
						require.Positive(t, cs.multiStream.Load(), "no batch spanned streams")
					}
				} else {
					require.Equal(t, cs.commitCalls.Load(), cs.committed.Load())
					require.Equal(t, cs.leaseCalls.Load(), cs.leased.Load())
				}
			}
			require.Equal(t, ledgers[false], ledgers[true])
		})
	}
}

// runWorkload has workers lease n numbers of each of streams streams (worker
// i on stream i mod streams) and resolve each by a rule of its number
// (commit, release, or a transaction function that fails and then a
// release), with random delays; it returns the ledgers without times and
// tokens.
func runWorkload(t *testing.T, l *sequence.Leaser, s fullStore, streams int, n int64, workers int) []string {
	ctx := context.Background()
	var wg sync.WaitGroup
	next := make([]atomic.Int64, streams)
	for w := range workers {
		stream, claim := fmt.Sprint("w", w%streams), &next[w%streams]
		wg.Go(func() {
			for claim.Add(1) <= n {
				x, err := l.Lease(ctx, stream, &sequence.LeaseOpts{TTL: time.Minute, Kind: "k"})
				if !assert.NoError(t, err) {
					return
				}
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				switch k := x.Number(); {
				case k%5 == 0:
					assert.NoError(t, x.Release(ctx))
				case k%11 == 0:
					_, isPG := s.(*countingStore).fullStore.(*postgres.Store)
					if isPG {
						err := sequence.CommitTx(ctx, x, []byte("never"), func(context.Context, pgx.Tx) error { return errors.New("boom") })
						assert.ErrorContains(t, err, "boom")
					}
					assert.NoError(t, x.Release(ctx))
				default:
					assert.NoError(t, x.Commit(ctx, fmt.Appendf(nil, "r%d", k)))
				}
			}
		})
	}
	wg.Wait()
	var out []string
	for i := range streams {
		stream := fmt.Sprint("w", i)
		es := readAll(t, s, stream)
		requireOrderedLedger(t, es, int(n))
		for _, e := range es {
			out = append(out, fmt.Sprint(stream, e.Number, e.State, e.GapReason, string(e.Payload), e.Kind))
		}
	}
	return out
}

// TestCompleteDoesNotWaitForEarlierNumbers: Complete of 2 goes through while
// 1 is still leased (an unordered commit), while the barrier and the ordered
// reader still hold 2 back until 1 resolves; an ordered Commit of 3 waits
// for both.
func TestCompleteDoesNotWaitForEarlierNumbers(t *testing.T) {
	t.Parallel()
	for name, s := range realBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			b := startBarrier(t, s)
			w := &countingWaiter{Waiter: b, calls: map[int64]int{}}
			l, err := sequence.New(s, &sequence.Config{Barrier: w})
			require.NoError(t, err)
			xs, err := l.LeaseN(ctx, "unordered", 3, &sequence.LeaseOpts{TTL: time.Minute})
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- xs[1].Complete(ctx, []byte("two")) }()
			require.NoError(t, receive(t, done, "Complete of 2 with 1 leased"))
			es := readAll(t, s, "unordered")
			require.Equal(t, store.Leased, es[0].State, "1 untouched")
			require.Equal(t, store.Committed, es[1].State)
			require.Equal(t, []byte("two"), es[1].Payload)

			wm, err := b.Watermark(ctx, "unordered")
			require.NoError(t, err)
			require.Zero(t, wm, "the watermark passed the leased 1")
			require.Empty(t, collect(t, b, "unordered", &barrier.ReadOpts{IncludeGaps: true}), "the reader passed the leased 1")
			third := commitAsync(xs[2])
			waitParked(t, w, 3, 1)
			select {
			case err := <-third:
				t.Fatalf("Commit of 3 went through with 1 leased: %v", err)
			default:
			}

			require.NoError(t, xs[0].Commit(ctx, []byte("one")))
			require.NoError(t, receive(t, third, "Commit of 3"))
			require.Equal(t, []int64{1, 2, 3}, numbersOf(collect(t, b, "unordered", nil)))
			es = readAll(t, s, "unordered")
			require.False(t, es[0].ResolvedAt.Before(es[1].ResolvedAt), "1 resolved before 2")
			require.False(t, es[2].ResolvedAt.Before(es[0].ResolvedAt), "3 resolved before 1")
		})
	}
}
