package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// synopsisFlag finds the flags a command's synopsis names.
var synopsisFlag = regexp.MustCompile(`-[a-z][a-z-]*`)

// helpFlag finds the flags the help's flag list defines.
var helpFlag = regexp.MustCompile(`(?m)^  (-[a-z][a-z-]*)`)

// TestHelp asks every command for its help in the three ways (-h, --help,
// help COMMAND), with no database reachable: each prints its own usage on
// stdout and exits 0, and the flags it lists are exactly those its synopsis
// names, which the global usage lists.
func TestHelp(t *testing.T) {
	t.Parallel()
	var global bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"help"}, &global, io.Discard))
	var dashH bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"-h"}, &dashH, io.Discard))
	require.Equal(t, global.String(), dashH.String())
	for _, cmd := range commands {
		require.Contains(t, global.String(), "\n  "+cmd.name+" ", "the global usage lists %s", cmd.name)
		want := synopsisFlag.FindAllString(cmd.args, -1)
		slices.Sort(want)
		want = slices.Compact(want)
		for _, args := range [][]string{{cmd.name, "-h"}, {cmd.name, "--help"}, {"help", cmd.name}, {"-json", cmd.name, "-help"}} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				var out, errOut bytes.Buffer
				code := run(context.Background(), append([]string{"-dsn", unreachable}, args...), &out, &errOut)
				require.Equal(t, 0, code, errOut.String())
				require.Empty(t, errOut.String())
				help := out.String()
				synopsis := strings.TrimSpace("usage: seqlease [-dsn URL] [-schema NAME] [-json] " + cmd.name + " " + cmd.args)
				require.True(t, strings.HasPrefix(help, synopsis+"\n"), help)
				require.Contains(t, help, strings.TrimSpace(cmd.help))
				var got []string
				for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
					got = append(got, m[1])
				}
				slices.Sort(got)
				require.Equal(t, want, got, "the flags listed are the synopsis's")
				require.Contains(t, help, "global flags: -dsn URL, -schema NAME, -json")
			})
		}
	}
}

// snakeCase is the form of every JSON key.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// jsonKeys decodes every JSON value of out (watch prints one per line) and
// returns every object key in them, at any depth.
func jsonKeys(t *testing.T, out string) []string {
	t.Helper()
	var keys []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				keys = append(keys, k)
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	dec := json.NewDecoder(strings.NewReader(out))
	n := 0
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "valid JSON:\n%s", out)
		walk(v)
		n++
	}
	require.NotZero(t, n, "some JSON")
	return keys
}

