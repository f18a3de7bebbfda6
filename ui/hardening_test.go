package ui_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/ui"
)

// countingSource counts the entries its Read returns.
type countingSource struct {
	ui.Source
	read atomic.Int64
}

func (s *countingSource) Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	es, err := s.Source.Read(ctx, stream, after, limit)
	s.read.Add(int64(len(es)))
	return es, err
}

// The streams page reads no entry, so no payload: its chart reads
// resolution times only.
func TestStreamsPageReadsNoPayload(t *testing.T) {
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			fill(t, s, "orders")
			cs := &countingSource{Source: s}
			r := get(t, newHandler(t, cs, nil), "/")
			require.Equal(t, 200, r.status)
			require.Contains(t, r.body, `aria-label="4 resolved"`, "the chart counts 3 commits and a gap")
			require.Zero(t, cs.read.Load(), "the streams page read whole entries")
		})
	}
}

// The pages count at most 100 expired (and parked) entries of a stream.
func TestExpiredCountCapped(t *testing.T) {
	s := memory.New(nil)
	past := time.Now().Add(-time.Hour)
	reqs := make([]store.LeaseRequest, 150)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Minute}
	}
	_, err := s.Lease(t.Context(), "stalled", reqs, &store.LeaseParams{Owner: "w", Now: &past})
	require.NoError(t, err)
	r := get(t, newHandler(t, s, nil), "/")
	require.Equal(t, 200, r.status)
	require.Contains(t, r.body, `<td class="num bad">100&#43;</td>`)
}
