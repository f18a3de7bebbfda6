package sequence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// appTx is a Leaser on PostgreSQL with a running barrier and a business
// table, for the tests of the application's own transaction.
type appTx struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	pg     *postgres.Store
	bar    *barrier.Barrier
	l      *sequence.Leaser
	orders string
}

func newAppTx(t *testing.T) *appTx {
	t.Helper()
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	pg, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	a := &appTx{ctx: t.Context(), pool: pool, pg: pg, bar: startBarrier(t, pg), orders: pgx.Identifier{schema, "orders"}.Sanitize()}
	a.l, err = sequence.New(pg, &sequence.Config{Barrier: a.bar})
	require.NoError(t, err)
	_, err = pool.Exec(a.ctx, "CREATE TABLE "+a.orders+" (id bigint PRIMARY KEY, seq bigint)")
	require.NoError(t, err)
	return a
}

// begin starts an application transaction and returns it with a Leaser
// in it; the transaction is rolled back at the end if still open.
func (a *appTx) begin(t *testing.T) (pgx.Tx, *sequence.Leaser) {
	t.Helper()
	tx, err := a.pool.Begin(a.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx, a.l.InTx(a.pg.InTx(tx))
}

func (a *appTx) order(t *testing.T, tx pgx.Tx, id, seq int64) {
	t.Helper()
	_, err := tx.Exec(a.ctx, "INSERT INTO "+a.orders+" (id, seq) VALUES ($1, $2)", id, seq)
	require.NoError(t, err)
}

func (a *appTx) orderCount(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, a.pool.QueryRow(a.ctx, "SELECT count(*) FROM "+a.orders).Scan(&n))
	return n
}

// requireDense checks, as an auditor would, that the entries of stream are
// exactly 1..N, N the counter's last number, and returns N.
func (a *appTx) requireDense(t *testing.T, stream string) int64 {
	t.Helper()
	es, err := a.pg.Read(a.ctx, stream, 0, store.MaxListLimit)
	require.NoError(t, err)
	for i, e := range es {
		require.Equal(t, int64(i+1), e.Number, "dense")
	}
	st, err := a.pg.Stats(a.ctx, stream)
	require.NoError(t, err)
	require.Equal(t, int64(len(es))+1, st.NextNumber, "no number without its entry")
	return int64(len(es))
}

func TestInTxRollbackLeavesNoNumber(t *testing.T) {
	a := newAppTx(t)
	_, err := a.l.Append(a.ctx, "orders", nil, []byte("first"))
	require.NoError(t, err)
	w, err := a.bar.Watermark(a.ctx, "orders") // the barrier follows the stream
	require.NoError(t, err)
	require.Equal(t, int64(1), w)

	tx, tl := a.begin(t)
	a.order(t, tx, 1, 2)
	x, err := tl.Lease(a.ctx, "orders", nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), x.Number())
	require.NoError(t, x.Commit(a.ctx, []byte("rolled back")))
	nums, err := tl.Append(a.ctx, "orders", &sequence.AppendOpts{Kind: "order"}, []byte("a"), []byte("b"))
	require.NoError(t, err)
	require.Equal(t, []int64{3, 4}, nums)
	require.NoError(t, tx.Rollback(a.ctx))

	require.Zero(t, a.orderCount(t))
	require.Equal(t, int64(1), a.requireDense(t, "orders"))
	w, err = a.bar.Watermark(a.ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, int64(1), w, "the barrier heard nothing of the rolled-back commit")
	y, err := a.l.Lease(a.ctx, "orders", nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), y.Number(), "the number the rollback took back is handed out again")
	require.NoError(t, y.Complete(a.ctx, nil))
	require.Equal(t, int64(2), a.requireDense(t, "orders"))
	wctx, cancel := context.WithTimeout(a.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, a.bar.WaitFor(wctx, "orders", 3), "the barrier was not misled by the rolled-back commit")
}

func TestInTxCommitShowsRowAndEntriesTogether(t *testing.T) {
	a := newAppTx(t)
	tx, tl := a.begin(t)
	a.order(t, tx, 1, 1)
	nums, err := tl.Append(a.ctx, "orders", nil, []byte("order 1"))
	require.NoError(t, err)
	x, err := tl.Lease(a.ctx, "orders", &sequence.LeaseOpts{Kind: "order"})
	require.NoError(t, err)
	require.NoError(t, x.Commit(a.ctx, []byte("order 1, second event")), "ordered: 1 was appended by this transaction")
	_, err = a.pg.Read(a.ctx, "orders", 0, 0)
	require.ErrorIs(t, err, store.ErrStreamNotFound, "nothing visible before the commit")
	require.Zero(t, a.orderCount(t))

	require.NoError(t, tx.Commit(a.ctx))
	require.Equal(t, []int64{1}, nums)
	require.Equal(t, int64(1), a.orderCount(t))
	es, err := a.pg.ReadResolved(a.ctx, "orders", 0, 0)
	require.NoError(t, err)
	require.Len(t, es, 2)
	// The root's barrier hears of them once the transaction commits.
	wctx, cancel := context.WithTimeout(a.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, a.bar.WaitFor(wctx, "orders", 3))
}

