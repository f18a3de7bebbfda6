package cleanup_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

var _ cleanup.Waiter = (*barrier.Barrier)(nil)

func TestMain(m *testing.M) { pgtest.Main(m) }

// backend is a store with what the tests use besides cleanup's needs.
type backend interface {
	cleanup.Store
	Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error)
	Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error)
	Release(ctx context.Context, stream string, number int64, token store.Token, p *store.ReleaseParams) error
	Stats(ctx context.Context, stream string) (store.StreamStats, error)
	barrier.Source
}

// backends returns a fresh memory store and a store on a fresh PostgreSQL
// schema.
func backends(t *testing.T) map[string]backend {
	return map[string]backend{"memory": memory.New(nil), "postgres": newPostgres(t)}
}

func newPostgres(t testing.TB) *postgres.Store {
	pool := pgtest.Shared(t, false)
	pg, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
	require.NoError(t, err)
	return pg
}

// leaseExpired leases n numbers of stream with a TTL over before the next
// statement and waits until the backend's clock is past their expiry.
func leaseExpired(t *testing.T, s backend, stream string, n int) []store.Entry {
	t.Helper()
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Microsecond, OperationID: fmt.Sprint("op-", i+1), Kind: "orders"}
	}
	return leaseWith(t, s, stream, reqs)
}

// leaseWith leases reqs on stream and, if the last one's TTL is tiny, waits
// until it expired by the backend's clock.
func leaseWith(t *testing.T, s backend, stream string, reqs []store.LeaseRequest) []store.Entry {
	t.Helper()
	es, err := s.Lease(context.Background(), stream, reqs, nil)
	require.NoError(t, err)
	if reqs[len(reqs)-1].TTL < time.Millisecond {
		waitExpired(t, s, es[len(es)-1])
	}
	return es
}

// waitExpired waits until e expired by the backend's clock.
func waitExpired(t *testing.T, s backend, e store.Entry) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := s.ListExpired(context.Background(), &store.ListExpiredParams{Stream: e.Stream, AfterStream: e.Stream, AfterNumber: e.Number - 1, Limit: 1})
		return err == nil && len(got) == 1 && got[0].Number == e.Number
	}, 10*time.Second, time.Millisecond)
}

func readAll(t testing.TB, s interface {
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
}, stream string) []store.Entry {
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

// partialFor is a WorkTracker with partial work "partial <op>" for every
// operation but those in none.
func partialFor(none ...string) recovery.WorkTrackerFunc {
	return func(_ context.Context, e store.Entry) ([]byte, bool, error) {
		for _, op := range none {
			if e.OperationID == op {
				return nil, false, nil
			}
		}
		return []byte("partial " + e.OperationID), true, nil
	}
}

// newPipeline returns the recovery pipeline cfg describes on s.
func newPipeline(t testing.TB, s recovery.Store, cfg *recovery.Config) *recovery.Pipeline {
	t.Helper()
	p, err := recovery.New(s, cfg)
	require.NoError(t, err)
	return p
}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	handled  []store.Entry
	results  []recovery.Result
	errs     []error
	at       []time.Time
	cascades []bool
	hookErrs []error
	cycles   []cleanup.CycleResult
}

func (r *recorder) Handled(e store.Entry, _ time.Time, res recovery.Result, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handled = append(r.handled, e)
	r.results = append(r.results, res)
	r.errs = append(r.errs, err)
	r.at = append(r.at, time.Now())
}

func (r *recorder) Cycle(c cleanup.CycleResult, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cycles = append(r.cycles, c)
}

func (r *recorder) Cascade(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cascades = append(r.cascades, on)
}

func (r *recorder) HookFailed(_ store.Entry, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hookErrs = append(r.hookErrs, err)
}

func (r *recorder) cascadeLog() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.cascades...)
}

// firstCycle waits for the first cycle and returns what it did.
func (r *recorder) firstCycle(t *testing.T) cleanup.CycleResult {
	t.Helper()
	var first cleanup.CycleResult
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.cycles) == 0 {
			return false
		}
		first = r.cycles[0]
		return true
	}, 10*time.Second, time.Millisecond)
	return first
}

// result returns what the recorder was told of number n, and whether it was.
func (r *recorder) result(n int64) (recovery.Result, error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.handled) - 1; i >= 0; i-- {
		if r.handled[i].Number == n {
			return r.results[i], r.errs[i], true
		}
	}
	return recovery.Result{}, nil, false
}

// booster records the factors cascade mode sets; boosted is signalled on
// every boost above 1.
type booster struct {
	mu      sync.Mutex
	factors []float64
	boosted chan struct{}
}

func (b *booster) BoostTTL(f float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.factors = append(b.factors, f)
	if f > 1 && b.boosted != nil {
		select {
		case b.boosted <- struct{}{}:
		default:
		}
	}
}

