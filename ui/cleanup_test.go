package ui_test

import (
	"errors"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/ui"
)

// fixedCleaner reports a fixed cleanup.Status.
type fixedCleaner cleanup.Status

func (c fixedCleaner) Status() cleanup.Status { return cleanup.Status(c) }

// cleanupLine returns the streams page's line about the cleanup loop.
func cleanupLine(t *testing.T, h http.Handler) string {
	t.Helper()
	r := get(t, h, "/")
	require.Equal(t, http.StatusOK, r.status, r.body)
	m := regexp.MustCompile(`(?s)<p class="cleanup[^"]*" id="cleanup">(.*?)</p>`).FindStringSubmatch(r.body)
	require.NotNil(t, m, "no cleanup line in %s", r.body)
	return m[0]
}

// TestCleanupStatusShown shows on the streams page whether the cleanup
// loop runs and when its last full pass ended, marked when stale, failing
// or stopped, and says so when the loop is not in this process.
func TestCleanupStatusShown(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	fill(t, s, "orders")
	now := time.Now()
	cases := []struct {
		name  string
		st    cleanup.Status
		want  []string
		stale bool
	}{
		// Ages of minutes: they print to the second, whatever the test's pace.
		{"running", cleanup.Status{Running: true, Started: now.Add(-time.Hour), Interval: 10 * time.Minute, LastPass: now.Add(-5 * time.Minute)},
			[]string{"running", "last full pass 5m0s ago", "every 10m0s"}, false},
		{"stale", cleanup.Status{Running: true, Started: now.Add(-3 * time.Hour), Interval: 10 * time.Second, LastPass: now.Add(-2 * time.Hour)},
			[]string{"running", "no full pass for 2h0m", "max 30s"}, true},
		{"failing", cleanup.Status{Running: true, Started: now.Add(-time.Hour), Interval: 10 * time.Minute, LastPass: now.Add(-10 * time.Minute),
			LastPassFailed: 2, Failures: 3, LastError: errors.New("dial tcp 10.0.0.5:5432: secret host")},
			[]string{"last full pass 10m0s ago", "2 recoveries failed in it", "the last 3 cycles could not list the expired leases"}, true},
		{"no pass yet", cleanup.Status{Running: true, Started: now.Add(-3 * time.Minute), Interval: 10 * time.Minute},
			[]string{"running", "started 3m0s ago, no full pass yet"}, false},
		{"stopped", cleanup.Status{Started: now.Add(-time.Hour), Interval: 30 * time.Second, LastPass: now.Add(-time.Minute)},
			[]string{"stopped", "expired leases are not resolved", "last full pass 1m0s ago"}, true},
		{"never started", cleanup.Status{Interval: 30 * time.Second}, []string{"not started"}, true},
	}
	for _, c := range cases {
		line := cleanupLine(t, newHandler(t, s, &ui.Config{Cleanup: fixedCleaner(c.st)}))
		for _, w := range c.want {
			require.Contains(t, line, w, c.name)
		}
		require.NotContains(t, line, "secret host", "%s: a store error is not shown", c.name)
		require.Equal(t, c.stale, regexp.MustCompile(`class="cleanup bad"`).MatchString(line), "%s: %s", c.name, line)
	}

	line := cleanupLine(t, newHandler(t, s, nil))
	require.Contains(t, line, "not known here")

	// A real loop's pass.
	sv, err := cleanup.New(s, nil)
	require.NoError(t, err)
	t.Cleanup(sv.Stop)
	_, err = sv.RunOnce(t.Context())
	require.NoError(t, err)
	line = cleanupLine(t, newHandler(t, s, &ui.Config{Cleanup: sv}))
	require.Contains(t, line, "not started")
	require.Contains(t, line, "last full pass")
}
