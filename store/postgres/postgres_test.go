package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/store/storetest"
)

var (
	_ storetest.Store = (*postgres.Store)(nil)
	_ sequence.Store  = (*postgres.Store)(nil)
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newStore returns a Store on a fresh, migrated schema.
func newStore(t *testing.T, simple bool) *postgres.Store {
	pool := pgtest.Shared(t, simple)
	s, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
	require.NoError(t, err)
	return s
}

func TestConformancePostgres(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return newInterruptible(t, false) })
}

// TestConformancePostgresSimpleProtocol runs the suite in pgx's simple
// protocol mode, the one PgBouncer's transaction pooling needs.
func TestConformancePostgresSimpleProtocol(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return newInterruptible(t, true) })
}

// interruptible is a Store whose next CommitMulti can be cut mid-way
// (storetest.Interrupter): another connection locks the entry of the
// call's last item, so that the call stops there, having run the items
// before it in its transaction; its server process is terminated, as a
// lost connection would end it; the lock is let go.
type interruptible struct {
	*postgres.Store
	pool   *pgxpool.Pool
	schema string
	armed  atomic.Bool
}

func newInterruptible(t *testing.T, simple bool) *interruptible {
	pool := pgtest.Shared(t, simple)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	return &interruptible{Store: s, pool: pool, schema: schema}
}

func (s *interruptible) InterruptNextCommitMulti() { s.armed.Store(true) }

func (s *interruptible) CommitMulti(ctx context.Context, items []store.StreamCommit, p *store.CommitMultiParams) ([]store.CommitResult, error) {
	if !s.armed.CompareAndSwap(true, false) || len(items) < 2 {
		return s.Store.CommitMulti(ctx, items, p)
	}
	locker, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = locker.Rollback(context.WithoutCancel(ctx)) }()
	last := items[len(items)-1]
	var lockerPID int
	err = locker.QueryRow(ctx, "SELECT pg_backend_pid() FROM "+pgx.Identifier{s.schema, "entries"}.Sanitize()+
		" WHERE stream = $1 AND number = $2 FOR UPDATE", last.Stream, last.Number).Scan(&lockerPID)
	if err != nil {
		return nil, err
	}
	type result struct {
		res []store.CommitResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.Store.CommitMulti(ctx, items, p)
		done <- result{res, err}
	}()
	for { // the call waits for the lock: cut it there
		var terminated bool
		err := s.pool.QueryRow(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", lockerPID).Scan(&terminated)
		if err == nil && terminated {
			break
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		select {
		case r := <-done: // never waited for the lock: not cut, and the suite says so
			return r.res, r.err
		case <-time.After(time.Millisecond):
		}
	}
	r := <-done
	return r.res, r.err
}

func TestNewRejectsBadSchema(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{`x"; DROP TABLE entries; --`, "Upper", "a b", "pg_catalog", "a\x00b",
		"a\n\x1b[31m", strings.Repeat("x", 10<<20)} {
		s, err := postgres.New(pgtest.Shared(t, false), &postgres.Config{Schema: schema})
		require.Nil(t, s)
		require.ErrorIs(t, err, migrations.ErrInvalidSchema, schema)
		require.ErrorIs(t, err, store.ErrInvalidArgument, schema)
		require.Less(t, len(err.Error()), 300)
		require.NotContains(t, err.Error(), "\n")
		require.NotContains(t, err.Error(), "\x1b")
	}
}

func TestUnmigratedSchemaSaysSo(t *testing.T) {
	t.Parallel()
	s, err := postgres.New(pgtest.Shared(t, false), &postgres.Config{Schema: "seqlease_never_migrated"})
	require.NoError(t, err)
	_, err = s.Lease(context.Background(), "s", []store.LeaseRequest{{TTL: time.Second}}, nil)
	require.ErrorIs(t, err, postgres.ErrSchemaMissing)
	require.ErrorContains(t, err, "migrations")
}

// TestAbortedLeaseLeavesNoHole makes lease statements fail inside the server,
// after they began executing: they wait for the stream row's lock until
// lock_timeout aborts them. The next lease must get the very next number: an
// aborted lease consumes none (I1), unlike a sequence's nextval.
//
// (Cancelling the client's context instead would not do: pgx then closes the
// connection, but the server-side statement goes on once it gets the lock and
// may commit. Such an orphaned lease is no hole either: it exists, nobody
// holds it, and it expires into a gap.)
func TestAbortedLeaseLeavesNoHole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	req := []store.LeaseRequest{{TTL: time.Minute}}
	first, err := s.Lease(ctx, "s", req, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), first[0].Number)

	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "50ms"
	cfg.MaxConns = 1
	impatient, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer impatient.Close()
	aborting, err := postgres.New(impatient, &postgres.Config{Schema: schema})
	require.NoError(t, err)

	// Hold the stream row's lock in another transaction.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+schema+".streams WHERE name = 's' FOR UPDATE")
	require.NoError(t, err)

	for range 3 {
		_, err = aborting.Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}}, nil)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "55P03", pgErr.Code, "lock_not_available")
	}
	require.NoError(t, tx.Rollback(ctx))

	next, err := aborting.Lease(ctx, "s", req, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), next[0].Number, "aborted leases must not consume numbers")
	entries, err := s.Read(ctx, "s", 0, 0)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	stats, err := s.Stats(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(3), stats.NextNumber)
}

// TestCommitDecidedByStatementClock commits inside a transaction that began
// before the lease expired: PostgreSQL's now() there is stale, but the
// decision uses the statement's clock, so the late commit is refused (I3).
func TestCommitDecidedByStatementClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var txStart time.Time
	require.NoError(t, tx.QueryRow(ctx, "SELECT now()").Scan(&txStart))

	leased, err := s.Lease(ctx, "s", []store.LeaseRequest{{TTL: 20 * time.Millisecond}}, nil)
	require.NoError(t, err)
	// Wait on the database's clock until the lease is past its expiry.
	require.Eventually(t, func() bool {
		now, err := s.Now(ctx)
		return err == nil && !now.Before(leased[0].ExpiresAt)
	}, 5*time.Second, time.Millisecond)

	txStore, err := postgres.New(tx, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	_, err = txStore.Commit(ctx, "s", 1, leased[0].Token, nil)
	require.ErrorIs(t, err, store.ErrExpired, "now() of the transaction (%v) predates the expiry, but the statement clock decides", txStart)
}

var _ storetest.NamedLeaseStore = (*postgres.Store)(nil)

func TestNamedLeaseConformancePostgres(t *testing.T) {
	storetest.RunNamedLeases(t, func(t *testing.T) storetest.NamedLeaseStore { return newStore(t, false) })
}

// TestNamedLeaseConformancePostgresSimpleProtocol runs the named-lease suite
// in pgx's simple protocol mode, the one PgBouncer's transaction pooling needs.
func TestNamedLeaseConformancePostgresSimpleProtocol(t *testing.T) {
	storetest.RunNamedLeases(t, func(t *testing.T) storetest.NamedLeaseStore { return newStore(t, true) })
}
