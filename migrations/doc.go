// Package migrations holds seqlease's versioned PostgreSQL schema, embedded
// in the binary, and the runner that applies it.
//
// # Files
//
// The SQL lives in sql/, one pair of files per version, in golang-migrate's
// naming:
//
//	sql/000001_streams_entries.up.sql
//	sql/000001_streams_entries.down.sql
//	sql/000002_<title>.up.sql
//	...
//
// Versions run 1..N without gaps; every version has exactly one up and one
// down file with the same title. The files are parsed when the package is
// initialized, and a malformed set (a missing down file, a duplicate or
// missing version, a bad name) panics: it is a defect of the build, which the
// package's unit tests catch. Migrations returns the parsed list so tools can
// print or export it.
//
// Table names in the files are unqualified. The runner sets search_path to
// the configured schema (Config.Schema, default "seqlease") for the
// migrating transaction only, so the same files serve any schema. The schema
// name must pass ValidateSchema, a plain lower-case identifier, and is still
// quoted with pgx.Identifier wherever it appears in SQL; no SQL is ever
// built from other user text.
//
// # Running
//
// Up applies what is missing; Down(n) reverts the n latest; Status reports:
//
//	m, err := migrations.New(&migrations.Config{Schema: "seqlease"})
//	applied, err := m.Up(ctx, pool) // pool: *pgxpool.Pool or *pgx.Conn
//
// Up runs in one transaction, so a failure leaves the schema as it was:
//
//	BEGIN (READ COMMITTED)
//	  pg_advisory_xact_lock(hashtext('seqlease.migrate.' || schema))
//	  CREATE SCHEMA IF NOT EXISTS; CREATE TABLE IF NOT EXISTS seqlease_migrations
//	  set_config('search_path', schema, true)
//	  verify the checksum of every applied known migration
//	  for each missing migration, in version order: run up, record it
//	COMMIT
//
// The tracking table, <schema>.seqlease_migrations, holds one row per applied
// version: version, name, checksum, applied_at (the database's clock).
//
// # The lock
//
// The transaction-scoped advisory lock, keyed by the schema name, serializes
// every migrator of one schema across processes and machines: when many
// replicas start at once, the first applies the migrations and the others
// wait, then find nothing to do. The lock ends with the transaction, so a
// migrator that crashes or loses its connection cannot leave it held.
// Migrators of different schemas do not block each other. Down takes the same
// lock.
//
// # Checksums
//
// An applied migration is immutable. Each tracking row records the sha256 of
// the up file that was applied, and every Up first compares the recorded
// checksum of every applied migration it knows with the embedded one. If any
// differs, Up applies nothing and fails with a *ChecksumError (matching
// ErrChecksumMismatch) that names the version and both checksums: someone
// edited a migration after it shipped. Ship the change as a new migration
// instead. Down verifies the migrations it reverts the same way.
//
// # Rolling deploys
//
// During a rolling deploy a newer binary may migrate the schema while older
// processes still run or restart. Up in an older binary sees applied
// versions it does not know, logs them at warn level and leaves them alone,
// so the older process still starts; migrations must therefore stay
// backward compatible for at least one release (add, then use, then drop).
// Down is stricter: it refuses, with an *UnknownVersionError matching
// ErrUnknownVersion, to revert a version it has no down file for. Status
// lists unknown applied versions with Known false.
//
// # Other tools
//
// golang-migrate can apply sql/ directly. Create the schema first (its
// postgres driver keeps its own table in current_schema() and does not
// create the schema), point search_path at it in the URL, and give its
// tracking table a name of its own:
//
//	psql "$URL" -c 'CREATE SCHEMA IF NOT EXISTS seqlease'
//	migrate -path migrations/sql \
//	    -database 'postgres://user@host:5432/db?search_path=seqlease&x-migrations-table=seqlease_schema_migrations' up
//
// golang-migrate's table has another shape (version, dirty), so do not reuse
// seqlease_migrations for it, and pick one runner per database: neither
// reads the other's records. golang-migrate runs each file as one
// multi-statement Exec, which PostgreSQL wraps in an implicit transaction,
// but it does not verify checksums.
//
// goose wants one file per version with "-- +goose Up" and "-- +goose Down"
// annotations, so the same migrations ship a second time in that shape in
// migrations/goose (Migration.Goose writes them; a test keeps them equal to
// sql/ and applies them the way goose splits statements). As with
// golang-migrate, create the schema first, put it in search_path, and let
// goose keep its own table:
//
//	psql "$URL" -c 'CREATE SCHEMA IF NOT EXISTS seqlease'
//	goose -dir migrations/goose -table seqlease_goose_db_version \
//	    postgres 'postgres://user@host:5432/db?search_path=seqlease' up
//
// Whichever tool applies them, the checksums recorded by Up are this
// package's own: pick one runner per database.
package migrations
