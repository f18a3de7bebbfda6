package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// txBundle is a Store on a fresh schema with a business table of its
// own, for the tests of Stores in the application's transaction.
type txBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	s      *postgres.Store
	orders string // the quoted business table
}

func newTxBundle(t *testing.T, simple bool) *txBundle {
	t.Helper()
	t.Parallel()
	pool := pgtest.Shared(t, simple)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	b := &txBundle{ctx: t.Context(), pool: pool, schema: schema, s: s, orders: pgx.Identifier{schema, "orders"}.Sanitize()}
	_, err = pool.Exec(b.ctx, "CREATE TABLE "+b.orders+" (id bigint PRIMARY KEY, seq bigint)")
	require.NoError(t, err)
	return b
}

// begin starts an application transaction, rolled back at the end of the
// test if still open.
func (b *txBundle) begin(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// order inserts the business row id in tx, pointing at seq.
func (b *txBundle) order(t *testing.T, tx pgx.Tx, id, seq int64) {
	t.Helper()
	_, err := tx.Exec(b.ctx, "INSERT INTO "+b.orders+" (id, seq) VALUES ($1, $2)", id, seq)
	require.NoError(t, err)
}

// orderCount counts the committed business rows.
func (b *txBundle) orderCount(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT count(*) FROM "+b.orders).Scan(&n))
	return n
}

// requireDense checks, as an auditor would, that stream's entries are
// exactly 1..N with N the counter's last number, and returns N.
func (b *txBundle) requireDense(t *testing.T, stream string) int64 {
	t.Helper()
	es, err := b.s.Read(b.ctx, stream, 0, store.MaxListLimit)
	require.NoError(t, err)
	for i, e := range es {
		require.Equal(t, int64(i+1), e.Number, "dense")
	}
	st, err := b.s.Stats(b.ctx, stream)
	require.NoError(t, err)
	require.Equal(t, int64(len(es))+1, st.NextNumber, "no number counted without its entry")
	return int64(len(es))
}

func append1(t *testing.T, s *postgres.Store, stream, payload string) store.Entry {
	t.Helper()
	es, err := s.Append(t.Context(), stream, []store.AppendRequest{{Kind: "order", Payload: []byte(payload)}}, nil)
	require.NoError(t, err)
	return es[0]
}

func TestInTxRollbackLeavesNoNumber(t *testing.T) {
	for _, simple := range []bool{false, true} {
		t.Run(map[bool]string{false: "extended", true: "simple"}[simple], func(t *testing.T) {
			b := newTxBundle(t, simple)
			append1(t, b.s, "orders", "before")

			tx := b.begin(t)
			ts := b.s.InTx(tx)
			b.order(t, tx, 1, 2)
			e := append1(t, ts, "orders", "rolled back")
			require.Equal(t, int64(2), e.Number)
			leased, err := ts.Lease(b.ctx, "orders", []store.LeaseRequest{{TTL: time.Minute}}, nil)
			require.NoError(t, err)
			require.Equal(t, int64(3), leased[0].Number)
			_, err = ts.Commit(b.ctx, "orders", 3, leased[0].Token, nil)
			require.NoError(t, err)
			require.NoError(t, tx.Rollback(b.ctx))

			require.Zero(t, b.orderCount(t))
			require.Equal(t, int64(1), b.requireDense(t, "orders"), "the rolled-back numbers are gone")
			again, err := b.s.Lease(b.ctx, "orders", []store.LeaseRequest{{TTL: time.Minute}}, nil)
			require.NoError(t, err)
			require.Equal(t, int64(2), again[0].Number, "the next lease gets the number the rollback took back")
			require.Equal(t, int64(2), b.requireDense(t, "orders"))
		})
	}
}

func TestInTxCommitShowsRowAndEntryTogether(t *testing.T) {
	b := newTxBundle(t, false)
	tx := b.begin(t)
	ts := b.s.InTx(tx)
	b.order(t, tx, 7, 1)
	e := append1(t, ts, "orders", "order 7")
	require.Equal(t, int64(1), e.Number)

	// Inside, the transaction sees its own entry; outside, nothing yet.
	got, err := ts.ReadResolved(b.ctx, "orders", 0, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	_, err = b.s.Read(b.ctx, "orders", 0, 0)
	require.ErrorIs(t, err, store.ErrStreamNotFound, "not visible before the commit")
	require.Zero(t, b.orderCount(t))

	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, int64(1), b.orderCount(t))
	got, err = b.s.ReadResolved(b.ctx, "orders", 0, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, []byte("order 7"), got[0].Payload)
	require.Equal(t, store.Committed, got[0].State)
}

func TestInTxOrderedCommitSeesItsOwnResolutions(t *testing.T) {
	b := newTxBundle(t, false)
	tx := b.begin(t)
	ts := b.s.InTx(tx)
	es, err := ts.Lease(b.ctx, "s", []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}, {TTL: time.Minute}}, nil)
	require.NoError(t, err)
	_, err = ts.Commit(b.ctx, "s", 2, es[1].Token, &store.CommitParams{Ordered: true})
	require.ErrorIs(t, err, store.ErrNotReady, "1 is still leased")
	require.NoError(t, ts.Release(b.ctx, "s", 1, es[0].Token, nil))
	_, err = ts.Commit(b.ctx, "s", 2, es[1].Token, &store.CommitParams{Ordered: true})
	require.NoError(t, err, "the release of 1 in the same transaction counts")
	res, err := ts.CommitMulti(b.ctx, []store.StreamCommit{{Stream: "s", Number: 3, Token: es[2].Token, Ordered: true}}, nil)
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.NoError(t, tx.Commit(b.ctx))

	st, err := b.s.Stats(b.ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Watermark)
}

