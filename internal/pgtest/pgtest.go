package pgtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/seqlease/seqlease/migrations"
)

// EnvURL is the environment variable that names the test database.
const EnvURL = "SEQLEASE_TEST_DATABASE_URL"

// DefaultURL is the test database used when EnvURL is unset: the local
// cluster's database "test", trust authentication.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// sharedMaxConns bounds each shared pool. go test runs up to GOMAXPROCS test
// binaries at once, each with up to two shared pools, and PostgreSQL allows
// 100 connections by default.
const sharedMaxConns = 10

// connectTimeout bounds the first connection and ping of a pool.
const connectTimeout = 15 * time.Second

// cleanupTimeout bounds the DROP SCHEMA run when a test ends.
const cleanupTimeout = 30 * time.Second

// URL returns the URL of the test database: EnvURL if set, else DefaultURL.
func URL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

// Options configures NewPool. A nil *Options means all defaults.
type Options struct {
	// SimpleProtocol makes the pool use pgx.QueryExecModeSimpleProtocol,
	// as behind a transaction-pooling PgBouncer. Default: false, pgx's
	// default extended protocol with cached statements.
	SimpleProtocol bool

	// MaxConns caps the pool's connections. Default: 0, pgxpool's default
	// (the greater of 4 and the number of CPUs).
	MaxConns int32

	// URL is the database to connect to. Default: URL().
	URL string
}

// NewPool connects a new pool to URL() and pings it. When the database
// cannot be reached the error explains how to provide one. The caller
// closes the pool.
func NewPool(ctx context.Context, opts *Options) (*pgxpool.Pool, error) {
	if opts == nil {
		opts = &Options{}
	}
	raw := cmp.Or(opts.URL, URL())
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("pgtest: parse %s (%s): %w", EnvURL, redact(raw), err)
	}
	if opts.SimpleProtocol {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, unreachable(raw, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, unreachable(raw, err)
	}
	return pool, nil
}

// unreachable explains how to provide a test database.
func unreachable(raw string, err error) error {
	return fmt.Errorf(`pgtest: cannot use the test database %s: %w

The tests need PostgreSQL. Provide it in one of these ways:
  - set %s to the URL of a database in which the tests may create and drop schemas;
  - start the local cluster:
        pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start
    and create the database if it is missing:
        runuser -u postgres -- createdb test
  - run "make test", which starts a throwaway cluster (scripts/with-postgres) when none answers`,
		redact(raw), err, EnvURL)
}

// redact hides a password in a URL-form connection string.
func redact(raw string) string {
	if !strings.Contains(raw, "://") {
		if strings.Contains(raw, "password") {
			return "(keyword/value connection string)"
		}
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// shared holds the lazily created pools, one per protocol mode, and the
// error of a failed attempt so that later tests fail fast.
var shared struct {
	mu    sync.Mutex
	pools [2]*pgxpool.Pool
	errs  [2]error
}

func modeIndex(simple bool) int {
	if simple {
		return 1
	}
	return 0
}

// Shared returns the test binary's pool for the protocol mode (simple: pgx's
// simple protocol), creating it on first use. It fails tb, never skips it,
// when the database cannot be reached. The pool is closed by CloseShared
// (Main calls it); tests must not close it.
func Shared(tb testing.TB, simple bool) *pgxpool.Pool {
	tb.Helper()
	i := modeIndex(simple)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pools[i] == nil && shared.errs[i] == nil {
		shared.pools[i], shared.errs[i] = NewPool(context.Background(), &Options{SimpleProtocol: simple, MaxConns: sharedMaxConns})
	}
	if shared.errs[i] != nil {
		tb.Fatal(shared.errs[i])
	}
	return shared.pools[i]
}

// CloseShared closes the pools made by Shared and forgets them and any
// connection failure; a later Shared connects anew.
func CloseShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for i, p := range shared.pools {
		if p != nil {
			p.Close()
		}
		shared.pools[i], shared.errs[i] = nil, nil
	}
}

// ReserveSchema returns a fresh random schema name, t_<16 hex digits>, and
// registers a cleanup on tb that drops the schema (CASCADE) if it exists. It
// creates nothing.
func ReserveSchema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	name := "t_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name
}

// NewSchema creates a fresh schema, migrates it to the latest version with
// migrations.Up, and drops it when tb ends. It returns the schema's name.
func NewSchema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	name := ReserveSchema(tb, pool)
	m, err := migrations.New(&migrations.Config{Schema: name})
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), cleanupTimeout)
	defer cancel()
	if _, err := m.Up(ctx, pool); err != nil {
		tb.Fatalf("pgtest: migrate schema %s: %v", name, err)
	}
	return name
}

// Main runs a test binary's tests: call it from TestMain. After the tests it
// closes the shared pools, then, if the tests passed, fails the run when
// goroutines leaked (goleak, which waits a little for goroutines that are
// already on their way out, as pgxpool's are after Close). It exits with the
// run's status.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	code := m.Run()
	CloseShared()
	bouncer.mu.Lock()
	stopPgBouncer()
	bouncer.mu.Unlock()
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: goroutines leaked by the tests: %v\n", err)
		return 1
	}
	return 0
}

// RolledBack returns a migrations.DB on tx, a transaction the test rolls
// back: its Begin hands out tx with Commit and Rollback turned into no-ops,
// so a Migrator's work, however it ends, is undone when the test rolls tx
// back. tx must not have run a statement yet (Up sets its isolation level).
func RolledBack(tx pgx.Tx) migrations.DB { return rolledBack{tx} }

type rolledBack struct{ tx pgx.Tx }

func (d rolledBack) Begin(context.Context) (pgx.Tx, error) { return uncommitted{d.tx}, nil }

type uncommitted struct{ pgx.Tx }

func (uncommitted) Commit(context.Context) error   { return nil }
func (uncommitted) Rollback(context.Context) error { return nil }
