package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/migrations"
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
	require.Regexp(t, `orders\s+7\s+4\s+1\s+0\s+3\s+1\s+5 \(`, out, "next 7, watermark 4, 1 in flight, 0 expired, 3 open gaps (1 recovered), oldest 5")

	code, out, _ = seqlease(t, "-schema", schema, "-json", "streams")
	require.Equal(t, 0, code)
	var rows []streamRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Equal(t, []streamRow{{Stream: "orders", NextNumber: 7, Watermark: 4, InFlight: 1, OpenGaps: 3, RecoveredGaps: 1, OldestUnresolved: 5, OldestAge: rows[0].OldestAge, LowPoint: 1}}, rows)

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
	require.Contains(t, out, "I3 committed before expiry")
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
	// After the trim, inspect starts at the low point, and says so.
	for _, args := range [][]string{{"inspect", "orders", "-from", "2"}, {"inspect", "orders"}} {
		code, out, errOut = seqlease(t, append([]string{"-schema", schema}, args...)...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, `entries of "orders" below 5 were trimmed (its low point); showing from 5`)
		lines = strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, out) // header, 5, 6
		require.Regexp(t, `^5\s+leased\s+`, lines[1])
		require.Regexp(t, `^6\s+committed\s+`, lines[2])
	}
	code, out, errOut = seqlease(t, "-schema", schema, "-json", "inspect", "orders", "-from", "3", "-limit", "1")
	require.Equal(t, 0, code, errOut)
	var after []entryRow
	require.NoError(t, json.Unmarshal([]byte(out), &after))
	require.Len(t, after, 1)
	require.Equal(t, int64(5), after[0].Number)
	code, out, errOut = seqlease(t, "-schema", schema, "inspect", "orders", "-from", "6")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut, "no note when -from is at or above the low point")
	require.Regexp(t, `\n6\s+committed`, out)

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

// TestNamedLeases lists named leases with their status and time remaining,
// an expired holding not yet marked only with -expired, and force-releases
// a crashed agent's, recording who and why in the history.
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
	// stale: agent-3's holding ran out; no maintenance has marked it.
	_, err = s.AcquireLease(ctx, "stale", "agent-3", &store.AcquireLeaseParams{TTL: time.Microsecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		l, err := s.GetLease(ctx, "stale", nil)
		return err == nil && !l.Held()
	}, 10*time.Second, time.Millisecond)

	code, out, _ := seqlease(t, "-schema", schema, "leases")
	require.Equal(t, 0, code)
	require.Regexp(t, `NAME\s+OWNER\s+FENCE\s+STATUS\s+HELD FOR\s+REMAINING\s+RENEWALS\n`, out)
	require.Regexp(t, `cursor/a\s+agent-1\s+1\s+active\s+\S+\s+59m\S+\s+0\n`, out)
	require.Regexp(t, `cursor/b\s+agent-2\s+1\s+active\s`, out)
	require.Regexp(t, `leader\s+agent-1\s+1\s+active\s`, out)
	require.NotContains(t, out, "stale", "an expired holding is not live")
	code, out, _ = seqlease(t, "-schema", schema, "leases", "-expired")
	require.Equal(t, 0, code)
	require.Regexp(t, `stale\s+agent-3\s+1\s+expired\s+\S+\s+-\s+0\n`, out)
	require.Regexp(t, `leader\s+agent-1\s+1\s+active\s`, out)

	code, out, _ = seqlease(t, "-schema", schema, "-json", "leases", "-owner", "agent-1")
	require.Equal(t, 0, code)
	var rows []leaseRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	for _, r := range rows {
		require.Equal(t, "active", r.Status)
		require.Greater(t, r.Remaining, 59*time.Minute)
		require.LessOrEqual(t, r.Remaining, time.Hour)
	}
	code, out, _ = seqlease(t, "-schema", schema, "-json", "leases", "-expired", "-owner", "agent-3")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 1)
	require.Equal(t, "expired", rows[0].Status)
	require.Zero(t, rows[0].Remaining)

	code, out, _ = seqlease(t, "-schema", schema, "force-release", "agent-1", "-by", "alice", "-reason", "agent-1 crashed: host lost")
	require.Equal(t, 0, code)
	require.Regexp(t, `NAME\s+FENCE\s+RESULT\s+BY\s+REASON\n`, out)
	require.Regexp(t, `leader\s+1\s+force-released\s+alice\s+agent-1 crashed: host lost\n`, out)
	evs, err := s.LeaseHistory(ctx, "leader", nil)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, store.LeaseForceReleased, last.Kind)
	require.Equal(t, store.LeaseReasonForceReleased, last.Reason)
	require.Equal(t, "alice", last.Actor)
	require.Equal(t, "agent-1 crashed: host lost", last.Comment)
	code, out, _ = seqlease(t, "-schema", schema, "lease-history", "leader")
	require.Equal(t, 0, code)
	require.Regexp(t, `force-released\s+force-released\s+agent-1\s+1\s+\S+\s+alice\s+agent-1 crashed: host lost\n`, out)

	code, out, _ = seqlease(t, "-schema", schema, "-json", "leases")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 1)
	require.Equal(t, "agent-2", rows[0].Owner)
	code, out, _ = seqlease(t, "-schema", schema, "-json", "force-release", "agent-2", "-by", "bob")
	require.Equal(t, 0, code)
	var forced []forcedRow
	require.NoError(t, json.Unmarshal([]byte(out), &forced))
	require.Len(t, forced, 1)
	require.Equal(t, "cursor/b", forced[0].Name)
	require.Equal(t, "bob", forced[0].By)
	require.Equal(t, "force-released", forced[0].Status)
	code, out, _ = seqlease(t, "-schema", schema, "force-release", "agent-1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "no live lease held by agent-1")
}

