package cleanup_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// lateRelease is a store on which the holder of one number releases it
// just before the cleaner's statement: resolved elsewhere.
type lateRelease struct {
	*memory.Store
	e store.Entry
}

func (l *lateRelease) ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error) {
	if slices.Contains(numbers, l.e.Number) {
		if err := l.Release(ctx, stream, l.e.Number, l.e.Token, nil); err != nil {
			return nil, err
		}
	}
	return l.Store.ResolveExpiredBatch(ctx, stream, numbers, p)
}

// TestHooksOncePerResolvedEntry: hooks run once for each entry this Service
// resolved, after it resolved it: not for an entry resolved elsewhere
// meanwhile, not for an entry whose recovery failed, and not again in the
// next cycle.
func TestHooksOncePerResolvedEntry(t *testing.T) {
	t.Parallel()
	mem := memory.New(nil)
	es := leaseExpired(t, mem, "h", 5)
	s := &lateRelease{Store: mem, e: es[2]}
	var mu sync.Mutex
	var ran []int64
	hook := func(_ context.Context, e store.Entry) error {
		st, err := mem.Read(context.Background(), "h", e.Number-1, 1)
		if err != nil || !st[0].State.Resolved() {
			return errors.New("hook ran before the resolution")
		}
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, e.Number)
		return nil
	}
	sel := recovery.SelectorFunc(func(recovery.Level, string) recovery.Steps {
		return recovery.Steps{recovery.PartialWork(mem, recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
			if e.Number == 5 {
				return nil, false, errors.New("tracker down")
			}
			return nil, false, nil
		}), "c"), recovery.Gap(mem)}
	})
	rec := &recorder{}
	sv, err := cleanup.New(s, &cleanup.Config{Observer: rec, Pipeline: newPipeline(t, s, &recovery.Config{Selector: sel}), Hooks: &cleanup.HooksConfig{BestEffort: []cleanup.HookFunc{hook}}})
	require.NoError(t, err)
	res, err := sv.RunOnce(context.Background())
	require.Error(t, err, "5's tracker failed")
	require.Equal(t, 3, res.Resolved["gap"])
	require.Equal(t, 1, res.Elsewhere, "3 was released by its holder")
	_, err = sv.RunOnce(context.Background())
	require.Error(t, err)
	sv.Stop() // waits for the hooks
	slices.Sort(ran)
	require.Equal(t, []int64{1, 2, 4}, ran)
	require.Empty(t, rec.hookErrs)
}

// TestHooksBounded: at most Hooks.Concurrency hooks run at once, and all run.
func TestHooksBounded(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	leaseExpired(t, s, "b", 10)
	var running, most, total atomic.Int64
	release := make(chan struct{})
	hook := func(ctx context.Context, _ store.Entry) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		total.Add(1)
		return nil
	}
	sv, err := cleanup.New(s, &cleanup.Config{Hooks: &cleanup.HooksConfig{BestEffort: []cleanup.HookFunc{hook}, Concurrency: 2}})
	require.NoError(t, err)
	_, err = sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return running.Load() == 2 }, 10*time.Second, time.Millisecond)
	close(release)
	require.Eventually(t, func() bool { return total.Load() == 10 }, 10*time.Second, time.Millisecond)
	sv.Stop()
	require.Equal(t, int64(2), most.Load())
}

// TestStopCancelsHooks: Stop cancels a hook that outlives Hooks.Grace, and
// waits for it; failures and timeouts are reported.
func TestStopCancelsHooks(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	leaseExpired(t, s, "c", 1)
	started := make(chan struct{})
	rec := &recorder{}
	var quick atomic.Bool
	sv, err := cleanup.New(s, &cleanup.Config{
		Observer: rec,
		Hooks: &cleanup.HooksConfig{Timeout: time.Hour, Grace: 10 * time.Millisecond, BestEffort: []cleanup.HookFunc{
			func(context.Context, store.Entry) error { quick.Store(true); return errors.New("temp file gone") },
			func(ctx context.Context, _ store.Entry) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			},
		}},
	})
	require.NoError(t, err)
	_, err = sv.RunOnce(context.Background())
	require.NoError(t, err)
	<-started
	require.Eventually(t, quick.Load, 10*time.Second, time.Millisecond)
	sv.Stop() // would wait an hour if it did not cancel the hook after the grace
	require.Len(t, rec.hookErrs, 2)
	require.True(t, slices.ContainsFunc(rec.hookErrs, func(err error) bool { return errors.Is(err, context.Canceled) }))

	// A hook that outlives Hooks.Timeout is cut off and reported.
	leaseExpired(t, s, "d", 1)
	rec = &recorder{}
	sv, err = cleanup.New(s, &cleanup.Config{
		Observer: rec,
		Hooks: &cleanup.HooksConfig{Timeout: 10 * time.Millisecond, BestEffort: []cleanup.HookFunc{
			func(ctx context.Context, _ store.Entry) error { <-ctx.Done(); return ctx.Err() },
		}},
	})
	require.NoError(t, err)
	_, err = sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.hookErrs) == 1 && errors.Is(rec.hookErrs[0], context.DeadlineExceeded)
	}, 10*time.Second, time.Millisecond)
	sv.Stop()
}

