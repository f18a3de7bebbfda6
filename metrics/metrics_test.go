package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// bundle is one wired-up system on the memory backend.
type bundle struct {
	reader  *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
	m       *metrics.Metrics
	alerts  *metrics.Evaluator
	fired   *[]metrics.Alert
	dbClock *clock // the memory store's "database clock"
	store   *memory.Store
	barrier *barrier.Barrier
	leaser  *sequence.Leaser
	gaps    *gap.Gaps
	cleaner *cleanup.Service
}

const (
	stream = "orders"
	kind   = "invoice"
)

func setup(t *testing.T, opts ...sdkmetric.Option) *bundle {
	t.Helper()
	b := &bundle{
		reader:  sdkmetric.NewManualReader(),
		spans:   tracetest.NewSpanRecorder(),
		dbClock: &clock{t: time.Now().Add(-time.Hour).Truncate(time.Second)},
		fired:   new([]metrics.Alert),
	}
	mp := sdkmetric.NewMeterProvider(append(opts, sdkmetric.WithReader(b.reader))...)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	t.Cleanup(func() {
		require.NoError(t, mp.Shutdown(context.Background()))
		require.NoError(t, tp.Shutdown(context.Background()))
	})
	b.store = memory.New(&memory.Config{Now: b.dbClock.Now})
	var err error
	b.barrier, err = barrier.New(b.store, nil)
	require.NoError(t, err)
	require.NoError(t, b.barrier.Start(context.Background()))
	t.Cleanup(b.barrier.Stop)
	b.gaps, err = gap.New(b.store, nil)
	require.NoError(t, err)
	b.alerts, err = metrics.NewEvaluator(&metrics.EvaluatorConfig{
		MinSamples: 1,
		Sink:       func(a metrics.Alert) { *b.fired = append(*b.fired, a) },
	})
	require.NoError(t, err)
	b.m, err = metrics.New(&metrics.Config{
		MeterProvider: mp, TracerProvider: tp,
		Watermarks: b.barrier, Gaps: b.store, Alerts: b.alerts,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.m.Close()) })
	b.gaps, err = gap.New(b.store, &gap.Config{Observer: b.m.Gaps()})
	require.NoError(t, err)
	b.leaser, err = sequence.New(b.store, &sequence.Config{Barrier: b.barrier, Observer: b.m.Leaser()})
	require.NoError(t, err)
	pipeline, err := recovery.New(b.store, &recovery.Config{
		// op-5's tracker fails: give up at once, so its number becomes a
		// gap in the scripted cycle.
		MaxAttempts: 1,
		WorkTracker: recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
			switch e.OperationID {
			case "op-4":
				return []byte("half done"), true, nil
			case "op-5":
				return nil, false, errors.New("work tracker unreachable")
			}
			return nil, false, nil
		}),
	})
	require.NoError(t, err)
	b.cleaner, err = cleanup.New(b.store, &cleanup.Config{
		Observer: b.m.Cleanup(),
		Pipeline: pipeline,
		Hooks: &cleanup.HooksConfig{BestEffort: []cleanup.HookFunc{func(_ context.Context, e store.Entry) error {
			if e.OperationID == "op-5" {
				return errors.New("temp file busy")
			}
			return nil
		}}},
	})
	require.NoError(t, err)
	t.Cleanup(b.cleaner.Stop)
	return b
}

func (b *bundle) lease(t *testing.T, op string) *sequence.Lease {
	t.Helper()
	l, err := b.leaser.Lease(context.Background(), stream, &sequence.LeaseOpts{OperationID: op, Kind: kind})
	require.NoError(t, err)
	return l
}

