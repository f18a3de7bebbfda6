package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
)

// TestBatchIsOneImplicitTransaction checks what CommitBatch's pipelined path
// rests on: pgx's SendBatch runs the queued statements as ONE implicit
// transaction, in the extended protocol (a pipeline with one Sync) and in
// the simple protocol (one multi-statement Query message). Three statements,
// the third failing with an SQL error: the first two roll back, and the
// notification the second sent is never delivered. Without the failure the
// three share one transaction id and all commit. Each case runs twice, so
// the extended protocol is seen both preparing and with cached statements.
func TestBatchIsOneImplicitTransaction(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		t.Run(fmt.Sprintf("simple=%v", simple), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.Shared(t, simple)
			schema := pgtest.ReserveSchema(t, pool)
			s := pgx.Identifier{schema}.Sanitize()
			table := pgx.Identifier{schema, "t"}.Sanitize()
			_, err := pool.Exec(ctx, "CREATE SCHEMA "+s)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, "CREATE TABLE "+table+" (n int PRIMARY KEY CHECK (n < 100))")
			require.NoError(t, err)

			listener, err := pool.Acquire(ctx)
			require.NoError(t, err)
			defer listener.Release()
			_, err = listener.Exec(ctx, "LISTEN "+s)
			require.NoError(t, err)

			insert := "INSERT INTO " + table + " VALUES ($1) RETURNING pg_current_xact_id()::text"
			insertNotify := "WITH i AS (INSERT INTO " + table + " VALUES ($1) RETURNING n) " +
				"SELECT pg_current_xact_id()::text FROM i, LATERAL pg_notify($2, 'n' || i.n::text) n"
			count := func() int {
				var n int
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
				return n
			}

			for round := range 2 {
				base := round * 10
				// Failing: the third statement violates the check constraint.
				b := &pgx.Batch{}
				b.Queue(insert, base+1)
				b.Queue(insertNotify, base+2, schema)
				b.Queue(insert, 1000)
				br := pool.SendBatch(ctx, b)
				var x1, x2 string
				require.NoError(t, br.QueryRow().Scan(&x1))
				require.NoError(t, br.QueryRow().Scan(&x2))
				var third string
				err := br.QueryRow().Scan(&third)
				var pgErr *pgconn.PgError
				require.True(t, errors.As(err, &pgErr), "want an SQL error, got %v", err)
				require.Equal(t, "23514", pgErr.Code, "check_violation")
				require.ErrorAs(t, br.Close(), &pgErr, "Close reports the batch's error")
				require.Equal(t, x1, x2, "one transaction")
				require.Zero(t, count(), "round %d: the first two statements must roll back with the third", round)

				// Succeeding: all three commit together, in one transaction.
				b = &pgx.Batch{}
				b.Queue(insert, base+1)
				b.Queue(insertNotify, base+2, schema)
				b.Queue(insert, base+3)
				br = pool.SendBatch(ctx, b)
				var xs [3]string
				for i := range xs {
					require.NoError(t, br.QueryRow().Scan(&xs[i]))
				}
				require.NoError(t, br.Close())
				require.Equal(t, xs[0], xs[1])
				require.Equal(t, xs[1], xs[2])
				require.Equal(t, 3, count())
				// The first notification to arrive is the committed batch's:
				// the rolled-back one was never sent.
				n, err := listener.Conn().WaitForNotification(ctx)
				require.NoError(t, err)
				require.Equal(t, fmt.Sprintf("n%d", base+2), n.Payload)
				_, err = pool.Exec(ctx, "DELETE FROM "+table)
				require.NoError(t, err)
			}
		})
	}
}
