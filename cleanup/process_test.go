package cleanup_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// Environment of the cleaner processes TestCleanersAcrossProcesses starts.
const (
	envCleaner       = "SEQLEASE_CLEANER_CHILD"
	envCleanerSchema = "SEQLEASE_CLEANER_SCHEMA"
)

// trackerTable is the test schema's table of partial work and completed
// results, shared by every cleaner process.
func trackerTable(schema string) string { return pgx.Identifier{schema, "tracker"}.Sanitize() }

// chaosCleaner is the cleaner every process of the test runs: its own pool,
// trackers read from the shared table, a fixed low load (all three steps),
// short stream leases so a killed cleaner's streams are free again soon;
// recoverable work is never given up (the default recovery.Config.MaxAttempts).
func chaosCleaner(pool *pgxpool.Pool, schema string, b cleanup.Waiter) (*cleanup.Service, error) {
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	lookup := func(column string) func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
		q := "SELECT " + column + " FROM " + trackerTable(schema) + " WHERE op = $1"
		return func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
			var b []byte
			err := pool.QueryRow(ctx, q, e.OperationID).Scan(&b)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, false, nil
			}
			return b, err == nil && b != nil, err
		}
	}
	pipeline, err := recovery.New(s, &recovery.Config{
		Probe:            recovery.LoadProbeFunc(func(context.Context, recovery.Signals) recovery.Level { return recovery.Low }),
		WorkTracker:      recovery.WorkTrackerFunc(lookup("partial")),
		OperationTracker: recovery.OperationTrackerFunc(lookup("result")),
	})
	if err != nil {
		return nil, err
	}
	return cleanup.New(s, &cleanup.Config{
		Interval:   50 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond,
		LeaseTTL:   time.Second,
		BatchSize:  7,
		Barrier:    b,
		Pipeline:   pipeline,
	})
}

// TestCleanerProcess is the body of TestCleanersAcrossProcesses's cleaner
// processes; run alone it does nothing. It cleans until it is killed.
func TestCleanerProcess(t *testing.T) {
	if os.Getenv(envCleaner) == "" {
		return
	}
	ctx := context.Background()
	pool, err := pgtest.NewPool(ctx, &pgtest.Options{MaxConns: 3})
	require.NoError(t, err)
	defer pool.Close()
	sv, err := chaosCleaner(pool, os.Getenv(envCleanerSchema), nil)
	require.NoError(t, err)
	require.NoError(t, sv.Start(ctx))
	defer sv.Stop()
	time.Sleep(2 * time.Minute) // the parent kills it long before
}

// inProcess is a cleaner of this process with its own pool and barrier.
type inProcess struct {
	pool *pgxpool.Pool
	b    *barrier.Barrier
	sv   *cleanup.Service
}

func startInProcess(t *testing.T, schema string) *inProcess {
	ctx := context.Background()
	pool, err := pgtest.NewPool(ctx, &pgtest.Options{MaxConns: 4})
	require.NoError(t, err)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	b, err := barrier.New(s, nil)
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	sv, err := chaosCleaner(pool, schema, b)
	require.NoError(t, err)
	require.NoError(t, sv.Start(ctx))
	return &inProcess{pool: pool, b: b, sv: sv}
}

func (p *inProcess) stop() {
	p.sv.Stop()
	p.b.Stop()
	p.pool.Close()
}