// script runs the scenario every test of the instruments checks: leases,
// commits (one of them waiting at the barrier), an extension, a release,
// two expiries resolved by cleanup (one recovered, one a gap after a step
// failed), a gap fill, and one lease left in flight.
func (b *bundle) script(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	l1, l2, l3 := b.lease(t, "op-1"), b.lease(t, "op-2"), b.lease(t, "op-3")
	b.lease(t, "op-4")
	b.lease(t, "op-5")

	waiting := make(chan error, 1)
	go func() { waiting <- l2.Commit(ctx, []byte("two")) }() // waits for 1
	require.NoError(t, l2.Extend(ctx, 0))
	require.NoError(t, l1.Commit(ctx, []byte("one")))
	require.NoError(t, <-waiting)
	require.NoError(t, l3.Release(ctx))

	b.dbClock.Advance(time.Minute) // 4 and 5 expire
	res, err := b.cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Expired)
	b.cleaner.Stop() // lets the hooks run, op-5's failing one too

	require.NoError(t, b.gaps.Fill(ctx, stream, 3, []byte("three"),
		&gap.FillOpts{FilledBy: "operator", Policy: gap.FillReasons(store.ReasonReleased)}))
	require.Equal(t, int64(7), b.lease(t, "op-7").Number()) // 6 is the recovered work
}

func (b *bundle) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, b.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, metrics.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// enc renders an attribute set as "k=v,k=v", sorted by key.
func enc(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// points returns the values of a sum or gauge by attributes.
func points(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		require.True(t, d.IsMonotonic, m.Name)
		for _, p := range d.DataPoints {
			out[enc(p.Attributes)] = p.Value
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out[enc(p.Attributes)] = p.Value
		}
	default:
		t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
	}
	return out
}

// histogram returns the data points of a histogram by attributes.
func histogram(t *testing.T, m metricdata.Metrics) map[string]metricdata.HistogramDataPoint[float64] {
	t.Helper()
	d, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s: unexpected data %T", m.Name, m.Data)
	out := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, p := range d.DataPoints {
		out[enc(p.Attributes)] = p
	}
	return out
}

const sk = "kind=invoice,stream=orders"