func (b *booster) log() []float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]float64(nil), b.factors...)
}

// batchSizes records the sizes of the batch statements.
type batchSizes struct {
	backend
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error) {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(numbers))
	b.mu.Unlock()
	return b.backend.ResolveExpiredBatch(ctx, stream, numbers, p)
}

// TestCascade expires 1,000 leases of one stream at once: the cycle enters
// cascade mode, writes bounded batches with pauses, boosts the TTL,
// resolves everything in order, and leaves the mode.
func TestCascade(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			leaseExpired(t, s, "mass", 1000)
			rec, boost := &recorder{}, &booster{}
			bs := &batchSizes{backend: s}
			const delay = 20 * time.Millisecond
			sv, err := cleanup.New(bs, &cleanup.Config{
				Observer:  rec,
				BatchSize: 400,
				Cascade:   &cleanup.CascadeConfig{Booster: boost, Threshold: 100, Batch: 100, Delay: delay},
			})
			require.NoError(t, err)
			defer sv.Stop()
			res, err := sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, 1000, res.Expired)
			require.Equal(t, 1000, res.Resolved[recovery.MethodGap])
			require.True(t, res.Cascade)
			require.Equal(t, []bool{true, false}, rec.cascadeLog(), "entered and left")
			require.Equal(t, []float64{2, 1}, boost.log(), "TTL boosted, then restored")

			// Bounded batches: statements of 100, a pause of at least the
			// delay after each.
			require.Len(t, bs.sizes, 10)
			for _, n := range bs.sizes {
				require.Equal(t, 100, n)
			}
			for i := 100; i < len(rec.at); i += 100 {
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

// TestAdaptiveRecovery recovers partial work and results at low load, in
// the original order, and falls back to gaps under high load (a saturated
// pool).
func TestAdaptiveRecovery(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			done := recovery.OperationTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
				return []byte("result " + e.OperationID), true, nil
			})
			var saturation atomic.Value
			saturation.Store(0.0)
			sv, err := cleanup.New(s, &cleanup.Config{
				Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: partialFor("op-2"), OperationTracker: done, PoolSaturation: func() float64 { return saturation.Load().(float64) }}),
			})
			require.NoError(t, err)
			defer sv.Stop()
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
			require.Equal(t, "partial-work", es[2].RecoveryType)
			require.Equal(t, "retry", es[3].RecoveryType)

			saturation.Store(0.95)
			leaseExpired(t, s, "b", 1)
			res, err = sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, map[string]int{"gap": 1}, res.Resolved, "high load: gaps only")
		})
	}
}

// failingStore fails every listing while broken, and reading its clock
// too unless clockUp (a database up, but failing the listing).
type failingStore struct {
	backend
	broken  atomic.Bool
	clockUp atomic.Bool
	lists   atomic.Int64
}

func (f *failingStore) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	f.lists.Add(1)
	if f.broken.Load() {
		return nil, errors.New("database is down")
	}
	return f.backend.ListExpired(ctx, p)
}

func (f *failingStore) Now(ctx context.Context) (time.Time, error) {
	if f.broken.Load() && !f.clockUp.Load() {
		return time.Time{}, errors.New("database is down")
	}
	return f.backend.Now(ctx)
}

// TestLoopRunsOnceTheStoreIsBack: after a long outage the pause between
// failed cycles has grown towards MaxBackoff (an hour here); the loop runs
// a cycle within a second of the store answering again, not at the end
// of that pause, also when the store comes back just after a failed cycle.
func TestLoopRunsOnceTheStoreIsBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fs := &failingStore{backend: memory.New(nil)}
		fs.broken.Store(true)
		sv, err := cleanup.New(fs, &cleanup.Config{Interval: time.Hour, MaxBackoff: time.Hour, Elector: cleanup.NewLocalElector()})
		require.NoError(t, err)
		require.NoError(t, sv.Start(context.Background()))
		defer sv.Stop()
		time.Sleep(30 * time.Minute) // pauses of 1 s, 1.5 s, 2.25 s... now minutes long
		lists := fs.lists.Load()
		require.Greater(t, lists, int64(5), "the loop retried")
		require.Less(t, lists, int64(100), "the loop did not back off")
		leaseExpired(t, fs.backend, "s", 1)
		for n := fs.lists.Load(); fs.lists.Load() == n; {
			time.Sleep(time.Millisecond) // until the next failed cycle
		}
		fs.broken.Store(false)
		back := time.Now()
		for range 100 {
			if st, err := fs.Stats(context.Background(), "s"); err == nil && st.Unresolved == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		st, err := fs.Stats(context.Background(), "s")
		require.NoError(t, err)
		require.Zero(t, st.Unresolved, "not resolved within 10 s of the store coming back")
		require.LessOrEqual(t, time.Since(back), time.Second, "resolved %v after the store came back", time.Since(back))
	})
}

