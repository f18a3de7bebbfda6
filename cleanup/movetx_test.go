package cleanup_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// sideTable is a PostgreSQL store on a fresh schema with a table, side,
// that the tests' MoveTx writes the moves to.
type sideTable struct {
	s    *postgres.Store
	pool *pgxpool.Pool
	name string // quoted
}

func newSideTable(t *testing.T) *sideTable {
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	name := pgx.Identifier{schema, "side"}.Sanitize()
	_, err = pool.Exec(t.Context(), "CREATE TABLE "+name+" (old bigint PRIMARY KEY, moved bigint, op text, kind text, payload bytea, method text)")
	require.NoError(t, err)
	return &sideTable{s: s, pool: pool, name: name}
}

// insert writes moves into the side table in tx.
func (st *sideTable) insert(ctx context.Context, tx pgx.Tx, moves []cleanup.Move) error {
	for _, m := range moves {
		if _, err := tx.Exec(ctx, "INSERT INTO "+st.name+" VALUES ($1, $2, $3, $4, $5, $6)",
			m.Number, m.NewNumber, m.OperationID, m.Kind, m.Payload, m.Method); err != nil {
			return err
		}
	}
	return nil
}

// rows returns the side table as old -> its row.
func (st *sideTable) rows(t *testing.T) map[int64]cleanup.Move {
	rows, err := st.pool.Query(t.Context(), "SELECT old, moved, op, kind, payload, method FROM "+st.name)
	require.NoError(t, err)
	out := map[int64]cleanup.Move{}
	var m cleanup.Move
	_, err = pgx.ForEachRow(rows, []any{&m.Number, &m.NewNumber, &m.OperationID, &m.Kind, &m.Payload, &m.Method}, func() error {
		out[m.Number] = m
		return nil
	})
	require.NoError(t, err)
	return out
}

// completed is an OperationTracker with a result for every operation.
var completed = recovery.OperationTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
	return []byte("result of " + e.OperationID), true, nil
})

// TestMoveTxCommitsWithTheMoves: MoveTx's writes and the moves commit
// together; when MoveTx fails, neither does, the entries stay expired, the
// failure counts, and the next cycle moves them.
func TestMoveTxCommitsWithTheMoves(t *testing.T) {
	t.Parallel()
	st := newSideTable(t)
	ctx := t.Context()
	leaseExpired(t, st.s, "mtx", 3)
	var fail atomic.Bool
	fail.Store(true)
	var mu sync.Mutex
	var seen [][]cleanup.Move
	rec := &recorder{}
	sv, err := cleanup.New(st.s, &cleanup.Config{
		Observer: rec,
		MoveTx: cleanup.MoveTxFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, moves []cleanup.Move) error {
			mu.Lock()
			seen = append(seen, moves)
			mu.Unlock()
			if err := st.insert(ctx, tx, moves); err != nil {
				return err
			}
			if fail.Load() {
				return errors.New("read model down")
			}
			return nil
		}),
		Pipeline: newPipeline(t, st.s, &recovery.Config{OperationTracker: completed}),
	})
	require.NoError(t, err)
	defer sv.Stop()

	res, err := sv.RunOnce(ctx)
	require.ErrorContains(t, err, "read model down")
	require.ErrorIs(t, err, recovery.ErrUnrecovered)
	require.Equal(t, 1, res.Failed, "counted against the batch's first entry")
	require.Empty(t, res.Resolved)
	require.Empty(t, st.rows(t), "MoveTx's writes rolled back")
	left, err := st.s.ListExpired(ctx, &store.ListExpiredParams{Stream: "mtx"})
	require.NoError(t, err)
	require.Len(t, left, 3, "still expired, their work kept")
	stats, err := st.s.Stats(ctx, "mtx")
	require.NoError(t, err)
	require.Equal(t, int64(4), stats.NextNumber, "no new number")

	fail.Store(false)
	res, err = sv.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, res.Resolved[recovery.MethodRetry])
	got := st.rows(t)
	require.Len(t, got, 3)
	es, err := st.s.Read(ctx, "mtx", 0, 10)
	require.NoError(t, err)
	require.Len(t, es, 6)
	for old := int64(1); old <= 3; old++ {
		m := got[old]
		require.Equal(t, old+3, m.NewNumber, "new numbers in the order of the originals")
		require.Equal(t, fmt.Sprint("op-", old), m.OperationID)
		require.Equal(t, "orders", m.Kind)
		require.Equal(t, recovery.MethodRetry, m.Method)
		require.Equal(t, []byte(fmt.Sprint("result of op-", old)), m.Payload)
		require.Equal(t, store.Gap, es[old-1].State)
		require.Equal(t, m.NewNumber, es[old-1].RecoveredAs)
		require.Equal(t, store.Committed, es[m.NewNumber-1].State)
		require.Equal(t, m.Payload, es[m.NewNumber-1].Payload)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 2, "one call per batch")
	for _, call := range seen {
		require.Len(t, call, 3)
		require.Equal(t, "mtx", call[0].Stream)
	}
}