// TestInstruments runs the script and checks every instrument's name, unit,
// attributes and values.
func TestInstruments(t *testing.T) {
	b := setup(t)
	b.script(t)
	nl := b.m.NamedLeases()
	ctx := context.Background()
	nl.Acquire(ctx, "leader", nil)
	nl.Acquire(ctx, "leader", &store.HeldError{Name: "app/leader"})
	nl.Acquire(ctx, "leader", errors.New("connection refused"))
	nl.Renew(ctx, "leader", nil)
	nl.Renew(ctx, "leader", nil)
	nl.Renew(ctx, "leader", errors.New("timeout"))
	nl.Lost(ctx, "leader", 90*time.Second)
	nl.Released(ctx, "leader", 30*time.Second)
	defer nl.Held("leader")()
	b.m.Cleanup().PendingHooks(store.HookStats{Pending: 3, Failing: 1})
	b.m.Cleanup().ExpiryShare(cleanup.ExpiryShare{Window: time.Minute, Expired: 820, HandedOut: 1851, TTL: 30 * time.Second})

	got := b.collect(t)

	units := map[string]string{
		metrics.NameLeaseGranted:           "{lease}",
		metrics.NameLeaseCommitted:         "{lease}",
		metrics.NameLeaseReleased:          "{lease}",
		metrics.NameLeaseExtended:          "{extension}",
		metrics.NameLeaseExpired:           "{lease}",
		metrics.NameLeaseOverrun:           "s",
		metrics.NameCommitWait:             "s",
		metrics.NameWatermarkLag:           "{entry}",
		metrics.NameRecoveryAttempts:       "{attempt}",
		metrics.NameCleanupCycleDuration:   "s",
		metrics.NameCleanupCycleExpired:    "{lease}",
		metrics.NameCleanupCascadeActive:   "{mode}",
		metrics.NameCleanupHookFailures:    "{failure}",
		metrics.NameCleanupHooksPending:    "{hook}",
		metrics.NameCleanupExpiredShare:    "1",
		metrics.NameGapOpen:                "{gap}",
		metrics.NameGapCreated:             "{gap}",
		metrics.NameGapFilled:              "{gap}",
		metrics.NameNamedLeaseAcquisitions: "{acquisition}",
		metrics.NameNamedLeaseRenewals:     "{renewal}",
		metrics.NameNamedLeaseLosses:       "{loss}",
		metrics.NameNamedLeaseHoldDuration: "s",
		metrics.NameNamedLeaseLongHeld:     "{lease}",
		metrics.NameAlertActive:            "{alert}",
	}
	var names []string
	for name, m := range got {
		names = append(names, name)
		require.Equal(t, units[name], m.Unit, "unit of %s", name)
		require.NotEmpty(t, m.Description, name)
	}
	var want []string
	for name := range units {
		want = append(want, name)
	}
	sort.Strings(names)
	sort.Strings(want)
	require.Equal(t, want, names, "every instrument reports, and no other")

	sums := func(name string) map[string]int64 { return points(t, got[name]) }
	require.Equal(t, map[string]int64{sk: 6}, sums(metrics.NameLeaseGranted))
	require.Equal(t, map[string]int64{sk: 2}, sums(metrics.NameLeaseCommitted))
	require.Equal(t, map[string]int64{sk: 1}, sums(metrics.NameLeaseReleased))
	require.Equal(t, map[string]int64{sk: 1}, sums(metrics.NameLeaseExtended))
	require.Equal(t, map[string]int64{
		"kind=invoice,method=gap,stream=orders":          1,
		"kind=invoice,method=partial-work,stream=orders": 1,
	}, sums(metrics.NameLeaseExpired))
	require.Equal(t, map[string]int64{
		"kind=invoice,method=partial-work,result=success,stream=orders": 1,
		"kind=invoice,method=partial-work,result=failure,stream=orders": 1,
		"kind=invoice,method=gap,result=success,stream=orders":          1,
	}, sums(metrics.NameRecoveryAttempts))
	require.Equal(t, map[string]int64{sk: 1}, sums(metrics.NameCleanupHookFailures))
	require.Equal(t, map[string]int64{"": 3}, sums(metrics.NameCleanupHooksPending))
	share, ok := got[metrics.NameCleanupExpiredShare].Data.(metricdata.Gauge[float64])
	require.True(t, ok)
	require.Len(t, share.DataPoints, 1)
	require.InDelta(t, 820.0/1851, share.DataPoints[0].Value, 1e-12)
	require.Equal(t, map[string]int64{
		"kind=invoice,reason=released,stream=orders":        1,
		"kind=invoice,reason=recovery-failed,stream=orders": 1, // op-5: its tracker failed, the work was given up
		"kind=invoice,reason=recovered,stream=orders":       1,
	}, sums(metrics.NameGapCreated))
	require.Equal(t, map[string]int64{"kind=invoice,reason=released,stream=orders": 1}, sums(metrics.NameGapFilled))
	require.Equal(t, map[string]int64{
		"kind=leader,result=acquired": 1, "kind=leader,result=held": 1, "kind=leader,result=error": 1,
		"kind=cleanup,result=acquired": 1, // the cleaner's own stream lease (seqlease/cleanup/orders)
	}, sums(metrics.NameNamedLeaseAcquisitions))
	require.Equal(t, map[string]int64{"kind=leader,result=ok": 2, "kind=leader,result=error": 1}, sums(metrics.NameNamedLeaseRenewals))
	require.Equal(t, map[string]int64{"kind=leader": 1}, sums(metrics.NameNamedLeaseLosses))

	// Gauges.
	require.Equal(t, map[string]int64{"stream=orders": 1}, sums(metrics.NameWatermarkLag), "leased 7, watermark 6")
	require.Equal(t, map[string]int64{"stream=orders": 2}, sums(metrics.NameGapOpen), "4 (recovered) and 5 (expired); 3 was filled")
	require.Equal(t, map[string]int64{"": 2}, sums(metrics.NameCleanupCycleExpired))
	require.Equal(t, map[string]int64{"": 0}, sums(metrics.NameCleanupCascadeActive))
	require.Equal(t, map[string]int64{"kind=leader": 0, "kind=cleanup": 0}, sums(metrics.NameNamedLeaseLongHeld), "held, but not for an hour")
	require.Equal(t, map[string]int64{
		"alert=ExpirationRate,level=warning":      1, // 2 of 6
		"alert=MassExpiry,level=critical":         0,
		"alert=RecoveryFailureRate,level=warning": 1, // 1 of 3
		"alert=OpenGaps,level=warning":            0,
		"alert=HistoryLost,level=critical":        0,
		"alert=Parked,level=warning":              0, // no store counts parked entries here
		"alert=NamedLeaseTimeouts,level=warning":  0,
		"alert=NamedLeaseLosses,level=warning":    1, // nl.Lost above
		"alert=NamedLeaseLongHeld,level=warning":  0, // no Monitor checked
	}, sums(metrics.NameAlertActive))

	// Histograms.
	overrun := histogram(t, got[metrics.NameLeaseOverrun])
	require.Len(t, overrun, 1)
	p := overrun[sk]
	require.Equal(t, uint64(2), p.Count)
	// The leases expired 30 s after being leased and the cleaner found them
	// a minute after the leasing, by the database clock: each was 30 s
	// overdue, though the local clock runs an hour ahead of the database's.
	require.InDelta(t, 2*30.0, p.Sum, 1)
	wait := histogram(t, got[metrics.NameCommitWait])
	require.Equal(t, uint64(2), wait[sk].Count)
	cycles := histogram(t, got[metrics.NameCleanupCycleDuration])
	require.Equal(t, uint64(1), cycles["result=ok"].Count)
	hold := histogram(t, got[metrics.NameNamedLeaseHoldDuration])
	require.Equal(t, 90.0, hold["kind=leader,result=lost"].Sum)
	require.Equal(t, 30.0, hold["kind=leader,result=released"].Sum)
	require.Equal(t, uint64(1), hold["kind=cleanup,result=released"].Count, "the cleaner released its stream lease after the walk")

	// One instrument in full, with the SDK's own assertion.
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        metrics.NameLeaseReleased,
		Description: got[metrics.NameLeaseReleased].Description,
		Unit:        "{lease}",
		Data: metricdata.Sum[int64]{
			Temporality: metricdata.CumulativeTemporality,
			IsMonotonic: true,
			DataPoints: []metricdata.DataPoint[int64]{{
				Attributes: attribute.NewSet(metrics.KeyStream.String(stream), metrics.KeyKind.String(kind)),
				Value:      1,
			}},
		},
	}, got[metrics.NameLeaseReleased], metricdatatest.IgnoreTimestamp())

	// Only low-cardinality attribute keys, never a number or an id.
	allowed := map[attribute.Key]bool{metrics.KeyStream: true, metrics.KeyKind: true, metrics.KeyMethod: true,
		metrics.KeyResult: true, metrics.KeyReason: true, metrics.KeyAlert: true, metrics.KeyLevel: true}
	for name, m := range got {
		for _, set := range attributeSets(m) {
			for _, kv := range set.ToSlice() {
				require.True(t, allowed[kv.Key], "%s has attribute %s", name, kv.Key)
				require.NotContains(t, kv.Value.String(), "op-", "%s carries an operation id", name)
			}
		}
	}
}

