package pgtest_test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// helperEnv makes the test binary, re-run by TestMainDetects*, act out a
// failure in TestHelperProcess.
const helperEnv = "PGTEST_HELPER"

// TestHelperProcess is not a test: it is the body of the child processes of
// the tests below, and does nothing in a normal run.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "leak":
		block := make(chan struct{})
		go func() { <-block }() // never returns: a leak for Main to find
	case "shared":
		pgtest.Shared(t, false)
		t.Log("pgtest: Shared returned despite an unreachable database")
	}
}

// runHelper runs TestHelperProcess in a child process with mode and extra
// environment, returning its combined output and exit error.
func runHelper(t *testing.T, mode string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestMainDetectsLeakedGoroutines(t *testing.T) {
	t.Parallel()
	out, err := runHelper(t, "leak")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out)
	require.Equal(t, 1, exit.ExitCode(), out)
	require.Contains(t, out, "pgtest: goroutines leaked by the tests")
	require.Contains(t, out, "TestHelperProcess")
}

func TestSharedFailsWhenUnreachable(t *testing.T) {
	t.Parallel()
	out, err := runHelper(t, "shared", pgtest.EnvURL+"=postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out)
	require.NotContains(t, out, "Shared returned")
	require.Contains(t, out, "--- FAIL: TestHelperProcess")
	require.NotContains(t, out, "SKIP")
	for _, hint := range []string{pgtest.EnvURL, "pg_ctlcluster --skip-systemctl-redirect", "make test"} {
		require.Contains(t, out, hint)
	}
}

func TestURL(t *testing.T) {
	t.Setenv(pgtest.EnvURL, "")
	require.Equal(t, pgtest.DefaultURL, pgtest.URL())
	t.Setenv(pgtest.EnvURL, "postgres://elsewhere/db")
	require.Equal(t, "postgres://elsewhere/db", pgtest.URL())
}

func TestNewPoolUnreachableRedactsPassword(t *testing.T) {
	t.Setenv(pgtest.EnvURL, "postgres://postgres:secret@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	pool, err := pgtest.NewPool(t.Context(), nil)
	require.Nil(t, pool)
	require.ErrorContains(t, err, "make test")
	require.NotContains(t, err.Error(), "secret")
}

func TestNewPoolOptions(t *testing.T) {
	t.Parallel()
	pool, err := pgtest.NewPool(t.Context(), &pgtest.Options{SimpleProtocol: true, MaxConns: 3})
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, pgx.QueryExecModeSimpleProtocol, pool.Config().ConnConfig.DefaultQueryExecMode)
	require.EqualValues(t, 3, pool.Config().MaxConns)
	var one int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT $1::int", 1).Scan(&one))
	require.Equal(t, 1, one)
}

func TestSharedIsOnePoolPerMode(t *testing.T) {
	t.Parallel()
	ext, simple := pgtest.Shared(t, false), pgtest.Shared(t, true)
	require.Same(t, ext, pgtest.Shared(t, false))
	require.Same(t, simple, pgtest.Shared(t, true))
	require.NotSame(t, ext, simple)
	require.Equal(t, pgx.QueryExecModeSimpleProtocol, simple.Config().ConnConfig.DefaultQueryExecMode)
	require.NotEqual(t, pgx.QueryExecModeSimpleProtocol, ext.Config().ConnConfig.DefaultQueryExecMode)
}

func TestNewSchemaIsMigratedAndDropped(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	exists := func(name string) bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", name).Scan(&n))
		return n == 1
	}

	var a, b string
	t.Run("inner", func(t *testing.T) {
		a, b = pgtest.NewSchema(t, pool), pgtest.NewSchema(t, pool)
		require.Regexp(t, `^t_[0-9a-f]{16}$`, a)
		require.NotEqual(t, a, b)
		require.True(t, exists(a))

		m, err := migrations.New(&migrations.Config{Schema: a})
		require.NoError(t, err)
		st, err := m.Status(t.Context(), pool)
		require.NoError(t, err)
		require.NotEmpty(t, st)
		for _, s := range st {
			require.True(t, s.Applied && s.ChecksumOK && s.Known, "%+v", s)
		}
	})
	require.False(t, exists(a), "schema %s must be dropped when its test ends", a)
	require.False(t, exists(b), "schema %s must be dropped when its test ends", b)
}

func TestReserveSchemaCreatesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, true)
	name := pgtest.ReserveSchema(t, pool)
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", name).Scan(&n))
	require.Zero(t, n)
}
