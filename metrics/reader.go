package metrics

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/seqlease/seqlease/store"
)

// CheckpointLister lists the readers' checkpoints with their streams'
// watermarks: the store (store/memory, store/postgres).
type CheckpointLister interface {
	ListCheckpoints(ctx context.Context, p *store.ListCheckpointsParams) ([]store.Checkpoint, error)
}

// observeReaders observes the lag of every reader's checkpoint, up to
// MaxReaderSeries of them, page by page, each page bounded by QueryTimeout.
// A failed page is logged and ends the round: the pairs not observed have
// no point in this collection rather than a wrong one.
func (m *Metrics) observeReaders(ctx context.Context, o metric.Observer) {
	if m.readers == nil {
		return
	}
	p := &store.ListCheckpointsParams{}
	for seen := 0; seen < m.maxReaders && ctx.Err() == nil; {
		p.Limit = min(m.maxReaders-seen, store.MaxListLimit)
		qctx, cancel := context.WithTimeout(ctx, m.qTimeout)
		cs, err := m.readers.ListCheckpoints(qctx, p)
		cancel()
		if err != nil {
			m.logger.Warn("metrics: list checkpoints", slog.Any("error", err))
			return
		}
		for _, c := range cs {
			o.ObserveInt64(m.readerLag, c.Lag(), metric.WithAttributeSet(
				attribute.NewSet(KeyReader.String(c.Reader), KeyStream.String(c.Stream))))
		}
		seen += len(cs)
		if len(cs) < p.Limit {
			return
		}
		last := cs[len(cs)-1]
		p.AfterReader, p.AfterStream = last.Reader, last.Stream
	}
}
