package cleanup_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
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
	sel := recovery.SelectorFunc(func(recovery.Level, string) recovery.Pipeline {
		return recovery.Pipeline{recovery.PartialWork(mem, recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
			if e.Number == 5 {
				return nil, false, errors.New("tracker down")
			}
			return nil, false, nil
		}), "c"), recovery.Gap(mem)}
	})
	rec := &recorder{}
	sv, err := cleanup.New(s, &cleanup.Config{Selector: sel, Hooks: []cleanup.HookFunc{hook}, Observer: rec})
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

// TestHooksBounded: at most HookConcurrency hooks run at once, and all run.
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
	sv, err := cleanup.New(s, &cleanup.Config{Hooks: []cleanup.HookFunc{hook}, HookConcurrency: 2})
	require.NoError(t, err)
	_, err = sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return running.Load() == 2 }, 10*time.Second, time.Millisecond)
	close(release)
	require.Eventually(t, func() bool { return total.Load() == 10 }, 10*time.Second, time.Millisecond)
	sv.Stop()
	require.Equal(t, int64(2), most.Load())
}

// TestStopCancelsHooks: Stop cancels a hook that would outlive it, and
// waits for it; failures and timeouts are reported.
func TestStopCancelsHooks(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	leaseExpired(t, s, "c", 1)
	started := make(chan struct{})
	rec := &recorder{}
	var quick atomic.Bool
	sv, err := cleanup.New(s, &cleanup.Config{
		Observer:    rec,
		HookTimeout: time.Hour,
		Hooks: []cleanup.HookFunc{
			func(context.Context, store.Entry) error { quick.Store(true); return errors.New("temp file gone") },
			func(ctx context.Context, _ store.Entry) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			},
		},
	})
	require.NoError(t, err)
	_, err = sv.RunOnce(context.Background())
	require.NoError(t, err)
	<-started
	require.Eventually(t, quick.Load, 10*time.Second, time.Millisecond)
	sv.Stop() // would wait an hour if it did not cancel the hook
	require.Len(t, rec.hookErrs, 2)
	require.True(t, slices.ContainsFunc(rec.hookErrs, func(err error) bool { return errors.Is(err, context.Canceled) }))

	// A hook that outlives HookTimeout is cut off and reported.
	leaseExpired(t, s, "d", 1)
	rec = &recorder{}
	sv, err = cleanup.New(s, &cleanup.Config{Observer: rec, HookTimeout: 10 * time.Millisecond, Hooks: []cleanup.HookFunc{
		func(ctx context.Context, _ store.Entry) error { <-ctx.Done(); return ctx.Err() },
	}})
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
