package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// ledger reads every entry of stream.
func ledger(t *testing.T, s *postgres.Store, stream string) []store.Entry {
	t.Helper()
	es, err := s.Read(context.Background(), stream, 0, store.MaxListLimit)
	require.NoError(t, err)
	return es
}

// TestCleanup runs `cleanup` after a crash: a dry run that lists what a
// pass would do and changes nothing, then passes that make gaps in order,
// leave the lease behind a live one waiting, skip a stream another cleaner
// leads, and record durable hooks when asked.
func TestCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	// a: 1 committed, 2 and 3 expired, 4 live, 5 expired behind it.
	es, err := s.Lease(ctx, "a", []store.LeaseRequest{
		{TTL: time.Hour}, {TTL: time.Microsecond, OperationID: "op-2", Kind: "k"}, {TTL: time.Microsecond, OperationID: "op-3"},
		{TTL: time.Hour}, {TTL: time.Microsecond, OperationID: "op-5"},
	}, &store.LeaseParams{Owner: "crashed"})
	require.NoError(t, err)
	_, err = s.Commit(ctx, "a", 1, es[0].Token, nil)
	require.NoError(t, err)
	// b: 1 expired, and another cleaner leads b.
	_, err = s.Lease(ctx, "b", []store.LeaseRequest{{TTL: time.Microsecond}}, nil)
	require.NoError(t, err)
	other, err := s.AcquireLease(ctx, cleanup.LeaseName("b"), "other-cleaner", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)

	beforeA, beforeB := ledger(t, s, "a"), ledger(t, s, "b")
	code, out, errOut := seqlease(t, "-schema", schema, "cleanup", "-dry-run")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `a\s+2\s+op-2\s+k\s+crashed\s+\S+\s+gap\s+reason expired\n`, out)
	require.Regexp(t, `a\s+3\s+op-3\s+crashed\s+\S+\s+gap\s`, out)
	require.Regexp(t, `a\s+5\s+op-5\s+crashed\s+\S+\s+wait\s+behind the live lease of 4\n`, out)
	require.Regexp(t, `b\s+1\s+\S+\s+skip\s+cleaner other-cleaner leads the stream`, out)
	require.Contains(t, out, "dry run, nothing changed: 4 expired; a pass would make 2 gaps; 1 wait behind a live lease; 1 streams skipped")
	code, out, errOut = seqlease(t, "-schema", schema, "-json", "cleanup", "a", "-dry-run")
	require.Equal(t, 0, code, errOut)
	var plan cleanupResult
	require.NoError(t, json.Unmarshal([]byte(out), &plan))
	require.True(t, plan.DryRun)
	require.Equal(t, 3, plan.Expired)
	require.Equal(t, 2, plan.Gaps)
	require.Equal(t, 1, plan.Waiting)
	require.Len(t, plan.Entries, 3)
	require.Equal(t, []string{actionGap, actionGap, actionWait}, []string{plan.Entries[0].Action, plan.Entries[1].Action, plan.Entries[2].Action})
	require.Equal(t, beforeA, ledger(t, s, "a"), "a dry run changes no entry")
	require.Equal(t, beforeB, ledger(t, s, "b"))
	_, err = s.GetLease(ctx, cleanup.LeaseName("a"), nil)
	require.ErrorIs(t, err, store.ErrLeaseNotFound, "a dry run takes no lease")

	// A pass over a: 2 and 3 become gaps, 5 waits; b is not touched.
	code, out, errOut = seqlease(t, "-schema", schema, "-json", "cleanup", "a")
	require.Equal(t, 0, code, errOut)
	var pass cleanupResult
	require.NoError(t, json.Unmarshal([]byte(out), &pass))
	require.False(t, pass.DryRun)
	require.Equal(t, 3, pass.Expired)
	require.Equal(t, 2, pass.Gaps)
	require.Equal(t, 1, pass.Waiting)
	require.Equal(t, 1, pass.Remaining, "5 is left, behind the live 4")
	require.Len(t, pass.Entries, 2)
	require.Equal(t, []int64{2, 3}, []int64{pass.Entries[0].Number, pass.Entries[1].Number}, "in number order")
	got := ledger(t, s, "a")
	require.Equal(t, store.Committed, got[0].State)
	for _, n := range []int{1, 2} {
		require.Equal(t, store.Gap, got[n].State)
		require.Equal(t, store.ReasonExpired, got[n].GapReason)
	}
	require.Equal(t, store.Leased, got[3].State)
	require.Equal(t, store.Leased, got[4].State, "behind a live lease, as the loop does")
	require.Equal(t, beforeB, ledger(t, s, "b"), "a pass over a leaves b alone")
	// The pass held a's cleanup lease, as the loop does, and released it;
	// its history says who.
	code, out, errOut = seqlease(t, "-schema", schema, "lease-history", cleanup.LeaseName("a"))
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `acquired\s+-\s+seqlease-cli:\S+\s+1\s`, out)
	require.Regexp(t, `released\s+released\s+seqlease-cli:\S+\s+1\s`, out)

	// Every stream: b is led by the other cleaner, skipped.
	code, out, errOut = seqlease(t, "-schema", schema, "cleanup")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "2 expired: 0 made gaps, 0 resolved elsewhere, 0 failed, 1 wait behind a live lease, 1 streams skipped (another cleaner leads them); 2 expired remain")
	require.Equal(t, beforeB, ledger(t, s, "b"))

	// The other cleaner is gone: b's lease becomes a gap, with a durable
	// hook recorded for the application's loop.
	require.NoError(t, s.ReleaseLease(ctx, other.Name, other.Owner, other.Fence, nil))
	code, out, errOut = seqlease(t, "-schema", schema, "cleanup", "b", "-durable-hooks")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `b\s+1\s+\S+\s+gap\s+reason expired\n`, out)
	require.Equal(t, store.Gap, ledger(t, s, "b")[0].State)
	hs, err := s.HookStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), hs.Pending, "the pass recorded b/1's durable hook, and only that")
}

