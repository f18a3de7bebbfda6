package main

import (
	"context"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" { // a worker process of TestProjectionProcs
		main()
		return
	}
	pgtest.Main(m)
}

// TestProjection runs the pipeline with heavy faults on both backends: the
// read model must match the sequential replay and the ledger pass its audit.
func TestProjection(t *testing.T) {
	for name, dsn := range map[string]string{"memory": "", "postgres": pgtest.URL()} {
		t.Run(name, func(t *testing.T) {
			schema := "unused"
			if dsn != "" {
				schema = pgtest.ReserveSchema(t, pgtest.Shared(t, false)) // migrated by run, dropped after
			}
			c := config{
				events: 400, workers: 8, accounts: 10, seed: 7,
				ttl: 50 * time.Millisecond, interval: 10 * time.Millisecond,
				stall: 0.02, crash: 0.03, partial: 0.03, retry: 0.02,
				dsn: dsn, schema: schema,
			}
			rep, err := run(context.Background(), c)
			require.NoError(t, err)
			require.True(t, rep.matches)
			require.Equal(t, 400, rep.committed)
			require.NotZero(t, rep.n.stalled.Load()+rep.n.crashed.Load(), "faults were injected")
			require.NotZero(t, rep.recoveredBy["partial-work"]+rep.recoveredBy["retry"], "work was recovered")
			rep.print(io.Discard)
		})
	}
}

// TestProjectionProcs runs the pipeline in three worker processes on one
// PostgreSQL, with faults: the cleanup of the stream moves between them, and
// the outcome is the same as in one process.
func TestProjectionProcs(t *testing.T) {
	schema := pgtest.ReserveSchema(t, pgtest.Shared(t, false))
	c := config{
		events: 300, workers: 4, accounts: 10, seed: 11, procs: 3,
		ttl: 300 * time.Millisecond, interval: 20 * time.Millisecond,
		stall: 0.02, crash: 0.03, partial: 0.03, retry: 0.02,
		dsn: pgtest.URL(), schema: schema,
	}
	rep, err := run(context.Background(), c)
	require.NoError(t, err)
	require.True(t, rep.matches)
	require.Equal(t, 300, rep.committed)
	require.NotZero(t, rep.n.stalled.Load()+rep.n.crashed.Load(), "faults were injected")
	require.NotZero(t, rep.recoveredBy["partial-work"]+rep.recoveredBy["retry"], "work was recovered")
	require.Len(t, rep.owners, 3, "all three processes leased")
}

// TestDemoSurvivesKill9 runs the demo in three worker processes on
// PostgreSQL with -kill: the supervisor SIGKILLs worker process 0 a third of
// the way in. The process must really die of that signal and be restarted;
// the leases it held are resolved by the cleanup loop of the others, the
// restarted process finishes its share, and the verdict is the one of a run
// without the kill: every check passed, every event applied exactly once,
// the read model equal to the sequential replay.
func TestDemoSurvivesKill9(t *testing.T) {
	schema := pgtest.ReserveSchema(t, pgtest.Shared(t, false))
	c := config{
		events: 600, workers: 4, accounts: 20, seed: 5, procs: 3, kill: true,
		ttl: 300 * time.Millisecond, interval: 20 * time.Millisecond,
		stall: 0.01, crash: 0.02, partial: 0.02, retry: 0.01,
		dsn: pgtest.URL(), schema: schema,
	}
	rep, err := run(context.Background(), c)
	if rep != nil {
		var b strings.Builder
		rep.print(&b)
		t.Log(b.String())
	}
	require.NoError(t, err)

	require.Len(t, rep.deaths, 1, "one worker process died: the one killed")
	d := rep.deaths[0]
	require.Equal(t, 0, d.proc)
	require.Equal(t, 0, d.run, "its first incarnation")
	require.True(t, d.byKill, "the supervisor sent the signal")
	require.Equal(t, syscall.SIGKILL, d.signal, "it died of SIGKILL: %s", d.status)
	require.True(t, rep.killChecked)
	require.GreaterOrEqual(t, rep.killAt, int64(200), "killed a third of the way in")
	require.Less(t, rep.killAt, int64(600), "killed before the end")
	require.GreaterOrEqual(t, d.applied, rep.killAt, "it died after the signal")
	require.Equal(t, len(d.held), d.heldRecovered+d.heldGaps, "every lease it held was resolved by the cleanup: %v", d.held)
	require.Positive(t, rep.owners[ownerName(0, 1)], "the restarted process leased numbers")
	require.Positive(t, rep.owners[ownerName(0, 0)], "the killed process had leased numbers")

	require.Empty(t, rep.audit.Violations)
	checks := strings.Join(rep.audit.Checks, "\n")
	for _, inv := range []string{"I1 ", "I2 ", "I4 ", "I5 "} {
		require.Contains(t, checks, inv, "the audit checked %s", inv)
	}
	require.Zero(t, rep.n.duplicates.Load(), "exactly once")
	require.Equal(t, 600, rep.committed)
	require.Equal(t, int64(600), rep.n.applied.Load())
	require.True(t, rep.matches, "the read model matches the sequential replay")
	require.Zero(t, rep.refused, "no transition out of order")
	require.Equal(t, rep.lastApplied, rep.checkpoint)
}

