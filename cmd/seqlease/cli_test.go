package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// seqlease runs the CLI with args against the test database.
func seqlease(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"-dsn", pgtest.URL()}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.ReserveSchema(t, pool)

	code, out, _ := seqlease(t, "-schema", schema, "migrate", "status")
	require.Equal(t, 0, code)
	require.Contains(t, out, "pending")
	code, out, errOut := seqlease(t, "-schema", schema, "streams")
	require.Equal(t, 1, code, out)
	require.Contains(t, errOut, "not migrated: run `seqlease -schema "+schema+" migrate up`")

	code, out, _ = seqlease(t, "-schema", schema, "migrate", "up")
	require.Equal(t, 0, code)
	require.Contains(t, out, "000001_streams_entries")
	code, out, _ = seqlease(t, "-schema", schema, "migrate", "up")
	require.Equal(t, 0, code)
	require.Contains(t, out, "nothing to do")

	// A stream with every kind of entry.
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	es, err := s.Lease(ctx, "orders", []store.LeaseRequest{
		{TTL: time.Minute, OperationID: "a", Kind: "k"}, {TTL: time.Minute, OperationID: "b"},
		{TTL: time.Microsecond, OperationID: "c"}, {TTL: time.Microsecond, OperationID: "d"}, {TTL: time.Minute, OperationID: "e"},
	}, &store.LeaseParams{Owner: "w1"})
	require.NoError(t, err)
	_, err = s.Commit(ctx, "orders", 1, es[0].Token, &store.CommitParams{Payload: []byte("one")})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "orders", 2, es[1].Token, nil))
	require.NoError(t, s.ResolveExpired(ctx, "orders", 3, nil))
	moved, err := s.RecoverExpired(ctx, "orders", 4, &store.RecoverParams{RecoveryType: "retry", Payload: []byte("x")})
	require.NoError(t, err)

	code, out, _ = seqlease(t, "-schema", schema, "streams")
	require.Equal(t, 0, code)
	require.Contains(t, out, "STREAM")
	require.Regexp(t, `orders\s+7\s+4\s+1\s+0\s+3\s+5 \(`, out, "next 7, watermark 4, 1 in flight, 0 expired, 3 open gaps, oldest 5")

	code, out, _ = seqlease(t, "-schema", schema, "-json", "streams")
	require.Equal(t, 0, code)
	var rows []streamRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Equal(t, []streamRow{{Stream: "orders", NextNumber: 7, Watermark: 4, InFlight: 1, OpenGaps: 3, OldestUnresolved: 5, OldestAge: rows[0].OldestAge, LowPoint: 1}}, rows)

	code, out, _ = seqlease(t, "-schema", schema, "inspect", "orders", "-from", "2", "-limit", "5")
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 6, out) // header + 2..6
	require.Contains(t, lines[1], "released")
	require.Contains(t, lines[3], "recovered as 6")
	require.Contains(t, lines[5], "retry of 4")

	code, out, _ = seqlease(t, "-schema", schema, "-json", "gaps", "orders")
	require.Equal(t, 0, code)
	var gaps []entryRow
	require.NoError(t, json.Unmarshal([]byte(out), &gaps))
	require.Len(t, gaps, 3)
	require.Equal(t, moved, gaps[2].RecoveredAs)

	code, out, _ = seqlease(t, "-schema", schema, "audit", "orders", "-ordered")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "I1 dense")
	require.Contains(t, out, "I4 ordered commits")
	require.NotContains(t, out, "VIOLATION")
	code, _, errOut = seqlease(t, "-schema", schema, "audit", "orders", "-max-unresolved", "1h")
	require.Equal(t, 0, code, errOut)
	code, out, errOut = seqlease(t, "-schema", schema, "audit", "nope")
	require.Equal(t, 1, code, out)
	require.Contains(t, errOut, `unknown stream "nope"`)

	code, out, _ = seqlease(t, "-schema", schema, "watch", "orders", "-count", "2", "-interval", "10ms")
	require.Equal(t, 0, code)
	require.Equal(t, 2, strings.Count(out, "watermark 4"), out)
	require.Contains(t, out, "lag 2")

	code, out, _ = seqlease(t, "-schema", schema, "trim", "orders", "100")
	require.Equal(t, 0, code)
	require.Regexp(t, `orders\s+5`, out, "trimmed up to the watermark, never past it")
	code, _, errOut = seqlease(t, "-schema", schema, "inspect", "orders", "-from", "2")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "trimmed")

	code, _, errOut = seqlease(t, "-schema", schema, "inspect", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `unknown stream "nope"`)

	code, out, _ = seqlease(t, "-schema", schema, "migrate", "down")
	require.Equal(t, 0, code)
	require.Contains(t, out, "down")
	code, out, _ = seqlease(t, "-schema", schema, "migrate", "status")
	require.Equal(t, 0, code)
	require.Contains(t, out, "pending")
}