// TestFillGap fills an open gap through the fill policy and refuses,
// changing nothing, a committed number, a filled gap, a gap whose work was
// recovered, a gap of another reason than asked, and a number never
// handed out.
func TestFillGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	es, err := s.Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Hour}, {TTL: time.Hour, OperationID: "op-2"},
		{TTL: time.Microsecond}, {TTL: time.Microsecond}}, nil)
	require.NoError(t, err)
	_, err = s.Commit(ctx, "s", 1, es[0].Token, &store.CommitParams{Payload: []byte("one")})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "s", 2, es[1].Token, nil))
	require.NoError(t, s.ResolveExpired(ctx, "s", 3, nil))
	moved, err := s.RecoverExpired(ctx, "s", 4, &store.RecoverParams{RecoveryType: "retry", Payload: []byte("x")})
	require.NoError(t, err)
	before := ledger(t, s, "s")

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"a committed number", []string{"1"}, "seqlease: entry is not a gap: s/1 is committed: refused, nothing changed"},
		{"another reason than asked", []string{"3", "-reason", "released"}, "fill refused by policy: its reason is not one of -reason released"},
		{"a recovered gap", []string{"4"}, "work recovered under another number"},
		{"a number never handed out", []string{"99"}, "s has not handed out 99"},
	} {
		code, _, errOut := seqlease(t, append([]string{"-schema", schema, "fill-gap", "s", "-by", "alice", "-payload", "p"}, c.args...)...)
		require.Equal(t, 1, code, c.name)
		require.Contains(t, errOut, c.want, c.name)
		require.Equal(t, before, ledger(t, s, "s"), "%s: nothing changed", c.name)
	}

	code, out, errOut := seqlease(t, "-schema", schema, "fill-gap", "s", "2", "-payload", "two", "-by", "alice")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `s\s+2\s+released\s+alice\s+3\s+filled`, out)
	e := ledger(t, s, "s")[1]
	require.Equal(t, store.Committed, e.State)
	require.Equal(t, "alice", e.FilledBy)
	require.Equal(t, []byte("two"), e.Payload)
	require.Equal(t, store.ReasonReleased, e.GapReason, "the reason is kept")
	code, _, errOut = seqlease(t, "-schema", schema, "fill-gap", "s", "2", "-payload", "again", "-by", "bob")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `filled by "alice"`)
	require.Equal(t, "alice", ledger(t, s, "s")[1].FilledBy, "a filled gap is not filled twice")

	// From a file, with the reason asked for.
	file := filepath.Join(t.TempDir(), "payload")
	require.NoError(t, os.WriteFile(file, []byte("three\n"), 0o600))
	code, out, errOut = seqlease(t, "-schema", schema, "-json", "fill-gap", "s", "3", "-payload-file", file, "-by", "bob", "-reason", "released,expired")
	require.Equal(t, 0, code, errOut)
	var row filledRow
	require.NoError(t, json.Unmarshal([]byte(out), &row))
	require.Equal(t, int64(3), row.Number)
	require.Equal(t, "bob", row.FilledBy)
	require.Equal(t, store.ReasonExpired, row.Reason)
	require.Equal(t, 6, row.PayloadBytes)
	require.False(t, row.FilledAt.IsZero())
	require.Equal(t, []byte("three\n"), ledger(t, s, "s")[2].Payload)
	require.NotZero(t, moved)
}

