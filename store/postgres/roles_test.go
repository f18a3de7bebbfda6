package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// roles are the two roles of docs/operations.md ("Least-privilege roles"),
// made for one test: a migrator that owns the schema and runs migrations,
// and a runtime role with DML only.
type roles struct {
	schema            string
	migrator, runtime string        // role names
	migratorPool      *pgxpool.Pool // connected as migrator
	runtimePool       *pgxpool.Pool // connected as runtime
	otherRuntimePool  *pgxpool.Pool // a second process of the service, as runtime
	runtimeStore      *postgres.Store
	otherRuntimeStore *postgres.Store
}

// setupRoles creates the roles (named after a fresh schema, as roles are
// global to the cluster), grants what the doc says, and migrates the schema
// as the migrator. Everything is dropped when t ends: DROP OWNED BY first,
// which drops the schema the migrator owns and revokes the grants.
func setupRoles(t *testing.T) *roles {
	t.Helper()
	ctx := t.Context()
	su := pgtest.Shared(t, false)
	r := &roles{schema: pgtest.ReserveSchema(t, su)}
	r.migrator, r.runtime = r.schema+"_migrator", r.schema+"_app"
	var db string
	require.NoError(t, su.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	password := func() string {
		var b [16]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	migratorPassword, runtimePassword := password(), password()
	id := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	schema, migrator, runtime := id(r.schema), id(r.migrator), id(r.runtime)

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// One role at a time: DROP OWNED BY of both at once trips over the
		// default privileges that involve both ("could not find tuple for
		// default ACL", PostgreSQL 15).
		for _, sql := range []string{
			"DROP OWNED BY " + migrator + " CASCADE",
			"DROP OWNED BY " + runtime + " CASCADE",
			"DROP ROLE IF EXISTS " + runtime,
			"DROP ROLE IF EXISTS " + migrator,
		} {
			if _, err := su.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	// docs/operations.md, "Least-privilege roles", with this test's names.
	// (CREATE ROLE takes no parameters: the passwords are hex.)
	for _, sql := range []string{
		"CREATE ROLE " + migrator + " LOGIN PASSWORD '" + migratorPassword + "'",
		"GRANT CREATE ON DATABASE " + id(db) + " TO " + migrator,
		"CREATE SCHEMA " + schema + " AUTHORIZATION " + migrator,
		"CREATE ROLE " + runtime + " LOGIN PASSWORD '" + runtimePassword + "'",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + runtime,
		"ALTER DEFAULT PRIVILEGES FOR ROLE " + migrator + " IN SCHEMA " + schema +
			" GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO " + runtime,
	} {
		_, err := su.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}

	connect := func(user, password string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(pgtest.URL())
		require.NoError(t, err)
		cfg.ConnConfig.User, cfg.ConnConfig.Password = user, password
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close) // before the roles are dropped
		require.NoError(t, pool.Ping(ctx), "connect as %s", user)
		return pool
	}
	r.migratorPool = connect(r.migrator, migratorPassword)
	r.runtimePool = connect(r.runtime, runtimePassword)
	r.otherRuntimePool = connect(r.runtime, runtimePassword)

	// Deploy: migrate as the migrator, then keep the service off the
	// migration records, as the doc says.
	m, err := migrations.New(&migrations.Config{Schema: r.schema})
	require.NoError(t, err)
	done, err := m.Up(ctx, r.migratorPool)
	require.NoError(t, err)
	require.NotEmpty(t, done)
	_, err = r.migratorPool.Exec(ctx, "REVOKE INSERT, UPDATE, DELETE ON "+pgx.Identifier{r.schema, "seqlease_migrations"}.Sanitize()+" FROM "+runtime)
	require.NoError(t, err)

	r.runtimeStore, err = postgres.New(r.runtimePool, &postgres.Config{Schema: r.schema})
	require.NoError(t, err)
	r.otherRuntimeStore, err = postgres.New(r.otherRuntimePool, &postgres.Config{Schema: r.schema})
	require.NoError(t, err)
	return r
}

// requireDenied checks that err is PostgreSQL's insufficient_privilege.
func requireDenied(t *testing.T, err error, what string) {
	t.Helper()
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%s: want a privilege error, got %v", what, err)
	require.Equal(t, "42501", pe.Code, "%s: %v", what, err)
}

// TestLeastPrivilegeRoles follows docs/operations.md: the schema is migrated
// by a migrator role, and the service runs as a role with DML only. Every
// runtime path works as that role; schema changes and writes to the
// migration records are refused.
func TestLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	r := setupRoles(t)
	ctx := t.Context()
	s := r.runtimeStore
	minute := []store.LeaseRequest{{TTL: time.Minute, OperationID: "a", Kind: "k"}, {TTL: time.Minute}, {TTL: time.Minute}}

	t.Run("ledger", func(t *testing.T) {
		// Lease, ordered commit, release, extend.
		es, err := s.Lease(ctx, "s", minute, &store.LeaseParams{Owner: "app"})
		require.NoError(t, err)
		_, err = s.Commit(ctx, "s", 1, es[0].Token, &store.CommitParams{Payload: []byte("one"), Ordered: true})
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, "s", 2, es[1].Token, nil))
		_, _, err = s.Extend(ctx, "s", 3, es[2].Token, &store.ExtendParams{TTL: time.Hour})
		require.NoError(t, err)
		res, err := s.CommitBatch(ctx, "s", []store.CommitItem{{Number: 3, Token: es[2].Token, Payload: []byte("three")}}, &store.CommitBatchParams{Ordered: true})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)

		// Expiry: list, resolve into a gap, recover one and a batch.
		expiring := make([]store.LeaseRequest, 4)
		for i := range expiring {
			expiring[i] = store.LeaseRequest{TTL: time.Microsecond, OperationID: "x"}
		}
		_, err = s.Lease(ctx, "s", expiring, nil) // 4..7
		require.NoError(t, err)
		expired, err := s.ListExpired(ctx, &store.ListExpiredParams{Stream: "s"})
		require.NoError(t, err)
		require.Len(t, expired, 4)
		require.NoError(t, s.ResolveExpired(ctx, "s", 4, nil))
		moved, err := s.RecoverExpired(ctx, "s", 5, &store.RecoverParams{RecoveryType: "retry", Payload: []byte("five")})
		require.NoError(t, err)
		require.Equal(t, int64(8), moved)
		rr, err := s.RecoverExpiredBatch(ctx, "s", []store.RecoverItem{{Number: 6, RecoveryType: "retry", Payload: []byte("six")}}, nil)
		require.NoError(t, err)
		require.NoError(t, rr[0].Err)
		_, err = s.ResolveExpiredBatch(ctx, "s", []int64{7}, nil)
		require.NoError(t, err)

		// Read, stats, gaps, fill, trim.
		all, err := s.Read(ctx, "s", 0, 100)
		require.NoError(t, err)
		require.Len(t, all, 9)
		_, err = s.ReadResolved(ctx, "s", 0, 100)
		require.NoError(t, err)
		st, err := s.Stats(ctx, "s")
		require.NoError(t, err)
		require.Equal(t, int64(9), st.Watermark)
		_, err = s.Snapshot(ctx, "s", 10)
		require.NoError(t, err)
		n, err := s.CountGaps(ctx, "s")
		require.NoError(t, err)
		require.Equal(t, int64(5), n) // 2, 4, 5, 6, 7
		_, err = s.ListGaps(ctx, "s", nil)
		require.NoError(t, err)
		require.NoError(t, s.FillGap(ctx, "s", 2, &store.FillParams{FilledBy: "ops", Payload: []byte("two")}))
		_, err = s.Streams(ctx, "", 10)
		require.NoError(t, err)
		low, err := s.Trim(ctx, "s", 4)
		require.NoError(t, err)
		require.Equal(t, int64(4), low)
	})

	t.Run("checkpoints", func(t *testing.T) {
		// A reader's checkpoint: saved on the pool and in a transaction,
		// read, listed, deleted.
		_, err := s.Lease(ctx, "k", minute[:1], nil)
		require.NoError(t, err)
		require.NoError(t, s.SaveCheckpoint(ctx, "reader", "k", 0, nil))
		tx, err := r.runtimePool.Begin(ctx)
		require.NoError(t, err)
		ts, err := postgres.New(tx, &postgres.Config{Schema: r.schema})
		require.NoError(t, err)
		require.NoError(t, ts.SaveCheckpoint(ctx, "reader", "k", 0, nil))
		require.NoError(t, tx.Commit(ctx))
		_, err = s.Checkpoint(ctx, "reader", "k")
		require.NoError(t, err)
		cs, err := s.ListCheckpoints(ctx, nil)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.NoError(t, s.DeleteCheckpoint(ctx, "reader", "k"))
	})

	t.Run("cleanup", func(t *testing.T) {
		// The cleanup loop's cycle: the expired scan, its per-stream named
		// lease (seqlease/cleanup/<stream>), the gap step.
		_, err := s.Lease(ctx, "c", []store.LeaseRequest{{TTL: time.Microsecond}, {TTL: time.Microsecond}}, nil)
		require.NoError(t, err)
		p, err := recovery.New(s, &recovery.Config{Owner: "app/cleanup"})
		require.NoError(t, err)
		cl, err := cleanup.New(s, &cleanup.Config{Pipeline: p})
		require.NoError(t, err)
		res, err := cl.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Resolved["gap"], "%+v", res)
	})

	t.Run("named leases", func(t *testing.T) {
		held, err := s.AcquireLease(ctx, "leader", "app-1", &store.AcquireLeaseParams{TTL: time.Minute})
		require.NoError(t, err)
		held, err = s.RenewLease(ctx, "leader", "app-1", held.Fence, &store.RenewLeaseParams{TTL: time.Minute})
		require.NoError(t, err)
		_, err = s.AcquireLease(ctx, "leader", "app-2", &store.AcquireLeaseParams{TTL: time.Minute, Wait: time.Second}) // marks the name wanted
		var he *store.HeldError
		require.ErrorAs(t, err, &he)
		require.NoError(t, s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: "leader", Waiter: "app-2", Since: time.Now()}))
		tx, err := r.runtimePool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, s.CheckFence(ctx, tx, "leader", held.Fence))
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, s.ReleaseLease(ctx, "leader", "app-1", held.Fence, nil))
		_, err = s.AcquireLease(ctx, "cursor", "app-3", &store.AcquireLeaseParams{TTL: time.Minute})
		require.NoError(t, err)
		ended, err := s.ForceReleaseLeases(ctx, "app-3", nil)
		require.NoError(t, err)
		require.Len(t, ended, 1)
		_, err = s.AcquireLease(ctx, "short", "app-4", &store.AcquireLeaseParams{TTL: time.Microsecond})
		require.NoError(t, err)
		_, err = s.CleanupExpiredLeases(ctx, nil)
		require.NoError(t, err)
		_, err = s.ListLeases(ctx, nil)
		require.NoError(t, err)
		hist, err := s.LeaseHistory(ctx, "leader", nil)
		require.NoError(t, err)
		require.NotEmpty(t, hist)
		_, err = s.TrimLeaseHistory(ctx, time.Now().Add(time.Hour), 100)
		require.NoError(t, err)

		// The lease package on top: its batched statements and its LISTEN.
		m, err := lease.New(s, &lease.Config{Owner: "app-5"})
		require.NoError(t, err)
		require.NoError(t, m.Start(ctx))
		defer m.Stop()
		l, err := m.TryAcquire(ctx, "runner", &lease.AcquireOpts{TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, l.Renew(ctx))
		require.NoError(t, l.Release(ctx))
	})

	t.Run("inbox", func(t *testing.T) {
		first, err := s.MarkReceived(ctx, "payments", "m-1", nil)
		require.NoError(t, err)
		require.True(t, first)
		first, err = s.MarkReceived(ctx, "payments", "m-1", nil)
		require.NoError(t, err)
		require.False(t, first)
		_, ok, err := s.Received(ctx, "payments", "m-1")
		require.NoError(t, err)
		require.True(t, ok)
		n, err := s.CountReceived(ctx, "")
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		n, err = s.PurgeReceived(ctx, &store.PurgeReceivedParams{Before: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})

	t.Run("listen", func(t *testing.T) {
		// The watch as the runtime role: once it listens (Reset), a commit
		// by another process of the service reaches it by NOTIFY.
		es, err := s.Lease(ctx, "w", minute, nil)
		require.NoError(t, err)
		sink := &chanSink{reset: make(chan struct{}, 1), resolved: make(chan int64, 10)}
		wctx, cancel := context.WithCancel(ctx)
		watched := make(chan error, 1)
		go func() { watched <- s.Watch(wctx, sink) }()
		defer func() { cancel(); <-watched }()
		<-sink.reset
		_, err = r.otherRuntimeStore.Commit(ctx, "w", 1, es[0].Token, nil)
		require.NoError(t, err)
		require.Equal(t, int64(1), <-sink.resolved)

		// A barrier of the service, which polls only once an hour: the
		// ordered commit of 3 waits until another process commits 2.
		b, err := barrier.New(s, &barrier.Config{PollInterval: time.Hour})
		require.NoError(t, err)
		require.NoError(t, b.Start(ctx))
		defer b.Stop()
		leaser, err := sequence.New(s, &sequence.Config{Barrier: b, Owner: "app"})
		require.NoError(t, err)
		third, err := leaser.Lease(ctx, "w", nil) // 4
		require.NoError(t, err)
		committed := make(chan error, 1)
		go func() { committed <- b.WaitFor(ctx, "w", 3) }()
		require.False(t, b.Reached("w", 3))
		_, err = r.otherRuntimeStore.Commit(ctx, "w", 2, es[1].Token, nil)
		require.NoError(t, err)
		require.NoError(t, <-committed)
		require.True(t, b.Reached("w", 3))

		// The Leaser's own paths: ordered commit (group commit), extend,
		// release.
		_, err = r.otherRuntimeStore.Commit(ctx, "w", 3, es[2].Token, nil)
		require.NoError(t, err)
		require.NoError(t, third.Extend(ctx, time.Minute))
		require.NoError(t, third.Commit(ctx, []byte("four")))
		fifth, err := leaser.Lease(ctx, "w", nil)
		require.NoError(t, err)
		require.NoError(t, fifth.Release(ctx))
	})

	t.Run("no DDL", func(t *testing.T) {
		table := func(name string) string { return pgx.Identifier{r.schema, name}.Sanitize() }
		for _, sql := range []string{
			"DROP TABLE " + table("entries"),
			"ALTER TABLE " + table("entries") + " ADD COLUMN x int",
			"CREATE TABLE " + table("mine") + " (x int)",
			"CREATE INDEX ON " + table("entries") + " (owner)",
			"TRUNCATE " + table("entries"),
			"INSERT INTO " + table("seqlease_migrations") + " (version, name, checksum) VALUES (999, 'x', 'x')",
			"DELETE FROM " + table("seqlease_migrations"),
		} {
			_, err := r.runtimePool.Exec(ctx, sql)
			requireDenied(t, err, sql)
		}
		// Nor can the service migrate: migrations need the migrator.
		m, err := migrations.New(&migrations.Config{Schema: r.schema})
		require.NoError(t, err)
		_, err = m.Down(ctx, r.runtimePool, 1)
		requireDenied(t, err, "migrate down")
		// The migrator can (its DDL is what the roles separate).
		_, err = r.migratorPool.Exec(ctx, "CREATE TABLE "+table("mine")+" (x int)")
		require.NoError(t, err)
	})
}

// chanSink is a store.Sink on channels.
type chanSink struct {
	reset    chan struct{}
	resolved chan int64
}

func (c *chanSink) Reset() {
	select {
	case c.reset <- struct{}{}:
	default:
	}
}

func (c *chanSink) Resolved(_ string, number int64) { c.resolved <- number }

func (c *chanSink) ResolvedThrough(_ string, through int64) { c.resolved <- through }
