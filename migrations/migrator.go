package migrations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

// DefaultSchema is the schema the migrator uses when Config.Schema is empty.
const DefaultSchema = "seqlease"

// TrackingTable is the name of the table, inside the configured schema, that
// records the applied migrations.
const TrackingTable = "seqlease_migrations"

// lockPrefix namespaces the advisory-lock key: the key is
// hashtext(lockPrefix || schema), so migrators of different schemas do not
// wait for each other (short of a hash collision, which only serializes them).
const lockPrefix = "seqlease.migrate."

// maxIdentifierLen is PostgreSQL's NAMEDATALEN-1: longer names are silently
// truncated by the server, so they are rejected instead.
const maxIdentifierLen = 63

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// ValidateSchema reports whether name can be used as the seqlease schema. It
// accepts only plain lower-case identifiers (^[a-z_][a-z0-9_]*$, at most 63
// bytes) that PostgreSQL does not reserve: no "pg_" prefix, not
// information_schema. The error wraps ErrInvalidSchema and matches
// store.ErrInvalidArgument.
//
// Validation is a second line of defense: the name is still quoted with
// pgx.Identifier wherever it appears in SQL.
func ValidateSchema(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidSchema)
	case len(name) > maxIdentifierLen:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidSchema, len(name), maxIdentifierLen)
	case !schemaRE.MatchString(name):
		return fmt.Errorf("%w: %s does not match %s", ErrInvalidSchema, store.QuoteInput(name), schemaRE)
	case strings.HasPrefix(name, "pg_"):
		return fmt.Errorf("%w: %s: the pg_ prefix is reserved by PostgreSQL", ErrInvalidSchema, store.QuoteInput(name))
	case name == "information_schema":
		return fmt.Errorf("%w: %s is reserved by PostgreSQL", ErrInvalidSchema, store.QuoteInput(name))
	}
	return nil
}

// Config configures a Migrator. The zero value of every field means its
// default; a nil *Config means all defaults.
type Config struct {
	// Schema is the PostgreSQL schema that holds seqlease's tables and the
	// tracking table. It must pass ValidateSchema. Default: DefaultSchema.
	Schema string

	// Logger receives a record per applied or rolled-back migration and a
	// warning when the database holds versions unknown to this binary.
	// Default: discard.
	Logger *slog.Logger
}

// DB is the database a Migrator runs on: anything that begins a pgx
// transaction. *pgxpool.Pool, *pgxpool.Conn and *pgx.Conn satisfy it. The
// Migrator needs a transaction of its own (it sets the isolation level), so
// a pgx.Tx, whose Begin opens a savepoint, does not work.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrator applies, reverts and reports the embedded migrations on one
// schema. It holds no connection and is safe for concurrent use; concurrent
// runs on one schema, in any number of processes, serialize on an advisory
// lock.
type Migrator struct {
	schema     string
	schemaSQL  string // the quoted schema identifier
	trackedSQL string // the quoted schema-qualified tracking table
	logger     *slog.Logger
	migrations []Migration
}

// New returns a Migrator for cfg (nil means defaults). It fails with an error
// wrapping ErrInvalidSchema when cfg.Schema is not a valid schema name.
func New(cfg *Config) (*Migrator, error) {
	return newMigrator(cfg, embedded)
}

func newMigrator(cfg *Config, ms []Migration) (*Migrator, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	schema := cfg.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	if err := ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("migrations: Config.Schema: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Migrator{
		schema:     schema,
		schemaSQL:  pgx.Identifier{schema}.Sanitize(),
		trackedSQL: pgx.Identifier{schema, TrackingTable}.Sanitize(),
		logger:     logger,
		migrations: slices.Clone(ms),
	}, nil
}

// Schema returns the schema the Migrator works on.
func (m *Migrator) Schema() string { return m.schema }

// applied is one row of the tracking table.
type applied struct {
	version   int
	name      string
	checksum  string
	appliedAt time.Time
}