// TestLeaseHistory lists a named lease's history in order, pages it, and
// says so when a name has none.
func TestLeaseHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	l, err := s.AcquireLease(ctx, "leader", "agent-1", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	_, err = s.RenewLease(ctx, "leader", "agent-1", l.Fence, &store.RenewLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.ReleaseLease(ctx, "leader", "agent-1", l.Fence, nil))
	_, err = s.AcquireLease(ctx, "leader", "agent-2", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	_, err = s.AcquireLease(ctx, "other", "agent-3", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)

	code, out, errOut := seqlease(t, "-schema", schema, "lease-history", "leader")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut)
	require.Regexp(t, `ID\s+AT\s+EVENT\s+REASON\s+OWNER\s+FENCE\s+EXPIRES\s+ACTOR\s+COMMENT\n`+
		`\d+\s+\S+\s+acquired\s+-\s+agent-1\s+1\s+\S+\s+-\s+-\n`+
		`\d+\s+\S+\s+renewed\s+renewed\s+agent-1\s+1\s+\S+\s+-\s+-\n`+
		`\d+\s+\S+\s+released\s+released\s+agent-1\s+1\s+\S+\s+-\s+-\n`+
		`\d+\s+\S+\s+acquired\s+-\s+agent-2\s+2\s+\S+\s+-\s+-\n$`, out)

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "lease-history", "leader", "-limit", "2")
	require.Equal(t, 0, code, errOut)
	var page []historyRow
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Len(t, page, 2)
	require.Equal(t, "acquired", page[0].Event)
	require.Empty(t, page[0].Reason)
	require.Equal(t, "renewed", page[1].Event)
	require.Equal(t, "renewed", page[1].Reason)
	require.Contains(t, errOut, "more events: -after "+jsonNumber(page[1].ID))
	code, out, errOut = seqlease(t, "-schema", schema, "-json", "lease-history", "leader", "-after", jsonNumber(page[1].ID))
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Len(t, page, 2)
	require.Equal(t, "released", page[0].Event)
	require.Equal(t, "agent-2", page[1].Owner)
	require.Equal(t, int64(2), page[1].Fence)

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "lease-history", "nobody")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, "[]", out)
	require.Contains(t, errOut, `no history of "nobody"`)
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestVersion prints the binary's version and the schema's, migrated or
// not, and the binary's alone when the database does not answer.
func TestVersion(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	fresh := pgtest.ReserveSchema(t, pool)
	latest := 0
	for _, m := range migrations.Migrations() {
		latest = max(latest, m.Version)
	}
	version := func(args ...string) (int, versionRow, string) {
		code, out, errOut := seqlease(t, args...)
		var row versionRow
		if code == 0 && json.Valid([]byte(out)) {
			require.NoError(t, json.Unmarshal([]byte(out), &row))
		}
		return code, row, out + errOut
	}

	code, row, out := version("-schema", schema, "-json", "version")
	require.Equal(t, 0, code, out)
	require.Equal(t, "github.com/seqlease/seqlease", row.Module)
	require.NotEmpty(t, row.Version)
	require.Equal(t, runtime.Version(), row.GoVersion)
	require.Equal(t, latest, row.SchemaLatest)
	require.NotNil(t, row.SchemaVersion)
	require.Equal(t, latest, *row.SchemaVersion)
	require.Zero(t, row.SchemaPending)
	require.Empty(t, row.DatabaseError)

	code, row, out = version("-schema", fresh, "-json", "version")
	require.Equal(t, 0, code, out)
	require.NotNil(t, row.SchemaVersion)
	require.Zero(t, *row.SchemaVersion)
	require.Equal(t, len(migrations.Migrations()), row.SchemaPending)

	code, out, errOut := seqlease(t, "-schema", fresh, "version")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `seqlease\s+\S+\nmodule\s+github.com/seqlease/seqlease\ngo\s+go`, out)
	// A test binary records no VCS revision.
	require.Regexp(t, `\nrevision\s+unknown \(the build recorded no VCS revision`, out)
	require.Equal(t, "unknown", row.Revision)
	require.Regexp(t, `schema `+fresh+`\s+0, not migrated`, out)

	code, row, out = version("-dsn", unreachable, "-json", "version")
	require.Equal(t, 0, code, out)
	require.Nil(t, row.SchemaVersion)
	require.Equal(t, latest, row.SchemaLatest)
	require.Contains(t, row.DatabaseError, "cannot connect to PostgreSQL")
}