func TestInTxClosedTransaction(t *testing.T) {
	b := newTxBundle(t, false)
	tx := b.begin(t)
	ts := b.s.InTx(tx)
	es, err := ts.Lease(b.ctx, "s", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))

	_, err = ts.Lease(b.ctx, "s", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	require.ErrorIs(t, err, pgx.ErrTxClosed)
	_, err = ts.Append(b.ctx, "s", []store.AppendRequest{{Payload: []byte("x")}}, nil)
	require.ErrorIs(t, err, pgx.ErrTxClosed)
	_, err = ts.Commit(b.ctx, "s", 1, es[0].Token, nil)
	require.ErrorIs(t, err, pgx.ErrTxClosed)
	require.ErrorIs(t, ts.Release(b.ctx, "s", 1, es[0].Token, nil), pgx.ErrTxClosed)
	_, err = ts.CommitMulti(b.ctx, []store.StreamCommit{{Stream: "s", Number: 1, Token: es[0].Token}, {Stream: "s", Number: 2, Token: es[0].Token}}, nil)
	require.ErrorIs(t, err, pgx.ErrTxClosed)
	_, err = ts.CommitTx(b.ctx, []store.TxCommit[pgx.Tx]{{StreamCommit: store.StreamCommit{Stream: "s", Number: 1, Token: es[0].Token}}}, nil)
	require.ErrorIs(t, err, pgx.ErrTxClosed)
	_, err = b.s.Stats(b.ctx, "s")
	require.ErrorIs(t, err, store.ErrStreamNotFound, "nothing changed")

	nilTx := b.s.InTx(nil)
	_, err = nilTx.Append(b.ctx, "s", []store.AppendRequest{{}}, nil)
	require.ErrorIs(t, err, pgx.ErrTxClosed, "a nil transaction")
	_, err = nilTx.Lease(b.ctx, "s", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	require.ErrorIs(t, err, pgx.ErrTxClosed)
}

func TestInTxBadInputChangesNothing(t *testing.T) {
	b := newTxBundle(t, false)
	tx := b.begin(t)
	ts := b.s.InTx(tx)
	b.order(t, tx, 1, 1)
	_, err := ts.Append(b.ctx, "", []store.AppendRequest{{}}, nil)
	require.ErrorIs(t, err, store.ErrInvalidStream)
	_, err = ts.Append(b.ctx, "s", nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidCount)
	_, err = ts.Append(b.ctx, "s", []store.AppendRequest{{Kind: "\x00"}}, nil)
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = ts.Lease(b.ctx, "s", []store.LeaseRequest{{TTL: -time.Second}}, nil)
	require.ErrorIs(t, err, store.ErrInvalidTTL)
	// The transaction is still good: bad input sent nothing.
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, int64(1), b.orderCount(t))
	_, err = b.s.Stats(b.ctx, "s")
	require.ErrorIs(t, err, store.ErrStreamNotFound, "nothing appended")
}

func TestInTxCannotWatch(t *testing.T) {
	b := newTxBundle(t, false)
	ts := b.s.InTx(b.begin(t))
	require.ErrorIs(t, ts.Watch(b.ctx, &txSink{}), store.ErrUnsupported)
	require.ErrorIs(t, ts.WatchLeases(b.ctx, nil), store.ErrUnsupported)
}