// TestForceReleaseRefusesBadInput refuses a bad -by or -reason, naming the
// flag, with exit code 2, and releases nothing.
func TestForceReleaseRefusesBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	_, err = s.AcquireLease(ctx, "leader", "agent-1", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"a reason without -by", []string{"-reason", "crashed"}, "-by WHO is required with -reason"},
		{"a control character in -by", []string{"-by", "al\x1bice"}, "force-release: -by: "},
		{"a newline in -reason", []string{"-by", "alice", "-reason", "a\nb"}, "force-release: -reason: "},
		{"a -by too long", []string{"-by", strings.Repeat("a", store.MaxNameLen+1)}, "force-release: -by: "},
		{"a -reason too long", []string{"-by", "alice", "-reason", strings.Repeat("r", store.MaxTextLen+1)}, "force-release: -reason: "},
		{"invalid UTF-8 in -reason", []string{"-by", "alice", "-reason", "\xff"}, "force-release: -reason: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := seqlease(t, append([]string{"-schema", schema, "force-release", "agent-1"}, c.args...)...)
			require.Equal(t, 2, code, errOut)
			require.Empty(t, out)
			require.Contains(t, errOut, c.want)
			require.Contains(t, errOut, "usage: seqlease [-dsn URL] [-schema NAME] [-json] force-release OWNER")
			l, err := s.GetLease(ctx, "leader", nil)
			require.NoError(t, err)
			require.True(t, l.Held(), "nothing released")
		})
	}
	evs, err := s.LeaseHistory(ctx, "leader", nil)
	require.NoError(t, err)
	require.Len(t, evs, 1, "nothing recorded: only the acquire")
}

