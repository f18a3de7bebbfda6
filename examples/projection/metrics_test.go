package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMetricsEndpoint runs the pipeline with metrics on (memory backend,
// faults on) and checks that /metrics serves the Prometheus names
// docs/operations.md and the Grafana dashboard use.
func TestMetricsEndpoint(t *testing.T) {
	tm, err := newTelemetry()
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.shutdown(context.Background())) }()
	c := config{
		events: 300, workers: 8, accounts: 10, seed: 7,
		ttl: 50 * time.Millisecond, interval: 10 * time.Millisecond,
		stall: 0.02, crash: 0.05, partial: 0.03, retry: 0.02,
		telemetry: tm,
	}
	rep, err := run(context.Background(), c)
	require.NoError(t, err)
	require.True(t, rep.matches)

	rec := httptest.NewRecorder()
	tm.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	text := string(body)
	for _, name := range []string{
		"seqlease_lease_granted_total",
		"seqlease_lease_committed_total",
		"seqlease_lease_extended_total",
		"seqlease_lease_expired_total",
		"seqlease_lease_overrun_seconds_bucket",
		"seqlease_commit_wait_seconds_bucket",
		"seqlease_recovery_attempts_total",
		"seqlease_cleanup_cycle_duration_seconds_count",
		"seqlease_cleanup_cycle_expired",
		"seqlease_watermark_lag",
		"seqlease_cleanup_cascade_active",
		"seqlease_gap_created_total",
		"seqlease_gap_open",
		"seqlease_alert_active",
	} {
		require.Contains(t, text, "\n"+name+"{", "%s is served", name)
	}
	require.Contains(t, text, `method="partial-work"`)
	require.False(t, strings.Contains(text, "ev-"), "no operation id in a label")
}