// TestJSONSnakeCase runs every command with -json on a schema that gives
// each of them something to print, and checks that the output is valid
// JSON whose keys are all snake_case. A command without a case here fails
// the test.
func TestJSONSnakeCase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	fresh := pgtest.ReserveSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)

	// A stream with every kind of entry, expired leases included.
	es, err := s.Lease(ctx, "orders", []store.LeaseRequest{
		{TTL: time.Minute, OperationID: "a", Kind: "k"}, {TTL: time.Minute, OperationID: "b"},
		{TTL: time.Microsecond, OperationID: "c"}, {TTL: time.Microsecond, OperationID: "d"}, {TTL: time.Microsecond, OperationID: "e"},
		{TTL: time.Hour, OperationID: "f"}, {TTL: time.Microsecond, OperationID: "g"},
	}, &store.LeaseParams{Owner: "w1"})
	require.NoError(t, err)
	_, err = s.Commit(ctx, "orders", 1, es[0].Token, &store.CommitParams{Payload: []byte("one")})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "orders", 2, es[1].Token, nil))
	later := es[4].ExpiresAt.Add(time.Second)
	_, err = s.ResolveExpiredBatch(ctx, "orders", []int64{3}, &store.ResolveExpiredParams{Hook: true, Now: &later})
	require.NoError(t, err)
	_, err = s.RecoverExpired(ctx, "orders", 4, &store.RecoverParams{RecoveryType: "retry", Payload: []byte("x")})
	require.NoError(t, err)
	// 5 is expired, 6 live, 7 expired behind it; 8 carries 4's work.
	_, err = s.AcquireLease(ctx, "leader", "agent-1", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	_, err = s.AcquireLease(ctx, "gone", "agent-2", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	require.NoError(t, s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: "leader", Waiter: "agent-3", Since: now, Fence: 1}))
	require.NoError(t, s.SaveCheckpoint(ctx, "projection", "orders", 1, nil))
	require.NoError(t, s.SaveCheckpoint(ctx, "relay", "orders", 1, nil))
	_, err = s.MarkReceived(ctx, "billing", "m-1", nil)
	require.NoError(t, err)
	// Stream p: 1..3 parked.
	_, err = s.Lease(ctx, "p", []store.LeaseRequest{{TTL: time.Microsecond}, {TTL: time.Microsecond}, {TTL: time.Microsecond}}, nil)
	require.NoError(t, err)
	for n := int64(1); n <= 3; n++ {
		require.Eventually(t, func() bool {
			_, err := s.RecordRecoveryFailure(ctx, "p", n, &store.RecoveryFailureParams{Error: "tracker down", ParkAfter: 1})
			return err == nil
		}, 10*time.Second, time.Millisecond)
	}

	cases := []struct {
		cmd  string
		args []string
	}{
		{"migrate", []string{"-schema", fresh, "migrate", "status"}},
		{"migrate", []string{"-schema", fresh, "migrate", "up"}},
		{"migrate", []string{"-schema", fresh, "migrate", "down", "-steps", "2"}},
		{"streams", []string{"streams"}},
		{"inspect", []string{"inspect", "orders"}},
		{"gaps", []string{"gaps", "orders"}},
		{"watch", []string{"watch", "orders", "-count", "2", "-interval", "1ms"}},
		{"audit", []string{"audit", "orders", "-max-unresolved", "1ns"}}, // exit 1: violations
		{"leases", []string{"leases"}},
		{"lease-history", []string{"lease-history", "leader"}},
		{"lease-waiters", []string{"lease-waiters"}},
		{"hooks", []string{"hooks"}},
		{"readers", []string{"readers"}},
		{"inbox", []string{"inbox"}},
		{"version", []string{"version"}},
		{"cleanup", []string{"cleanup", "-dry-run"}},
		{"cleanup", []string{"cleanup", "orders"}},
		{"fill-gap", []string{"fill-gap", "orders", "2", "-payload", "two", "-by", "operator"}},
		{"parked", []string{"parked"}},
		{"unpark", []string{"unpark", "p", "1"}},
		{"give-up", []string{"give-up", "p", "2"}},
		{"fill-parked", []string{"fill-parked", "p", "3", "-payload", "w", "-by", "alice"}},
		{"trim", []string{"trim", "orders", "2"}},
		{"force-release", []string{"force-release", "agent-2", "-by", "operator", "-reason", "crashed"}},
		{"delete-checkpoint", []string{"delete-checkpoint", "-reader", "relay", "-stream", "orders"}},
		{"config", []string{"config", "set", "lease.max_renewals", "5", "-by", "ops"}},
		{"config", []string{"config", "get"}},
		{"config", []string{"config", "unset", "lease.max_renewals"}},
	}
	var covered []string
	for _, c := range cases {
		code, out, errOut := seqlease(t, append([]string{"-schema", schema, "-json"}, c.args...)...)
		if c.cmd == "audit" {
			require.Equal(t, 1, code, "audit found the overdue leases: %s", errOut)
		} else {
			require.Equal(t, 0, code, "%v: %s", c.args, errOut)
		}
		keys := jsonKeys(t, out)
		require.NotEmpty(t, keys, "%v printed objects:\n%s", c.args, out)
		for _, k := range keys {
			require.Regexp(t, snakeCase, k, "%v: key %q is not snake_case", c.args, k)
		}
		covered = append(covered, c.cmd)
	}
	for _, cmd := range commands {
		if cmd.name == "serve" {
			continue // runs until interrupted: TestServe checks its JSON
		}
		require.Contains(t, covered, cmd.name, "TestJSONSnakeCase runs every command")
	}
}