// TestCleanersAcrossProcesses runs several cleaners at once on one
// database, two in this process (separate pools) and two in OS processes,
// and restarts them at random (SIGKILL for the processes) while leases with
// varied TTLs expire, some holders commit and the others die. Every
// expired number ends exactly once, a gap or recovered; every operation
// with partial work or a result gets exactly one new number, with that
// work; new numbers keep the original order.
func TestCleanersAcrossProcesses(t *testing.T) {
	t.Parallel()
	if os.Getenv(envCleaner) != "" {
		t.Fatal("TestCleanersAcrossProcesses must not run in a cleaner process")
	}
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "CREATE TABLE "+trackerTable(schema)+" (op text PRIMARY KEY, partial bytea, result bytea)")
	require.NoError(t, err)

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const streams, each = 3, 40
	ttls := []time.Duration{time.Microsecond, 30 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond, time.Second, 2 * time.Second}
	type plan struct {
		partial, result []byte
		commits         bool
	}
	plans := map[string]plan{} // by operation id
	reqs := make([][]store.LeaseRequest, streams)
	for st := range streams {
		for i := range each {
			op := fmt.Sprintf("s%d-op%d", st, i+1)
			ttl := ttls[rng.IntN(len(ttls))]
			var p plan
			switch rng.IntN(10) {
			case 0, 1, 2, 3:
				p.partial = []byte("partial " + op)
				if rng.IntN(2) == 0 {
					p.result = []byte("result " + op)
				}
			case 4, 5, 6:
				p.result = []byte("result " + op)
			}
			p.commits = ttl >= 150*time.Millisecond && rng.IntN(4) == 0
			plans[op] = p
			_, err := pool.Exec(ctx, "INSERT INTO "+trackerTable(schema)+" (op, partial, result) VALUES ($1, $2, $3)", op, p.partial, p.result)
			require.NoError(t, err)
			reqs[st] = append(reqs[st], store.LeaseRequest{TTL: ttl, OperationID: op, Kind: "k"})
		}
	}

	// The cleaners.
	exe, err := os.Executable()
	require.NoError(t, err)
	spawn := func() *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^TestCleanerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envCleaner+"=1", envCleanerSchema+"="+schema)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	children := []*exec.Cmd{spawn(), spawn()}
	local := []*inProcess{startInProcess(t, schema), startInProcess(t, schema)}
	defer func() {
		for _, c := range children {
			kill(c)
		}
		for _, p := range local {
			p.stop()
		}
	}()

	// The holders: lease everything, then the living ones commit.
	var mu sync.Mutex
	committed := map[string]bool{}
	var holders sync.WaitGroup
	for st := range streams {
		es, err := s.Lease(ctx, fmt.Sprint("xp-", st), reqs[st], nil)
		require.NoError(t, err)
		for i, e := range es {
			if !plans[e.OperationID].commits {
				continue
			}
			holders.Go(func() {
				time.Sleep(reqs[st][i].TTL / 3) // the holder's work
				_, err := s.Commit(ctx, e.Stream, e.Number, e.Token, nil)
				mu.Lock()
				committed[e.OperationID] = err == nil
				mu.Unlock()
			})
		}
	}

	// Chaos until every original number is resolved.
	deadline := time.Now().Add(90 * time.Second)
	restarts := 0
	for {
		left := int64(0)
		for st := range streams {
			stats, err := s.Stats(ctx, fmt.Sprint("xp-", st))
			require.NoError(t, err)
			left += stats.Unresolved
		}
		if left == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d numbers still unresolved", left)
		time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		if i := rng.IntN(4); i < len(children) {
			kill(children[i])
			children[i] = spawn()
		} else {
			i -= len(children)
			local[i].stop()
			local[i] = startInProcess(t, schema)
		}
		restarts++
	}
	holders.Wait()
	t.Logf("%d restarts", restarts)

	for st := range streams {
		stream := fmt.Sprint("xp-", st)
		es := readAll(t, s, stream)
		copies := map[int64]int64{} // new number -> original
		var lastMoved int64
		for _, e := range es[:each] {
			p := plans[e.OperationID]
			require.True(t, e.State.Resolved(), "%s/%d", stream, e.Number)
			if e.State == store.Committed {
				require.True(t, committed[e.OperationID], "%s/%d committed, but not by its holder", stream, e.Number)
				continue
			}
			require.False(t, committed[e.OperationID], "%s/%d: its holder's commit succeeded, yet it is a gap", stream, e.Number)
			if p.partial == nil && p.result == nil {
				require.Equal(t, store.ReasonExpired, e.GapReason, "%s/%d", stream, e.Number)
				require.Zero(t, e.RecoveredAs)
				continue
			}
			require.NotZero(t, e.RecoveredAs, "%s/%d had work to recover", stream, e.Number)
			require.Greater(t, e.RecoveredAs, lastMoved, "%s/%d: new numbers out of the original order", stream, e.Number)
			lastMoved = e.RecoveredAs
			copies[e.RecoveredAs] = e.Number
			moved := es[e.RecoveredAs-1]
			require.Equal(t, e.Number, moved.RecoveredFrom)
			require.Equal(t, store.Committed, moved.State)
			if p.partial != nil {
				require.Equal(t, recovery.MethodPartialWork, moved.RecoveryType)
				require.Equal(t, p.partial, moved.Payload)
			} else {
				require.Equal(t, recovery.MethodRetry, moved.RecoveryType)
				require.Equal(t, p.result, moved.Payload)
			}
		}
		require.Len(t, es, each+len(copies), "%s: exactly one new number per recovered operation", stream)
		for _, e := range es[each:] {
			require.Equal(t, copies[e.Number], e.RecoveredFrom, "%s/%d", stream, e.Number)
		}
		t.Logf("%s: %d recovered, %d committed by holders", stream, len(copies), func() (n int) {
			for _, e := range es[:each] {
				if e.State == store.Committed {
					n++
				}
			}
			return n
		}())
	}
}
