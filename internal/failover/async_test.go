//go:build failover

package failover_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

const (
	asyncSchema = "failover_async"
	asyncName   = "async-leader" // the named lease whose fences are watched
	asyncTTL    = 10 * time.Second
	asyncPause  = 20 * time.Millisecond
	asyncWarmup = 50  // commits per stream acknowledged before the standby is cut off
	asyncLost   = 100 // commits acknowledged while it is cut off: the standby never gets them
	asyncWait   = 90 * time.Second
)

var asyncStreams = []string{"async-a", "async-b"}

// asyncLedger is what the workers and the holder of the named lease saw.
type asyncLedger struct {
	mu     sync.Mutex
	leased map[string]map[int64]bool   // numbers handed out
	dups   []string                    // numbers handed out twice
	acked  map[string]map[int64][]byte // commits acknowledged
	count  int                         // acknowledgements in all
	lost   map[string]error            // the first ErrHistoryLost of each stream (and of the name)
	fences []int64                     // fences granted, in order
	errs   map[string]int
	notify chan struct{} // a tick at every event, for the test's waits
}

func (g *asyncLedger) event() {
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

func (g *asyncLedger) leaseOf(stream string, n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leased[stream][n] {
		g.dups = append(g.dups, fmt.Sprintf("%s #%d", stream, n))
	}
	g.leased[stream][n] = true
}

func (g *asyncLedger) ack(stream string, n int64, payload []byte) {
	g.mu.Lock()
	g.acked[stream][n] = payload
	g.count++
	g.mu.Unlock()
	g.event()
}

func (g *asyncLedger) fail(op, key string, err error) {
	g.mu.Lock()
	if errors.Is(err, store.ErrHistoryLost) {
		if _, ok := g.lost[key]; !ok {
			g.lost[key] = err
		}
	}
	g.errs[op+": "+kindOf(err)]++
	g.mu.Unlock()
	g.event()
}

func (g *asyncLedger) acks() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.count
}

// until waits for cond, checked at every event of g, for at most d.
func (g *asyncLedger) until(d time.Duration, cond func() bool) bool {
	deadline := time.After(d)
	for !cond() {
		select {
		case <-g.notify:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			return cond()
		}
	}
	return true
}

// asyncWork leases and completes numbers of stream until ctx ends. A
// Complete that fails is retried for a while (a retry tells whether the
// first took effect), then the lease is left.
func asyncWork(ctx context.Context, g *asyncLedger, l *sequence.Leaser, stream string) {
	sleep := func() {
		select {
		case <-ctx.Done():
		case <-time.After(asyncPause):
		}
	}
	for i := 0; ctx.Err() == nil; i++ {
		x, err := l.Lease(ctx, stream, &sequence.LeaseOpts{TTL: asyncTTL})
		if err != nil {
			if ctx.Err() == nil {
				g.fail("lease", stream, err)
				sleep()
			}
			continue
		}
		g.leaseOf(stream, x.Number())
		payload := fmt.Appendf(nil, "%s/%d", stream, i)
		giveUp := time.Now().Add(asyncTTL)
		for ctx.Err() == nil && time.Now().Before(giveUp) {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err = x.Complete(cctx, payload)
			cancel()
			if err == nil {
				g.ack(stream, x.Number(), payload)
				break
			}
			if ctx.Err() != nil {
				break
			}
			g.fail("complete", stream, err)
			if errors.Is(err, sequence.ErrExpired) || errors.Is(err, sequence.ErrGap) || errors.Is(err, sequence.ErrReleased) ||
				errors.Is(err, sequence.ErrTokenMismatch) || errors.Is(err, store.ErrNotFound) {
				break
			}
			sleep()
		}
	}
}

// asyncHold acquires and releases the named lease in a loop, recording each
// fence granted.
func asyncHold(ctx context.Context, g *asyncLedger, m *lease.Manager) {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := m.TryAcquire(actx, asyncName, &lease.AcquireOpts{TTL: asyncTTL})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				g.fail("acquire", asyncName, err)
			}
		} else {
			g.mu.Lock()
			g.fences = append(g.fences, l.Fence())
			g.mu.Unlock()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = l.Release(rctx) // a lost release leaves the name to its expiry
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(asyncPause):
		}
	}
}

