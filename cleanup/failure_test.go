package cleanup_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// TestStepErrorStopsTheStream: a tracker that fails leaves its entry
// expired (no fall-through to a gap: the work is not lost) and stops the
// walk of the stream for the cycle (the later entries wait: order); the
// next cycle recovers both, in order.
func TestStepErrorStopsTheStream(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var broken atomic.Bool
			broken.Store(true)
			work := recovery.WorkTrackerFunc(func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
				if e.OperationID == "op-2" && broken.Load() {
					return nil, false, errors.New("tracker down")
				}
				return partialFor()(ctx, e)
			})
			rec := &recorder{}
			sv, err := cleanup.New(s, &cleanup.Config{Observer: rec, Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: work})})
			require.NoError(t, err)
			defer sv.Stop()
			leaseExpired(t, s, "e", 3)
			res, err := sv.RunOnce(context.Background())
			require.ErrorIs(t, err, recovery.ErrUnrecovered)
			require.ErrorContains(t, err, "tracker down")
			require.Equal(t, 1, res.Failed)
			require.Equal(t, map[string]int{"partial-work": 1}, res.Resolved)
			es := readAll(t, s, "e")
			require.Equal(t, int64(4), es[0].RecoveredAs)
			require.Equal(t, store.Leased, es[1].State, "left expired, not a gap")
			require.Equal(t, store.Leased, es[2].State, "waits behind 2")
			_, herr, ok := rec.result(2)
			require.True(t, ok)
			require.Error(t, herr)

			broken.Store(false)
			res, err = sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, map[string]int{"partial-work": 2}, res.Resolved)
			es = readAll(t, s, "e")
			require.Equal(t, []int64{4, 5, 6}, []int64{es[0].RecoveredAs, es[1].RecoveredAs, es[2].RecoveredAs})
			require.Equal(t, "partial op-2", string(es[4].Payload))
		})
	}
}

// TestRecoveryNeverGivenUp: by default a failing recovery is never given
// up: however often the tracker fails, the entry stays expired (its work is
// not lost) and the later entries wait; once the tracker works again, both
// move, in order.
func TestRecoveryNeverGivenUp(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	var broken atomic.Bool
	broken.Store(true)
	work := recovery.WorkTrackerFunc(func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
		if e.OperationID == "op-1" && broken.Load() {
			return nil, false, errors.New("tracker down")
		}
		return partialFor()(ctx, e)
	})
	sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: work})})
	require.NoError(t, err)
	defer sv.Stop()
	leaseExpired(t, s, "n", 2)
	for i := range 25 {
		res, err := sv.RunOnce(context.Background())
		require.ErrorIs(t, err, recovery.ErrUnrecovered, "attempt %d", i+1)
		require.Equal(t, 1, res.Failed)
		require.Empty(t, res.Resolved, "attempt %d", i+1)
		es := readAll(t, s, "n")
		require.Equal(t, []store.State{store.Leased, store.Leased}, []store.State{es[0].State, es[1].State}, "attempt %d", i+1)
	}
	broken.Store(false)
	res, err := sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"partial-work": 2}, res.Resolved)
	es := readAll(t, s, "n")
	require.Equal(t, []int64{3, 4}, []int64{es[0].RecoveredAs, es[1].RecoveredAs})
}

// TestMaxRecoveryAttempts: with MaxAttempts set, a tracker that
// always fails stalls its stream for MaxAttempts cycles at most;
// then the entry becomes a gap that says its recovery failed, and the
// stream goes on.
func TestMaxRecoveryAttempts(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	work := recovery.WorkTrackerFunc(func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
		if e.OperationID == "op-1" {
			return nil, false, errors.New("always down")
		}
		return partialFor()(ctx, e)
	})
	rec := &recorder{}
	sv, err := cleanup.New(s, &cleanup.Config{Observer: rec, Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: work, MaxAttempts: 3})})
	require.NoError(t, err)
	defer sv.Stop()
	leaseExpired(t, s, "m", 2)
	for i := range 2 {
		res, err := sv.RunOnce(context.Background())
		require.Error(t, err, "attempt %d", i+1)
		require.Equal(t, 1, res.Failed)
		require.Equal(t, store.Leased, readAll(t, s, "m")[0].State)
	}
	res, err := sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"gap": 1, "partial-work": 1}, res.Resolved)
	es := readAll(t, s, "m")
	require.Equal(t, store.Gap, es[0].State)
	require.Equal(t, recovery.ReasonRecoveryFailed, es[0].GapReason)
	require.Zero(t, es[0].RecoveredAs)
	require.Equal(t, int64(3), es[1].RecoveredAs, "the stream went on")
	r, herr, _ := rec.result(1)
	require.NoError(t, herr)
	require.Equal(t, recovery.ReasonRecoveryFailed, r.Reason)
}

var errCrashed = errors.New("crashed")

