package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store/postgres"
)

// inboxFixture is a schema with the inbox and an application table,
// credits, that the tests write in the same transaction as the record.
type inboxFixture struct {
	pool    *pgxpool.Pool
	schema  string
	credits string // quoted, schema-qualified
	s       *postgres.Store
}

func newInboxFixture(t *testing.T) *inboxFixture {
	t.Helper()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	f := &inboxFixture{pool: pool, schema: schema, credits: pgx.Identifier{schema, "credits"}.Sanitize()}
	_, err := pool.Exec(t.Context(), "CREATE TABLE "+f.credits+" (message_id text PRIMARY KEY, amount bigint NOT NULL)")
	require.NoError(t, err)
	f.s, err = postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	return f
}

// inTx returns a Store over tx: what an inbox consumer writes through it
// commits or rolls back with tx.
func (f *inboxFixture) inTx(t *testing.T, tx pgx.Tx) *postgres.Store {
	t.Helper()
	s, err := postgres.New(tx, &postgres.Config{Schema: f.schema})
	require.NoError(t, err)
	return s
}

// consume is an inbox consumer's transaction body: record the message,
// and credit it only if it is the first delivery.
func (f *inboxFixture) consume(ctx context.Context, tx pgx.Tx, id string) (bool, error) {
	s, err := postgres.New(tx, &postgres.Config{Schema: f.schema})
	if err != nil {
		return false, err
	}
	first, err := s.MarkReceived(ctx, "payments", id, nil)
	if err != nil || !first {
		return first, err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+f.credits+" (message_id, amount) VALUES ($1, 100)", id)
	return true, err
}

func (f *inboxFixture) credits1(t *testing.T, id string) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+f.credits+" WHERE message_id = $1", id).Scan(&n))
	return n
}

// TestInboxRecordRollsBackWithTheEffect: a consumer's transaction that
// rolls back takes the record with it, so the redelivery is a first
// delivery and applies the effect; once committed, the next one is a
// duplicate.
func TestInboxRecordRollsBackWithTheEffect(t *testing.T) {
	t.Parallel()
	f := newInboxFixture(t)
	ctx := t.Context()

	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	first, err := f.consume(ctx, tx, "m-1")
	require.NoError(t, err)
	require.True(t, first)
	require.NoError(t, tx.Rollback(ctx)) // a crash before the commit
	_, ok, err := f.s.Received(ctx, "payments", "m-1")
	require.NoError(t, err)
	require.False(t, ok, "the record rolled back with the effect")
	require.Zero(t, f.credits1(t, "m-1"))

	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		first, err := f.consume(ctx, tx, "m-1")
		require.True(t, first, "the redelivery after a rollback is the first delivery")
		return err
	})
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		first, err := f.consume(ctx, tx, "m-1")
		require.False(t, first, "a redelivery after the commit is a duplicate")
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 1, f.credits1(t, "m-1"), "credited exactly once")
}

// TestInboxConcurrentRedeliveryWaits: two transactions receive the same
// message at once. The second MarkReceived waits for the first
// transaction (it is blocked on it, as pg_blocking_pids shows); when the
// first commits it sees a duplicate, when the first rolls back it is the
// first delivery. Either way the effect is applied once.
func TestInboxConcurrentRedeliveryWaits(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "first commits", false: "first rolls back"}[commit]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newInboxFixture(t)
			ctx := t.Context()
			tx1, err := f.pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx1.Rollback(context.WithoutCancel(ctx)) }()
			var pid1 int
			require.NoError(t, tx1.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid1))
			first, err := f.consume(ctx, tx1, "m")
			require.NoError(t, err)
			require.True(t, first)

			type outcome struct {
				first bool
				err   error
			}
			done := make(chan outcome, 1)
			go func() {
				tx2, err := f.pool.Begin(ctx)
				if err != nil {
					done <- outcome{err: err}
					return
				}
				defer func() { _ = tx2.Rollback(context.WithoutCancel(ctx)) }()
				first, err := f.consume(ctx, tx2, "m")
				if err == nil {
					err = tx2.Commit(ctx)
				}
				done <- outcome{first, err}
			}()

			// Wait until the second transaction is blocked on the first.
			for {
				var blocked bool
				err := f.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))", pid1).Scan(&blocked)
				require.NoError(t, err)
				if blocked {
					break
				}
				select {
				case o := <-done:
					t.Fatalf("the second delivery did not wait for the first transaction: first=%v err=%v", o.first, o.err)
				case <-time.After(time.Millisecond):
				}
			}
			if commit {
				require.NoError(t, tx1.Commit(ctx))
			} else {
				require.NoError(t, tx1.Rollback(ctx))
			}
			o := <-done
			require.NoError(t, o.err)
			require.Equal(t, !commit, o.first, "the waiting delivery is first exactly when the other rolled back")
			require.Equal(t, 1, f.credits1(t, "m"), "credited exactly once")
			_, ok, err := f.s.Received(ctx, "payments", "m")
			require.NoError(t, err)
			require.True(t, ok)
		})
	}
}

// TestInboxRepeatableReadConflictIsRetryable: under REPEATABLE READ a
// record committed after the snapshot was taken is a serialization
// failure, not a silent first delivery.
func TestInboxRepeatableReadConflictIsRetryable(t *testing.T) {
	t.Parallel()
	f := newInboxFixture(t)
	ctx := t.Context()
	tx, err := f.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+f.credits) // takes the snapshot
	require.NoError(t, err)
	first, err := f.s.MarkReceived(ctx, "payments", "m", nil) // another transaction, committed
	require.NoError(t, err)
	require.True(t, first)
	_, err = f.inTx(t, tx).MarkReceived(ctx, "payments", "m", nil)
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "got %v", err)
	require.Equal(t, "40001", pgErr.Code, "serialization_failure: %v", err)
}
