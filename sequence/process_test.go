package sequence_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestCrossProcess starts worker OS processes that lease and commit, in
// order, on one stream: each process's ordered commits wait for numbers
// the other processes commit, so they are woken across processes (NOTIFY).
// The parent waits for the last number and checks the ledger. Every barrier,
// the parent's and the workers', polls only once an hour: a lost
// notification would leave a commit waiting until the test times out.
func TestCrossProcess(t *testing.T) {
	t.Parallel()
	runCrossProcess(t, "", workerPoll)
}

// TestCrossProcessThroughPgBouncer runs the same worker processes with every
// connection of theirs through a transaction-mode PgBouncer (simple
// protocol), where LISTEN hears nothing: each worker's barrier finds its
// listener deaf by its self-check and polls, so the ordered commits still
// go on, only later. (The parent listens directly and polls once an hour.)
func TestCrossProcessThroughPgBouncer(t *testing.T) {
	t.Parallel()
	runCrossProcess(t, pgtest.PgBouncerURL(t), workerPoll)
}

// runCrossProcess is TestCrossProcess with the workers connecting to url
// (empty: the test database directly).
func runCrossProcess(t *testing.T, url string, poll time.Duration) {
	t.Helper()
	if os.Getenv("SEQLEASE_WORKER") != "" {
		t.Fatal("TestCrossProcess must not run in a worker process")
	}
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	b, err := barrier.New(s, &barrier.Config{PollInterval: poll})
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	t.Cleanup(b.Stop)

	const procs, each = 3, 40
	exe, err := os.Executable()
	require.NoError(t, err)
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(exe, "-test.run=^TestWorkerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SEQLEASE_WORKER=1", "SEQLEASE_WORKER_SCHEMA="+schema,
			"SEQLEASE_WORKER_COUNT="+strconv.Itoa(each), "SEQLEASE_WORKER_ID="+strconv.Itoa(i),
			"SEQLEASE_WORKER_POLL="+poll.String(), "SEQLEASE_WORKER_URL="+url)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	// Wait in this process for the last number of all of them.
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, b.WaitFor(waitCtx, "xp", procs*each+1))
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait())
	}
	es := readAll(t, s, "xp")
	requireOrderedLedger(t, es, procs*each)
	owners := map[string]int{}
	for _, e := range es {
		owners[e.Owner]++
	}
	require.Len(t, owners, procs, "every process leased")
}

// workerPoll is the safety poll of every barrier in TestCrossProcess: far
// longer than the test, so that wake-ups come from notifications alone.
const workerPoll = time.Hour

// TestWorkerProcess is the body of TestCrossProcess's worker processes; run
// alone it does nothing.
func TestWorkerProcess(t *testing.T) {
	if os.Getenv("SEQLEASE_WORKER") == "" {
		return
	}
	ctx := context.Background()
	n, err := strconv.Atoi(os.Getenv("SEQLEASE_WORKER_COUNT"))
	require.NoError(t, err)
	url := os.Getenv("SEQLEASE_WORKER_URL") // through a pooler: the simple protocol
	pool, err := pgtest.NewPool(ctx, &pgtest.Options{MaxConns: 4, URL: url, SimpleProtocol: url != ""})
	require.NoError(t, err)
	defer pool.Close()
	s, err := postgres.New(pool, &postgres.Config{Schema: os.Getenv("SEQLEASE_WORKER_SCHEMA")})
	require.NoError(t, err)
	poll, err := time.ParseDuration(os.Getenv("SEQLEASE_WORKER_POLL"))
	require.NoError(t, err)
	b, err := barrier.New(s, &barrier.Config{PollInterval: poll})
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	defer b.Stop()
	l, err := sequence.New(s, &sequence.Config{Barrier: b, Owner: "worker-" + os.Getenv("SEQLEASE_WORKER_ID")})
	require.NoError(t, err)
	for i := range n {
		x, err := l.Lease(ctx, "xp", &sequence.LeaseOpts{TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, x.Commit(ctx, fmt.Appendf(nil, "%s-%d", os.Getenv("SEQLEASE_WORKER_ID"), i)))
	}
	if url != "" {
		require.Positive(t, s.ListenHealth().DeafChecks, "the listener through the pooler was found deaf")
	}
}
