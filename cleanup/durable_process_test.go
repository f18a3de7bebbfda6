package cleanup_test

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// Environment of the process TestDurableHooksSurviveKill starts.
const (
	envHookChild  = "SEQLEASE_HOOK_CHILD"
	envHookSchema = "SEQLEASE_HOOK_SCHEMA"
)

// startedTable is the test schema's table where the child's hooks say
// they started.
func startedTable(schema string) string { return pgx.Identifier{schema, "hook_started"}.Sanitize() }

// TestDurableHookProcess is the body of TestDurableHooksSurviveKill's
// child; run alone it does nothing. It resolves the expired entries, and
// its hook notes that it started, then hangs until the process is killed.
func TestDurableHookProcess(t *testing.T) {
	if os.Getenv(envHookChild) == "" {
		return
	}
	ctx := context.Background()
	pool, err := pgtest.NewPool(ctx, &pgtest.Options{MaxConns: 4})
	require.NoError(t, err)
	defer pool.Close()
	schema := os.Getenv(envHookSchema)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	sv, err := cleanup.New(s, &cleanup.Config{
		Interval:     time.Hour,
		QueryTimeout: time.Second,
		Pipeline:     newPipeline(t, s, &recovery.Config{WorkTracker: oddWork}),
		Hooks: &cleanup.HooksConfig{Timeout: time.Second, Durable: func(ctx context.Context, e store.Entry) error {
			if _, err := pool.Exec(ctx, "INSERT INTO "+startedTable(schema)+" VALUES ($1)", e.Number); err != nil {
				return err
			}
			time.Sleep(2 * time.Minute) // hangs, ignoring ctx: the parent kills the process long before
			return nil
		}},
	})
	require.NoError(t, err)
	require.NoError(t, sv.Start(ctx))
	defer sv.Stop()
	time.Sleep(2 * time.Minute)
}

// TestDurableHooksSurviveKill: a cleaner process resolves expired entries
// and is killed (SIGKILL) while its durable hooks run; a cleaner of this
// process then delivers every one of them, once their claims lapsed, and
// the table of pending hooks empties.
func TestDurableHooksSurviveKill(t *testing.T) {
	t.Parallel()
	if os.Getenv(envHookChild) != "" {
		t.Fatal("TestDurableHooksSurviveKill must not run in the child")
	}
	ctx := t.Context()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "CREATE TABLE "+startedTable(schema)+" (number bigint)")
	require.NoError(t, err)
	leaseExpired(t, s, "kill", 4)

	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^TestDurableHookProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHookChild+"=1", envHookSchema+"="+schema)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	require.NoError(t, cmd.Start())
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
	defer kill()
	// Wait (on the database) until the child resolved every entry and its
	// hooks are running, then kill it.
	require.Eventually(t, func() bool {
		var started int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM "+startedTable(schema)).Scan(&started)
		stats, serr := s.Stats(ctx, "kill")
		return err == nil && serr == nil && started > 0 && stats.Unresolved == 0
	}, 30*time.Second, 5*time.Millisecond)
	kill()
	st, err := s.HookStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Pending, "the child resolved the four and delivered none")
	es, err := s.Read(ctx, "kill", 0, 10)
	require.NoError(t, err)
	require.Len(t, es, 6, "two moves (1 and 3) and two gaps")
	for _, e := range es {
		require.True(t, e.State.Resolved())
	}

	d := newDeliveries(nil)
	sv, err := cleanup.New(s, &cleanup.Config{
		Interval: time.Hour,
		Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: oddWork, Probe: recovery.LoadProbeFunc(func(context.Context, recovery.Signals) recovery.Level { return recovery.Low })}),
		Hooks:    &cleanup.HooksConfig{Durable: d.hook, Poll: 50 * time.Millisecond},
	})
	require.NoError(t, err)
	require.NoError(t, sv.Start(ctx))
	d.await(t, 1, 2, 3, 4)
	sv.Stop()
	st, err = s.HookStats(ctx)
	require.NoError(t, err)
	require.Equal(t, store.HookStats{}, st)
}
