package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// TestPrometheusNamesAreDocumented feeds every instrument once through the
// OpenTelemetry Prometheus exporter and checks the names it serves against
// docs/operations.md and docs/grafana-dashboard.json: every seqlease_ name
// they use is served, and every served family is documented and has a
// panel. (The exporter
// lives in this module, not the library's, so the library's go.mod stays
// lean.)
func TestPrometheusNamesAreDocumented(t *testing.T) {
	tm, err := newTelemetry()
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.shutdown(context.Background())) }()
	ctx := context.Background()
	st := memory.New(nil)
	b, err := barrier.New(st, nil)
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	defer b.Stop()
	alerts, err := metrics.NewEvaluator(&metrics.EvaluatorConfig{Sink: func(metrics.Alert) {}})
	require.NoError(t, err)
	m, err := metrics.New(&metrics.Config{MeterProvider: tm.provider, Watermarks: b, Gaps: st, Alerts: alerts, LongHeldAfter: time.Nanosecond, Checkpoints: st, Listen: quietListeners{}, History: oneLoss{}, Parked: st})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()

	const stream, kind = "s", "k"
	_, err = st.Lease(ctx, stream, []store.LeaseRequest{{TTL: time.Minute}}, nil)
	require.NoError(t, err)
	require.NoError(t, st.SaveCheckpoint(ctx, readerName, stream, 0, nil)) // a reader's lag
	lo := m.Leaser()
	_, end := lo.StartLease(ctx, stream, kind, 1)
	end(1, nil)
	_, endCommit := lo.StartCommit(ctx, stream, kind, 1, true)
	lo.CommitReady(ctx, stream, kind, time.Millisecond)
	endCommit(nil)
	lo.Released(ctx, stream, kind, nil)
	lo.Extended(ctx, stream, kind, nil)
	co := m.Cleanup()
	e := store.Entry{Stream: stream, Number: 1, Kind: kind, ExpiresAt: time.Now()}
	co.Step(ctx, e, recovery.MethodPartialWork, recovery.Result{Recovered: true, Method: recovery.MethodPartialWork, NewNumber: 2}, nil)
	co.Handled(e, time.Now(), recovery.Result{Recovered: true, Method: recovery.MethodPartialWork, NewNumber: 2}, nil)
	co.Cycle(cleanup.CycleResult{Expired: 1, Duration: time.Millisecond}, nil)
	co.Cascade(true)
	co.HookFailed(e, errors.New("busy"))
	m.Gaps().Filled(ctx, gap.Gap{Stream: stream, Number: 1, Kind: kind, Reason: store.ReasonReleased})
	nl := m.NamedLeases()
	nl.Acquire(ctx, "cleanup", nil)
	nl.Renew(ctx, "cleanup", nil)
	nl.Lost(ctx, "cleanup", time.Minute)
	nl.Released(ctx, "cleanup", time.Second)
	nl.Checked(ctx, lease.MonitorResult{Active: 1, Expired: 0, Pending: 0}) // a monitor check: the holdings gauge
	defer nl.Held("cleanup")()

	rec := httptest.NewRecorder()
	tm.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	text := string(body)

	// The series names served, with a histogram's _bucket, _sum, _count.
	served := map[string]bool{}
	families := map[string]bool{}
	for _, f := range regexp.MustCompile(`(?m)^# TYPE (seqlease_\S+) (\S+)$`).FindAllStringSubmatch(text, -1) {
		families[f[1]] = true
		served[f[1]] = true
		if f[2] == "histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				served[f[1]+suffix] = true
			}
		}
	}
	require.Len(t, families, 30, "every instrument is served:\n%s", text)

	name := regexp.MustCompile(`seqlease_[a-z_]+[a-z]`)
	for _, doc := range []string{"../../docs/operations.md", "../../docs/grafana-dashboard.json"} {
		raw, err := os.ReadFile(doc)
		require.NoError(t, err)
		used := map[string]bool{}
		for _, n := range name.FindAllString(string(raw), -1) {
			if n == "seqlease_migrations" || n == "seqlease_app" || n == "seqlease_migrator" {
				continue // role and table names in the tuning section
			}
			used[n] = true
			require.True(t, served[n], "%s uses %s, which the exporter does not serve", doc, n)
		}
		for f := range families {
			shown := used[f] || used[f+"_bucket"] || used[f+"_count"] || used[f+"_sum"]
			require.True(t, shown, "%s does not show %s", doc, f)
		}
	}
}

// quietListeners is a store.ListenChecker with no deaf listener: the memory
// store listens to nothing, and PostgreSQL's Store (which is one) would
// need a database here. It makes the exporter serve the listener series.
type quietListeners struct{}

func (quietListeners) ListenHealth() store.ListenHealth { return store.ListenHealth{} }

// oneLoss is a store.HistoryChecker that found one lost history, since
// accepted: the memory store checks none, and PostgreSQL's would need a
// database here. It makes the exporter serve the lost history counter.
type oneLoss struct{}

func (oneLoss) HistoryHealth() store.HistoryHealth {
	return store.HistoryHealth{Losses: []store.HistoryLoss{{Stream: "s", Count: 1}}}
}
