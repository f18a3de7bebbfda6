package migrations_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/migrations"
)

// TestGooseFilesAreCurrent checks that migrations/goose holds exactly the
// embedded migrations in goose's shape. After changing sql/, regenerate
// them with SEQLEASE_WRITE_GOOSE=1 go test -run TestGooseFilesAreCurrent.
func TestGooseFilesAreCurrent(t *testing.T) {
	write := os.Getenv("SEQLEASE_WRITE_GOOSE") == "1"
	ms := migrations.Migrations()
	for _, m := range ms {
		path := filepath.Join("goose", m.String()+".sql")
		if write {
			require.NoError(t, os.WriteFile(path, []byte(m.Goose()), 0o644))
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "regenerate with SEQLEASE_WRITE_GOOSE=1")
		require.Equal(t, m.Goose(), string(got), "%s is stale: regenerate with SEQLEASE_WRITE_GOOSE=1", path)
	}
	files, err := filepath.Glob(filepath.Join("goose", "*.sql"))
	require.NoError(t, err)
	require.Len(t, files, len(ms), "a goose file without an embedded migration")
}

// gooseSplit splits one direction of a goose file into statements the way
// goose does without StatementBegin/End: a statement ends on a line whose
// last word before any "--" comment ends with a semicolon.
func gooseSplit(t *testing.T, file, direction string) []string {
	var stmts []string
	var cur strings.Builder
	in := false
	sc := bufio.NewScanner(strings.NewReader(file))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.ToLower(line), "-- +goose ") {
			in = strings.EqualFold(strings.TrimPrefix(line, "-- +goose "), direction)
			continue
		}
		if !in {
			continue
		}
		cur.WriteString(line + "\n")
		last := ""
		for _, w := range strings.Fields(line) {
			if strings.HasPrefix(w, "--") {
				break
			}
			last = w
		}
		if strings.HasSuffix(last, ";") {
			stmts = append(stmts, cur.String())
			cur.Reset()
		}
	}
	require.NoError(t, sc.Err())
	require.Empty(t, strings.TrimSpace(stripComments(cur.String())), "text after the last statement of %s", direction)
	return stmts
}

func stripComments(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestGooseFilesApply applies the goose files statement by statement, as
// goose would, on a fresh schema, then reverts them: the tables of sql/
// appear and disappear.
func TestGooseFilesApply(t *testing.T) {
	b := setup(t, false)
	_, err := b.pool.Exec(b.ctx, "CREATE SCHEMA "+pgx.Identifier{b.schema}.Sanitize())
	require.NoError(t, err)
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(b.ctx, "SELECT set_config('search_path', $1, false)", pgx.Identifier{b.schema}.Sanitize())
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(b.ctx, "RESET search_path") }()

	tables := func() []string {
		rows, err := conn.Query(b.ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", b.schema)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	for _, m := range migrations.Migrations() {
		tx, err := conn.Begin(b.ctx) // goose runs each migration in a transaction
		require.NoError(t, err)
		for _, stmt := range gooseSplit(t, m.Goose(), "up") {
			_, err := tx.Exec(b.ctx, stmt)
			require.NoError(t, err, stmt)
		}
		require.NoError(t, tx.Commit(b.ctx))
	}
	require.Equal(t, []string{"checkpoints", "entries", "inbox", "lease_history", "lease_waiters", "leases", "pending_hooks", "recovery_stats", "settings", "streams"}, tables())
	ms := migrations.Migrations()
	for i := len(ms) - 1; i >= 0; i-- {
		for _, stmt := range gooseSplit(t, ms[i].Goose(), "down") {
			_, err := conn.Exec(b.ctx, stmt)
			require.NoError(t, err, stmt)
		}
	}
	require.Empty(t, tables())
}