// crashingStore crashes at its crashAt-th write: before the statement, or
// after it committed. A crashed store fails every call, as a dead process
// would never hear back; a lossy one only loses that reply.
type crashingStore struct {
	backend
	crashAt int64
	after   bool
	lossy   bool // only the reply is lost; the store goes on
	writes  atomic.Int64
	dead    atomic.Bool
}

func (c *crashingStore) write(fn func() error) error {
	if c.dead.Load() {
		return errCrashed
	}
	if c.writes.Add(1) != c.crashAt {
		return fn()
	}
	if c.after {
		if err := fn(); err != nil {
			return err
		}
	}
	c.dead.Store(!c.lossy)
	return errCrashed
}

func (c *crashingStore) read() error {
	if c.dead.Load() {
		return errCrashed
	}
	return nil
}

func (c *crashingStore) RecoverExpiredBatch(ctx context.Context, stream string, items []store.RecoverItem, p *store.RecoverBatchParams) (out []store.RecoverResult, err error) {
	err = c.write(func() (err error) { out, err = c.backend.RecoverExpiredBatch(ctx, stream, items, p); return })
	return out, err
}

func (c *crashingStore) RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (n int64, err error) {
	err = c.write(func() (err error) { n, err = c.backend.RecoverExpired(ctx, stream, number, p); return })
	return n, err
}

func (c *crashingStore) ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) (out []int64, err error) {
	err = c.write(func() (err error) { out, err = c.backend.ResolveExpiredBatch(ctx, stream, numbers, p); return })
	return out, err
}

func (c *crashingStore) ResolveExpired(ctx context.Context, stream string, number int64, p *store.ResolveExpiredParams) error {
	return c.write(func() error { return c.backend.ResolveExpired(ctx, stream, number, p) })
}

func (c *crashingStore) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	if err := c.read(); err != nil {
		return nil, err
	}
	return c.backend.ListExpired(ctx, p)
}

func (c *crashingStore) Snapshot(ctx context.Context, stream string, limit int) (store.Snapshot, error) {
	if err := c.read(); err != nil {
		return store.Snapshot{}, err
	}
	return c.backend.Snapshot(ctx, stream, limit)
}

func (c *crashingStore) Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	if err := c.read(); err != nil {
		return nil, err
	}
	return c.backend.Read(ctx, stream, after, limit)
}

// TestCrashSafety crashes a cleaner before and after each write of a
// recovery (moves and gaps, in batches) and restarts it as a new Service:
// every expired entry ends resolved exactly once, every recovered operation
// has exactly one new number, in the original order, and nothing is lost.
// A lost reply without a crash is reported as the move it was.
func TestCrashSafety(t *testing.T) {
	t.Parallel()
	// ops 4 and 5 have no partial work: gaps between moves.
	work := partialFor("op-4", "op-5")
	const n = 7
	check := func(t *testing.T, s backend, stream string) {
		t.Helper()
		es := readAll(t, s, stream)
		copies := map[int64]int{}
		var lastMoved int64
		for _, e := range es[:n] {
			require.Equal(t, store.Gap, e.State, "%d resolved", e.Number)
			if e.OperationID == "op-4" || e.OperationID == "op-5" {
				require.Equal(t, store.ReasonExpired, e.GapReason)
				continue
			}
			require.NotZero(t, e.RecoveredAs, "%d's work moved", e.Number)
			require.Greater(t, e.RecoveredAs, lastMoved, "%d moved out of order", e.Number)
			lastMoved = e.RecoveredAs
			copies[e.RecoveredAs]++
		}
		require.Len(t, es, n+5, "5 moved copies, no more")
		for _, e := range es[n:] {
			require.Equal(t, 1, copies[e.Number], "%d is the copy of exactly one original", e.Number)
			require.Equal(t, store.Committed, e.State)
			require.Equal(t, "partial "+e.OperationID, string(e.Payload))
			require.Equal(t, e.Number, es[e.RecoveredFrom-1].RecoveredAs)
		}
	}
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for crashAt := int64(1); crashAt <= 5; crashAt++ {
				for _, after := range []bool{false, true} {
					stream := fmt.Sprintf("crash-%d-%v", crashAt, after)
					leaseExpired(t, s, stream, n)
					cs := &crashingStore{backend: s, crashAt: crashAt, after: after}
					sv, err := cleanup.New(cs, &cleanup.Config{BatchSize: 2, Pipeline: newPipeline(t, cs, &recovery.Config{WorkTracker: work})})
					require.NoError(t, err)
					_, err = sv.RunOnce(context.Background())
					require.ErrorIs(t, err, errCrashed, stream)
					sv.Stop()
					// The restart: a new Service on the store.
					sv, err = cleanup.New(s, &cleanup.Config{BatchSize: 2, Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: work})})
					require.NoError(t, err)
					_, err = sv.RunOnce(context.Background())
					require.NoError(t, err, stream)
					sv.Stop()
					check(t, s, stream)
				}
			}

			// A lost reply of a batch of moves: the entries are read back
			// and reported moved, in the same cycle.
			leaseExpired(t, s, "lossy", n)
			rec := &recorder{}
			cs := &crashingStore{backend: s, crashAt: 1, after: true, lossy: true}
			sv, err := cleanup.New(cs, &cleanup.Config{BatchSize: 2, Observer: rec, Pipeline: newPipeline(t, cs, &recovery.Config{WorkTracker: work})})
			require.NoError(t, err)
			defer sv.Stop()
			res, err := sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, map[string]int{"partial-work": 5, "gap": 2}, res.Resolved)
			check(t, s, "lossy")
			es := readAll(t, s, "lossy")
			for _, num := range []int64{1, 2} {
				r, herr, ok := rec.result(num)
				require.True(t, ok)
				require.NoError(t, herr)
				require.False(t, r.Elsewhere)
				require.Equal(t, es[num-1].RecoveredAs, r.NewNumber, "%d reported as moved", num)
			}
		})
	}
}

