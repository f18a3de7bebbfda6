package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
)

// TestQueryDecidedRowsComeBeforeTheCommit runs statements through
// queryDecided on a table whose unique key is checked at commit: the rows
// of an insert that breaks it arrive, complete and without error, and only
// commit reports the failure (and nothing was written); a statement that
// fails while it runs fails its rows; the connections go back to the pool
// in working order. In the simple protocol the rows come from Query, after
// the commit, and there is no commit to wait for.
func TestQueryDecidedRowsComeBeforeTheCommit(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		t.Run(fmt.Sprintf("simple protocol %v", simple), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := pgtest.Shared(t, simple)
			schema := pgtest.ReserveSchema(t, pool)
			table := pgx.Identifier{schema, "t"}.Sanitize()
			_, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
			require.NoError(t, err)
			_, err = pool.Exec(ctx, "CREATE TABLE "+table+" (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
			require.NoError(t, err)
			s, err := New(pool, &Config{Schema: schema})
			require.NoError(t, err)
			count := func() int {
				var n int
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
				return n
			}

			for round := range 3 { // the first prepares the statement, the others reuse it
				rows, commit, err := s.queryDecided(ctx, "INSERT INTO "+table+" SELECT unnest($1::int[]) RETURNING x", []int32{1, 1})
				if simple {
					// The rows come after the commit: the failure with them.
					require.Nil(t, commit)
					if err == nil {
						_, err = pgx.CollectRows(rows, pgx.RowTo[int32])
					}
				} else {
					require.NoError(t, err)
					require.NotNil(t, commit)
					xs, cerr := pgx.CollectRows(rows, pgx.RowTo[int32])
					require.NoError(t, cerr, "the statement ran")
					require.Equal(t, []int32{1, 1}, xs)
					err = commit()
				}
				var pgErr *pgconn.PgError
				require.True(t, errors.As(err, &pgErr), "round %d: the commit failed: %v", round, err)
				require.Equal(t, "23505", pgErr.Code)
				require.Zero(t, count(), "nothing was written")

				rows, commit, err = s.queryDecided(ctx, "SELECT 1 / x FROM (VALUES (1), (0)) v(x)")
				if err == nil {
					_, err = pgx.CollectRows(rows, pgx.RowTo[int32])
				}
				if commit != nil {
					_ = commit()
				}
				require.True(t, errors.As(err, &pgErr), "the statement failed: %v", err)
				require.Equal(t, "22012", pgErr.Code)
			}

			rows, commit, err := s.queryDecided(ctx, "INSERT INTO "+table+" SELECT unnest($1::int[]) RETURNING x", []int32{1, 2})
			require.NoError(t, err)
			xs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			require.NoError(t, err)
			require.Equal(t, []int32{1, 2}, xs)
			if commit != nil {
				require.NoError(t, commit())
			}
			require.Equal(t, 2, count(), "the connections work")
		})
	}
}

// TestQueryDecidedPreparesAgainAfterASchemaChange: a statement prepared on
// a connection, whose table then changes shape, fails once (as with pgx's
// own statement cache) and is prepared again at its next use.
func TestQueryDecidedPreparesAgainAfterASchemaChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := pgtest.NewPool(ctx, &pgtest.Options{MaxConns: 1}) // one connection: the one that prepared
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := pgtest.ReserveSchema(t, pool)
	table := pgx.Identifier{schema, "t"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "CREATE TABLE "+table+" (x int)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+table+" VALUES (1)")
	require.NoError(t, err)
	s, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)
	read := func() (int, error) {
		rows, commit, err := s.queryDecided(ctx, "SELECT * FROM "+table+" WHERE x = $1", 1)
		if err != nil {
			return 0, err
		}
		vals, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		if cerr := commit(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, err
		}
		return len(vals[0]), nil
	}
	cols, err := read()
	require.NoError(t, err)
	require.Equal(t, 1, cols)
	_, err = pool.Exec(ctx, "ALTER TABLE "+table+" ADD COLUMN y int")
	require.NoError(t, err)
	cols, err = read()
	if err != nil { // the old plan's result type no longer fits
		cols, err = read()
	}
	require.NoError(t, err, "prepared again")
	require.Equal(t, 2, cols)
}