// TestAuditFindsDamage damages a ledger behind the library's back and checks
// that `audit` reports it and exits 1.
func TestAuditFindsDamage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	es, err := s.Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}, {TTL: time.Minute}}, nil)
	require.NoError(t, err)
	for _, e := range es {
		_, err := s.Commit(ctx, "s", e.Number, e.Token, nil)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, "DELETE FROM "+pgx.Identifier{schema, "entries"}.Sanitize()+" WHERE number = 2")
	require.NoError(t, err)
	code, out, errOut := seqlease(t, "-schema", schema, "audit", "s")
	require.Equal(t, 1, code)
	require.Contains(t, out, "VIOLATION  I1: entry 2: missing")
	require.Contains(t, errOut, "1 violations")
}

// TestNamedLeases lists named leases and force-releases a crashed agent's.
func TestNamedLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	for _, l := range []struct{ name, owner string }{{"leader", "agent-1"}, {"cursor/a", "agent-1"}, {"cursor/b", "agent-2"}} {
		_, err := s.AcquireLease(ctx, l.name, l.owner, &store.AcquireLeaseParams{TTL: time.Hour})
		require.NoError(t, err)
	}
	code, out, _ := seqlease(t, "-schema", schema, "leases")
	require.Equal(t, 0, code)
	require.Regexp(t, `cursor/a\s+agent-1\s+1\s`, out)
	require.Regexp(t, `cursor/b\s+agent-2\s+1\s`, out)
	require.Regexp(t, `leader\s+agent-1\s+1\s`, out)

	code, out, _ = seqlease(t, "-schema", schema, "-json", "leases", "-owner", "agent-1")
	require.Equal(t, 0, code)
	var rows []leaseRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)

	code, out, _ = seqlease(t, "-schema", schema, "force-release", "agent-1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "force-released")
	code, out, _ = seqlease(t, "-schema", schema, "-json", "leases")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 1)
	require.Equal(t, "agent-2", rows[0].Owner)
	code, out, _ = seqlease(t, "-schema", schema, "force-release", "agent-1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "no live lease held by agent-1")
}

func TestErrors(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, 2, "no command"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"migrate without action", []string{"migrate"}, 2, "migrate needs up, down or status"},
		{"bad schema name", []string{"-schema", `x"; DROP TABLE y; --`, "streams"}, 2, "-schema"},
		{"inspect without stream", []string{"-schema", schema, "inspect"}, 2, "inspect needs STREAM"},
		{"trim with a bad bound", []string{"-schema", schema, "trim", "s", "zero"}, 2, "BELOW must be a number"},
		{"unknown stream", []string{"-schema", schema, "gaps", "nope"}, 1, `unknown stream "nope"`},
		{"wrong DSN", []string{"-dsn", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "streams"}, 1, "cannot connect to PostgreSQL"},
		{"unknown flag", []string{"-schema", schema, "streams", "-frob"}, 2, "flag provided but not defined: -frob"},
		{"unknown migrate action, checked before connecting", []string{"-dsn", "postgres://nobody@127.0.0.1:1/x", "migrate", "sideways"}, 2, `unknown action "sideways"`},
		{"force-release without owner", []string{"-schema", schema, "force-release"}, 2, "force-release needs OWNER"},
		{"force-release with a bad owner", []string{"-schema", schema, "force-release", "a\nb"}, 2, "OWNER"},
		{"audit with a negative bound", []string{"-schema", schema, "audit", "s", "-max-unresolved", "-1s"}, 2, "must not be negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := seqlease(t, c.args...)
			require.Equal(t, c.code, code, errOut)
			require.Contains(t, errOut, c.want)
		})
	}
}