// TestStopDuringCascade: Stop in the middle of cascade mode (here in one of
// its pauses) leaves the mode: the TTL boost is undone and the Observer is
// told.
func TestStopDuringCascade(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	leaseExpired(t, s, "x", 300)
	rec, boost := &recorder{}, &booster{boosted: make(chan struct{}, 1)}
	sv, err := cleanup.New(s, &cleanup.Config{
		Observer: rec,
		Cascade:  &cleanup.CascadeConfig{Booster: boost, Threshold: 100, Batch: 100, Delay: time.Hour},
	})
	require.NoError(t, err)
	require.NoError(t, sv.Start(context.Background()))
	<-boost.boosted
	sv.Stop()
	require.Equal(t, []float64{2, 1}, boost.log())
	require.Equal(t, []bool{true, false}, rec.cascadeLog())
}

// listFailsAfter fails every listing after the first n.
type listFailsAfter struct {
	backend
	n     int64
	lists atomic.Int64
}

func (l *listFailsAfter) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	if l.lists.Add(1) > l.n {
		return nil, errors.New("database went away")
	}
	return l.backend.ListExpired(ctx, p)
}

// TestCascadeLeftOnListingError: a cycle that fails in cascade mode leaves
// it too.
func TestCascadeLeftOnListingError(t *testing.T) {
	t.Parallel()
	s := &listFailsAfter{backend: memory.New(nil), n: 2}
	leaseExpired(t, s.backend, "y", 500)
	rec, boost := &recorder{}, &booster{}
	sv, err := cleanup.New(s, &cleanup.Config{
		Observer:  rec,
		BatchSize: 100,
		ScanLimit: 200,
		Cascade:   &cleanup.CascadeConfig{Booster: boost, Threshold: 100, Delay: time.Millisecond},
	})
	require.NoError(t, err)
	defer sv.Stop()
	res, err := sv.RunOnce(context.Background())
	require.ErrorContains(t, err, "database went away")
	require.True(t, res.Cascade)
	require.Equal(t, 200, res.Resolved["gap"])
	require.Equal(t, []float64{2, 1}, boost.log())
	require.Equal(t, []bool{true, false}, rec.cascadeLog())
}

// TestFailingStreamDelaysNoOther: a stream whose recovery keeps failing is
// retried at every regular cycle and does not put the loop on backoff, so
// the other streams keep the time-to-resolve bound. With MaxBackoff an hour,
// a loop that backed off after each failure (10 ms, 15 ms, ... growing by
// half) would take about an hour to reach 30 failures.
func TestFailingStreamDelaysNoOther(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	var fails atomic.Int64
	work := recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
		if e.Stream == "bad" {
			fails.Add(1)
			return nil, false, errors.New("tracker down")
		}
		return nil, false, nil
	})
	sv, err := cleanup.New(s, &cleanup.Config{
		Interval:   10 * time.Millisecond,
		MaxBackoff: time.Hour,
		Pipeline:   newPipeline(t, s, &recovery.Config{WorkTracker: work}),
	})
	require.NoError(t, err)
	leaseExpired(t, s, "bad", 1)
	require.NoError(t, sv.Start(context.Background()))
	defer sv.Stop()
	require.Eventually(t, func() bool { return fails.Load() >= 30 }, 20*time.Second, time.Millisecond,
		"the failing stream is retried every interval, not on a growing backoff")
	leaseExpired(t, s, "good", 1)
	require.Eventually(t, func() bool { return readAll(t, s, "good")[0].State == store.Gap }, 20*time.Second, time.Millisecond)
	require.Equal(t, store.Leased, readAll(t, s, "bad")[0].State, "the failing entry stays expired")
}
