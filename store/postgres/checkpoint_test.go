package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// txFixture is a migrated schema with a stream whose watermark is 10, and a
// way to open Stores over transactions on it.
type txFixture struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	cfg    *postgres.Config
	s      *postgres.Store // on the pool
	stream string
}

func newTxFixture(t *testing.T) *txFixture {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	f := &txFixture{ctx: t.Context(), pool: pool, cfg: &postgres.Config{Schema: pgtest.NewSchema(t, pool)}, stream: "orders"}
	var err error
	f.s, err = postgres.New(pool, f.cfg)
	require.NoError(t, err)
	reqs := make([]store.LeaseRequest, 10)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Hour}
	}
	es, err := f.s.Lease(f.ctx, f.stream, reqs, nil)
	require.NoError(t, err)
	for _, e := range es {
		_, err := f.s.Commit(f.ctx, e.Stream, e.Number, e.Token, nil)
		require.NoError(t, err)
	}
	return f
}

// begin opens a transaction and a Store over it; the transaction is rolled
// back at the end of the test if it is still open.
func (f *txFixture) begin(t *testing.T) (pgx.Tx, *postgres.Store) {
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	ts, err := postgres.New(tx, f.cfg)
	require.NoError(t, err)
	return tx, ts
}

func (f *txFixture) checkpoint(t *testing.T) int64 {
	pos, err := f.s.Checkpoint(f.ctx, "projection", f.stream)
	require.NoError(t, err)
	return pos
}

// waitBlocked waits until the server process of tx waits for a lock.
func (f *txFixture) waitBlocked(t *testing.T, tx pgx.Tx) {
	pid := tx.Conn().PgConn().PID()
	require.Eventually(t, func() bool {
		var waiting bool
		err := f.pool.QueryRow(f.ctx, `SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, time.Millisecond, "the second saver never waited for the row lock")
}

// TestSaveCheckpointInTransaction: a save in the application's transaction
// takes effect exactly when the transaction commits; a rollback leaves the
// checkpoint as it was.
func TestSaveCheckpointInTransaction(t *testing.T) {
	f := newTxFixture(t)
	tx, ts := f.begin(t)
	require.NoError(t, ts.SaveCheckpoint(f.ctx, "projection", f.stream, 5, nil))
	pos, err := ts.Checkpoint(f.ctx, "projection", f.stream)
	require.NoError(t, err)
	require.Equal(t, int64(5), pos, "the transaction sees its own save")
	require.Zero(t, f.checkpoint(t), "an uncommitted save is visible outside its transaction")
	require.NoError(t, tx.Rollback(f.ctx))
	require.Zero(t, f.checkpoint(t), "a rolled back save took effect")

	tx, ts = f.begin(t)
	require.NoError(t, ts.SaveCheckpoint(f.ctx, "projection", f.stream, 5, nil))
	require.NoError(t, tx.Commit(f.ctx))
	require.Equal(t, int64(5), f.checkpoint(t))

	// A refusal inside a transaction leaves it usable and changes nothing.
	tx, ts = f.begin(t)
	require.ErrorIs(t, ts.SaveCheckpoint(f.ctx, "projection", f.stream, 4, nil), store.ErrCheckpointBackwards)
	require.ErrorIs(t, ts.SaveCheckpoint(f.ctx, "projection", f.stream, 11, nil), store.ErrCheckpointAhead)
	require.NoError(t, ts.SaveCheckpoint(f.ctx, "projection", f.stream, 6, nil))
	require.NoError(t, tx.Commit(f.ctx))
	require.Equal(t, int64(6), f.checkpoint(t))
}

// TestConcurrentTransactionalSaves: two transactions saving one checkpoint
// serialize on its row: the second waits for the first and then judges the
// position the first left, so no update is lost and none goes back.
func TestConcurrentTransactionalSaves(t *testing.T) {
	for _, c := range []struct {
		name        string
		first       int64
		commitFirst bool
		second      int64
		wantErr     error
		want        int64
	}{
		{"a lower save behind a committed higher one is refused", 7, true, 6, store.ErrCheckpointBackwards, 7},
		{"a higher save behind a committed lower one wins", 7, true, 8, nil, 8},
		{"a lower save behind a rolled back higher one succeeds", 7, false, 6, nil, 6},
		{"the same position behind a committed save is a no-op", 7, true, 7, nil, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newTxFixture(t)
			txA, sa := f.begin(t)
			txB, sb := f.begin(t)
			require.NoError(t, sa.SaveCheckpoint(f.ctx, "projection", f.stream, c.first, nil))
			done := make(chan error, 1)
			go func() { done <- sb.SaveCheckpoint(f.ctx, "projection", f.stream, c.second, nil) }()
			f.waitBlocked(t, txB)
			if c.commitFirst {
				require.NoError(t, txA.Commit(f.ctx))
			} else {
				require.NoError(t, txA.Rollback(f.ctx))
			}
			err := <-done
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
				var ce *store.CheckpointError
				require.True(t, errors.As(err, &ce))
				require.Equal(t, c.first, ce.Current, "the refusal did not judge the committed position")
			} else {
				require.NoError(t, err)
			}
			require.NoError(t, txB.Commit(f.ctx))
			require.Equal(t, c.want, f.checkpoint(t))
		})
	}
}