// TestStopDrainsQueuedHooks: Stop lets the hooks of entries already
// resolved run, the queued ones too, before it returns; it cancels nothing
// that finishes within Hooks.Grace.
func TestStopDrainsQueuedHooks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		release := make(chan struct{})
		var ran atomic.Int64
		hook := func(ctx context.Context, e store.Entry) error {
			if e.Number == 1 {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			ran.Add(1)
			return nil
		}
		rec := &recorder{}
		sv, err := cleanup.New(s, &cleanup.Config{
			Observer: rec,
			Elector:  cleanup.NewLocalElector(),
			Hooks:    &cleanup.HooksConfig{BestEffort: []cleanup.HookFunc{hook}, Concurrency: 1, Grace: time.Minute},
		})
		require.NoError(t, err)
		leaseExpired(t, s, "q", 5)
		_, err = sv.RunOnce(context.Background())
		require.NoError(t, err)
		synctest.Wait() // 1's hook runs, the other four wait in the queue
		stopped := make(chan struct{})
		go func() {
			sv.Stop()
			close(stopped)
		}()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("Stop returned while hooks were queued and running")
		default:
		}
		close(release)
		<-stopped
		require.Equal(t, int64(5), ran.Load(), "every hook ran")
		require.Empty(t, rec.hookErrs)
	})
}

// TestStopGraceDropsHooks: after Hooks.Grace, Stop cancels the hooks still
// running and drops those still queued; both are reported, the dropped
// ones with ErrHookDropped. Stop takes the grace period, no longer.
func TestStopGraceDropsHooks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		rec := &recorder{}
		const grace = time.Minute
		sv, err := cleanup.New(s, &cleanup.Config{
			Observer: rec,
			Elector:  cleanup.NewLocalElector(),
			Hooks:    &cleanup.HooksConfig{BestEffort: []cleanup.HookFunc{func(ctx context.Context, _ store.Entry) error { <-ctx.Done(); return ctx.Err() }}, Timeout: time.Hour, Concurrency: 1, Grace: grace},
		})
		require.NoError(t, err)
		leaseExpired(t, s, "g", 3)
		_, err = sv.RunOnce(context.Background())
		require.NoError(t, err)
		synctest.Wait()
		start := time.Now()
		sv.Stop()
		require.Equal(t, grace, time.Since(start))
		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Len(t, rec.hookErrs, 3)
		var cancelled, dropped int
		for _, err := range rec.hookErrs {
			switch {
			case errors.Is(err, context.Canceled):
				cancelled++
			case errors.Is(err, cleanup.ErrHookDropped):
				dropped++
			}
		}
		require.Equal(t, 1, cancelled, "the running hook is cancelled")
		require.Equal(t, 2, dropped, "the queued ones are dropped")
	})
}

// TestHookQueueBounded: beyond Hooks.Queue waiting hooks, the hooks of
// further resolved entries are dropped and reported with ErrHookDropped,
// as are those of entries resolved after Stop; the queued ones still run.
func TestHookQueueBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		release := make(chan struct{})
		var ran atomic.Int64
		rec := &recorder{}
		sv, err := cleanup.New(s, &cleanup.Config{
			Observer: rec,
			Elector:  cleanup.NewLocalElector(),
			Hooks: &cleanup.HooksConfig{BestEffort: []cleanup.HookFunc{func(context.Context, store.Entry) error {
				<-release
				ran.Add(1)
				return nil
			}}, Concurrency: 1, Queue: 2},
		})
		require.NoError(t, err)
		leaseExpired(t, s, "b", 1)
		_, err = sv.RunOnce(context.Background())
		require.NoError(t, err)
		synctest.Wait() // the one worker runs 1's hook: the queue is empty
		leaseExpired(t, s, "b", 4)
		_, err = sv.RunOnce(context.Background())
		require.NoError(t, err)
		dropped := func() int {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			n := 0
			for _, err := range rec.hookErrs {
				require.ErrorIs(t, err, cleanup.ErrHookDropped)
				n++
			}
			return n
		}
		require.Equal(t, 2, dropped(), "2 queued, 2 dropped")
		close(release)
		sv.Stop()
		require.Equal(t, int64(3), ran.Load())

		leaseExpired(t, s, "b", 1)
		_, err = sv.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 3, dropped(), "resolved after Stop: its hook is dropped")
	})
}

// TestStopFromAHook: a best-effort hook that calls Stop does not deadlock.
// Its Stop stops the rest, lets the other running hook finish (cancelling
// it after the grace period), and returns without waiting for the hook
// that called it; a Stop from outside then waits for that hook.
func TestStopFromAHook(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		var sv *cleanup.Service
		other := make(chan struct{})   // closed when the other hook returns
		stopped := make(chan struct{}) // closed when the calling hook's Stop returned
		hook := func(ctx context.Context, e store.Entry) error {
			if e.Number == 1 {
				<-ctx.Done() // cancelled by Stop after the grace period
				close(other)
				return ctx.Err()
			}
			sv.Stop()
			select {
			case <-other:
			default:
				t.Error("Stop from a hook returned before the other hook")
			}
			close(stopped)
			return nil
		}
		var err error
		sv, err = cleanup.New(s, &cleanup.Config{
			Elector: cleanup.NewLocalElector(),
			Hooks:   &cleanup.HooksConfig{BestEffort: []cleanup.HookFunc{hook}, Concurrency: 2, Grace: time.Second},
		})
		require.NoError(t, err)
		leaseExpired(t, s, "stop", 2)
		_, err = sv.RunOnce(context.Background())
		require.NoError(t, err)
		<-stopped
		sv.Stop() // waits for the hook that called Stop
		require.ErrorIs(t, sv.Start(context.Background()), cleanup.ErrStopped)
	})
}
