package ui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/ui"
)

// Sizes of the benchmark's data set: 100 streams holding 10,000 gaps.
const (
	benchStreams   = 100
	benchGaps      = 100 // per stream
	benchCommitted = 100 // per stream, after the gaps
	benchLive      = 5   // per stream, leased and live at the end
	benchParked    = 10  // per stream, parked after the live ones
)

// BenchmarkPages renders each page on PostgreSQL with 100 streams and
// 10,000 gaps (100 per stream), 100 committed, 5 live leases and 10
// parked entries per stream (1,000 parked in all), 100 named leases with
// history and 100 reader checkpoints. Each
// listing asks for 100 rows, the default page size.
//
//	go test -run '^$' -bench BenchmarkPages -benchtime 50x ./ui/
func BenchmarkPages(b *testing.B) {
	s := newPostgres(b)
	ctx := b.Context()
	now, err := s.Now(ctx)
	require.NoError(b, err)
	past := now.Add(-time.Hour)
	gapReqs := make([]store.LeaseRequest, benchGaps)
	for i := range gapReqs {
		gapReqs[i] = store.LeaseRequest{TTL: time.Minute, OperationID: fmt.Sprintf("op-%d", i), Kind: "bench"}
	}
	numbers := make([]int64, benchGaps)
	for i := range numbers {
		numbers[i] = int64(i + 1)
	}
	live := make([]store.LeaseRequest, benchCommitted+benchLive)
	for i := range live {
		live[i] = store.LeaseRequest{TTL: time.Hour}
	}
	for i := range benchStreams {
		name := fmt.Sprintf("stream-%03d", i)
		_, err := s.Lease(ctx, name, gapReqs, &store.LeaseParams{Owner: "worker", Now: &past})
		require.NoError(b, err)
		got, err := s.ResolveExpiredBatch(ctx, name, numbers, nil)
		require.NoError(b, err)
		require.Len(b, got, benchGaps)
		es, err := s.Lease(ctx, name, live, &store.LeaseParams{Owner: "worker"})
		require.NoError(b, err)
		items := make([]store.StreamCommit, benchCommitted)
		for j := range items {
			items[j] = store.StreamCommit{Stream: name, Number: es[j].Number, Token: es[j].Token, Payload: []byte(`{"n":1}`)}
		}
		res, err := s.CommitMulti(ctx, items, nil)
		require.NoError(b, err)
		for _, r := range res {
			require.NoError(b, r.Err)
		}
		parked, err := s.Lease(ctx, name, gapReqs[:benchParked], &store.LeaseParams{Owner: "worker", Now: &past})
		require.NoError(b, err)
		for _, e := range parked {
			_, err := s.RecordRecoveryFailure(ctx, name, e.Number, &store.RecoveryFailureParams{Error: "tracker: connection refused", ParkAfter: 1})
			require.NoError(b, err)
		}
		require.NoError(b, s.SaveCheckpoint(ctx, fmt.Sprintf("reader-%03d", i), name, int64(benchGaps), nil))
		l, err := s.AcquireLease(ctx, fmt.Sprintf("lease-%03d", i), "agent", &store.AcquireLeaseParams{TTL: time.Hour})
		require.NoError(b, err)
		_, err = s.RenewLease(ctx, l.Name, "agent", l.Fence, &store.RenewLeaseParams{TTL: time.Hour})
		require.NoError(b, err)
	}
	h, err := ui.New(&ui.Config{Store: s})
	require.NoError(b, err)
	pages := []struct{ name, target string }{
		{"streams", "/"},
		{"stream", "/stream?name=stream-050"},
		{"gaps", "/gaps?stream=stream-050"},
		{"gap-streams", "/gaps"},
		{"leases", "/leases"},
		{"lease", "/lease?name=lease-050"},
		{"readers", "/readers"},
		{"parked", "/parked"},
		{"parked-stream", "/parked?stream=stream-050"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				r := httptest.NewRequestWithContext(ctx, http.MethodGet, p.target, nil)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", p.target, w.Code, w.Body)
				}
			}
		})
	}
}

// BenchmarkStreamsPagePayloads renders the streams page on PostgreSQL
// with 20 streams of 500 committed entries with 16 KiB payloads, which
// the page never shows: its allocations per page must not grow with the
// payloads.
//
//	go test -run '^$' -bench BenchmarkStreamsPagePayloads -benchtime 10x ./ui/
func BenchmarkStreamsPagePayloads(b *testing.B) {
	s := newPostgres(b)
	ctx := b.Context()
	reqs := make([]store.AppendRequest, ui.DefaultChartSample)
	for i := range reqs {
		reqs[i] = store.AppendRequest{Payload: make([]byte, 16<<10)}
	}
	for i := range 20 {
		_, err := s.Append(ctx, fmt.Sprintf("big-%02d", i), reqs, nil)
		require.NoError(b, err)
	}
	h, err := ui.New(&ui.Config{Store: s})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkStreamsPageBusy renders the streams page on PostgreSQL with 100
// streams that each resolved 5,000 numbers inside the chart's window: more
// than ChartSample (200), so each chart is estimated from every 25th
// number, 200 lookups per stream.
//
//	go test -run '^$' -bench BenchmarkStreamsPageBusy -benchtime 50x ./ui/
func BenchmarkStreamsPageBusy(b *testing.B) {
	s := newPostgres(b)
	ctx := b.Context()
	reqs := make([]store.AppendRequest, 5000)
	for i := range benchStreams {
		_, err := s.Append(ctx, fmt.Sprintf("busy-%03d", i), reqs, nil)
		require.NoError(b, err)
	}
	h, err := ui.New(&ui.Config{Store: s})
	require.NoError(b, err)
	for b.Loop() {
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `<span class="total">≈5000</span>`) {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}