// walsenders lists the primary's WAL sender processes: the children of its
// postmaster whose command line (PostgreSQL's process title) names one.
func walsenders(t *testing.T, n node) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dataDir, "postmaster.pid"))
	require.NoError(t, err)
	var pm int
	_, err = fmt.Sscan(string(b), &pm)
	require.NoError(t, err)
	var out []int
	for _, c := range children(t, pm) {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
		if err == nil && strings.Contains(string(cmd), "walsender") {
			out = append(out, c)
		}
	}
	return out
}

// TestFailoverAsync runs workers on two streams and a holder of a named
// lease through an asynchronously replicated cluster, cuts the standby off
// (SIGSTOP of the primary's WAL senders) while the primary goes on
// acknowledging commits, kills the primary and lets Patroni promote the
// standby, which never received them. It checks that the Store notices the
// lost history: every stream's leases, and the name's acquires, fail with
// store.ErrHistoryLost; no number is handed out twice and no fence
// repeats; the HistoryLost alert fires. It reports how many acknowledged
// commits the failover lost.
func TestFailoverAsync(t *testing.T) {
	url, ns := nodes(t)
	ctx := t.Context()

	pool := migratedPool(t, url, asyncSchema, 16)
	var syncNames string
	require.NoError(t, pool.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&syncNames))
	require.Empty(t, syncNames, "the cluster replicates synchronously: run under SEQLEASE_PATRONI_ASYNC=1 scripts/with-patroni")

	primary := -1
	for i, n := range ns {
		if ok, err := writable(ctx, n.port); err == nil && ok {
			primary = i
		}
	}
	require.GreaterOrEqual(t, primary, 0, "no node accepts writes")
	standby := (primary + 1) % len(ns)
	t.Logf("primary: node%d (port %d); standby: node%d (port %d)", primary+1, ns[primary].port, standby+1, ns[standby].port)

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	ev, err := metrics.NewEvaluator(nil)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := postgres.New(pool, &postgres.Config{Schema: asyncSchema, Logger: logger})
	require.NoError(t, err)
	met, err := metrics.New(&metrics.Config{MeterProvider: mp, Gaps: s, Alerts: ev})
	require.NoError(t, err)
	defer func() { require.NoError(t, met.Close()) }()
	l, err := sequence.New(s, &sequence.Config{Owner: "async", UnorderedOnly: true})
	require.NoError(t, err)
	lm, err := lease.New(s, &lease.Config{Owner: "async-holder"})
	require.NoError(t, err)
	defer lm.Stop()

	g := &asyncLedger{leased: map[string]map[int64]bool{}, acked: map[string]map[int64][]byte{},
		lost: map[string]error{}, errs: map[string]int{}, notify: make(chan struct{}, 1)}
	for _, st := range asyncStreams {
		g.leased[st], g.acked[st] = map[int64]bool{}, map[int64][]byte{}
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, st := range asyncStreams {
		for range 2 {
			wg.Go(func() { asyncWork(loadCtx, g, l, st) })
		}
	}
	wg.Go(func() { asyncHold(loadCtx, g, lm) })
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopLoad()
			wg.Wait()
		}
	}
	defer stop()

	require.True(t, g.until(time.Minute, func() bool { return g.acks() >= asyncWarmup*len(asyncStreams) }),
		"fewer than %d commits within a minute", asyncWarmup*len(asyncStreams))

	// Cut the standby off: it receives no more WAL, and the primary, which
	// waits for no standby, goes on acknowledging.
	var senders []int
	require.True(t, g.until(30*time.Second, func() bool { senders = walsenders(t, ns[primary]); return len(senders) > 0 }),
		"no WAL sender on the primary")
	for _, p := range senders {
		require.NoError(t, syscall.Kill(p, syscall.SIGSTOP), "stop WAL sender %d", p)
	}
	g.mu.Lock()
	cutAt, fencesAtCut := g.count, len(g.fences)
	g.mu.Unlock()
	t.Logf("WAL senders %v stopped after %d acknowledged commits and %d fences", senders, cutAt, fencesAtCut)
	require.True(t, g.until(time.Minute, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.count >= cutAt+asyncLost && len(g.fences) > fencesAtCut
	}), "fewer than %d commits (or no fence) within a minute of the cut", asyncLost)

	kill(t, ns[primary])
	killedAt := time.Now()
	g.mu.Lock()
	before := g.count
	g.mu.Unlock()
	t.Logf("killed node%d after %d acknowledged commits (%d since the cut)", primary+1, before, before-cutAt)

	// Every stream, and the name, must be refused once the standby serves.
	detected := g.until(asyncWait, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, st := range asyncStreams {
			if g.lost[st] == nil {
				return false
			}
		}
		return g.lost[asyncName] != nil
	})
	detectedAt := time.Now()
	promoted, _ := writable(ctx, ns[standby].port)
	// A while more of refused leases: none may hand out a number.
	time.Sleep(time.Second)
	stop()

	g.mu.Lock()
	t.Logf("failed calls: %v", g.errs)
	for k, err := range g.lost {
		t.Logf("%s: %v", k, err)
	}
	lostErrs := maps(g.lost)
	fences := append([]int64(nil), g.fences...)
	dups := append([]string(nil), g.dups...)
	acked := g.acked
	g.mu.Unlock()
	require.True(t, detected, "not every stream and name was refused within %v of the kill: %v", asyncWait, lostErrs)
	require.True(t, promoted, "node%d does not accept writes", standby+1)
	t.Logf("kill -> every stream and the name refused: %v", detectedAt.Sub(killedAt).Round(time.Millisecond))
	require.Empty(t, dups, "numbers handed out twice")
	for i := 1; i < len(fences); i++ {
		require.Greater(t, fences[i], fences[i-1], "fence %d after %d: a fence repeated or went back", fences[i], fences[i-1])
	}
	for _, st := range asyncStreams {
		var lost *store.HistoryLostError
		require.ErrorAs(t, lostErrs[st], &lost)
		require.Equal(t, st, lost.Stream)
	}

	// The metric and the alert.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	counted := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == metrics.NameHistoryLost {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					for _, kv := range dp.Attributes.ToSlice() {
						counted[string(kv.Key)+"="+kv.Value.AsString()] = dp.Value
					}
				}
			}
		}
	}
	t.Logf("%s: %v", metrics.NameHistoryLost, counted)
	for _, st := range asyncStreams {
		require.Positive(t, counted["stream="+st], "no lost history counted for %s", st)
	}
	firing := false
	for _, a := range ev.Alerts() {
		if a.Name == metrics.AlertHistoryLost {
			firing = a.Firing
			t.Logf("alert %s firing=%v: %s", a.Name, a.Firing, a.Message)
		}
	}
	require.True(t, firing, "the HistoryLost alert")

	// What asynchronous replication lost: acknowledged commits that are not
	// on the new primary (or are there with other content).
	total, missing := 0, 0
	for _, st := range asyncStreams {
		got := map[int64][]byte{}
		for after := int64(0); ; {
			es, err := s.Read(ctx, st, after, 0)
			require.NoError(t, err)
			if len(es) == 0 {
				break
			}
			for _, e := range es {
				if e.State == store.Committed {
					got[e.Number] = e.Payload
				}
			}
			after = es[len(es)-1].Number
		}
		lostHere := 0
		for n, p := range acked[st] {
			if string(got[n]) != string(p) {
				lostHere++
			}
		}
		t.Logf("%s: %d acknowledged commits, %d of them lost by the failover", st, len(acked[st]), lostHere)
		total += len(acked[st])
		missing += lostHere
		require.Positive(t, lostHere, "%s: the cut-off standby lost nothing: the test did not make it lag", st)
	}
	t.Logf("acknowledged commits lost by the asynchronous failover: %d of %d", missing, total)

	// The operator accepts the new primary's history: leases go on.
	for _, st := range asyncStreams {
		require.NoError(t, s.AcceptHistory(st))
		x, err := l.Lease(ctx, st, &sequence.LeaseOpts{TTL: asyncTTL})
		require.NoError(t, err, "%s after AcceptHistory", st)
		require.NoError(t, x.Release(ctx))
	}
}

// maps copies m.
func maps[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