func attributeSets(m metricdata.Metrics) []attribute.Set {
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	}
	return out
}

// TestSpans checks the spans of the script: lease, commit with the barrier
// wait as an event, one cleanup cycle with a recovery span per expired lease.
func TestSpans(t *testing.T) {
	b := setup(t)
	b.script(t)
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range b.spans.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	require.Len(t, byName["seqlease.lease"], 6)
	require.Len(t, byName["seqlease.commit"], 2)
	for _, s := range byName["seqlease.commit"] {
		require.Len(t, s.Events(), 1)
		require.Equal(t, "seqlease.barrier.wait", s.Events()[0].Name)
		require.Contains(t, attrs(s.Attributes()), "seqlease.ordered=true")
	}
	require.Len(t, byName["seqlease.cleanup.cycle"], 1)
	cycle := byName["seqlease.cleanup.cycle"][0]
	require.Contains(t, attrs(cycle.Attributes()), "seqlease.expired=2")
	recovers := byName["seqlease.recover"]
	require.Len(t, recovers, 2)
	for _, s := range recovers {
		require.Equal(t, cycle.SpanContext().SpanID(), s.Parent().SpanID(), "recoveries are children of their cycle")
		a := attrs(s.Attributes())
		switch {
		case strings.Contains(a, "seqlease.number=4"):
			require.Contains(t, a, "seqlease.method=partial-work")
			require.Contains(t, a, "seqlease.new_number=6")
			require.Contains(t, a, "seqlease.operation_id=op-4")
			require.Len(t, s.Events(), 1)
		case strings.Contains(a, "seqlease.number=5"):
			require.Contains(t, a, "seqlease.method=gap")
			require.Len(t, s.Events(), 2, "partial-work failed, gap succeeded")
			require.Contains(t, attrs(s.Events()[0].Attributes), "seqlease.result=failure")
		default:
			t.Fatalf("unexpected recovery span %s", a)
		}
	}
	for _, s := range b.spans.Ended() {
		require.True(t, s.EndTime().After(s.StartTime()) || s.EndTime().Equal(s.StartTime()))
	}
}