// TestLoopBacksOffWhileTheStoreAnswers: a store that answers (its clock
// reads) but fails the listing, an overloaded database, is not retried
// faster than the backoff.
func TestLoopBacksOffWhileTheStoreAnswers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fs := &failingStore{backend: memory.New(nil)}
		fs.broken.Store(true)
		fs.clockUp.Store(true)
		sv, err := cleanup.New(fs, &cleanup.Config{Interval: time.Hour, MaxBackoff: time.Hour, Elector: cleanup.NewLocalElector()})
		require.NoError(t, err)
		require.NoError(t, sv.Start(context.Background()))
		defer sv.Stop()
		time.Sleep(30 * time.Minute)
		lists := fs.lists.Load()
		require.Greater(t, lists, int64(5), "the loop retried")
		require.Less(t, lists, int64(30), "the loop did not back off")
	})
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

// TestTimeToResolve: a holder that dies is resolved within TTL + interval +
// one cycle, measured on the backend's clock from the ledger.
func TestTimeToResolve(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
			require.Eventually(t, func() bool { return rec.resolved() > 0 }, 10*time.Second, time.Millisecond,
				"the resolving cycle reported")
			// The slack covers timers and goroutines woken late on a busy
			// machine (under -race, with parallel tests), which no cycle's
			// duration includes. A loop that missed an interval would take
			// at least 2 intervals and fail.
			const schedulingSlack = 50 * time.Millisecond
			overrun := got.ResolvedAt.Sub(es[0].ExpiresAt)
			bound := interval + interval/10 + rec.longest() + schedulingSlack
			t.Logf("resolved %v after expiry (bound: interval + jitter + longest cycle + slack = %v)", overrun, bound)
			require.LessOrEqual(t, overrun, bound)
		})
	}
}

type cycleRecorder struct {
	recorder
	mu   sync.Mutex
	max  time.Duration
	gaps int
}

func (c *cycleRecorder) Cycle(r cleanup.CycleResult, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.max = max(c.max, r.Duration)
	c.gaps += r.Resolved[recovery.MethodGap]
}

func (c *cycleRecorder) resolved() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gaps
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
		"Interval":          {Interval: -1},
		"LeaseTTL":          {LeaseTTL: -1},
		"BatchSize":         {BatchSize: store.MaxListLimit + 1},
		"ScanLimit":         {ScanLimit: -1},
		"Cascade.Threshold": {Cascade: &cleanup.CascadeConfig{Threshold: -1}},
		"Cascade.Batch":     {Cascade: &cleanup.CascadeConfig{Batch: -1}},
		"Cascade.Delay":     {Cascade: &cleanup.CascadeConfig{Delay: -1}},
		"Cascade.TTLFactor": {Cascade: &cleanup.CascadeConfig{TTLFactor: 0.5}},
		"Hooks.Timeout":     {Hooks: &cleanup.HooksConfig{Timeout: -1}},
		"Hooks.Concurrency": {Hooks: &cleanup.HooksConfig{Concurrency: -1}},
		"Hooks.Queue":       {Hooks: &cleanup.HooksConfig{Queue: -1}},
		"Hooks.Grace":       {Hooks: &cleanup.HooksConfig{Grace: -1}},
		"Hooks.Poll":        {Hooks: &cleanup.HooksConfig{Poll: -1}},
		"MaxBackoff":        {MaxBackoff: -1},
		"QueryTimeout":      {QueryTimeout: -1},
	} {
		_, err := cleanup.New(s, &cfg)
		require.ErrorIs(t, err, store.ErrInvalidArgument, field)
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

// TestDefaultIntervalBoundsADeadWorker: with the default interval, a dead
// worker's number is resolved within its TTL plus 5 s and the jitter's
// 10%, however the lease falls between two cycles (it was TTL + 33 s).
func TestDefaultIntervalBoundsADeadWorker(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New(nil)
		sv, err := cleanup.New(s, &cleanup.Config{Elector: cleanup.NewLocalElector()})
		require.NoError(t, err)
		require.NoError(t, sv.Start(ctx))
		defer sv.Stop()
		synctest.Wait() // the first cycle ran: the next is an interval away
		const ttl = time.Second
		_, err = s.Lease(ctx, "dead", []store.LeaseRequest{{TTL: ttl}}, nil)
		require.NoError(t, err)
		time.Sleep(ttl + 5500*time.Millisecond + time.Millisecond)
		synctest.Wait()
		st, err := s.Stats(ctx, "dead")
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Watermark, "resolved within TTL + 5.5 s")
	})
}