// TestVersionRevision: the revision comes from the build's VCS settings;
// without them it is "unknown", never "-" or empty.
func TestVersionRevision(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		bi       *debug.BuildInfo
		revision string
		text     string
	}{
		{nil, "unknown", "unknown (the build recorded no VCS revision"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/seqlease/seqlease", Version: "(devel)"}}, "unknown", "unknown (the build"},
		{&debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "4b1d"}, {Key: "vcs.modified", Value: "false"}}}, "4b1d", "4b1d"},
		{&debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "4b1d"}, {Key: "vcs.modified", Value: "true"}}}, "4b1d", "4b1d (modified)"},
	} {
		var row versionRow
		row.fromBuild(c.bi)
		require.Equal(t, c.revision, row.Revision)
		require.True(t, strings.HasPrefix(row.revisionText(), c.text), row.revisionText())
		require.Equal(t, "github.com/seqlease/seqlease", row.Module)
	}
}

// TestAuditReportsExpired checks that audit lists expired, unresolved
// leases by default, without failing, and fails on them only with
// -max-unresolved when they are older than it.
func TestAuditReportsExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	_, err = s.Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Microsecond, OperationID: "op-1"},
		{TTL: time.Microsecond, OperationID: "op-2"}, {TTL: time.Hour}}, &store.LeaseParams{Owner: "crashed"})
	require.NoError(t, err)

	code, out, errOut := seqlease(t, "-schema", schema, "audit", "s")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "2 leases expired and unresolved: does a cleanup loop run? (seqlease cleanup s -dry-run)")
	require.Regexp(t, `EXPIRED\s+entry 1: unresolved \S+ past its expiry \(owner "crashed", operation "op-1"\)`, out)
	require.Regexp(t, `EXPIRED\s+entry 2: `, out)
	require.NotContains(t, out, "VIOLATION")

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "audit", "s", "-max-unresolved", "1h")
	require.Equal(t, 0, code, errOut)
	var r auditRow
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.True(t, r.OK)
	require.Len(t, r.Expired, 2)
	require.Equal(t, int64(1), r.Expired[0].Number)
	require.Equal(t, "op-2", r.Expired[1].OperationID)
	require.Positive(t, r.Expired[0].Overdue)
	require.Empty(t, r.Violations)

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "audit", "s", "-max-unresolved", "1ns")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "found 2 violations")
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.False(t, r.OK)
	require.Len(t, r.Violations, 2)
	require.Equal(t, "I6", r.Violations[0].Invariant)

	// Resolved, they are no longer reported.
	code, _, errOut = seqlease(t, "-schema", schema, "cleanup", "s")
	require.Equal(t, 0, code, errOut)
	code, out, errOut = seqlease(t, "-schema", schema, "audit", "s", "-max-unresolved", "1ns")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "0 leases expired and unresolved")
	require.NotContains(t, out, "EXPIRED")
}

