package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// FuzzNewConfig builds Stores from fuzzed configs (FuzzValidateSchema, in
// migrations, checks the schema rule itself). New must never panic; it
// fails with an error that matches migrations.ErrInvalidSchema and names
// Config.Schema, the only field fuzzed here (with Schema at its default the
// config passes; TestListenConfig checks the listeners' fields), or returns a Store that works, in either protocol mode:
// in a transaction of the test database that is rolled back, whatever the
// name (an existing schema included), the schema is migrated, and the Store
// leases two numbers, commits one in order, releases the other, reads both
// back resolved, and acquires and releases a named lease.
func FuzzNewConfig(f *testing.F) {
	for _, s := range []string{"", "seqlease", "public", "_", "a1", "fuzz_store", strings.Repeat("z", 63),
		strings.Repeat("z", 64), "Upper", "pg_x", "information_schema", "a-b", "a\x00", `x"; DROP SCHEMA public; --`} {
		f.Add(s, false, false)
		f.Add(s, true, true)
	}
	extended, simple := pgtest.Shared(f, false), pgtest.Shared(f, true)
	f.Fuzz(func(t *testing.T, schema string, withLogger, simpleMode bool) {
		cfg := postgres.Config{Schema: schema}
		if withLogger {
			cfg.Logger = slog.New(slog.DiscardHandler)
		}
		if _, err := postgres.New(nil, &cfg); err != nil { // New does not touch the database
			if !errors.Is(err, migrations.ErrInvalidSchema) || !strings.Contains(err.Error(), "Config.Schema") {
				t.Fatalf("New(%+v): %v does not match ErrInvalidSchema or does not name Config.Schema", cfg, err)
			}
			cfg.Schema = ""
			if _, err := postgres.New(nil, &cfg); err != nil {
				t.Fatalf("New with the default schema: %v", err)
			}
			return
		}
		ctx := t.Context()
		pool := extended
		if simpleMode {
			pool = simple
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		m, err := migrations.New(&migrations.Config{Schema: schema})
		if err != nil {
			t.Fatalf("postgres.New accepted the schema %q, migrations.New refuses it: %v", schema, err)
		}
		if _, err := m.Up(ctx, pgtest.RolledBack(tx)); err != nil {
			t.Fatalf("migrate %q: %v", schema, err)
		}
		s, err := postgres.New(tx, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		fail := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("New accepted %+v, but %s fails: %v", cfg, what, err)
			}
		}
		// A stream of its own, in case the schema existed.
		stream := "fuzz-" + store.NewToken().String()
		es, err := s.Lease(ctx, stream, []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}}, nil)
		fail("Lease", err)
		_, err = s.Commit(ctx, stream, es[0].Number, es[0].Token, &store.CommitParams{Payload: []byte("p"), Ordered: true})
		fail("Commit", err)
		fail("Release", s.Release(ctx, stream, es[1].Number, es[1].Token, nil))
		got, err := s.Read(ctx, stream, 0, 10)
		fail("Read", err)
		if len(got) != 2 || got[0].State != store.Committed || string(got[0].Payload) != "p" || got[1].State != store.Gap {
			t.Fatalf("New accepted %+v, but the stream reads %+v", cfg, got)
		}
		l, err := s.AcquireLease(ctx, stream, "owner", &store.AcquireLeaseParams{TTL: time.Minute})
		fail("AcquireLease", err)
		fail("ReleaseLease", s.ReleaseLease(ctx, stream, "owner", l.Fence, nil))
	})
}
