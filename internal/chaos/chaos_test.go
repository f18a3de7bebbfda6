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
// the call: the load got going.
func progress(t *testing.T, h *chaos.Harness, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), progressTimeout)
	defer cancel()
	require.NoError(t, h.WaitAcks(ctx, h.Acks()+n), "no progress")
}

// resolveBound is how long past its expiry a lease of the load may stay
// unresolved while workers run (chaos.WorkerConfig.ResolveBound explains
// it): every fault test's workers, the holders of TestPausedHolder
// included, have load()'s TTL, cleanup interval and stream-lease TTL.
var resolveBound = load().ResolveBound()

// afterFault checks the pipeline after a fault, while the load goes on: it
// must make progress (n more commits acknowledged), and then the auditor
// must find nothing wrong: I1, I2, I4, I5 for what the reader has read so
// far, I6 for the commits acknowledged so far and for the leases that
// expired (none unresolved more than resolveBound past its expiry), the
// fenced writes, and I8 on the named-lease history so far.
//
// On one stream, progress means that the leases the fault left were
// resolved (an ordered commit waits for every number before it), so the
// age bound has little left to judge. The tests therefore run their load on
// two streams where they can: progress may come from either, and a stream
// whose expired leases are resolved late, or never, is caught by the age
// bound of the audits after the following faults, and by finish.
//
// outage is how long no cleaner could run (the server was down, or every
// worker dead), which the bound does not cover: it is added to it. It is 0
// for the faults that leave a cleaner running.
func afterFault(t *testing.T, h *chaos.Harness, fault string, n int64, outage time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), progressTimeout)
	defer cancel()
	require.NoError(t, h.WaitAcks(ctx, h.Acks()+n), "no progress after the fault %q", fault)
	v := auditLoad(ctx, t, h, resolveBound+outage)
	require.NoError(t, v.Err(), "after the fault %q", fault)
}

// auditLoad audits the streams with h.Audit while the workers run, reading
// again after a failure to read (the harness's connections may have died
// with a restarted server) until ctx ends.
func auditLoad(ctx context.Context, t *testing.T, h *chaos.Harness, maxUnresolved time.Duration) *chaos.Verdict {
	t.Helper()
	for {
		v, err := h.Audit(ctx, maxUnresolved)
		if err == nil {
			return v
		}
		require.NoError(t, ctx.Err(), "the audit could not read: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// finish waits until every stream made progress since the last fault (n
// more commits acknowledged on each: a stream that nobody cleans stalls
// while another goes on), stops the workers gracefully (each must exit 0:
// no data race, no leaked goroutine), resolves what they left, and verifies
// everything. The age of unresolved leases was judged by the audits of
// afterFault, while the load ran; at rest, once Drain returned, no entry is
// unresolved, so Verify has no age left to judge and gets no bound.
func finish(t *testing.T, h *chaos.Harness, n int64) *chaos.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pctx, pcancel := context.WithTimeout(ctx, progressTimeout)
	defer pcancel()
	for _, stream := range h.Streams {
		want := h.AcksOf(stream) + n
		for h.AcksOf(stream) < want {
			require.NoError(t, pctx.Err(), "no progress on %s at the end", stream)
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.NoError(t, h.ShutdownAll(ctx))
	require.Empty(t, h.Unexpected())
	require.NoError(t, h.Drain(ctx))
	h.StopFollow()
	v, err := h.Verify(ctx, 0)
	require.NoError(t, err)
	t.Log(summary(h, v))
	require.NoError(t, v.Err())
	require.Zero(t, v.Ledger.Leased, "drained, yet leased entries are left")
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
		"%d left unknown, %d lease and %d commit errors; longest cleanup cycle %v\n",
		h.Procs(), h.Acks(), s.Leased, s.Released, s.Refused, s.Retried, s.RetriedCommitted, s.Unknown, s.LeaseErrors, s.CommitErrors,
		s.LongestCycle.Round(time.Millisecond))
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