// TestTwoRunsOneSchema runs the demo twice on one PostgreSQL schema, with
// worker processes (their work log is a table the runs share) and other
// seeds: the same operation ids ("ev-000042") carry other events in the
// second run. The first run leaves much recorded work (crashes after partial
// or complete work); in the second, workers also crash without recording
// anything, and the cleanup looks up work for those operation ids: it must
// find none of the first run's. Each run has a stream of its own and finds
// only its own work: both end with the verdict OK.
func TestTwoRunsOneSchema(t *testing.T) {
	schema := pgtest.ReserveSchema(t, pgtest.Shared(t, false))
	var streams []string
	for i, seed := range []uint64{21, 22} {
		c := config{
			events: 200, workers: 4, accounts: 10, seed: seed, procs: 2,
			ttl: 300 * time.Millisecond, interval: 20 * time.Millisecond,
			partial: 0.2, retry: 0.2,
			dsn: pgtest.URL(), schema: schema,
		}
		if i == 1 {
			c.crash, c.partial, c.retry = 0.2, 0.05, 0.05
		}
		rep, err := run(context.Background(), c)
		require.NoError(t, err, "seed %d", seed)
		require.True(t, rep.matches, "seed %d: the read model matches the sequential replay", seed)
		require.Equal(t, 200, rep.committed)
		require.Empty(t, rep.audit.Violations)
		require.Positive(t, rep.recoveredBy["partial-work"]+rep.recoveredBy["retry"], "seed %d: work was looked up and recovered", seed)
		streams = append(streams, rep.stream)
	}
	require.NotEqual(t, streams[0], streams[1], "each run has a stream of its own")
}

// TestTimeout checks the run's bound: unset, it grows with -events (a run
// of 200000 events is not cut at five minutes); -timeout 0 is no limit; a
// negative one is refused; worker processes get the parent's bound.
func TestTimeout(t *testing.T) {
	c := config{events: 200_000, workers: 1, accounts: 1, procs: 1, ttl: time.Second, interval: time.Second}
	c.setDefaults(false)
	require.Equal(t, 5*time.Minute+4000*time.Second, c.timeout)
	ctx, cancel := c.runContext()
	deadline, ok := ctx.Deadline()
	cancel()
	require.True(t, ok)
	require.Greater(t, time.Until(deadline), time.Hour)

	c.timeout = 0
	c.setDefaults(true)
	require.Zero(t, c.timeout, "-timeout 0 given: no limit")
	ctx, cancel = c.runContext()
	_, ok = ctx.Deadline()
	cancel()
	require.False(t, ok, "no deadline")
	require.NoError(t, c.validate())

	c.timeout = -time.Second
	require.ErrorContains(t, c.validate(), "-timeout")

	c.timeout = 90 * time.Minute
	require.Contains(t, strings.Join(childArgs(c, "s", 0, 0), " "), "-timeout 1h30m0s")
}
