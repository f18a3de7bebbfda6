package migrations_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is what each test works with: a pool and a reserved, not yet
// created schema that is dropped when the test ends.
type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
}

func setup(t *testing.T, simple bool) *bundle {
	t.Helper()
	pool := pgtest.Shared(t, simple)
	return &bundle{ctx: t.Context(), pool: pool, schema: pgtest.ReserveSchema(t, pool)}
}

func (b *bundle) migrator(t *testing.T, ms []migrations.Migration) *migrations.Migrator {
	t.Helper()
	var (
		m   *migrations.Migrator
		err error
	)
	if ms == nil {
		m, err = migrations.New(&migrations.Config{Schema: b.schema})
	} else {
		m, err = migrations.NewWithMigrations(&migrations.Config{Schema: b.schema}, ms)
	}
	require.NoError(t, err)
	return m
}

// tables lists the tables of the schema, sorted.
func (b *bundle) tables(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", b.schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func (b *bundle) schemaExists(t *testing.T) bool {
	t.Helper()
	return schemaExists(t, b.pool, b.schema)
}

func schemaExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", name).Scan(&n))
	return n == 1
}

// tracked returns the versions in the tracking table.
func (b *bundle) tracked(t *testing.T) []int {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, "SELECT version FROM "+pgx.Identifier{b.schema, migrations.TrackingTable}.Sanitize()+" ORDER BY version")
	require.NoError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return vs
}

func (b *bundle) tamper(t *testing.T, version int) {
	t.Helper()
	tag, err := b.pool.Exec(b.ctx, "UPDATE "+pgx.Identifier{b.schema, migrations.TrackingTable}.Sanitize()+
		" SET checksum = 'tampered' WHERE version = $1", version)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// synthetic returns n migrations creating tables t1..tn.
func synthetic(t *testing.T, n int) []migrations.Migration {
	t.Helper()
	fsys := fstest.MapFS{}
	for v := 1; v <= n; v++ {
		fsys[fmt.Sprintf("sql/%06d_table_%d.up.sql", v, v)] = &fstest.MapFile{Data: fmt.Appendf(nil, "CREATE TABLE t%d (id int);\nCREATE INDEX t%d_id ON t%d (id);", v, v, v)}
		fsys[fmt.Sprintf("sql/%06d_table_%d.down.sql", v, v)] = &fstest.MapFile{Data: fmt.Appendf(nil, "DROP TABLE t%d;", v)}
	}
	ms, err := migrations.Parse(fsys, "sql")
	require.NoError(t, err)
	return ms
}

func versions[T any](xs []T, version func(T) int) []int {
	out := make([]int, 0, len(xs))
	for _, x := range xs {
		out = append(out, version(x))
	}
	return out
}

func migVersions(ms []migrations.Migration) []int {
	return versions(ms, func(m migrations.Migration) int { return m.Version })
}

func TestUpFromScratchThenIdempotent(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		t.Run(fmt.Sprintf("simple=%v", simple), func(t *testing.T) {
			t.Parallel()
			b := setup(t, simple)
			m := b.migrator(t, nil)

			applied, err := m.Up(b.ctx, b.pool)
			require.NoError(t, err)
			require.Equal(t, migrations.Migrations(), applied)
			require.Equal(t, []string{"checkpoints", "entries", "inbox", "lease_history", "lease_waiters", "leases", "pending_hooks", "recovery_stats", "seqlease_migrations", "settings", "streams"}, b.tables(t))
			require.Equal(t, migVersions(migrations.Migrations()), b.tracked(t))

			applied, err = m.Up(b.ctx, b.pool)
			require.NoError(t, err)
			require.Empty(t, applied)
			require.Equal(t, migVersions(migrations.Migrations()), b.tracked(t))

			// The search_path was set for the migrating transaction only.
			var path string
			require.NoError(t, b.pool.QueryRow(b.ctx, "SHOW search_path").Scan(&path))
			require.NotContains(t, path, b.schema)
		})
	}
}

func TestUpAppliesManyInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ms := synthetic(t, 3)

	applied, err := b.migrator(t, ms[:1]).Up(b.ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, []int{1}, migVersions(applied))

	applied, err = b.migrator(t, ms).Up(b.ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, []int{2, 3}, migVersions(applied))
	require.Equal(t, []string{"seqlease_migrations", "t1", "t2", "t3"}, b.tables(t))
	require.Equal(t, []int{1, 2, 3}, b.tracked(t))
}

func TestUpFailureAppliesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ms := synthetic(t, 3)
	ms[2].Up = "CREATE TABLE t3 (id int); SELECT no_such_function();"

	applied, err := b.migrator(t, ms).Up(b.ctx, b.pool)
	require.ErrorContains(t, err, "migrations: up: apply 000003_table_3")
	require.Nil(t, applied)
	// One transaction: not even the schema was created.
	require.False(t, b.schemaExists(t))
}

func TestDownThenUpRoundTrip(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		t.Run(fmt.Sprintf("simple=%v", simple), func(t *testing.T) {
			t.Parallel()
			b := setup(t, simple)
			m := b.migrator(t, nil)
			all := migrations.Migrations()

			_, err := m.Up(b.ctx, b.pool)
			require.NoError(t, err)

			reverted, err := m.Down(b.ctx, b.pool, len(all))
			require.NoError(t, err)
			want := slices.Clone(all)
			slices.Reverse(want)
			require.Equal(t, want, reverted)
			// The schema and the tracking table remain, empty.
			require.Equal(t, []string{"seqlease_migrations"}, b.tables(t))
			require.Empty(t, b.tracked(t))

			applied, err := m.Up(b.ctx, b.pool)
			require.NoError(t, err)
			require.Equal(t, all, applied)
			require.Equal(t, []string{"checkpoints", "entries", "inbox", "lease_history", "lease_waiters", "leases", "pending_hooks", "recovery_stats", "seqlease_migrations", "settings", "streams"}, b.tables(t))
		})
	}
}

func TestDownSteps(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	m := b.migrator(t, synthetic(t, 3))
	_, err := m.Up(b.ctx, b.pool)
	require.NoError(t, err)

	reverted, err := m.Down(b.ctx, b.pool, 1)
	require.NoError(t, err)
	require.Equal(t, []int{3}, migVersions(reverted))
	require.Equal(t, []string{"seqlease_migrations", "t1", "t2"}, b.tables(t))
	require.Equal(t, []int{1, 2}, b.tracked(t))

	// More steps than applied migrations reverts what there is.
	reverted, err = m.Down(b.ctx, b.pool, 5)
	require.NoError(t, err)
	require.Equal(t, []int{2, 1}, migVersions(reverted))
	require.Equal(t, []string{"seqlease_migrations"}, b.tables(t))

	reverted, err = m.Down(b.ctx, b.pool, 1)
	require.NoError(t, err)
	require.Empty(t, reverted)
}

func TestDownInvalidSteps(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	m := b.migrator(t, nil)
	_, err := m.Up(b.ctx, b.pool)
	require.NoError(t, err)

	for _, steps := range []int{0, -1, -1 << 31} {
		reverted, err := m.Down(b.ctx, b.pool, steps)
		require.ErrorIs(t, err, migrations.ErrInvalidSteps, "steps %d", steps)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "steps %d", steps)
		require.Nil(t, reverted)
	}
	require.Equal(t, migVersions(migrations.Migrations()), b.tracked(t))
	require.Equal(t, []string{"checkpoints", "entries", "inbox", "lease_history", "lease_waiters", "leases", "pending_hooks", "recovery_stats", "seqlease_migrations", "settings", "streams"}, b.tables(t))
}

func TestDownOnMissingSchemaCreatesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	reverted, err := b.migrator(t, nil).Down(b.ctx, b.pool, 1)
	require.NoError(t, err)
	require.Empty(t, reverted)
	require.False(t, b.schemaExists(t))
}

func TestStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	m := b.migrator(t, nil)
	all := migrations.Migrations()

	// Before: the schema does not exist; Status creates nothing.
	st, err := m.Status(b.ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, st, len(all))
	for i, s := range st {
		require.Equal(t, migrations.Status{Version: all[i].Version, Name: all[i].Name, Known: true}, s)
	}
	require.False(t, b.schemaExists(t))

	_, err = m.Up(b.ctx, b.pool)
	require.NoError(t, err)

	st, err = m.Status(b.ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, st, len(all))
	for i, s := range st {
		require.Equal(t, all[i].Version, s.Version)
		require.Equal(t, all[i].Name, s.Name)
		require.True(t, s.Applied)
		require.True(t, s.ChecksumOK)
		require.True(t, s.Known)
		require.False(t, s.AppliedAt.IsZero())
	}

	b.tamper(t, 1)
	st, err = m.Status(b.ctx, b.pool)
	require.NoError(t, err)
	require.True(t, st[0].Applied)
	require.False(t, st[0].ChecksumOK)
}

func TestChecksumMismatchAppliesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ms := synthetic(t, 3)
	_, err := b.migrator(t, ms[:2]).Up(b.ctx, b.pool)
	require.NoError(t, err)
	b.tamper(t, 1)

	m := b.migrator(t, ms)
	applied, err := m.Up(b.ctx, b.pool)
	require.ErrorIs(t, err, migrations.ErrChecksumMismatch)
	var ce *migrations.ChecksumError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, migrations.ChecksumError{Version: 1, Name: "table_1", Applied: "tampered", Embedded: ms[0].Checksum}, *ce)
	require.Nil(t, applied)
	require.Equal(t, []string{"seqlease_migrations", "t1", "t2"}, b.tables(t), "migration 3 must not be applied")
	require.Equal(t, []int{1, 2}, b.tracked(t))

	// Down refuses to revert a migration applied from other SQL.
	_, err = m.Down(b.ctx, b.pool, 2)
	require.ErrorIs(t, err, migrations.ErrChecksumMismatch)
	require.Equal(t, []int{1, 2}, b.tracked(t))
}

func TestChecksumMismatchEmbedded(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	m := b.migrator(t, nil)
	_, err := m.Up(b.ctx, b.pool)
	require.NoError(t, err)
	b.tamper(t, 1)
	_, err = m.Up(b.ctx, b.pool)
	require.ErrorIs(t, err, migrations.ErrChecksumMismatch)
}

func TestRollingDeploy(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ms := synthetic(t, 3)
	_, err := b.migrator(t, ms).Up(b.ctx, b.pool)
	require.NoError(t, err)

	// An older binary knows only versions 1 and 2.
	var logs bytes.Buffer
	old, err := migrations.NewWithMigrations(&migrations.Config{
		Schema: b.schema,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, ms[:2])
	require.NoError(t, err)

	applied, err := old.Up(b.ctx, b.pool)
	require.NoError(t, err, "an older binary must start on a newer schema")
	require.Empty(t, applied)
	require.Contains(t, logs.String(), "unknown to this binary")
	require.Contains(t, logs.String(), "versions=[3]")

	st, err := old.Status(b.ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3}, versions(st, func(s migrations.Status) int { return s.Version }))
	require.True(t, st[0].Known)
	require.False(t, st[2].Known)
	require.True(t, st[2].Applied)
	require.False(t, st[2].ChecksumOK)
	require.Equal(t, "table_3", st[2].Name)

	reverted, err := old.Down(b.ctx, b.pool, 2)
	require.ErrorIs(t, err, migrations.ErrUnknownVersion)
	var ue *migrations.UnknownVersionError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, migrations.UnknownVersionError{Version: 3, Name: "table_3"}, *ue)
	require.Nil(t, reverted)
	require.Equal(t, []int{1, 2, 3}, b.tracked(t))
	require.Equal(t, []string{"seqlease_migrations", "t1", "t2", "t3"}, b.tables(t))
}

func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	m := b.migrator(t, nil)
	const n = 8

	conns := make([]*pgx.Conn, n)
	for i := range conns {
		c, err := pgx.Connect(b.ctx, pgtest.URL())
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, c.Close(context.Background())) })
		conns[i] = c
	}

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		total   int
		errs    []error
		release = make(chan struct{})
	)
	for _, c := range conns {
		wg.Go(func() {
			<-release
			applied, err := m.Up(b.ctx, c)
			mu.Lock()
			defer mu.Unlock()
			total += len(applied)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	close(release)
	wg.Wait()

	require.Empty(t, errs)
	require.Equal(t, len(migrations.Migrations()), total, "each migration applied exactly once")
	require.Equal(t, migVersions(migrations.Migrations()), b.tracked(t))
}

func TestInvalidSchemaCreatesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	for _, name := range []string{
		`x"; drop table y; --`,
		"",
		"Upper",
		strings.Repeat("a", 64),
		"a b",
		"nul\x00byte",
		"pg_toast_x",
		"semi;colon",
		"it's",
	} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			require.ErrorIs(t, migrations.ValidateSchema(name), migrations.ErrInvalidSchema)
			require.ErrorIs(t, migrations.ValidateSchema(name), store.ErrInvalidArgument)
			if name == "" {
				return // an empty Config.Schema means the default schema
			}
			m, err := migrations.New(&migrations.Config{Schema: name})
			require.ErrorIs(t, err, migrations.ErrInvalidSchema)
			require.ErrorIs(t, err, store.ErrInvalidArgument)
			require.Nil(t, m)
			if !strings.Contains(name, "\x00") { // PostgreSQL text cannot hold NUL
				require.False(t, schemaExists(t, pool, name))
			}
		})
	}
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	m := b.migrator(t, nil)
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	_, err := m.Up(ctx, b.pool)
	require.ErrorIs(t, err, context.Canceled)
	_, err = m.Status(ctx, b.pool)
	require.ErrorIs(t, err, context.Canceled)
	_, err = m.Down(ctx, b.pool, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, b.schemaExists(t))
}