// TestParked lists parked entries with their last error, and decides each
// of them: unpark (tried again from zero attempts), give-up (a gap with the
// reason given) and fill-parked (the work committed under a new number);
// each refuses, changing nothing, an entry that is not parked, and bad
// arguments exit 2.
func TestParked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	_, err = s.Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Microsecond, OperationID: "op-1", Kind: "k"},
		{TTL: time.Microsecond, OperationID: "op-2"}, {TTL: time.Microsecond, OperationID: "op-3"},
		{TTL: time.Microsecond, OperationID: "op-4"}, {TTL: time.Hour}}, nil)
	require.NoError(t, err)
	for n := int64(1); n <= 3; n++ {
		require.Eventually(t, func() bool {
			_, err := s.RecordRecoveryFailure(ctx, "s", n, &store.RecoveryFailureParams{Error: fmt.Sprint("tracker down ", n), ParkAfter: 1})
			return err == nil
		}, 10*time.Second, time.Millisecond)
	}

	code, out, errOut := seqlease(t, "-schema", schema, "parked")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `s\s+1\s+op-1\s+k\s+\S+\s+1\s+"tracker down 1"`, out)
	code, out, errOut = seqlease(t, "-schema", schema, "-json", "parked", "-stream", "s", "-limit", "2")
	require.Equal(t, 0, code, errOut)
	var rows []parkedRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "tracker down 2", rows[1].LastError)
	require.Equal(t, 1, rows[1].Attempts)
	require.False(t, rows[1].ParkedAt.IsZero())
	require.Contains(t, errOut, "more parked entries")
	code, out, errOut = seqlease(t, "-schema", schema, "-json", "parked", "-stream", "other")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, "[]", out)

	// A cleanup pass leaves parked entries, and what waits behind them, alone.
	before := ledger(t, s, "s")
	for _, dry := range []bool{true, false} {
		args := []string{"-schema", schema, "-json", "cleanup", "s"}
		if dry {
			args = append(args, "-dry-run")
		}
		code, out, errOut = seqlease(t, args...)
		require.Equal(t, 0, code, errOut)
		var res cleanupResult
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		require.Equal(t, 1, res.Parked, "dry run %v", dry)
		require.Zero(t, res.Gaps, "dry run %v", dry)
		if dry {
			require.Equal(t, actionParked, res.Entries[0].Action)
			require.Equal(t, actionWait, res.Entries[3].Action)
		}
	}
	require.Equal(t, before, ledger(t, s, "s"), "cleanup: nothing changed")

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"unpark", "s", "4"}, 1, "not parked"},
		{[]string{"give-up", "s", "4"}, 1, "not parked"},
		{[]string{"fill-parked", "s", "5", "-payload", "x", "-by", "bob"}, 1, "not parked"},
		{[]string{"unpark", "s", "99"}, 1, "has not handed out 99"},
		{[]string{"give-up", "s", "99"}, 1, "has not handed out 99"},
		{[]string{"unpark", "s", "0"}, 2, "NUMBER must be a number of at least 1"},
		{[]string{"unpark", "s"}, 2, "usage"},
		{[]string{"give-up", "s", "1", "-reason", "bad\x01reason"}, 2, "control character"},
		{[]string{"give-up", "s", "1", "-reason", ""}, 2, "must not be empty"},
		{[]string{"fill-parked", "s", "1", "-payload", "x"}, 2, "-by"},
		{[]string{"fill-parked", "s", "1", "-by", "bob"}, 2, "one of -payload"},
		{[]string{"parked", "-limit", "0"}, 2, "-limit"},
		{[]string{"parked", "-stream", "bad\x00"}, 2, "-stream"},
	} {
		code, _, errOut := seqlease(t, append([]string{"-schema", schema}, c.args...)...)
		require.Equal(t, c.code, code, "%q: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, "%q", c.args)
		require.Equal(t, before, ledger(t, s, "s"), "%q: nothing changed", c.args)
	}

	code, out, errOut = seqlease(t, "-schema", schema, "unpark", "s", "1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "unparked")
	e := ledger(t, s, "s")[0]
	require.False(t, e.Parked())
	require.Zero(t, e.RecoveryAttempts, "tried again from zero")
	require.Equal(t, "tracker down 1", e.LastRecoveryError, "the last error is kept")

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "give-up", "s", "2", "-reason", "tracker retired")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"stream":"s","number":2,"result":"given-up","reason":"tracker retired"}`, out)
	e = ledger(t, s, "s")[1]
	require.Equal(t, store.Gap, e.State)
	require.Equal(t, "tracker retired", e.GapReason)

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "fill-parked", "s", "3", "-payload", "work 3", "-by", "alice")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"stream":"s","number":3,"result":"filled","moved_to":6,"by":"alice"}`, out)
	es := ledger(t, s, "s")
	require.Equal(t, int64(6), es[2].RecoveredAs)
	require.Equal(t, []byte("work 3"), es[5].Payload)
	require.Equal(t, "operator", es[5].RecoveryType)
	require.Equal(t, "alice", es[5].Owner)
	require.Equal(t, "op-3", es[5].OperationID)

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "parked")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, "[]", out, "none left")
	code, _, errOut = seqlease(t, "-schema", schema, "give-up", "s", "2")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not parked", "a gap is not given up twice")
}
