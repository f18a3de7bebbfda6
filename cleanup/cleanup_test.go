package cleanup_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// backend is a store with what the tests use besides cleanup's needs.
type backend interface {
	cleanup.Store
	Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error)
	Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error)
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
	Stats(ctx context.Context, stream string) (store.StreamStats, error)
}

func backends(t *testing.T) map[string]backend {
	pool := pgtest.Shared(t, false)
	pg, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
	require.NoError(t, err)
	return map[string]backend{"memory": memory.New(nil), "postgres": pg}
}

// leaseExpired leases n numbers of stream with a TTL over before the next
// statement, plus, if live, one long lease after them.
func leaseExpired(t *testing.T, s backend, stream string, n int) []store.Entry {
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Microsecond, OperationID: fmt.Sprint("op-", i+1), Kind: "orders"}
	}
	es, err := s.Lease(context.Background(), stream, reqs, nil)
	require.NoError(t, err)
	// Wait until the backend's clock is past the expiry.
	require.Eventually(t, func() bool {
		got, err := s.ListExpired(context.Background(), &store.ListExpiredParams{Stream: stream, AfterStream: stream, AfterNumber: es[n-1].Number - 1})
		return err == nil && len(got) == 1
	}, 10*time.Second, time.Millisecond)
	return es
}

func readAll(t *testing.T, s backend, stream string) []store.Entry {
	var out []store.Entry
	for {
		es, err := s.Read(context.Background(), stream, int64(len(out)), store.MaxListLimit)
		require.NoError(t, err)
		out = append(out, es...)
		if len(es) < store.MaxListLimit {
			return out
		}
	}
}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	handled  []store.Entry
	at       []time.Time
	cascades []bool
	hookErrs int
}

func (r *recorder) Handled(e store.Entry, _ time.Time, _ recovery.Result, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handled = append(r.handled, e)
	r.at = append(r.at, time.Now())
}
func (r *recorder) Cycle(cleanup.CycleResult, error) {}
func (r *recorder) Cascade(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cascades = append(r.cascades, on)
}
func (r *recorder) HookFailed(store.Entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hookErrs++
}

type booster struct {
	mu      sync.Mutex
	factors []float64
}

func (b *booster) BoostTTL(f float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.factors = append(b.factors, f)
}

// TestCascade expires 1,000 leases of one stream at once: the cycle enters
// cascade mode, works in bounded batches with pauses, boosts the TTL,
// resolves everything in order, and leaves the mode.
func TestCascade(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			leaseExpired(t, s, "mass", 1000)
			rec, boost := &recorder{}, &booster{}
			const delay = 20 * time.Millisecond
			sv, err := cleanup.New(s, &cleanup.Config{
				Observer: rec, Booster: boost, BatchSize: 400,
				CascadeThreshold: 100, CascadeBatch: 100, CascadeDelay: delay,
			})
			require.NoError(t, err)
			res, err := sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, 1000, res.Expired)
			require.Equal(t, 1000, res.Resolved[recovery.MethodGap])
			require.True(t, res.Cascade)
			require.Equal(t, []bool{true, false}, rec.cascades, "entered and left")
			require.Equal(t, []float64{2, 1}, boost.factors, "TTL boosted, then restored")

			// Bounded batches: a pause of at least the delay before every
			// 100th entry of a page (pages of 400).
			for i := 100; i < len(rec.at); i += 100 {
				if i%400 == 0 {
					continue // a new page starts without a pause
				}
				require.GreaterOrEqual(t, rec.at[i].Sub(rec.at[i-1]), delay, "no pause before entry %d", i)
			}
			es := readAll(t, s, "mass")
			require.Len(t, es, 1000)
			for i, e := range es {
				require.Equal(t, store.Gap, e.State)
				if i > 0 {
					require.False(t, e.ResolvedAt.Before(es[i-1].ResolvedAt), "resolved out of order at %d", e.Number)
				}
			}
			res, err = sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Zero(t, res.Expired)
			require.False(t, res.Cascade)
		})
	}
}

