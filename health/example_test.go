package health_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/seqlease/seqlease/health"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// Example mounts a health check on a memory store with one stream whose
// watermark waits behind a lease taken an hour ago, and one reader at the
// watermark of another stream.
func Example() {
	ctx := context.Background()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	st := memory.New(&memory.Config{Now: func() time.Time { return now }}) // a fixed clock, for the output
	hourAgo := now.Add(-time.Hour)
	_, _ = st.Lease(ctx, "invoices", []store.LeaseRequest{{TTL: 2 * time.Hour}}, &store.LeaseParams{Now: &hourAgo})
	es, _ := st.Lease(ctx, "orders", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	_, _ = st.Commit(ctx, "orders", es[0].Number, es[0].Token, nil)
	_ = st.SaveCheckpoint(ctx, "projection", "orders", 1, nil)

	checker, err := health.New(&health.Config{Database: st, Streams: st, Checkpoints: st, MaxStall: 30 * time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", checker)

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	fmt.Println(rec.Code)
	for _, c := range checker.Check(ctx).Components {
		if c.Check == health.CheckDatabase {
			fmt.Println(c.Check, c.Healthy)
			continue
		}
		fmt.Println(c.Check, c.Stream, c.Reader, c.Healthy, c.Message)
	}
	// Output:
	// 503
	// database true
	// stream invoices  false watermark 0: stalled: number 1, leased 1h0m0s ago, holds it (max stall 30m0s); 1 in flight
	// stream orders  true watermark 1: every number handed out is resolved
	// reader orders projection true at the watermark 1
}
