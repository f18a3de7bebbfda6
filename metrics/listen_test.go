package metrics_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// deafStore is a store whose listeners report what the test sets.
type deafStore struct {
	*memory.Store
	mu sync.Mutex
	h  store.ListenHealth
}

func (d *deafStore) ListenHealth() store.ListenHealth {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.h
}

func (d *deafStore) set(h store.ListenHealth) {
	d.mu.Lock()
	d.h = h
	d.mu.Unlock()
}

// listenSeries collects and returns the deaf listeners gauge and the deaf
// checks counter (-1 when a series did not report), and the counter's
// monotonicity.
func listenSeries(t *testing.T, reader *sdkmetric.ManualReader) (deaf, checks int64, monotonic bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	deaf, checks = -1, -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case metrics.NameListenDeaf:
				g := m.Data.(metricdata.Gauge[int64])
				require.Len(t, g.DataPoints, 1)
				deaf = g.DataPoints[0].Value
				require.Equal(t, "{listener}", m.Unit)
			case metrics.NameListenDeafChecks:
				c := m.Data.(metricdata.Sum[int64])
				require.Len(t, c.DataPoints, 1)
				checks, monotonic = c.DataPoints[0].Value, c.IsMonotonic
				require.Equal(t, "{check}", m.Unit)
			}
		}
	}
	return deaf, checks, monotonic
}

// TestListenHealth checks the deaf listeners gauge and the deaf checks
// counter: they report the store's ListenHealth at each collection, the
// store being found among Gaps when Config.Listen is unset, and there are
// no such series without a ListenChecker.
func TestListenHealth(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	s := &deafStore{Store: memory.New(nil)}
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Gaps: s})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()

	deaf, checks, monotonic := listenSeries(t, reader)
	require.Equal(t, int64(0), deaf)
	require.Equal(t, int64(0), checks)
	require.True(t, monotonic, "the deaf checks are a counter")

	s.set(store.ListenHealth{Deaf: 2, DeafChecks: 3})
	deaf, checks, _ = listenSeries(t, reader)
	require.Equal(t, int64(2), deaf)
	require.Equal(t, int64(3), checks)

	reader2 := sdkmetric.NewManualReader()
	mp2 := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader2))
	defer func() { require.NoError(t, mp2.Shutdown(context.Background())) }()
	m2, err := metrics.New(&metrics.Config{MeterProvider: mp2, Gaps: memory.New(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, m2.Close()) }()
	deaf, checks, _ = listenSeries(t, reader2)
	require.Equal(t, int64(-1), deaf, "no gauge without a ListenChecker")
	require.Equal(t, int64(-1), checks, "no counter without a ListenChecker")
}
