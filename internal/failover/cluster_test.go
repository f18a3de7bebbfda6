//go:build failover

package failover_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/migrations"
)

// node is one Patroni node of scripts/with-patroni.
type node struct {
	port       int
	patroniPID int
	dataDir    string
}

// nodes reads the cluster's description from the environment
// scripts/with-patroni sets.
func nodes(t *testing.T) (string, []node) {
	t.Helper()
	url := os.Getenv("SEQLEASE_TEST_HA_URL")
	if url == "" {
		t.Fatal("SEQLEASE_TEST_HA_URL is unset: run this test under scripts/with-patroni (make failover), " +
			"which starts a two-node Patroni cluster and sets it with each node's SEQLEASE_TEST_HA_* variables")
	}
	n, err := strconv.Atoi(os.Getenv("SEQLEASE_TEST_HA_NODES"))
	require.NoError(t, err, "SEQLEASE_TEST_HA_NODES")
	ns := make([]node, n)
	for i := range ns {
		env := func(k string) string {
			v := os.Getenv(fmt.Sprintf("SEQLEASE_TEST_HA_%s_%d", k, i+1))
			require.NotEmpty(t, v, "SEQLEASE_TEST_HA_%s_%d", k, i+1)
			return v
		}
		ns[i].port, err = strconv.Atoi(env("PORT"))
		require.NoError(t, err)
		ns[i].patroniPID, err = strconv.Atoi(env("PATRONI_PID"))
		require.NoError(t, err)
		ns[i].dataDir = env("DATA")
	}
	return url, ns
}

// writable reports whether the node at port accepts writes (is a primary).
func writable(ctx context.Context, port int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable&connect_timeout=1", port))
	if err != nil {
		return false, err
	}
	defer c.Close(context.Background())
	var ok bool
	err = c.QueryRow(ctx, "SELECT NOT pg_is_in_recovery()").Scan(&ok)
	return ok, err
}

// children lists the processes whose parent is pid, from /proc.
func children(t *testing.T, pid int) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []int
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// kill loses node n at once: Patroni, the postmaster and its children, all
// with SIGKILL (PostgreSQL is not Patroni's child). The postmaster is
// stopped first so that it forks nothing while its children are listed.
func kill(t *testing.T, n node) {
	t.Helper()
	f, err := os.Open(filepath.Join(n.dataDir, "postmaster.pid"))
	require.NoError(t, err)
	sc := bufio.NewScanner(f)
	require.True(t, sc.Scan(), "postmaster.pid is empty")
	f.Close()
	pm, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(n.patroniPID, syscall.SIGKILL), "kill Patroni")
	require.NoError(t, syscall.Kill(pm, syscall.SIGSTOP), "stop the postmaster")
	for _, c := range children(t, pm) {
		_ = syscall.Kill(c, syscall.SIGKILL) // may have exited already
	}
	require.NoError(t, syscall.Kill(pm, syscall.SIGKILL), "kill the postmaster")
}

// openPool opens a pool on url of at most maxConns connections, each
// connect bounded at 2 s so that a dead node is passed over quickly; the
// pool closes when the test ends.
func openPool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// migratedPool opens a pool on the cluster's url (openPool) and migrates
// schema through it.
func migratedPool(t *testing.T, url, schema string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool := openPool(t, url, maxConns)
	m, err := migrations.New(&migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(t.Context(), pool)
	require.NoError(t, err)
	return pool
}
