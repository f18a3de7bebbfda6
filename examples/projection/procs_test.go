package main

import (
	"context"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// TestWorkLogIsPerStream records work of an operation in one run's log: a
// later run (another stream in the same schema, the same operation ids)
// must not find it, and the run that recorded it must.
func TestWorkLogIsPerStream(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	partial, results, err := newPGLogs(ctx, pool, schema, "projection-1")
	require.NoError(t, err)
	require.NoError(t, partial.record(ctx, "ev-000042", []byte("run 1")))

	got, ok, err := partial.lookup(ctx, store.Entry{OperationID: "ev-000042"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []byte("run 1"), got)
	_, ok, err = results.lookup(ctx, store.Entry{OperationID: "ev-000042"})
	require.NoError(t, err)
	require.False(t, ok, "a partial record is not a result")

	later, _, err := newPGLogs(ctx, pool, schema, "projection-2")
	require.NoError(t, err)
	_, ok, err = later.lookup(ctx, store.Entry{OperationID: "ev-000042"})
	require.NoError(t, err)
	require.False(t, ok, "another run's record of the same operation id")
}

// TestSupervisorGivesUp runs a worker process that always fails (the
// command false): the supervisor restarts it maxRestarts times, records
// every death, then ends the run with the reason.
func TestSupervisorGivesUp(t *testing.T) {
	exe, err := exec.LookPath("false")
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sup := &supervisor{
		c: config{procs: 1}, st: memory.New(nil), exe: exe, stream: "s",
		cancel: cancel, applied: func() int64 { return 7 },
	}
	sup.start(ctx)
	sup.wait()
	require.ErrorContains(t, context.Cause(ctx), "worker process 0: exit status 1, after 3 restarts")
	require.Len(t, sup.deaths, maxRestarts+1, "the first start and every restart died")
	for i, d := range sup.deaths {
		require.Equal(t, death{proc: 0, run: i, status: "exit status 1", applied: 7}, d)
	}
}

// TestWorkerConnectionsAreNamed checks what the supervisor's wait for a
// dead worker process's connections rests on: a worker's connections carry
// the application_name of its run and incarnation, as pg_stat_activity
// shows it (at most 63 bytes).
func TestWorkerConnectionsAreNamed(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.ReserveSchema(t, pgtest.Shared(t, false))
	name := appName("projection-1795729378939146924", ownerName(2, 3))
	require.Equal(t, "projection-1795729378939146924/projection-proc-2-restart-3", name)
	long := appName("projection-1795729378939146924-and-then-some-more", ownerName(0, 1))
	require.Len(t, long, 63)

	_, pool, closeStore, err := openStore(ctx, config{dsn: pgtest.URL(), schema: schema}, long)
	require.NoError(t, err)
	defer closeStore()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, long).Scan(&n))
	require.Positive(t, n, "the pool's connections are found by the name")
	sup := &supervisor{pool: pgtest.Shared(t, false)}
	closeStore()
	require.NoError(t, sup.awaitDisconnected(ctx, long), "they end once the pool is closed")
	require.NoError(t, pgtest.Shared(t, false).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, long).Scan(&n))
	require.Zero(t, n)
}