// Up applies every embedded migration that the schema lacks, in version
// order, in one transaction, and returns the ones it applied (none when the
// schema is current). It creates the schema and the tracking table when they
// do not exist.
//
// Before applying anything it verifies the checksum of every applied
// migration this binary knows; a difference fails the whole run with a
// *ChecksumError and applies nothing. Applied versions this binary does not
// know (a newer binary migrated the database) are logged and left alone, so
// an older process can still start during a rolling deploy.
func (m *Migrator) Up(ctx context.Context, db DB) (_ []Migration, err error) {
	defer wrap(&err, "up")
	var done []Migration
	err = m.inLockedTx(ctx, db, func(tx pgx.Tx) error {
		if err := m.ensureTracking(ctx, tx); err != nil {
			return err
		}
		rows, err := m.readApplied(ctx, tx)
		if err != nil {
			return err
		}
		known := m.byVersion()
		var unknown []int
		for _, a := range rows {
			mig, ok := known[a.version]
			if !ok {
				unknown = append(unknown, a.version)
				continue
			}
			if a.checksum != mig.Checksum {
				return &ChecksumError{Version: mig.Version, Name: mig.Name, Applied: a.checksum, Embedded: mig.Checksum}
			}
		}
		if len(unknown) > 0 {
			m.logger.WarnContext(ctx, "migrations: schema has migrations unknown to this binary; leaving them",
				slog.String("schema", m.schema), slog.Any("versions", unknown))
		}
		isApplied := make(map[int]bool, len(rows))
		for _, a := range rows {
			isApplied[a.version] = true
		}
		for _, mig := range m.migrations {
			if isApplied[mig.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, mig.Up); err != nil {
				return fmt.Errorf("apply %s: %w", mig, err)
			}
			if _, err := tx.Exec(ctx,
				"INSERT INTO "+m.trackedSQL+" (version, name, checksum) VALUES ($1, $2, $3)",
				mig.Version, mig.Name, mig.Checksum); err != nil {
				return fmt.Errorf("record %s: %w", mig, err)
			}
			done = append(done, mig)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, mig := range done {
		m.logger.InfoContext(ctx, "migrations: applied",
			slog.String("schema", m.schema), slog.Int("version", mig.Version), slog.String("name", mig.Name))
	}
	return done, nil
}

// Down rolls back the steps most recently applied migrations, newest first,
// in one transaction, and returns the ones it rolled back. It rolls back
// fewer when fewer are applied. The schema and the tracking table remain.
//
// steps <= 0 fails with an error wrapping ErrInvalidSteps. If any migration
// to roll back is unknown to this binary it fails with an
// *UnknownVersionError, and if one was applied from different SQL with a
// *ChecksumError; either way it rolls back nothing.
func (m *Migrator) Down(ctx context.Context, db DB, steps int) (_ []Migration, err error) {
	defer wrap(&err, "down")
	if steps <= 0 {
		return nil, fmt.Errorf("%w: steps must be positive, got %d", ErrInvalidSteps, steps)
	}
	var done []Migration
	err = m.inLockedTx(ctx, db, func(tx pgx.Tx) error {
		exists, err := m.trackingExists(ctx, tx)
		if err != nil || !exists {
			return err
		}
		rows, err := m.readApplied(ctx, tx)
		if err != nil {
			return err
		}
		slices.Reverse(rows)
		rows = rows[:min(steps, len(rows))]
		known := m.byVersion()
		todo := make([]Migration, 0, len(rows))
		for _, a := range rows {
			mig, ok := known[a.version]
			if !ok {
				return &UnknownVersionError{Version: a.version, Name: a.name}
			}
			if a.checksum != mig.Checksum {
				return &ChecksumError{Version: mig.Version, Name: mig.Name, Applied: a.checksum, Embedded: mig.Checksum}
			}
			todo = append(todo, mig)
		}
		if err := m.setSearchPath(ctx, tx); err != nil {
			return err
		}
		for _, mig := range todo {
			if _, err := tx.Exec(ctx, mig.Down); err != nil {
				return fmt.Errorf("revert %s: %w", mig, err)
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+m.trackedSQL+" WHERE version = $1", mig.Version); err != nil {
				return fmt.Errorf("unrecord %s: %w", mig, err)
			}
			done = append(done, mig)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, mig := range done {
		m.logger.InfoContext(ctx, "migrations: rolled back",
			slog.String("schema", m.schema), slog.Int("version", mig.Version), slog.String("name", mig.Name))
	}
	return done, nil
}

// Status is the state of one migration version in a schema.
type Status struct {
	// Version is the migration's version.
	Version int
	// Name is the embedded name, or the recorded one for an unknown version.
	Name string
	// Applied reports whether the tracking table records the version.
	Applied bool
	// AppliedAt is when it was applied (the database's clock); zero when
	// not applied.
	AppliedAt time.Time
	// ChecksumOK reports whether the recorded checksum equals the embedded
	// one. It is false when the migration is not applied or not known.
	ChecksumOK bool
	// Known reports whether this binary embeds the version.
	Known bool
}

// Status returns one Status per embedded version and per applied version
// unknown to this binary, in version order. It only reads: on a schema that
// does not exist yet every embedded migration is reported pending.
func (m *Migrator) Status(ctx context.Context, db DB) (_ []Status, err error) {
	defer wrap(&err, "status")
	rows, err := m.applied(ctx, db)
	if err != nil {
		return nil, err
	}
	byApplied := make(map[int]applied, len(rows))
	for _, a := range rows {
		byApplied[a.version] = a
	}
	out := make([]Status, 0, len(m.migrations)+len(rows))
	for _, mig := range m.migrations {
		s := Status{Version: mig.Version, Name: mig.Name, Known: true}
		if a, ok := byApplied[mig.Version]; ok {
			s.Applied = true
			s.AppliedAt = a.appliedAt
			s.ChecksumOK = a.checksum == mig.Checksum
			delete(byApplied, mig.Version)
		}
		out = append(out, s)
	}
	for _, a := range byApplied {
		out = append(out, Status{Version: a.version, Name: a.name, Applied: true, AppliedAt: a.appliedAt})
	}
	slices.SortFunc(out, func(a, b Status) int { return a.Version - b.Version })
	return out, nil
}

// Check reports whether the schema is at the version this binary needs:
// nil when every embedded migration is applied as embedded (a schema
// ahead of the binary, migrated by a newer release, is fine), a
// *PendingError (matching ErrPending) naming the missing versions and the
// command that applies them, or a *ChecksumError when an applied migration
// differs from the embedded one. It only reads.
func (m *Migrator) Check(ctx context.Context, db DB) (err error) {
	defer wrap(&err, "check")
	rows, err := m.applied(ctx, db)
	if err != nil {
		return err
	}
	done := make(map[int]applied, len(rows))
	for _, a := range rows {
		done[a.version] = a
	}
	var pending []int
	for _, mig := range m.migrations {
		a, ok := done[mig.Version]
		switch {
		case !ok:
			pending = append(pending, mig.Version)
		case a.checksum != mig.Checksum:
			return &ChecksumError{Version: mig.Version, Name: mig.Name, Applied: a.checksum, Embedded: mig.Checksum}
		}
	}
	if len(pending) > 0 {
		return &PendingError{Schema: m.schema, Pending: pending, Want: m.migrations[len(m.migrations)-1].Version}
	}
	return nil
}

// applied returns the tracking table's rows, none when it does not exist.
func (m *Migrator) applied(ctx context.Context, db DB) ([]applied, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	exists, err := m.trackingExists(ctx, tx)
	if err != nil || !exists {
		return nil, err
	}
	return m.readApplied(ctx, tx)
}

// inLockedTx runs fn in a READ COMMITTED transaction that holds the
// schema's migration lock, committing when fn returns nil.
func (m *Migrator) inLockedTx(ctx context.Context, db DB, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	// READ COMMITTED whatever the server's default: after waiting for the
	// lock, each statement must see what the previous holder committed.
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		return fmt.Errorf("set isolation: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1::text))", lockPrefix+m.schema); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ensureTracking creates the schema and the tracking table if needed and
// points the transaction's search_path at the schema.
func (m *Migrator) ensureTracking(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+m.schemaSQL); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+m.trackedSQL+` (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		checksum   text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
	)`); err != nil {
		return fmt.Errorf("create tracking table: %w", err)
	}
	return m.setSearchPath(ctx, tx)
}

// setSearchPath makes unqualified names in the migration files resolve to
// the schema, for the rest of the transaction only.
func (m *Migrator) setSearchPath(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", m.schemaSQL); err != nil {
		return fmt.Errorf("set search_path: %w", err)
	}
	return nil
}

func (m *Migrator) trackingExists(ctx context.Context, tx pgx.Tx) (bool, error) {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL", m.trackedSQL).Scan(&exists); err != nil {
		return false, fmt.Errorf("find tracking table: %w", err)
	}
	return exists, nil
}

func (m *Migrator) readApplied(ctx context.Context, tx pgx.Tx) ([]applied, error) {
	rows, err := tx.Query(ctx, "SELECT version, name, checksum, applied_at FROM "+m.trackedSQL+" ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("read tracking table: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (applied, error) {
		var a applied
		err := row.Scan(&a.version, &a.name, &a.checksum, &a.appliedAt)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("read tracking table: %w", err)
	}
	return out, nil
}

func (m *Migrator) byVersion() map[int]Migration {
	out := make(map[int]Migration, len(m.migrations))
	for _, mig := range m.migrations {
		out[mig.Version] = mig
	}
	return out
}

// wrap prefixes a non-nil *errp with the operation, keeping sentinels and
// typed errors reachable through errors.Is and errors.As. Errors that
// already carry the package prefix are left as they are.
func wrap(errp *error, op string) {
	if *errp == nil {
		return
	}
	var ce *ChecksumError
	var ue *UnknownVersionError
	var pe *PendingError
	if errors.Is(*errp, ErrInvalidSteps) || errors.As(*errp, &ce) || errors.As(*errp, &ue) || errors.As(*errp, &pe) {
		return
	}
	*errp = fmt.Errorf("migrations: %s: %w", op, *errp)
}