func TestInTxOrderedCommitWaitsForOthers(t *testing.T) {
	a := newAppTx(t)
	held, err := a.l.Lease(a.ctx, "s", nil) // 1, held outside the transaction
	require.NoError(t, err)

	tx, tl := a.begin(t)
	x, err := tl.Lease(a.ctx, "s", nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), x.Number())
	done := make(chan error, 1)
	go func() { done <- x.Commit(a.ctx, []byte("2")) }()
	select {
	case err := <-done:
		t.Fatalf("the commit of 2 went ahead of 1: %v", err)
	default:
	}
	require.NoError(t, held.Commit(a.ctx, []byte("1")))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the commit in the transaction never went ahead")
	}
	require.NoError(t, tx.Commit(a.ctx))
	es, err := a.pg.ReadResolved(a.ctx, "s", 0, 0)
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.True(t, es[0].ResolvedAt.Before(es[1].ResolvedAt) || es[0].ResolvedAt.Equal(es[1].ResolvedAt))
}

func TestInTxOrderedCommitBoundedByTheDeadline(t *testing.T) {
	a := newAppTx(t)
	_, tl := a.begin(t)
	xs, err := tl.LeaseN(a.ctx, "s", 2, &sequence.LeaseOpts{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	// 1 is held by this very transaction: 2 can never commit before it.
	err = xs[1].Commit(a.ctx, nil)
	require.ErrorIs(t, err, sequence.ErrExpired)
}

func TestInTxHandleOperations(t *testing.T) {
	a := newAppTx(t)
	tx, tl := a.begin(t)
	xs, err := tl.LeaseN(a.ctx, "s", 4, nil)
	require.NoError(t, err)
	require.ErrorIs(t, xs[0].KeepAlive(nil), store.ErrUnsupported)
	require.NoError(t, xs[0].Extend(a.ctx, time.Hour))
	require.NoError(t, xs[0].Release(a.ctx))
	require.NoError(t, xs[2].Complete(a.ctx, []byte("3")))
	require.NoError(t, sequence.CommitTx(a.ctx, xs[1], []byte("2"), func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+a.orders+" (id, seq) VALUES (2, 2)")
		return err
	}))
	fail := errors.New("no")
	require.ErrorIs(t, sequence.CommitTx(a.ctx, xs[3], nil, func(context.Context, pgx.Tx) error { return fail }), fail)
	require.NoError(t, tx.Commit(a.ctx))

	es, err := a.pg.Read(a.ctx, "s", 0, 0)
	require.NoError(t, err)
	require.Equal(t, store.Gap, es[0].State)
	require.Equal(t, store.ReasonReleased, es[0].GapReason)
	require.Equal(t, 1, es[0].Renewals)
	require.Equal(t, store.Committed, es[1].State)
	require.Equal(t, store.Committed, es[2].State)
	require.Equal(t, store.Leased, es[3].State, "its function failed: only its savepoint rolled back")
	require.Equal(t, int64(1), a.orderCount(t))
}

func TestInTxClosedTransaction(t *testing.T) {
	a := newAppTx(t)
	tx, tl := a.begin(t)
	x, err := tl.Lease(a.ctx, "s", nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(a.ctx))
	require.ErrorIs(t, x.Commit(a.ctx, nil), pgx.ErrTxClosed)
	require.ErrorIs(t, x.Complete(a.ctx, nil), pgx.ErrTxClosed)
	_, err = tl.Lease(a.ctx, "s", nil)
	require.ErrorIs(t, err, pgx.ErrTxClosed)
	_, err = tl.Append(a.ctx, "s", nil, []byte("x"))
	require.ErrorIs(t, err, pgx.ErrTxClosed)
	_, err = a.pg.Stats(a.ctx, "s")
	require.ErrorIs(t, err, store.ErrStreamNotFound, "nothing changed")

	_, err = a.l.InTx(nil).Lease(a.ctx, "s", nil)
	require.ErrorIs(t, err, sequence.ErrInvalidArgument, "a nil store")
}

func TestAppendBadInputChangesNothing(t *testing.T) {
	a := newAppTx(t)
	small, err := sequence.New(a.pg, &sequence.Config{Barrier: a.bar, MaxPayload: 4})
	require.NoError(t, err)
	tx, tl := a.begin(t)
	for _, l := range []*sequence.Leaser{small, small.InTx(a.pg.InTx(tx))} {
		_, err := l.Append(a.ctx, "s", nil, []byte("ok"), []byte("too long"))
		require.ErrorIs(t, err, sequence.ErrPayloadTooLarge)
		_, err = l.Append(a.ctx, "s", nil)
		require.ErrorIs(t, err, sequence.ErrInvalidCount)
		_, err = l.Append(a.ctx, "", nil, []byte("x"))
		require.ErrorIs(t, err, sequence.ErrInvalidStream)
		_, err = l.Append(a.ctx, "s", &sequence.AppendOpts{Kind: "\x00"}, []byte("x"))
		require.ErrorIs(t, err, sequence.ErrInvalidArgument)
	}
	_, err = tl.Append(a.ctx, "t", nil, []byte("fine"))
	require.NoError(t, err, "the transaction is still good")
	require.NoError(t, tx.Commit(a.ctx))
	_, err = a.pg.Stats(a.ctx, "s")
	require.ErrorIs(t, err, store.ErrStreamNotFound)

	// A store that cannot append says so.
	hidden, err := sequence.New(struct{ sequence.Store }{memory.New(nil)}, &sequence.Config{UnorderedOnly: true})
	require.NoError(t, err)
	_, err = hidden.Append(a.ctx, "s", nil, []byte("x"))
	require.ErrorIs(t, err, store.ErrUnsupported)
}
