package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seqlease/seqlease/migrations"
)

// unreachable is a database nobody answers at: port 1 refuses at once.
const unreachable = "postgres://x@127.0.0.1:1/x?connect_timeout=1&sslmode=disable"

// FuzzRunArgs runs the command line with fuzzed arguments (the input split
// at NUL bytes, which argv cannot hold) and no database: every connection
// goes to a port that refuses. The CLI must never panic, must exit with 0, 1
// or 2, must say why on stderr when it fails, and can succeed only where no
// database is needed (help, and version, which reports the database
// unreachable). Arguments that mention -dsn are dropped and the
// environment points the PG* variables and DATABASE_URL at the unreachable
// address, so no input can reach a real database.
func FuzzRunArgs(f *testing.F) {
	f.Setenv("DATABASE_URL", unreachable)
	for k, v := range map[string]string{"PGHOST": "127.0.0.1", "PGPORT": "1", "PGDATABASE": "x", "PGUSER": "x",
		"PGCONNECT_TIMEOUT": "1", "PGSERVICE": "", "PGSERVICEFILE": "/nonexistent", "PGPASSFILE": "/nonexistent"} {
		f.Setenv(k, v)
	}
	for _, args := range [][]string{
		{}, {"help"}, {"-h"}, {"--help"}, {"-json", "help"}, {"nope"}, {"-nope"}, {"-schema"}, {"-schema", "Bad", "streams"},
		{"-schema", `x"; DROP SCHEMA public CASCADE; --`, "streams"}, {"-json", "-schema", "s", "streams"},
		{"migrate"}, {"migrate", "up"}, {"migrate", "down", "-steps", "-1"}, {"migrate", "status", "extra"},
		{"migrate", "sideways"}, {"migrate", "sql", "1"}, {"migrate", "sql", "-down", "9"}, {"migrate", "sql", "99"}, {"trim", "s", "5", "-force"}, {"streams", "--", "-x"}, {"inspect"}, {"inspect", "s", "-from", "0"},
		{"inspect", "s", "-limit", "99999999999999999999"}, {"inspect", "-from", "2", "s", "-limit", "5"},
		{"gaps", "s", "-limit", "0"}, {"trim", "s"}, {"trim", "s", "-1"}, {"trim", "s", "9223372036854775808"},
		{"trim", "s", "5"}, {"watch", "s", "-interval", "0"}, {"watch", "s", "-interval", "-1s"},
		{"watch", "s", "-count", "-1"}, {"watch", "s", "-interval", "1ns", "-count", "1"},
		{"audit", "s", "-ordered", "-max-unresolved", "-5s"}, {"audit", "s", "-max-unresolved", "2562048h"},
		{"leases", "-owner", "\xff"}, {"leases", "-held-for", "-1s"}, {"leases", "x"}, {"force-release"},
		{"force-release", "bad\nowner"}, {"force-release", "owner", "extra"}, {"force-release", "o", "-reason", "r"}, {"force-release", "o", "-by", "a\x00"},
		{"lease-waiters", "\xff"}, {"lease-waiters", "-limit", "-1"}, {"leases", "-expired=maybe"}, {"-json=false", "leases"},
		{"version"}, {"-json", "version"}, {"help", "migrate"}, {"migrate", "-h"}, {"fill-gap", "-h"}, {"help", "nope"},
		{"cleanup", "-dry-run"}, {"cleanup", "s", "-durable-hooks"}, {"fill-gap", "s", "1", "-by", "me", "-payload", "x"},
		{"lease-history", "seqlease/cleanup/s", "-after", "-1"}, {"s\xff", "\x01"}, {"-", "--", "---"}, {strings.Repeat("a", 1<<16)},
	} {
		f.Add(strings.Join(args, "\x00"))
	}
	f.Fuzz(func(t *testing.T, line string) {
		var args []string
		if line != "" {
			for _, a := range strings.Split(line, "\x00") {
				if !strings.Contains(strings.ToLower(a), "dsn") { // only the unreachable database
					args = append(args, a)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		start := time.Now()
		code := run(ctx, args, &out, &errOut)
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("run(%q) took %v without a database", args, took)
		}
		switch code {
		case 0:
			// Help, the version, which says the database could not be read,
			// or a migration's SQL, which needs no database.
			help := strings.Contains(out.String(), "usage: seqlease")
			version := strings.Contains(out.String(), "embedded schema") || strings.Contains(out.String(), `"database_error": "cannot connect`)
			sql := strings.Contains(out.String(), `"direction": "`) || slices.ContainsFunc(migrations.Migrations(), func(m migrations.Migration) bool {
				return out.String() == m.Up || out.String() == m.Down
			})
			if !help && !version && !sql {
				t.Fatalf("run(%q) succeeded without a database and without printing the usage:\nstdout: %s\nstderr: %s",
					args, out.String(), errOut.String())
			}
		case 1:
			if !strings.HasPrefix(errOut.String(), "seqlease: ") {
				t.Fatalf("run(%q) exited 1 with stderr %q", args, errOut.String())
			}
		case 2:
			if errOut.Len() == 0 {
				t.Fatalf("run(%q) exited 2 without a word on stderr", args)
			}
		default:
			t.Fatalf("run(%q) exited %d", args, code)
		}
	})
}