func attrs(kvs []attribute.KeyValue) string {
	return enc(attribute.NewSet(kvs...))
}

// TestGapBatchSpans checks that entries declared gaps in one batch (no
// tracker: the pipeline is the Gap step alone) get a span and a step each.
func TestGapBatchSpans(t *testing.T) {
	b := setup(t)
	cl, err := cleanup.New(b.store, &cleanup.Config{Observer: b.m.Cleanup()})
	require.NoError(t, err)
	t.Cleanup(cl.Stop)
	for i := range 3 {
		b.lease(t, fmt.Sprint("op-", i+1))
	}
	b.dbClock.Advance(time.Minute)
	_, err = cl.RunOnce(context.Background())
	require.NoError(t, err)
	n := 0
	for _, s := range b.spans.Ended() {
		if s.Name() == "seqlease.recover" {
			n++
			require.Len(t, s.Events(), 1)
		}
	}
	require.Equal(t, 3, n)
	got := b.collect(t)
	require.Equal(t, map[string]int64{"kind=invoice,method=gap,result=success,stream=orders": 3},
		points(t, got[metrics.NameRecoveryAttempts]))
	require.Equal(t, map[string]int64{"kind=invoice,method=gap,stream=orders": 3},
		points(t, got[metrics.NameLeaseExpired]))
}

// TestCascadeGauge checks that cascade mode shows while it lasts.
func TestCascadeGauge(t *testing.T) {
	b := setup(t)
	c := b.m.Cleanup()
	c.Cascade(true)
	require.Equal(t, map[string]int64{"": 1}, points(t, b.collect(t)[metrics.NameCleanupCascadeActive]))
	c.Cascade(false)
	require.Equal(t, map[string]int64{"": 0}, points(t, b.collect(t)[metrics.NameCleanupCascadeActive]))
}

// TestMassExpiryFollowsFullScans: the mass expiry alert and the expired
// gauge follow full scans only. Re-runs of deferred streams in between,
// which find few expired leases, neither resolve the alert nor drop the
// gauge, so a backlog that lasts fires once, not once per scan.
func TestMassExpiryFollowsFullScans(t *testing.T) {
	b := setup(t)
	c := b.m.Cleanup()
	expired := func() int64 { return points(t, b.collect(t)[metrics.NameCleanupCycleExpired])[""] }
	massExpiry := func() []metrics.Alert {
		var out []metrics.Alert
		for _, a := range *b.fired {
			if a.Name == metrics.AlertMassExpiry {
				out = append(out, a)
			}
		}
		return out
	}
	for range 3 {
		c.Cycle(cleanup.CycleResult{Full: true, Expired: 50}, nil)
		for range 5 {
			c.Cycle(cleanup.CycleResult{Expired: 1}, nil) // re-runs of a deferred stream
			require.Equal(t, int64(50), expired())
		}
	}
	require.Len(t, massExpiry(), 1, "one alert while the backlog lasts")
	require.True(t, massExpiry()[0].Firing)
	c.Cycle(cleanup.CycleResult{Full: true}, nil)
	require.Zero(t, expired())
	require.Len(t, massExpiry(), 2)
	require.False(t, massExpiry()[1].Firing, "the next full scan that finds none resolves it")
	cycles := histogram(t, b.collect(t)[metrics.NameCleanupCycleDuration])
	require.Equal(t, uint64(3+15+1), cycles["result=ok"].Count, "every cycle is timed, re-runs too")
}