// TestAdaptiveRecovery recovers partial work at low load and falls back to
// gaps under high load (a saturated pool).
func TestAdaptiveRecovery(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			work := recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
				if e.OperationID == "op-2" {
					return nil, false, nil
				}
				return []byte("partial " + e.OperationID), true, nil
			})
			done := recovery.OperationTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
				return []byte("result " + e.OperationID), true, nil
			})
			var saturation atomic.Value
			saturation.Store(0.0)
			sv, err := cleanup.New(s, &cleanup.Config{
				WorkTracker: work, OperationTracker: done,
				PoolSaturation: func() float64 { return saturation.Load().(float64) },
			})
			require.NoError(t, err)
			leaseExpired(t, s, "a", 2)
			res, err := sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, map[string]int{"partial-work": 1, "retry": 1}, res.Resolved)
			es := readAll(t, s, "a")
			require.Len(t, es, 4)
			require.Equal(t, int64(3), es[0].RecoveredAs, "1's partial work moved first, to 3")
			require.Equal(t, int64(4), es[1].RecoveredAs, "2's result moved next, to 4: original order kept")
			require.Equal(t, "partial op-1", string(es[2].Payload))
			require.Equal(t, "result op-2", string(es[3].Payload))

			saturation.Store(0.95)
			leaseExpired(t, s, "b", 1)
			res, err = sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, map[string]int{"gap": 1}, res.Resolved, "high load: gaps only")
		})
	}
}

// lossyStore loses the reply of the first RecoverExpired: the work moved,
// but the caller hears an error, as after a crash or a cut connection.
type lossyStore struct {
	backend
	lost atomic.Bool
}

func (l *lossyStore) RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error) {
	n, err := l.backend.RecoverExpired(ctx, stream, number, p)
	if err == nil && l.lost.CompareAndSwap(false, true) {
		return 0, errors.New("connection reset after the statement committed")
	}
	return n, err
}

// TestRecoveryCrashSafety: a recovery whose outcome was lost is run again
// (here by the next step); the ledger has one copy of the work, no loss.
func TestRecoveryCrashSafety(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ls := &lossyStore{backend: s}
			work := recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
				return []byte("w"), true, nil
			})
			sv, err := cleanup.New(ls, &cleanup.Config{WorkTracker: work})
			require.NoError(t, err)
			leaseExpired(t, s, "c", 3)
			_, err = sv.RunOnce(context.Background())
			require.NoError(t, err)
			_, err = sv.RunOnce(context.Background()) // a restart runs it all again
			require.NoError(t, err)
			es := readAll(t, s, "c")
			require.Len(t, es, 6, "3 originals, 3 moved copies, no more")
			seen := map[int64]int{}
			for _, e := range es[:3] {
				require.Equal(t, store.Gap, e.State)
				require.NotZero(t, e.RecoveredAs)
				seen[e.RecoveredAs]++
			}
			for _, e := range es[3:] {
				require.Equal(t, store.Committed, e.State)
				require.Equal(t, 1, seen[e.Number], "%d is the copy of exactly one original", e.Number)
			}
		})
	}
}

// failingStore fails every listing while broken.
type failingStore struct {
	backend
	broken atomic.Bool
	lists  atomic.Int64
}

func (f *failingStore) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	f.lists.Add(1)
	if f.broken.Load() {
		return nil, errors.New("database is down")
	}
	return f.backend.ListExpired(ctx, p)
}