// TestMoveTxFailuresCountTowardsGivingUp: a MoveTx that keeps failing is a
// recovery that keeps failing: with MaxAttempts, the entry becomes
// a gap and nothing of MoveTx's writes persists.
func TestMoveTxFailuresCountTowardsGivingUp(t *testing.T) {
	t.Parallel()
	st := newSideTable(t)
	ctx := t.Context()
	leaseExpired(t, st.s, "give-up", 1)
	sv, err := cleanup.New(st.s, &cleanup.Config{
		MoveTx: cleanup.MoveTxFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, moves []cleanup.Move) error {
			if err := st.insert(ctx, tx, moves); err != nil {
				return err
			}
			return errors.New("always down")
		}),
		Pipeline: newPipeline(t, st.s, &recovery.Config{OperationTracker: completed, MaxAttempts: 2}),
	})
	require.NoError(t, err)
	defer sv.Stop()
	_, err = sv.RunOnce(ctx)
	require.Error(t, err)
	res, err := sv.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Resolved[recovery.MethodGap])
	es, err := st.s.Read(ctx, "give-up", 0, 10)
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, store.Gap, es[0].State)
	require.Equal(t, recovery.ReasonRecoveryFailed, es[0].GapReason)
	require.Empty(t, st.rows(t))
}

// TestMoveTxNeedsATxRecoverer: New refuses MoveTx on a store that cannot
// run it, naming the field.
func TestMoveTxNeedsATxRecoverer(t *testing.T) {
	t.Parallel()
	fn := func(context.Context, pgx.Tx, []cleanup.Move) error { return nil }
	_, err := cleanup.New(memory.New(nil), &cleanup.Config{MoveTx: cleanup.MoveTxFunc[pgx.Tx](fn)})
	require.ErrorIs(t, err, store.ErrUnsupported)
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorContains(t, err, "Config.MoveTx")
	// a transaction type the store does not use
	_, err = cleanup.New(newPostgres(t), &cleanup.Config{MoveTx: cleanup.MoveTxFunc[*sql.Tx](func(context.Context, *sql.Tx, []cleanup.Move) error { return nil })})
	require.ErrorIs(t, err, store.ErrUnsupported)
	sv, err := cleanup.New(newPostgres(t), &cleanup.Config{MoveTx: cleanup.MoveTxFunc[pgx.Tx](fn)})
	require.NoError(t, err)
	sv.Stop()
}

// TestMoveTxTimeoutBoundsTheFunction: the transaction that runs MoveTx, the
// function included, is bounded by MoveTxTimeout, not by the statements'
// QueryTimeout (its default); New refuses one outside 0..MaxInterval.
func TestMoveTxTimeoutBoundsTheFunction(t *testing.T) {
	t.Parallel()
	const query = 10 * time.Second
	for _, c := range []struct {
		moveTx time.Duration
		within time.Duration // the function's ctx ends within it
		beyond time.Duration // and not before
	}{
		{0, query, 0},
		{time.Hour, time.Hour, query},
	} {
		st := newSideTable(t)
		ctx := t.Context()
		leaseExpired(t, st.s, "slow", 1)
		var left time.Duration // 0 without a deadline
		sv, err := cleanup.New(st.s, &cleanup.Config{
			QueryTimeout:  query,
			MoveTxTimeout: c.moveTx,
			MoveTx: cleanup.MoveTxFunc[pgx.Tx](func(ctx context.Context, tx pgx.Tx, moves []cleanup.Move) error {
				if dl, ok := ctx.Deadline(); ok {
					left = time.Until(dl)
				}
				return st.insert(ctx, tx, moves)
			}),
			Pipeline: newPipeline(t, st.s, &recovery.Config{OperationTracker: completed}),
		})
		require.NoError(t, err)
		res, err := sv.RunOnce(ctx)
		sv.Stop()
		require.NoError(t, err)
		require.Equal(t, 1, res.Resolved[recovery.MethodRetry])
		require.Positive(t, left, "MoveTxTimeout %v: the function runs with a deadline", c.moveTx)
		require.LessOrEqual(t, left, c.within, "MoveTxTimeout %v", c.moveTx)
		require.Greater(t, left, c.beyond, "MoveTxTimeout %v", c.moveTx)
	}
	for _, d := range []time.Duration{-1, cleanup.MaxInterval + 1} {
		_, err := cleanup.New(memory.New(nil), &cleanup.Config{MoveTxTimeout: d})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		require.ErrorContains(t, err, "Config.MoveTxTimeout")
	}
}