// TestMaxStreams checks that streams beyond the limit share one series and
// get no gauges.
func TestMaxStreams(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, MaxStreams: 2})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	ctx := context.Background()
	for _, s := range []string{"a", "b", "c", "d"} {
		_, end := m.Leaser().StartLease(ctx, s, "k", 1)
		end(1, nil)
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name == metrics.NameLeaseGranted {
				require.Equal(t, map[string]int64{"kind=k,stream=a": 1, "kind=k,stream=b": 1, "kind=k,stream=_other": 2}, points(t, mt))
				return
			}
		}
	}
	t.Fatal("no granted leases")
}

// TestGapCountInterval checks that the open gap count is reused within the
// interval and read again after it.
func TestGapCountInterval(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	clk := &clock{t: time.Unix(1e9, 0)}
	var mu sync.Mutex
	calls, open := 0, int64(3)
	counter := countFunc(func(context.Context, string) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return open, nil
	})
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Gaps: counter, GapCountInterval: time.Minute, Now: clk.Now})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	ctx := context.Background()
	m.Leaser().Released(ctx, "s", "k", nil) // touches the stream
	gaps := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		for _, mt := range rm.ScopeMetrics[0].Metrics {
			if mt.Name == metrics.NameGapOpen {
				return points(t, mt)
			}
		}
		return nil
	}
	require.Equal(t, map[string]int64{"stream=s": 3}, gaps())
	mu.Lock()
	open = 5
	mu.Unlock()
	clk.Advance(30 * time.Second)
	require.Equal(t, map[string]int64{"stream=s": 3}, gaps(), "reused within the interval")
	clk.Advance(30 * time.Second)
	require.Equal(t, map[string]int64{"stream=s": 5}, gaps())
	require.Equal(t, 2, calls)
}

type countFunc func(ctx context.Context, stream string) (int64, error)

func (f countFunc) CountGaps(ctx context.Context, stream string) (int64, error) {
	return f(ctx, stream)
}

// TestNilProviders: a Config without providers (nil, or zero fields) uses
// the global MeterProvider and TracerProvider: the instruments record into
// the one otel.SetMeterProvider installed, the spans go to the global
// tracer. Not parallel: it sets the globals, and restores them.
func TestNilProviders(t *testing.T) {
	prevMP, prevTP := otel.GetMeterProvider(), otel.GetTracerProvider()
	t.Cleanup(func() {
		otel.SetMeterProvider(prevMP)
		otel.SetTracerProvider(prevTP)
	})
	for _, cfg := range []*metrics.Config{nil, {}} {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		otel.SetMeterProvider(mp)
		otel.SetTracerProvider(tp)

		m, err := metrics.New(cfg)
		require.NoError(t, err)
		ctx := context.Background()
		lctx, end := m.Leaser().StartLease(ctx, "s", "k", 2)
		end(1, nil)
		_, endErr := m.Leaser().StartLease(ctx, "s", "k", 1)
		endErr(0, errors.New("down"))
		cctx, endCommit := m.Leaser().StartCommit(lctx, "s", "k", 1, true)
		m.Leaser().CommitReady(cctx, "s", "k", time.Millisecond)
		endCommit(nil)
		m.Leaser().Released(ctx, "s", "k", nil)
		m.Leaser().Extended(ctx, "s", "k", nil)
		c := m.Cleanup()
		yctx, endCycle := c.StartCycle(ctx)
		e := store.Entry{Stream: "s", Number: 1, Kind: "k", ExpiresAt: time.Now()}
		rctx, endRec := c.StartRecovery(yctx, e)
		c.Step(rctx, e, recovery.MethodGap, recovery.Result{Recovered: true}, nil)
		endRec(recovery.Result{Recovered: true, Method: recovery.MethodGap}, nil)
		c.Handled(e, time.Now(), recovery.Result{Recovered: true, Method: recovery.MethodGap}, nil)
		c.HookFailed(e, errors.New("x"))
		c.Cascade(true)
		endCycle(cleanup.CycleResult{Full: true, Expired: 1}, nil)
		c.Cycle(cleanup.CycleResult{Full: true, Expired: 1}, nil)
		m.Gaps().Filled(ctx, gap.Gap{Stream: "s"})
		m.NamedLeases().Acquire(ctx, "k", nil)

		b := &bundle{reader: reader}
		got := b.collect(t)
		require.Equal(t, map[string]int64{"kind=k,stream=s": 2}, points(t, got[metrics.NameLeaseGranted]), "cfg %v", cfg)
		require.Equal(t, map[string]int64{"kind=k,stream=s": 1}, points(t, got[metrics.NameLeaseCommitted]))
		require.Equal(t, map[string]int64{"kind=k,method=gap,stream=s": 1}, points(t, got[metrics.NameLeaseExpired]))
		require.Equal(t, map[string]int64{"": 1}, points(t, got[metrics.NameCleanupCascadeActive]), "the gauges' callback is registered there too")
		require.Equal(t, map[string]int64{"kind=k,result=acquired": 1}, points(t, got[metrics.NameNamedLeaseAcquisitions]))
		var names []string
		for _, s := range spans.Ended() {
			names = append(names, s.Name())
		}
		require.ElementsMatch(t, []string{"seqlease.lease", "seqlease.lease", "seqlease.commit", "seqlease.recover", "seqlease.cleanup.cycle"}, names)

		require.NoError(t, m.Close())
		require.NoError(t, m.Close(), "Close is safe twice")
		require.NoError(t, mp.Shutdown(ctx))
		require.NoError(t, tp.Shutdown(ctx))
	}
}

