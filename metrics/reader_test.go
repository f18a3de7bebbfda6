package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// readerLag collects and returns the reader lag gauge (nil when it did not
// report).
func readerLag(t *testing.T, reader *sdkmetric.ManualReader) *metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == metrics.NameReaderLag {
				return &m
			}
		}
	}
	return nil
}

// commitN leases n numbers of stream on s and commits the first k.
func commitN(t *testing.T, s *memory.Store, stream string, n, k int) []store.Entry {
	t.Helper()
	ctx := context.Background()
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Hour}
	}
	es, err := s.Lease(ctx, stream, reqs, nil)
	require.NoError(t, err)
	for _, e := range es[:k] {
		_, err := s.Commit(ctx, e.Stream, e.Number, e.Token, nil)
		require.NoError(t, err)
	}
	return es
}

// TestReaderLag checks the reader lag gauge: its name, unit and
// attributes, and that each value is the stream's watermark minus the
// reader's checkpoint at the collection.
func TestReaderLag(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	s := memory.New(nil)
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Checkpoints: s})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	require.Nil(t, readerLag(t, reader), "a gauge without checkpoints reported")

	ctx := context.Background()
	orders := commitN(t, s, "orders", 10, 7) // watermark 7
	commitN(t, s, "payments", 3, 3)          // watermark 3
	require.NoError(t, s.SaveCheckpoint(ctx, "projection", "orders", 4, nil))
	require.NoError(t, s.SaveCheckpoint(ctx, "relay", "orders", 7, nil))
	require.NoError(t, s.SaveCheckpoint(ctx, "projection", "payments", 0, nil))

	got := readerLag(t, reader)
	require.NotNil(t, got)
	require.Equal(t, "{entry}", got.Unit)
	require.NotEmpty(t, got.Description)
	require.Equal(t, map[string]int64{
		"reader=projection,stream=orders":   3,
		"reader=relay,stream=orders":        0,
		"reader=projection,stream=payments": 3,
	}, points(t, *got))

	// The watermark moves on: the lag grows; the reader saves: it shrinks.
	_, err = s.Commit(ctx, "orders", 8, orders[7].Token, nil)
	require.NoError(t, err)
	require.NoError(t, s.SaveCheckpoint(ctx, "projection", "orders", 8, nil))
	require.Equal(t, map[string]int64{
		"reader=projection,stream=orders":   0,
		"reader=relay,stream=orders":        1,
		"reader=projection,stream=payments": 3,
	}, points(t, *readerLag(t, reader)))
}

// checkpointsFunc adapts a function to metrics.CheckpointLister.
type checkpointsFunc func(context.Context, *store.ListCheckpointsParams) ([]store.Checkpoint, error)

func (f checkpointsFunc) ListCheckpoints(ctx context.Context, p *store.ListCheckpointsParams) ([]store.Checkpoint, error) {
	return f(ctx, p)
}

// TestReaderLagBounds: at most MaxReaderSeries pairs are reported, listed
// page by page in (reader, stream) order; a failed listing reports none.
func TestReaderLagBounds(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	var asked []store.ListCheckpointsParams
	var fail error
	lister := checkpointsFunc(func(_ context.Context, p *store.ListCheckpointsParams) ([]store.Checkpoint, error) {
		asked = append(asked, *p)
		if fail != nil {
			return nil, fail
		}
		return []store.Checkpoint{{Reader: "r", Stream: "a", Position: 1, Watermark: 5}, {Reader: "r", Stream: "b", Position: 9, Watermark: 9}}[:p.Limit], nil
	})
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Checkpoints: lister, MaxReaderSeries: 2})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	require.Equal(t, map[string]int64{"reader=r,stream=a": 4, "reader=r,stream=b": 0}, points(t, *readerLag(t, reader)))
	require.Equal(t, []store.ListCheckpointsParams{{Limit: 2}}, asked)

	fail = errors.New("database down")
	require.Nil(t, readerLag(t, reader), "a failed listing reported values")

	_, err = metrics.New(&metrics.Config{MaxReaderSeries: -1})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}
