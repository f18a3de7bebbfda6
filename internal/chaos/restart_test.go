package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/chaos"
	"github.com/seqlease/seqlease/migrations"
)

// TestPostgresRestart restarts PostgreSQL under worker processes that lease,
// work, commit (on two streams), clean and campaign for a named lease: a
// clean restart (fast shutdown), a crash restart (immediate shutdown, WAL
// recovery), and a crash with the server down for 3 s, past every lease's
// TTL. The server is a throwaway cluster the test owns (default durability:
// every acknowledged commit must survive the crash). After each restart the
// pipeline must go on and the audit of the load find nothing wrong
// (afterFault); at the end the ledger, the side rows, the fenced writes and
// the named-lease history must be clean.
func TestPostgresRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, err := chaos.StartCluster(ctx)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	const schema = "chaos"
	pool, err := chaos.NewPool(ctx, c.URL(), "chaos-migrate", 1)
	require.NoError(t, err)
	m, err := migrations.New(&migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx, pool)
	pool.Close()
	require.NoError(t, err)

	h, err := chaos.NewHarness(ctx, c.URL(), schema, []string{"restart-a", "restart-b"})
	require.NoError(t, err)
	t.Cleanup(h.Close) // before the cluster goes
	require.NoError(t, h.Follow(ctx))
	for range 3 {
		spawn(t, h, load())
	}
	progress(t, h, 20)

	for _, r := range []struct {
		mode string
		down time.Duration
		kind string
	}{
		{"fast", 0, "PostgreSQL restart (fast shutdown)"},
		{"immediate", 0, "PostgreSQL crash and restart (immediate shutdown)"},
		{"immediate", 3 * time.Second, "PostgreSQL crash, down 3 s (past every TTL)"},
	} {
		stopped := time.Now()
		require.NoError(t, c.Stop(ctx, r.mode))
		time.Sleep(r.down)
		require.NoError(t, c.Start(ctx))
		h.Fault(r.kind)
		afterFault(t, h, r.kind, 20, time.Since(stopped))
	}
	finish(t, h, 5)
}