// txSink records the resolutions of every stream a Watch reports.
type txSink struct {
	mu      sync.Mutex
	heard   map[int64]bool // of the stream "s"
	through int64
	got     chan int64
	resets  chan struct{}
}

func newTxSink() *txSink {
	return &txSink{heard: map[int64]bool{}, got: make(chan int64, 1000), resets: make(chan struct{}, 1)}
}

func (k *txSink) Resolved(stream string, n int64) {
	if stream != "s" {
		return
	}
	k.mu.Lock()
	k.heard[n] = true
	k.mu.Unlock()
	k.got <- n
}

func (k *txSink) ResolvedThrough(stream string, n int64) {
	if stream != "s" {
		return
	}
	k.mu.Lock()
	k.through = max(k.through, n)
	k.mu.Unlock()
	k.got <- -n
}

func (k *txSink) Reset() {
	select {
	case k.resets <- struct{}{}:
	default:
	}
}

// heardOf reports whether n was reported resolved, alone or through.
func (k *txSink) heardOf(n int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.heard[n] || k.through >= n
}

// watch runs a Watch of s into a new sink until the test ends.
func watchInto(t *testing.T, s *postgres.Store) *txSink {
	t.Helper()
	k := newTxSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, k) }()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
	select {
	case <-k.resets:
	case <-time.After(10 * time.Second):
		t.Fatal("the Watch did not start listening")
	}
	return k
}

// waitHeard waits until k heard of n.
func (k *txSink) waitHeard(t *testing.T, n int64) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !k.heardOf(n) {
		select {
		case <-k.got:
		case <-deadline:
			t.Fatalf("%d was never reported", n)
		}
	}
}

func TestInTxRolledBackSavepointIsNotNoticed(t *testing.T) {
	for _, simple := range []bool{false, true} {
		t.Run(map[bool]string{false: "extended", true: "simple"}[simple], func(t *testing.T) {
			testRolledBackSavepoint(t, simple)
		})
	}
}

func testRolledBackSavepoint(t *testing.T, simple bool) {
	b := newTxBundle(t, simple)
	k := watchInto(t, b.s) // the root's Watch: the transaction hands over to it

	tx := b.begin(t)
	ts := b.s.InTx(tx)
	es, err := ts.Lease(b.ctx, "s", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	require.NoError(t, err)
	sp, err := tx.Begin(b.ctx) // a savepoint
	require.NoError(t, err)
	_, err = b.s.InTx(sp).Commit(b.ctx, "s", 1, es[0].Token, nil)
	require.NoError(t, err)
	require.NoError(t, sp.Rollback(b.ctx))
	require.Equal(t, int64(2), append1(t, ts, "s", "kept").Number)
	require.NoError(t, tx.Commit(b.ctx))

	k.waitHeard(t, 2) // heard from the same confirmation as 1 would have been
	require.False(t, k.heardOf(1), "the commit of 1 was rolled back with its savepoint")
	got, err := b.s.Read(b.ctx, "s", 0, 0)
	require.NoError(t, err)
	require.Equal(t, store.Leased, got[0].State)
	require.Equal(t, store.Committed, got[1].State)

	// An aborted transaction's resolutions are dropped; a later commit is heard.
	tx2 := b.begin(t)
	require.Equal(t, int64(3), append1(t, b.s.InTx(tx2), "s", "aborted").Number)
	require.NoError(t, tx2.Rollback(b.ctx))
	tx3 := b.begin(t)
	require.Equal(t, int64(3), append1(t, b.s.InTx(tx3), "s", "committed").Number)
	require.NoError(t, tx3.Commit(b.ctx))
	k.waitHeard(t, 3)
}

// TestInTxWakesAnotherProcess checks that a barrier on another Store, on
// a pool of its own (another process, as far as the database can tell),
// wakes for an entry appended in an application transaction once that
// transaction commits: through the root's Watch, and without one, through
// the notice sent in the transaction. Its safety poll is an hour: only a
// notice can wake it in time.
func TestInTxWakesAnotherProcess(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(map[bool]string{true: "root watches", false: "no watch"}[watched], func(t *testing.T) {
			b := newTxBundle(t, false)
			if watched {
				watchInto(t, b.s)
			}
			other, err := pgtest.NewPool(b.ctx, nil)
			require.NoError(t, err)
			t.Cleanup(other.Close)
			os, err := postgres.New(other, &postgres.Config{Schema: b.schema})
			require.NoError(t, err)
			bar, err := barrier.New(os, &barrier.Config{PollInterval: time.Hour})
			require.NoError(t, err)
			require.NoError(t, bar.Start(b.ctx))
			t.Cleanup(bar.Stop)

			woke := make(chan error, 1)
			go func() { woke <- bar.WaitFor(b.ctx, "s", 2) }()
			tx := b.begin(t)
			b.order(t, tx, 1, 1)
			require.Equal(t, int64(1), append1(t, b.s.InTx(tx), "s", "order 1").Number)
			select {
			case err := <-woke:
				t.Fatalf("the barrier woke before the commit: %v", err)
			default:
			}
			require.NoError(t, tx.Commit(b.ctx))
			select {
			case err := <-woke:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("the other process's barrier never woke")
			}
		})
	}
}

