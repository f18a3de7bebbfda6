package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// config is what the environment asks of TestModel.
type config struct {
	seed     uint64        // SEQLEASE_MODEL_SEED: run this seed only
	seeds    int           // SEQLEASE_MODEL_SEEDS: schedules per backend
	duration time.Duration // SEQLEASE_MODEL_DURATION: run schedules per backend this long
	steps    int           // SEQLEASE_MODEL_STEPS: steps per schedule
	backends []string      // SEQLEASE_MODEL_BACKEND: memory, postgres or both
}

// Defaults for the plain `go test` run: a few seconds per backend.
const (
	defaultMemorySeeds   = 200
	defaultPostgresSeeds = 30
	defaultSteps         = 100
)

func loadConfig(t *testing.T) config {
	t.Helper()
	c := config{steps: defaultSteps, backends: []string{"memory", "postgres"}}
	if v := os.Getenv("SEQLEASE_MODEL_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SEQLEASE_MODEL_SEED=%q: %v", v, err)
		}
		c.seed, c.seeds = seed, 1
	}
	if v := os.Getenv("SEQLEASE_MODEL_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SEQLEASE_MODEL_SEEDS=%q: want a positive count", v)
		}
		c.seeds = n
	}
	if v := os.Getenv("SEQLEASE_MODEL_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SEQLEASE_MODEL_DURATION=%q: want a positive duration", v)
		}
		c.duration = d
	}
	if v := os.Getenv("SEQLEASE_MODEL_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SEQLEASE_MODEL_STEPS=%q: want a positive count", v)
		}
		c.steps = n
	}
	if v := os.Getenv("SEQLEASE_MODEL_BACKEND"); v != "" {
		if v != "memory" && v != "postgres" {
			t.Fatalf("SEQLEASE_MODEL_BACKEND=%q: want memory or postgres", v)
		}
		c.backends = []string{v}
	}
	return c
}

// TestModel runs seeded schedules of concurrent operations on both backends
// and checks every round against the reference model (see doc.go). On a
// failure it prints the seed, the failure, a shrunk schedule and the
// command that runs the seed again.
func TestModel(t *testing.T) {
	cfg := loadConfig(t)
	for _, name := range cfg.backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, workers, seeds := memoryBackend(), 2, defaultMemorySeeds
			if name == "postgres" {
				b, workers, seeds = openPostgres(t), 3, defaultPostgresSeeds
			}
			if cfg.seeds > 0 {
				seeds = cfg.seeds
			}
			explore(t, b, cfg, workers, seeds)
		})
	}
}

// openPostgres returns the PostgreSQL backend on pools of this test's own,
// one per process.
func openPostgres(t *testing.T) backend {
	t.Helper()
	var pools [procs]*pgxpool.Pool
	for i := range pools {
		pool, err := pgtest.NewPool(t.Context(), &pgtest.Options{MaxConns: 12})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		pools[i] = pool
	}
	return postgresBackend(pools)
}

// found is a failing seed.
type found struct {
	seed uint64
	s    schedule
	f    *failure
}

// explore runs schedules on b with workers at once: the configured seed,
// or seeds consecutive ones from a random base, or as many as fit in the
// configured duration. It reports the first failure, shrunk.
func explore(t *testing.T, b backend, cfg config, workers, seeds int) {
	ctx := t.Context()
	base := cfg.seed
	if base == 0 {
		base = rand.Uint64() >> 16 // short enough to type
	}
	var deadline time.Time
	if cfg.duration > 0 && cfg.seed == 0 {
		deadline, seeds = time.Now().Add(cfg.duration), 0
	}
	start := time.Now()
	var (
		mu    sync.Mutex
		total totals
		first *found
		next  = base
	)
	// take hands out the next seed, or false when the run is over.
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case first != nil, ctx.Err() != nil,
			seeds > 0 && next-base >= uint64(seeds),
			seeds == 0 && time.Now().After(deadline):
			return 0, false
		}
		next++
		return next - 1, true
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed, ok := take(); ok; seed, ok = take() {
				s := generate(seed, cfg.steps)
				f, tot := runSchedule(ctx, b, s, nil)
				mu.Lock()
				total.schedules += tot.schedules
				total.rounds += tot.rounds
				total.steps += tot.steps
				total.spans += tot.spans
				total.cuts += tot.cuts
				if f != nil && first == nil {
					first = &found{seed: seed, s: s, f: f}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%s: %d schedules (seeds %d..%d), %d rounds, %d steps in %v; %d batches of commits across streams, %d cut",
		b.name, total.schedules, base, next-1, total.rounds, total.steps, time.Since(start).Round(time.Millisecond),
		total.spans, total.cuts)
	if first != nil {
		t.Error(report(ctx, b, first, nil))
	}
}