// TestLoopBacksOffAndGoesOn: the loop survives a failing database, retries
// with backoff, resolves once the database is back, and stops cleanly.
func TestLoopBacksOffAndGoesOn(t *testing.T) {
	t.Parallel()
	fs := &failingStore{backend: memory.New(nil)}
	leaseExpired(t, fs, "s", 2)
	fs.broken.Store(true)
	sv, err := cleanup.New(fs, &cleanup.Config{Interval: time.Hour, MaxBackoff: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, sv.Start(context.Background()))
	require.Eventually(t, func() bool { return fs.lists.Load() >= 3 }, 10*time.Second, time.Millisecond, "retried")
	fs.broken.Store(false)
	require.Eventually(t, func() bool {
		st, err := fs.Stats(context.Background(), "s")
		return err == nil && st.Unresolved == 0
	}, 10*time.Second, time.Millisecond)
	sv.Stop()
	sv.Stop()
	require.ErrorIs(t, sv.Start(context.Background()), cleanup.ErrStopped)
}

// TestHooks runs a hook for every expired lease; a failing and a slow hook
// do not hold up resolution.
func TestHooks(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	leaseExpired(t, s, "h", 5)
	var ran atomic.Int64
	release := make(chan struct{})
	rec := &recorder{}
	sv, err := cleanup.New(s, &cleanup.Config{
		Observer:    rec,
		HookTimeout: 50 * time.Millisecond,
		Hooks: []cleanup.HookFunc{
			func(context.Context, store.Entry) error { ran.Add(1); return nil },
			func(context.Context, store.Entry) error { return errors.New("temp file gone") },
			func(ctx context.Context, _ store.Entry) error { // slow: outlives the cycle
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			},
		},
	})
	require.NoError(t, err)
	res, err := sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 5, res.Resolved["gap"], "resolved while the slow hooks still run")
	sv.Stop() // waits for the hooks: they time out
	close(release)
	require.Equal(t, int64(5), ran.Load())
	require.Equal(t, 10, rec.hookErrs, "5 failures and 5 timeouts")
}

// TestTimeToResolve: a holder that dies is resolved within TTL + interval +
// one cycle, measured on the backend's clock from the ledger.
func TestTimeToResolve(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			const ttl, interval = 200 * time.Millisecond, 100 * time.Millisecond
			rec := &cycleRecorder{}
			sv, err := cleanup.New(s, &cleanup.Config{Interval: interval, Observer: rec})
			require.NoError(t, err)
			require.NoError(t, sv.Start(context.Background()))
			defer sv.Stop()
			es, err := s.Lease(context.Background(), "dead", []store.LeaseRequest{{TTL: ttl}}, nil)
			require.NoError(t, err) // and the holder dies
			var got store.Entry
			require.Eventually(t, func() bool {
				got = readAll(t, s, "dead")[0]
				return got.State == store.Gap
			}, 10*time.Second, 5*time.Millisecond)
			overrun := got.ResolvedAt.Sub(es[0].ExpiresAt)
			bound := interval + interval/10 + rec.longest()
			t.Logf("resolved %v after expiry (bound: interval + jitter + longest cycle = %v)", overrun, bound)
			require.LessOrEqual(t, overrun, bound)
		})
	}
}

type cycleRecorder struct {
	recorder
	mu  sync.Mutex
	max time.Duration
}

func (c *cycleRecorder) Cycle(r cleanup.CycleResult, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.max = max(c.max, r.Duration)
}

func (c *cycleRecorder) longest() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.max
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for field, cfg := range map[string]cleanup.Config{
		"Interval":         {Interval: -1},
		"BatchSize":        {BatchSize: store.MaxListLimit + 1},
		"CascadeThreshold": {CascadeThreshold: -1},
		"CascadeBatch":     {CascadeBatch: -1},
		"CascadeDelay":     {CascadeDelay: -1},
		"CascadeTTLFactor": {CascadeTTLFactor: 0.5},
		"HookTimeout":      {HookTimeout: -1},
		"MaxBackoff":       {MaxBackoff: -1},
		"QueryTimeout":     {QueryTimeout: -1},
		"Owner":            {Owner: "a\x00b"},
	} {
		_, err := cleanup.New(s, &cfg)
		require.ErrorContains(t, err, "Config."+field)
	}
}

func TestStartStopStress(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	leaseExpired(t, s, "x", 3)
	var wg sync.WaitGroup
	for range 20 {
		sv, err := cleanup.New(s, &cleanup.Config{Interval: time.Millisecond})
		require.NoError(t, err)
		for range 3 {
			wg.Go(func() { _ = sv.Start(context.Background()) })
			wg.Go(func() { _, _ = sv.RunOnce(context.Background()) })
			wg.Go(sv.Stop)
		}
	}
	wg.Wait()
}
