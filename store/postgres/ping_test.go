package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// readOnlyPool returns a pool whose sessions are read-only, as a hot
// standby's are: default_transaction_read_only = on.
func readOnlyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestPing checks Ping's verdicts: a migrated schema on a writable server
// passes, and its streams are untouched; a read-only session fails with
// ErrReadOnly saying it is not a standby; a schema not migrated fails
// with ErrSchemaMissing; a closed pool fails.
func TestPing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Ping(t.Context()))
	names, err := s.Streams(t.Context(), "", 0)
	require.NoError(t, err)
	require.Empty(t, names, "a ping creates nothing")

	ro, err := postgres.New(readOnlyPool(t), &postgres.Config{Schema: schema})
	require.NoError(t, err)
	err = ro.Ping(t.Context())
	require.ErrorIs(t, err, store.ErrReadOnly)
	require.ErrorContains(t, err, "the session is read-only")

	missing, err := postgres.New(pool, &postgres.Config{Schema: pgtest.ReserveSchema(t, pool)})
	require.NoError(t, err)
	require.ErrorIs(t, missing.Ping(t.Context()), postgres.ErrSchemaMissing)

	closed, err := pgxpool.New(t.Context(), pgtest.URL())
	require.NoError(t, err)
	closed.Close()
	gone, err := postgres.New(closed, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	require.ErrorContains(t, gone.Ping(t.Context()), "closed pool")
}

// TestWriteOnReadOnlyServer checks that a Store whose pool reached a
// server that refuses writes (a standby during a failover) reports it as
// store.ErrReadOnly, keeping the server's error, and hands out nothing.
func TestWriteOnReadOnlyServer(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	ro, err := postgres.New(readOnlyPool(t), &postgres.Config{Schema: schema})
	require.NoError(t, err)
	_, err = ro.Lease(t.Context(), "s", []store.LeaseRequest{{TTL: time.Minute}}, &store.LeaseParams{Owner: "w"})
	require.ErrorIs(t, err, store.ErrReadOnly)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the server's error is kept")
	require.Equal(t, "25006", pgErr.Code)

	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	_, err = s.Stats(t.Context(), "s")
	require.ErrorIs(t, err, store.ErrStreamNotFound, "nothing was handed out")
}