// report shrinks a failure and describes it with the way to run it again.
func report(ctx context.Context, b backend, fd *found, wrap func(Store) Store) string {
	sh := &shrinker{kind: fd.f.kind, maxRuns: 400, deadline: time.Now().Add(2 * time.Minute),
		fails: failsOn(ctx, b, wrap)}
	small, sf := sh.shrink(fd.s, fd.f)
	var w strings.Builder
	fmt.Fprintf(&w, "model test failed on %s, seed %d (%d steps in %d rounds):\n  %v\n", b.name, fd.seed,
		fd.s.steps(), len(fd.s), fd.f)
	fmt.Fprintf(&w, "shrunk in %d runs to %d steps in %d rounds, which fails with:\n  %v\n%s", sh.runs,
		small.steps(), len(small), sf, small)
	fmt.Fprintf(&w, "run it again: SEQLEASE_MODEL_SEED=%d SEQLEASE_MODEL_BACKEND=%s go test -count=1 -run 'TestModel$' ./internal/model/",
		fd.seed, b.name)
	return w.String()
}

// failsOn runs a schedule on a fresh system of b, a few times (the rounds
// are concurrent, so a failure may need another try), and returns a failure.
func failsOn(ctx context.Context, b backend, wrap func(Store) Store) func(schedule) *failure {
	return func(s schedule) *failure {
		for range 3 {
			if f, _ := runSchedule(ctx, b, s, wrap); f != nil {
				return f
			}
		}
		return nil
	}
}

// TestHistoryI8 feeds the I8 check of the named leases' history legal and
// illegal histories.
func TestHistoryI8(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC) }
	ev := func(kind store.LeaseEventKind, owner string, fence int64, t, exp int) store.LeaseEvent {
		return store.LeaseEvent{Name: "x", Owner: owner, Fence: fence, Kind: kind, At: at(t), ExpiresAt: at(exp)}
	}
	legal := [][]store.LeaseEvent{
		{ev(store.LeaseAcquired, "p", 1, 0, 5), ev(store.LeaseRenewed, "p", 1, 4, 9), ev(store.LeaseReleased, "p", 1, 6, 9),
			ev(store.LeaseAcquired, "q", 2, 6, 10)},
		{ev(store.LeaseAcquired, "p", 1, 0, 5), ev(store.LeaseExpired, "p", 1, 5, 5), ev(store.LeaseAcquired, "q", 2, 7, 10)},
		{ev(store.LeaseAcquired, "p", 1, 0, 5), ev(store.LeaseAcquired, "q", 2, 5, 10)}, // a takeover at the expiry
	}
	illegal := [][]store.LeaseEvent{
		{ev(store.LeaseAcquired, "p", 1, 0, 5), ev(store.LeaseAcquired, "q", 2, 4, 10)},                                       // overlap
		{ev(store.LeaseAcquired, "p", 1, 0, 5), ev(store.LeaseRenewed, "p", 1, 4, 9), ev(store.LeaseAcquired, "q", 2, 6, 10)}, // over a renewal
		{ev(store.LeaseAcquired, "p", 2, 0, 5), ev(store.LeaseAcquired, "q", 2, 6, 10)},                                       // fence reused
		{ev(store.LeaseAcquired, "p", 1, 0, 5), ev(store.LeaseRenewed, "p", 1, 5, 9)},                                         // renewal at the expiry
		{ev(store.LeaseAcquired, "p", 1, 0, 5), ev(store.LeaseReleased, "p", 1, 2, 5), ev(store.LeaseRenewed, "p", 1, 3, 8)},  // renewal after release
		{ev(store.LeaseAcquired, "p", 1, 0, 5), ev(store.LeaseRenewed, "q", 2, 3, 8)},                                         // renewal of another holding
	}
	for i, h := range legal {
		require.NoError(t, historyI8(h), "legal history %d", i)
	}
	for i, h := range illegal {
		require.Error(t, historyI8(h), "illegal history %d", i)
	}
}
