package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/chaos"
	"github.com/seqlease/seqlease/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestWorker is the body of the worker processes that the harness starts
// (chaos.EnvWorker holds their configuration); run alone it does nothing.
func TestWorker(t *testing.T) {
	js := os.Getenv(chaos.EnvWorker)
	if js == "" {
		return
	}
	var cfg chaos.WorkerConfig
	require.NoError(t, json.Unmarshal([]byte(js), &cfg))
	require.NoError(t, chaos.RunWorker(context.Background(), cfg, os.Stdin, os.Stdout))
}

// load is the workers' configuration in the fault tests: three goroutines
// per process, leases of 1 s kept alive, a few ms of work, half the commits
// through CommitTx, half the operations recording their result (the
// cleanup's Retry step moves it to a new number if the holder dies), a few
// releases, and every process campaigning for the singleton lease.
func load() chaos.WorkerConfig {
	return chaos.WorkerConfig{
		Concurrency: 3, TTL: time.Second, MaxWork: 20 * time.Millisecond,
		TxShare: 0.5, ResultShare: 0.5, ReleaseShare: 0.02, Contend: true,
	}
}

// newHarness returns a harness on a fresh schema of the test database.
func newHarness(t *testing.T, streams ...string) *chaos.Harness {
	t.Helper()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	h, err := chaos.NewHarness(t.Context(), pgtest.URL(), schema, streams)
	require.NoError(t, err)
	t.Cleanup(h.Close) // before the schema is dropped
	return h
}

// spawn starts a worker and waits until it runs.
func spawn(t *testing.T, h *chaos.Harness, cfg chaos.WorkerConfig) *chaos.Proc {
	t.Helper()
	p, err := h.Spawn(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.Ready(ctx))
	return p
}

// progressTimeout bounds the wait for the pipeline to go on after a fault:
// the fault's leases expire (1 s), a cleaner takes the stream (its lease
// may have to expire too, 1 s) and resolves them; on a loaded machine with
// -race that can take a while, but not this long.
const progressTimeout = 60 * time.Second

// progress waits until the workers acknowledged n more commits than before
// the call: the pipeline made progress after a fault.
func progress(t *testing.T, h *chaos.Harness, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), progressTimeout)
	defer cancel()
	require.NoError(t, h.WaitAcks(ctx, h.Acks()+n), "no progress after the fault")
}

// finish stops the workers gracefully (each must exit 0: no data race, no
// leaked goroutine), resolves what they left, and verifies everything.
func finish(t *testing.T, h *chaos.Harness) *chaos.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, h.ShutdownAll(ctx))
	require.Empty(t, h.Unexpected())
	require.NoError(t, h.Drain(ctx))
	h.StopFollow()
	v, err := h.Verify(ctx, 0)
	require.NoError(t, err)
	t.Log(summary(h, v))
	require.NoError(t, v.Err())
	return v
}

// summary describes a run in a few lines.
func summary(h *chaos.Harness, v *chaos.Verdict) string {
	var b strings.Builder
	c := v.Ledger
	fmt.Fprintf(&b, "ledger: %d entries, %d committed (%d by their holders, recovered %v), %d gaps %v, %d leased\n",
		c.Entries, c.Committed, c.ByHolder, c.Recovered, c.Gaps, c.GapReasons, c.Leased)
	s := h.Stats()
	fmt.Fprintf(&b, "workers: %d processes; %d commits acknowledged; as last reported (a killed worker's last 0.5 s are missing): "+
		"%d leased, %d released, %d late commits refused, %d commits retried after an unknown outcome (%d of them committed), "+
		"%d left unknown, %d lease and %d commit errors\n",
		h.Procs(), h.Acks(), s.Leased, s.Released, s.Refused, s.Retried, s.RetriedCommitted, s.Unknown, s.LeaseErrors, s.CommitErrors)
	fmt.Fprintf(&b, "named leases: singleton held %d times, %d fenced writes (%d refused), %d history events checked (I8); %d side rows\n",
		s.SingletonHeld, v.FencedWrites, s.FenceRefused, v.LeaseEvents, v.SideRows)
	faults := h.Faults()
	kinds := make([]string, 0, len(faults))
	for k := range faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "fault: %-44s %d\n", k, faults[k])
	}
	return b.String()
}
