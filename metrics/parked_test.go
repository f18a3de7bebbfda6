package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// TestParkedGaugeAndAlert: an entry the cleanup loop parks shows in the
// parked gauge and fires the Parked alert (a warning); given up, the gauge
// falls to 0 and the alert resolves.
func TestParkedGaugeAndAlert(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(ctx)) }()
	clk := &clock{t: time.Unix(1e9, 0)}
	s := memory.New(&memory.Config{Now: clk.Now})
	var fired []metrics.Alert
	alerts, err := metrics.NewEvaluator(&metrics.EvaluatorConfig{Sink: func(a metrics.Alert) { fired = append(fired, a) }})
	require.NoError(t, err)
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Parked: s, Alerts: alerts, GapCountInterval: time.Second, Now: clk.Now})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	parked := func() int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		for _, mt := range rm.ScopeMetrics[0].Metrics {
			if mt.Name == metrics.NameRecoveryParked {
				require.Equal(t, "{entry}", mt.Unit)
				return points(t, mt)[""]
			}
		}
		t.Fatal("no parked gauge")
		return 0
	}
	require.Zero(t, parked())
	require.Empty(t, fired)

	p, err := recovery.New(s, &recovery.Config{MaxAttempts: 1, OnExhausted: recovery.ExhaustedPark,
		WorkTracker: recovery.WorkTrackerFunc(func(context.Context, store.Entry) ([]byte, bool, error) {
			return nil, false, errors.New("tracker down")
		})})
	require.NoError(t, err)
	sv, err := cleanup.New(s, &cleanup.Config{Pipeline: p})
	require.NoError(t, err)
	defer sv.Stop()
	_, err = s.Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Second}}, nil)
	require.NoError(t, err)
	clk.Advance(2 * time.Second)
	_, err = sv.RunOnce(ctx)
	require.ErrorIs(t, err, store.ErrParked)

	require.Equal(t, int64(1), parked())
	require.Len(t, fired, 1)
	require.Equal(t, metrics.AlertParked, fired[0].Name)
	require.Equal(t, metrics.LevelWarning, fired[0].Level)
	require.True(t, fired[0].Firing)
	require.Contains(t, fired[0].Message, "seqlease parked")

	require.NoError(t, s.ResolveExpired(ctx, "s", 1, &store.ResolveExpiredParams{Reason: "given-up"}))
	require.Equal(t, int64(1), parked(), "the count is reused within the interval")
	clk.Advance(time.Second)
	require.Zero(t, parked())
	require.Len(t, fired, 2)
	require.False(t, fired[1].Firing)
}

// TestParkedAlertOff: a negative threshold turns the Parked alert off.
func TestParkedAlertOff(t *testing.T) {
	e, err := metrics.NewEvaluator(&metrics.EvaluatorConfig{Thresholds: metrics.Thresholds{Parked: -1}})
	require.NoError(t, err)
	e.Parked(3)
	for _, a := range e.Alerts() {
		require.NotEqual(t, metrics.AlertParked, a.Name)
	}
}
