package chaos_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/chaos"
)

// TestTerminateBackends ends the library's connections with
// pg_terminate_backend while worker processes lease, work, commit, clean and
// campaign for a named lease on two streams, and a reader follows them:
// every connection at once, only the LISTEN connections (the barrier's, the
// named-lease watch's), and only those in the middle of a statement or a
// transaction. After each, every listener must be back, the pipeline must go
// on and the audit of the load find nothing wrong (afterFault); at the end
// the ledger, the side rows, the fenced writes and the named-lease history
// (I8: the cleanup's stream leases, the singleton) must be clean.
func TestTerminateBackends(t *testing.T) {
	h := newHarness(t, "terminate-a", "terminate-b")
	require.NoError(t, h.Follow(t.Context()))
	for range 3 {
		spawn(t, h, load())
	}
	progress(t, h, 20)

	// Each worker listens twice (barrier, lease manager), the reader once.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	want := map[string]int{h.Prefix + "reader": 1}
	for _, p := range h.Live() {
		want[p.Config.AppName] = 2
	}
	waitListeners(ctx, t, h, want)

	targets := []string{chaos.TargetAll, chaos.TargetListeners, chaos.TargetBusy}
	for round := range 15 {
		target := targets[round%len(targets)]
		ended := 0
		for ended == 0 { // a moment with no statement running ends nothing: try again
			n, err := h.Terminate(ctx, target)
			require.NoError(t, err)
			ended = n
			if n == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		h.Fault("pg_terminate_backend: " + target)
		waitListeners(ctx, t, h, want)
		afterFault(t, h, "pg_terminate_backend: "+target, 10, 0)
	}
	v := finish(t, h, 5)
	require.Positive(t, v.LeaseEvents)
	require.Positive(t, v.FencedWrites)
}

// waitListeners waits until the LISTEN connections are exactly want.
func waitListeners(ctx context.Context, t *testing.T, h *chaos.Harness, want map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got map[string]int
	for {
		var err error
		got, err = h.Listeners(ctx)
		require.NoError(t, err)
		if maps.Equal(got, want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("listeners: got %v, want %v", got, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
