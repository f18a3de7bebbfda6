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

// lostStore is a store whose history findings are what the test sets.
type lostStore struct {
	*memory.Store
	mu sync.Mutex
	h  store.HistoryHealth
}

func (l *lostStore) HistoryHealth() store.HistoryHealth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h
}

func (l *lostStore) set(h store.HistoryHealth) {
	l.mu.Lock()
	l.h = h
	l.mu.Unlock()
}

// historySeries collects the lost history counter: its value by stream
// (streams) or lease (names), and whether it is monotonic.
func historySeries(t *testing.T, reader *sdkmetric.ManualReader) (streams, names map[string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	streams, names = map[string]int64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != metrics.NameHistoryLost {
				continue
			}
			require.Equal(t, "{finding}", m.Unit)
			c := m.Data.(metricdata.Sum[int64])
			require.True(t, c.IsMonotonic)
			for _, dp := range c.DataPoints {
				if v, ok := dp.Attributes.Value(metrics.KeyStream); ok {
					streams[v.AsString()] = dp.Value
				} else if v, ok := dp.Attributes.Value(metrics.KeyLease); ok {
					names[v.AsString()] = dp.Value
				} else {
					t.Fatalf("a lost history point without stream or lease: %v", dp.Attributes)
				}
			}
		}
	}
	return streams, names
}

// TestHistoryLost checks the lost history counter, by stream and by named
// lease, read from the store's HistoryHealth found among Gaps, and the
// HistoryLost alert it feeds: firing while something is refused, exported
// as seqlease.alert.active.
func TestHistoryLost(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	ev, err := metrics.NewEvaluator(nil)
	require.NoError(t, err)
	s := &lostStore{Store: memory.New(nil)}
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Gaps: s, Alerts: ev})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()

	streams, names := historySeries(t, reader)
	require.Empty(t, streams)
	require.Empty(t, names)
	firing := func() bool {
		for _, a := range ev.Alerts() {
			if a.Name == metrics.AlertHistoryLost {
				return a.Firing
			}
		}
		t.Fatal("no HistoryLost alert")
		return false
	}
	require.False(t, firing())

	lost := store.HistoryLostError{Stream: "orders", What: store.LostNumber, Seen: 9, Got: 7}
	s.set(store.HistoryHealth{
		Refused: []store.HistoryLostError{lost},
		Losses:  []store.HistoryLoss{{Stream: "orders", Count: 2}, {Name: "leader", Count: 1}},
	})
	streams, names = historySeries(t, reader)
	require.Equal(t, map[string]int64{"orders": 2}, streams)
	require.Equal(t, map[string]int64{"leader": 1}, names)
	require.True(t, firing(), "a refused stream fires the alert at the collection")

	s.set(store.HistoryHealth{Losses: []store.HistoryLoss{{Stream: "orders", Count: 2}, {Name: "leader", Count: 1}}})
	streams, _ = historySeries(t, reader)
	require.Equal(t, map[string]int64{"orders": 2}, streams, "the counter keeps what was found")
	require.False(t, firing(), "accepted: the alert resolves")
}

// TestHistoryWithoutChecker checks that a store that is no HistoryChecker
// gets no lost history series.
func TestHistoryWithoutChecker(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Gaps: memory.New(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	streams, names := historySeries(t, reader)
	require.Empty(t, streams)
	require.Empty(t, names)
}