// TestLeaseWaiters lists the waiters announced by blocked acquires, of one
// name or of all, pending since when they asked.
func TestLeaseWaiters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	l, err := s.AcquireLease(ctx, "leader", "agent-1", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	since := now.Add(-2 * time.Second)
	for _, w := range []store.LeaseWaiter{
		{Name: "leader", Waiter: "agent-2", Since: since, Fence: l.Fence},
		{Name: "leader", Waiter: "agent-3", Since: since.Add(time.Second), Fence: l.Fence},
		{Name: "cursor", Waiter: "agent-4", Since: since},
	} {
		require.NoError(t, s.AnnounceLeaseWaiter(ctx, w))
	}

	code, out, errOut := seqlease(t, "-schema", schema, "lease-waiters", "leader")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `NAME\s+WAITER\s+STATUS\s+SINCE\s+WAITING\s+FENCE SEEN\n`+
		`leader\s+agent-2\s+pending\s+\S+\s+\S+\s+1\n`+
		`leader\s+agent-3\s+pending\s+\S+\s+\S+\s+1\n$`, out)

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "lease-waiters", "-limit", "2")
	require.Equal(t, 0, code, errOut)
	var rows []waiterRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "cursor", rows[0].Name, "by name, then by the time they asked")
	require.Equal(t, "agent-4", rows[0].Waiter)
	require.Equal(t, "pending", rows[0].Status)
	require.WithinDuration(t, since, rows[0].Since, time.Millisecond)
	require.GreaterOrEqual(t, rows[0].Waiting, 2*time.Second)
	require.Equal(t, "agent-2", rows[1].Waiter)
	require.Contains(t, errOut, "more than 2 waiters")

	// agent-2 gives up: it withdraws.
	require.NoError(t, s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: "leader", Waiter: "agent-2"}))
	code, out, _ = seqlease(t, "-schema", schema, "lease-waiters", "leader")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "agent-2")
	require.Contains(t, out, "agent-3")
}

