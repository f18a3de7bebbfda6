package migrations_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/migrations"
)

// savepoints is a migrations.DB whose transactions are savepoints of tx.
type savepoints struct{ tx pgx.Tx }

func (d savepoints) Begin(ctx context.Context) (pgx.Tx, error) { return d.tx.Begin(ctx) }

// FuzzNewConfig builds Migrators from fuzzed configs (FuzzValidateSchema
// checks the schema rule itself). New must never panic; it fails with an
// error that matches ErrInvalidSchema and names Config.Schema, the only
// field it checks (with Schema at its default the config passes), or
// returns a Migrator that works: in a transaction of the test database
// that is rolled back, whatever the name (an existing schema included),
// Up migrates the schema to the last version, and Status then reports
// every embedded migration applied with its checksum.
func FuzzNewConfig(f *testing.F) {
	for _, s := range []string{"", "seqlease", "public", "_", "a1", "fuzz_schema", strings.Repeat("z", 63),
		strings.Repeat("z", 64), "Upper", "pg_x", "information_schema", "a-b", "a\x00", `x"; DROP SCHEMA public; --`} {
		f.Add(s, false)
		f.Add(s, true)
	}
	pool := pgtest.Shared(f, false)
	f.Fuzz(func(t *testing.T, schema string, withLogger bool) {
		cfg := migrations.Config{Schema: schema}
		if withLogger {
			cfg.Logger = slog.New(slog.DiscardHandler)
		}
		m, err := migrations.New(&cfg)
		if err != nil {
			if !errors.Is(err, migrations.ErrInvalidSchema) || !strings.Contains(err.Error(), "Config.Schema") {
				t.Fatalf("New(%+v): %v does not match ErrInvalidSchema or does not name Config.Schema", cfg, err)
			}
			cfg.Schema = ""
			if _, err := migrations.New(&cfg); err != nil {
				t.Fatalf("New with the default schema: %v", err)
			}
			return
		}
		if want := cmpOr(schema, migrations.DefaultSchema); m.Schema() != want {
			t.Fatalf("New(%+v).Schema() = %q, want %q", cfg, m.Schema(), want)
		}
		ctx := t.Context()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := m.Up(ctx, pgtest.RolledBack(tx)); err != nil {
			t.Fatalf("New accepted %+v, but Up fails: %v", cfg, err)
		}
		st, err := m.Status(ctx, savepoints{tx})
		if err != nil {
			t.Fatalf("New accepted %+v, but Status fails: %v", cfg, err)
		}
		want := migrations.Migrations()
		if len(st) < len(want) {
			t.Fatalf("New accepted %+v, but Status reports %d migrations of %d", cfg, len(st), len(want))
		}
		for i, mig := range want {
			if s := st[i]; s.Version != mig.Version || !s.Applied || !s.ChecksumOK {
				t.Fatalf("New accepted %+v, but after Up, Status reports %+v", cfg, s)
			}
		}
	})
}