// TestInTxConcurrentTransactions runs transactions that append in
// parallel, some committed, some rolled back, while the root's Watch
// confirms them: every committed number is heard, and no number beyond
// the last one that exists.
func TestInTxConcurrentTransactions(t *testing.T) {
	b := newTxBundle(t, false)
	k := watchInto(t, b.s)
	const workers, rounds = 6, 12
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				tx, err := b.pool.Begin(b.ctx)
				if err != nil {
					errs <- err
					return
				}
				if _, err := b.s.InTx(tx).Append(b.ctx, "s", []store.AppendRequest{{Payload: []byte("x")}}, nil); err != nil {
					errs <- err
				}
				if (w+i)%3 == 0 {
					err = tx.Rollback(b.ctx)
				} else {
					err = tx.Commit(b.ctx)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	n := b.requireDense(t, "s")
	require.Equal(t, int64(workers*rounds*2/3), n, "the committed appends, and nothing else")
	for i := int64(1); i <= n; i++ {
		k.waitHeard(t, i)
	}
	require.False(t, k.heardOf(n+1), "nothing beyond the last number that exists")
}

// TestInTxRecordsAndCheckpoints: the inbox records and reader checkpoints
// of a Store in the application's transaction are written in it, on both
// protocols: gone with a rollback, kept with a commit. (An InTx Store once
// lacked the inbox statements: pgx panicked on their empty SQL.)
func TestInTxRecordsAndCheckpoints(t *testing.T) {
	for _, simple := range []bool{false, true} {
		t.Run(fmt.Sprintf("simple=%v", simple), func(t *testing.T) {
			b := newTxBundle(t, simple)
			_, err := b.s.Append(b.ctx, "orders", []store.AppendRequest{{Payload: []byte("a")}, {Payload: []byte("b")}}, nil)
			require.NoError(t, err)

			for _, commit := range []bool{false, true} {
				tx := b.begin(t)
				ts := b.s.InTx(tx)
				first, err := ts.MarkReceived(b.ctx, "payments", "m-1", nil)
				require.NoError(t, err)
				require.True(t, first)
				_, seen, err := ts.Received(b.ctx, "payments", "m-1")
				require.NoError(t, err)
				require.True(t, seen, "the transaction sees its own record")
				require.NoError(t, ts.SaveCheckpoint(b.ctx, "projection", "orders", 2, nil))
				pos, err := ts.Checkpoint(b.ctx, "projection", "orders")
				require.NoError(t, err)
				require.Equal(t, int64(2), pos)
				if commit {
					require.NoError(t, tx.Commit(b.ctx))
				} else {
					require.NoError(t, tx.Rollback(b.ctx))
				}

				_, seen, err = b.s.Received(b.ctx, "payments", "m-1")
				require.NoError(t, err)
				require.Equal(t, commit, seen, "the record commits with the transaction")
				pos, err = b.s.Checkpoint(b.ctx, "projection", "orders")
				require.NoError(t, err)
				require.Equal(t, map[bool]int64{false: 0, true: 2}[commit], pos, "the checkpoint commits with the transaction")
			}
		})
	}
}

// TestInTxFailuresAreNeverNotSent: a call on the caller's transaction takes
// no connection, and whether its statement left something in the
// transaction is the caller's to know: even with a context that ended
// before the call, its error does not match store.ErrNotSent.
func TestInTxFailuresAreNeverNotSent(t *testing.T) {
	b := newTxBundle(t, false)
	tx := b.begin(t)
	defer func() { _ = tx.Rollback(b.ctx) }()
	ts := b.s.InTx(tx)
	ended, cancel := context.WithCancel(b.ctx)
	cancel()
	_, err := ts.Lease(ended, "orders", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, store.ErrNotSent)
	_, err = b.s.Lease(ended, "orders", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	require.ErrorIs(t, err, store.ErrNotSent, "on the pool, the same call is not sent")
}