// TestInbox counts inbox records and purges the old ones, per consumer
// and for all of them.
func TestInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	old := now.Add(-2 * time.Hour)
	for i := range 5 {
		for _, c := range []string{"billing", "mail"} {
			at := &now
			if i < 3 {
				at = &old
			}
			_, err := s.MarkReceived(ctx, c, fmt.Sprint("m-", i), &store.ReceiveParams{Now: at})
			require.NoError(t, err)
		}
	}
	code, out, _ := seqlease(t, "-schema", schema, "inbox")
	require.Equal(t, 0, code)
	require.Regexp(t, `\(all\)\s+10\s+0`, out)

	code, out, _ = seqlease(t, "-schema", schema, "-json", "inbox", "billing", "-purge-older-than", "1h", "-batch", "2")
	require.Equal(t, 0, code, out)
	var res struct {
		Consumer        string
		Records, Purged int64
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, "billing", res.Consumer)
	require.Equal(t, int64(3), res.Purged, "the three old records, in batches of two")
	require.Equal(t, int64(2), res.Records)
	n, err := s.CountReceived(ctx, "mail")
	require.NoError(t, err)
	require.Equal(t, int64(5), n, "another consumer's records stay")

	code, out, _ = seqlease(t, "-schema", schema, "inbox", "-purge-older-than", "1h")
	require.Equal(t, 0, code)
	require.Regexp(t, `\(all\)\s+4\s+3`, out)
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
		{"migrate without action", []string{"migrate"}, 2, "migrate needs up, down, status or sql"},
		{"bad schema name", []string{"-schema", `x"; DROP TABLE y; --`, "streams"}, 2, "-schema"},
		{"inspect without stream", []string{"-schema", schema, "inspect"}, 2, "inspect needs STREAM"},
		{"trim with a bad bound", []string{"-schema", schema, "trim", "s", "zero"}, 2, "BELOW must be a number"},
		{"unknown stream", []string{"-schema", schema, "gaps", "nope"}, 1, `unknown stream "nope"`},
		{"wrong DSN", []string{"-dsn", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "streams"}, 1, "cannot connect to PostgreSQL"},
		{"unknown flag", []string{"-schema", schema, "streams", "-frob"}, 2, "flag provided but not defined: -frob"},
		{"unknown migrate action, checked before connecting", []string{"-dsn", "postgres://nobody@127.0.0.1:1/x", "migrate", "sideways"}, 2, `unknown action "sideways"`},
		{"force-release without owner", []string{"-schema", schema, "force-release"}, 2, "force-release needs OWNER"},
		{"force-release with a bad owner", []string{"-schema", schema, "force-release", "a\nb"}, 2, "OWNER"},
		{"force-release with a reason and no -by", []string{"-schema", schema, "force-release", "x", "-reason", "r"}, 2, "-by WHO is required with -reason"},
		{"lease-waiters with a bad name", []string{"-schema", schema, "lease-waiters", "a\nb"}, 2, "lease-waiters: NAME"},
		{"lease-waiters with a bad limit", []string{"-schema", schema, "lease-waiters", "-limit", "0"}, 2, "-limit must be in"},
		{"lease-waiters with two names", []string{"-schema", schema, "lease-waiters", "a", "b"}, 2, `unexpected "b"`},
		{"audit with a negative bound", []string{"-schema", schema, "audit", "s", "-max-unresolved", "-1s"}, 2, "must not be negative"},
		{"inbox with a bad consumer", []string{"-schema", schema, "inbox", "a\x01b"}, 2, "CONSUMER"},
		{"inbox with a negative age", []string{"-schema", schema, "inbox", "-purge-older-than", "-1s"}, 2, "must not be negative"},
		{"inbox with two consumers", []string{"-schema", schema, "inbox", "a", "b"}, 2, `unexpected "b"`},
		{"readers with a bad reader", []string{"-schema", schema, "readers", "-reader", "a\nb"}, 2, "invalid reader name"},
		{"delete-checkpoint without reader", []string{"-schema", schema, "delete-checkpoint", "-stream", "s"}, 2, "needs -reader R and -stream S"},
		{"delete-checkpoint with a bad stream", []string{"-schema", schema, "delete-checkpoint", "-reader", "r", "-stream", "\x00"}, 2, "invalid stream name"},
		{"help for an unknown command", []string{"help", "frobnicate"}, 2, `help: unknown command "frobnicate"`},
		{"migrate down with no steps", []string{"-dsn", "postgres://nobody@127.0.0.1:1/x", "migrate", "down", "-steps", "0"}, 2, "-steps must be at least 1"},
		{"migrate with two actions", []string{"migrate", "up", "down"}, 2, `migrate: unexpected "down"`},
		{"streams with an argument", []string{"-schema", schema, "streams", "x"}, 2, `streams: unexpected "x"`},
		{"a mistake shows the command's usage", []string{"-schema", schema, "trim", "s"}, 2, "usage: seqlease [-dsn URL] [-schema NAME] [-json] trim STREAM BELOW"},
		{"an unknown flag shows the command's flags", []string{"-schema", schema, "gaps", "s", "-frob"}, 2, "-limit int"},
		{"cleanup with a bad stream", []string{"-schema", schema, "cleanup", "a\x00b"}, 2, "cleanup: STREAM"},
		{"cleanup dry run recording hooks", []string{"-schema", schema, "cleanup", "-dry-run", "-durable-hooks"}, 2, "a -dry-run records nothing"},
		{"cleanup of an unknown stream", []string{"-schema", schema, "cleanup", "nope"}, 1, `unknown stream "nope"`},
		{"fill-gap without -by", []string{"-schema", schema, "fill-gap", "s", "1", "-payload", "x"}, 2, "filled by is required"},
		{"fill-gap without a payload", []string{"-schema", schema, "fill-gap", "s", "1", "-by", "me"}, 2, "needs one of -payload TEXT and -payload-file FILE"},
		{"fill-gap with two payloads", []string{"-schema", schema, "fill-gap", "s", "1", "-by", "me", "-payload", "x", "-payload-file", "f"}, 2, "needs one of -payload"},
		{"fill-gap with a bad number", []string{"-schema", schema, "fill-gap", "s", "0", "-by", "me", "-payload", "x"}, 2, "NUMBER must be a number of at least 1"},
		{"fill-gap without a number", []string{"-schema", schema, "fill-gap", "s"}, 2, "fill-gap needs STREAM NUMBER"},
		{"fill-gap of an unknown stream", []string{"-schema", schema, "fill-gap", "nope", "1", "-by", "me", "-payload", "x"}, 1, `unknown stream "nope"`},
		{"fill-gap with a missing file", []string{"-schema", schema, "fill-gap", "s", "1", "-by", "me", "-payload-file", "/nonexistent/x"}, 1, "-payload-file"},
		{"lease-history without a name", []string{"-schema", schema, "lease-history"}, 2, "lease-history needs NAME"},
		{"lease-history with a bad name", []string{"-schema", schema, "lease-history", "a\nb"}, 2, "lease-history: NAME"},
		{"lease-history with a bad limit", []string{"-schema", schema, "lease-history", "x", "-limit", "0"}, 2, "-limit must be in"},
		{"version with an argument", []string{"version", "x"}, 2, `version: unexpected "x"`},
		{"delete-checkpoint of nothing", []string{"-schema", schema, "delete-checkpoint", "-reader", "r", "-stream", "s"}, 1, `reader "r" has no checkpoint in stream "s"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := seqlease(t, c.args...)
			require.Equal(t, c.code, code, errOut)
			require.Contains(t, errOut, c.want)
		})
	}
}

// TestJSONEmptyLists checks that every listing prints [] for nothing, which
// scripts can iterate, and never null.
func TestJSONEmptyLists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	for _, args := range [][]string{{"streams"}, {"leases"}, {"leases", "-expired"}, {"force-release", "nobody"}, {"migrate", "up"}, {"readers"}, {"lease-waiters"}} {
		code, out, errOut := seqlease(t, append([]string{"-schema", schema, "-json"}, args...)...)
		require.Equal(t, 0, code, errOut)
		require.JSONEq(t, "[]", out, "%v", args)
	}
	_, err = s.Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	require.NoError(t, err)
	for _, args := range [][]string{{"gaps", "s"}, {"inspect", "s", "-from", "2"}} {
		code, out, errOut := seqlease(t, append([]string{"-schema", schema, "-json"}, args...)...)
		require.Equal(t, 0, code, errOut)
		require.JSONEq(t, "[]", out, "%v", args)
	}
}

// TestStreamsCountsSayWhenTheyStop fills one stream with more expired
// leases and another with more gaps than `streams` counts: the table says
// 10000+ and the JSON sets the capped flags; at exactly the limit the count
// is exact.
func TestStreamsCountsSayWhenTheyStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	lease := func(stream string, n int) []int64 {
		var numbers []int64
		for n > 0 {
			k := min(n, store.MaxBatch)
			reqs := make([]store.LeaseRequest, k)
			for i := range reqs {
				reqs[i].TTL = time.Microsecond
			}
			es, err := s.Lease(ctx, stream, reqs, nil)
			require.NoError(t, err)
			for _, e := range es {
				numbers = append(numbers, e.Number)
			}
			n -= k
		}
		return numbers
	}
	lease("expired", maxCount+1)
	gaps := lease("gaps", maxCount+1)
	for i := 0; i < len(gaps); i += store.MaxBatch {
		_, err := s.ResolveExpiredBatch(ctx, "gaps", gaps[i:min(i+store.MaxBatch, len(gaps))], nil)
		require.NoError(t, err)
	}

	code, out, errOut := seqlease(t, "-schema", schema, "streams")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `expired\s+10002\s+0\s+10001\s+10000\+\s+0\s+0\s+1 \(`, out)
	require.Regexp(t, `gaps\s+10002\s+10001\s+0\s+0\s+10001\s+0\+\s+-`, out)
	code, out, errOut = seqlease(t, "-schema", schema, "-json", "streams")
	require.Equal(t, 0, code, errOut)
	var rows []streamRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "expired", rows[0].Stream)
	require.Equal(t, maxCount, rows[0].Expired)
	require.True(t, rows[0].ExpiredCapped)
	require.False(t, rows[0].RecoveredCapped)
	require.Equal(t, "gaps", rows[1].Stream)
	require.Equal(t, int64(maxCount+1), rows[1].OpenGaps)
	require.True(t, rows[1].RecoveredCapped)
	require.False(t, rows[1].ExpiredCapped)

	// One fewer on each side: exactly the limit, counted exactly.
	require.NoError(t, s.ResolveExpired(ctx, "expired", 1, nil))
	require.NoError(t, s.FillGap(ctx, "gaps", 1, &store.FillParams{FilledBy: "test"}))
	code, out, errOut = seqlease(t, "-schema", schema, "streams")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `expired\s+10002\s+1\s+10000\s+10000\s+1\s+0\s+2 \(`, out)
	require.Regexp(t, `gaps\s+10002\s+10001\s+0\s+0\s+10000\s+0\s+-`, out)
}

// TestConnectionFromEnvironment connects without -dsn: through DATABASE_URL,
// and without it through the PG* variables. Each path is shown to be the
// one used by pointing it at a port nobody listens on. Not parallel: it sets
// the process's environment.
func TestConnectionFromEnvironment(t *testing.T) {
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	cfg, err := pgconn.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	streams := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append(args, "-schema", schema, "streams"), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	pg := map[string]string{
		"PGHOST": cfg.Host, "PGPORT": strconv.Itoa(int(cfg.Port)), "PGUSER": cfg.User, "PGPASSWORD": cfg.Password,
		"PGDATABASE": cfg.Database, "PGSSLMODE": "disable", "PGCONNECT_TIMEOUT": "2",
		"PGSERVICE": "", "PGSERVICEFILE": "/nonexistent", "PGPASSFILE": "/nonexistent",
	}
	if cfg.TLSConfig != nil {
		pg["PGSSLMODE"] = "require"
	}
	setenv := func(env map[string]string) {
		for k, v := range env {
			t.Setenv(k, v)
		}
	}

	// DATABASE_URL, with the PG* variables pointing nowhere.
	setenv(pg)
	t.Setenv("PGPORT", "1")
	t.Setenv("DATABASE_URL", pgtest.URL())
	code, out := streams()
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "STREAM")

	// -dsn comes before DATABASE_URL.
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2&sslmode=disable")
	code, out = streams("-dsn", pgtest.URL())
	require.Equal(t, 0, code, out)
	code, out = streams()
	require.Equal(t, 1, code)
	require.Contains(t, out, "cannot connect to PostgreSQL at postgres://nobody@127.0.0.1:1/x")

	// No DATABASE_URL: the PG* variables. The schema exists only in their
	// database, so a run that ignored them would fail.
	t.Setenv("DATABASE_URL", "")
	setenv(pg)
	code, out = streams()
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "STREAM")
	t.Setenv("PGPORT", "1")
	code, out = streams()
	require.Equal(t, 1, code)
	require.Contains(t, out, "cannot connect to PostgreSQL at (PG* environment)")
}

func TestHooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	code, out, _ := seqlease(t, "-schema", schema, "hooks")
	require.Equal(t, 0, code)
	require.Regexp(t, `PENDING\s+FAILING\s+OLDEST\n0\s+0\s+-\n`, out)

	es, err := s.Lease(ctx, "h", []store.LeaseRequest{{TTL: time.Microsecond}, {TTL: time.Microsecond}}, nil)
	require.NoError(t, err)
	later := es[1].ExpiresAt.Add(time.Second)
	_, err = s.ResolveExpiredBatch(ctx, "h", []int64{1, 2}, &store.ResolveExpiredParams{Hook: true, Now: &later})
	require.NoError(t, err)
	hs, err := s.ClaimHooks(ctx, &store.ClaimHooksParams{For: time.Minute, Limit: 1, Now: &later})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	_, err = s.RetryHook(ctx, "h", hs[0].Entry.Number, 1, time.Hour, "boom")
	require.NoError(t, err)
	code, out, _ = seqlease(t, "-schema", schema, "hooks")
	require.Equal(t, 0, code)
	require.Regexp(t, `\n2\s+1\s+\S+\n`, out)
	code, out, _ = seqlease(t, "-schema", schema, "-json", "hooks")
	require.Equal(t, 0, code)
	var row hooksRow
	require.NoError(t, json.Unmarshal([]byte(out), &row))
	require.Equal(t, int64(2), row.Pending)
	require.Equal(t, int64(1), row.Failing)
	require.NotNil(t, row.OldestAt)
}

// TestMigrateSQL prints the SQL of every embedded migration, up and down,
// exactly as the files hold it, without a database; bad input exits 2.
func TestMigrateSQL(t *testing.T) {
	t.Parallel()
	for _, m := range migrations.Migrations() {
		v := strconv.Itoa(m.Version)
		for _, c := range []struct {
			args []string
			want string
		}{{[]string{"migrate", "sql", v}, m.Up}, {[]string{"migrate", "sql", v, "-down"}, m.Down}, {[]string{"migrate", "-down", "sql", v}, m.Down}} {
			var out, errOut bytes.Buffer
			code := run(context.Background(), append([]string{"-dsn", unreachable}, c.args...), &out, &errOut)
			require.Equal(t, 0, code, "%v: %s", c.args, errOut.String())
			require.Equal(t, c.want, out.String(), "%v", c.args)
		}
	}
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"-dsn", unreachable, "-json", "migrate", "sql", "3", "-down"}, &out, io.Discard))
	var row migrationSQLRow
	require.NoError(t, json.Unmarshal(out.Bytes(), &row))
	m := migrations.Migrations()[2]
	require.Equal(t, migrationSQLRow{Version: 3, Name: m.Name, Direction: "down", SQL: m.Down}, row)

	for _, args := range [][]string{
		{"migrate", "sql"}, {"migrate", "sql", "0"}, {"migrate", "sql", "x"},
		{"migrate", "sql", strconv.Itoa(len(migrations.Migrations()) + 1)},
		{"migrate", "sql", "1", "-steps", "2"}, {"migrate", "up", "-down"}, {"migrate", "up", "1"},
	} {
		var errOut bytes.Buffer
		code := run(context.Background(), append([]string{"-dsn", unreachable}, args...), io.Discard, &errOut)
		require.Equal(t, 2, code, "%v: %s", args, errOut.String())
	}
}

// TestTrimRefusesUnreadEntries: trim refuses to remove entries the reader
// with the lowest checkpoint on the stream has not read, naming it and its
// checkpoint, and changes nothing; up to the checkpoint + 1 it trims, and
// -force trims past it.
func TestTrimRefusesUnreadEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	reqs := make([]store.LeaseRequest, 10)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Minute}
	}
	es, err := s.Lease(ctx, "orders", reqs, nil)
	require.NoError(t, err)
	for _, e := range es {
		_, err := s.Commit(ctx, "orders", e.Number, e.Token, nil)
		require.NoError(t, err)
	}
	require.NoError(t, s.SaveCheckpoint(ctx, "ahead", "orders", 7, nil))
	require.NoError(t, s.SaveCheckpoint(ctx, "behind", "orders", 4, nil))
	require.NoError(t, s.SaveCheckpoint(ctx, "elsewhere", "other", 0, nil))
	lowPoint := func() int64 {
		st, err := s.Stats(ctx, "orders")
		require.NoError(t, err)
		return st.LowPoint
	}

	c := &cli{out: io.Discard, errOut: io.Discard}
	err = c.run(ctx, []string{"-dsn", pgtest.URL(), "-schema", schema, "trim", "orders", "6"})
	c.pool.Close()
	require.ErrorIs(t, err, errUnread)
	var ue *unreadError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, unreadError{Stream: "orders", Reader: "behind", Checkpoint: 4, Below: 6}, *ue)
	require.Equal(t, int64(1), lowPoint(), "a refused trim changes nothing")

	code, _, errOut := seqlease(t, "-schema", schema, "trim", "orders", "6")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `reader "behind" is at 4 on stream "orders", so trimming below 6 would remove 5..5`)

	code, out, errOut := seqlease(t, "-schema", schema, "trim", "orders", "5")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `orders\s+5`, out, "up to the lowest checkpoint + 1")
	code, out, errOut = seqlease(t, "-schema", schema, "trim", "orders", "9", "-force")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `orders\s+9`, out, "-force trims past it")
	require.Equal(t, int64(9), lowPoint())
}
