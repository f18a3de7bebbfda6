// Package pgtest is the PostgreSQL harness of seqlease's tests.
//
// Every package whose tests touch PostgreSQL uses it the same way:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool := pgtest.Shared(t, false)   // true: pgx's simple protocol
//		schema := pgtest.NewSchema(t, pool) // fresh, migrated, dropped after t
//		...
//	}
//
// # The database
//
// URL returns SEQLEASE_TEST_DATABASE_URL, or a local default
// (postgres://postgres@127.0.0.1:5432/test). A database that does not answer
// fails the test with a message that says how to provide one; tests are
// never skipped for want of a database, because a skipped suite looks like
// a passing one. `make test` (scripts/with-postgres) starts a throwaway
// cluster when nothing answers.
//
// # Pools
//
// Shared keeps at most one pool per protocol mode per test binary: the
// default extended protocol, and the simple protocol that PgBouncer-style
// poolers need (pgx.QueryExecModeSimpleProtocol). Pools are created on first
// use, under a mutex, and a failure to connect is remembered so that every
// later test fails at once instead of waiting to time out again. Main closes
// them after the tests and before checking for leaked goroutines; NewPool
// makes a private pool for tests that need other settings.
//
// # PgBouncer
//
// PgBouncerURL returns the URL of a PgBouncer in transaction mode in front
// of the test database, for the tests of what happens behind a pooler:
// SEQLEASE_TEST_PGBOUNCER_URL, set by `make test` (scripts/with-pgbouncer,
// which installs Debian's pgbouncer when it is missing), or else a
// throwaway PgBouncer the test binary starts on first use when pgbouncer
// is installed (as root, as the postgres user: it refuses root), stopped by
// Main. Without either the test fails with a message that says how to
// provide one, as for the database. Options.URL points NewPool at it.
//
// # Isolation
//
// Each test works in its own schema, named t_<16 random hex digits>,
// migrated by the migrations package and dropped (CASCADE) by a cleanup
// when the test ends, so tests run in parallel on one database without
// seeing each other. ReserveSchema hands out a name and the cleanup without
// creating or migrating anything, for tests of the migrations themselves.
package pgtest