// TestConfigErrors checks that bad configuration names its field.
func TestConfigErrors(t *testing.T) {
	_, err := metrics.New(&metrics.Config{MaxStreams: -1})
	require.ErrorContains(t, err, "MaxStreams")
	_, err = metrics.New(&metrics.Config{GapCountInterval: -1})
	require.ErrorContains(t, err, "GapCountInterval")
	_, err = metrics.New(&metrics.Config{QueryTimeout: -1})
	require.ErrorContains(t, err, "QueryTimeout")
	_, err = metrics.New(&metrics.Config{LongHeldAfter: -1})
	require.ErrorContains(t, err, "LongHeldAfter")
	_, err = metrics.NewEvaluator(&metrics.EvaluatorConfig{Window: -1})
	require.ErrorContains(t, err, "Window")
	_, err = metrics.NewEvaluator(&metrics.EvaluatorConfig{Thresholds: metrics.Thresholds{ExpirationRate: 2}})
	require.ErrorContains(t, err, "ExpirationRate")
}

// TestNamedLeaseLongHeld: the long-held gauge counts, per kind, the
// holdings in progress older than Config.LongHeldAfter, from the observer's
// own bookkeeping (no store is asked), and falls back to 0.
func TestNamedLeaseLongHeld(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, LongHeldAfter: 10 * time.Minute, Now: clk.Now})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	b := &bundle{reader: reader}
	gauge := func() map[string]int64 {
		t.Helper()
		got := b.collect(t)[metrics.NameNamedLeaseLongHeld]
		require.Equal(t, "{lease}", got.Unit)
		require.NotEmpty(t, got.Description)
		return points(t, got)
	}
	nl := m.NamedLeases()
	endLeader := nl.Held("leader")
	endInbox := nl.Held("inbox")
	clk.Advance(5 * time.Minute)
	endMigration := nl.Held("migration")
	require.Equal(t, map[string]int64{"kind=leader": 0, "kind=inbox": 0, "kind=migration": 0}, gauge())
	clk.Advance(5 * time.Minute) // leader and inbox are 10 minutes old
	require.Equal(t, map[string]int64{"kind=leader": 1, "kind=inbox": 1, "kind=migration": 0}, gauge())
	endInbox()
	endInbox() // safe twice
	late := nl.Held("leader")
	clk.Advance(5 * time.Minute)
	require.Equal(t, map[string]int64{"kind=leader": 1, "kind=inbox": 0, "kind=migration": 1}, gauge())
	endLeader()
	endMigration()
	late()
	require.Equal(t, map[string]int64{"kind=leader": 0, "kind=inbox": 0, "kind=migration": 0}, gauge())
}
