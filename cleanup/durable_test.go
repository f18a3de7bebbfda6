package cleanup_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// oddWork is a WorkTracker with partial work for the odd numbers: those
// move, the even ones become gaps.
var oddWork = recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
	return []byte("w"), e.Number%2 == 1, nil
})

// deliveries records a durable hook's calls and signals each success.
type deliveries struct {
	mu    sync.Mutex
	calls map[int64]int // by number
	ok    chan int64
	fail  map[int64]int // how many first calls of a number fail
}

func newDeliveries(fail map[int64]int) *deliveries {
	return &deliveries{calls: map[int64]int{}, ok: make(chan int64, 100), fail: fail}
}

func (d *deliveries) hook(_ context.Context, e store.Entry) error {
	d.mu.Lock()
	d.calls[e.Number]++
	n := d.calls[e.Number]
	d.mu.Unlock()
	if e.State != store.Leased || e.OperationID == "" || e.Kind != "orders" {
		return errors.New("not the entry as it was found expired")
	}
	if n <= d.fail[e.Number] {
		return errors.New("lock service down")
	}
	d.ok <- e.Number
	return nil
}

// await waits until each of numbers was delivered successfully once.
func (d *deliveries) await(t *testing.T, numbers ...int64) {
	t.Helper()
	want := map[int64]bool{}
	for _, n := range numbers {
		want[n] = true
	}
	timeout := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case n := <-d.ok:
			require.True(t, want[n], "delivered %d again, or one not resolved", n)
			delete(want, n)
		case <-timeout:
			t.Fatalf("not delivered: %v", want)
		}
	}
}

// TestDurableHooksSurviveTheResolver: a Service resolves entries (gaps and
// moves) and is gone before it delivers their hooks (as a process that
// crashed right after the resolving transaction committed); another
// Service on the same store delivers each one, retries the one that fails,
// and leaves no record behind.
func TestDurableHooksSurviveTheResolver(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			leaseExpired(t, s, "crash", 5)
			first := newDeliveries(nil)
			a, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: oddWork}), Hooks: &cleanup.HooksConfig{Durable: first.hook}})
			require.NoError(t, err)
			res, err := a.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 3, res.Resolved[recovery.MethodPartialWork])
			require.Equal(t, 2, res.Resolved[recovery.MethodGap])
			a.Stop() // never started: it delivers nothing
			st, err := a.PendingHooks(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(5), st.Pending, "one record per resolved entry, moves and gaps alike")
			require.Empty(t, first.calls)

			second := newDeliveries(map[int64]int{2: 1}) // 2 fails once
			rec := &recorder{}
			b, err := cleanup.New(s, &cleanup.Config{
				Interval:   time.Hour,
				MaxBackoff: time.Second,
				Observer:   rec,
				Hooks:      &cleanup.HooksConfig{Durable: second.hook, Poll: 20 * time.Millisecond},
			})
			require.NoError(t, err)
			require.NoError(t, b.Start(ctx))
			second.await(t, 1, 2, 3, 4, 5)
			b.Stop() // waits for the acknowledgements
			st, err = b.PendingHooks(ctx)
			require.NoError(t, err)
			require.Equal(t, store.HookStats{}, st, "every record deleted")
			second.mu.Lock()
			require.Equal(t, map[int64]int{1: 1, 2: 2, 3: 1, 4: 1, 5: 1}, second.calls, "2 retried after its failure")
			second.mu.Unlock()
			rec.mu.Lock()
			require.Len(t, rec.hookErrs, 1, "the failure was reported")
			rec.mu.Unlock()
		})
	}
}

// TestDurableHooksOfCustomSteps: an entry resolved by a custom step's own
// write gets its durable hook recorded after the step, and delivered.
func TestDurableHooksOfCustomSteps(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			leaseExpired(t, s, "custom", 2)
			custom := recovery.NewStep("custom", func(ctx context.Context, e store.Entry) (recovery.Result, error) {
				if err := s.ResolveExpired(ctx, e.Stream, e.Number, &store.ResolveExpiredParams{Reason: "custom"}); err != nil {
					return recovery.Result{}, err
				}
				return recovery.Result{Recovered: true}, nil
			})
			sel := recovery.SelectorFunc(func(recovery.Level, string) recovery.Steps { return recovery.Steps{custom} })
			d := newDeliveries(nil)
			sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{Selector: sel}), Hooks: &cleanup.HooksConfig{Durable: d.hook}})
			require.NoError(t, err)
			defer sv.Stop()
			res, err := sv.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 2, res.Resolved["custom"])
			n, err := sv.DeliverHooks(ctx)
			require.NoError(t, err)
			require.Equal(t, 2, n)
			d.await(t, 1, 2)
			n, err = sv.DeliverHooks(ctx)
			require.NoError(t, err)
			require.Zero(t, n, "delivered once")
		})
	}
}

// TestDurableHookStopCancelsAfterGrace: Stop lets a running durable hook
// finish for Hooks.Grace, then cancels it; its record stays for a later
// delivery, and Stop returned only after the hook did.
func TestDurableHookStopCancelsAfterGrace(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	ctx := t.Context()
	leaseExpired(t, s, "grace", 1)
	started := make(chan struct{})
	var returned sync.WaitGroup
	returned.Add(1)
	var once sync.Once
	hook := func(ctx context.Context, e store.Entry) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		defer returned.Done()
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	sv, err := cleanup.New(s, &cleanup.Config{Hooks: &cleanup.HooksConfig{Durable: hook, Grace: time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, sv.Start(ctx))
	<-started
	sv.Stop()
	returned.Wait() // already returned: Stop waited for it
	st, err := s.HookStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Pending, "kept for a later delivery")
	require.Equal(t, int64(1), st.Failing)
	_, err = sv.DeliverHooks(ctx)
	require.NoError(t, err, "a stopped Service still delivers on request")
}

// TestDurableHookNeedsAHookQueue: New refuses a durable hook on a store that
// keeps no hook records, naming the field; a Service without one has no
// pending hooks to tell of.
func TestDurableHookNeedsAHookQueue(t *testing.T) {
	t.Parallel()
	type plain struct{ cleanup.Store } // hides the memory store's HookQueue
	hook := func(context.Context, store.Entry) error { return nil }
	_, err := cleanup.New(plain{memory.New(nil)}, &cleanup.Config{Hooks: &cleanup.HooksConfig{Durable: hook}})
	require.ErrorIs(t, err, store.ErrUnsupported)
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorContains(t, err, "Config.Hooks.Durable")
	_, err = cleanup.New(memory.New(nil), &cleanup.Config{Hooks: &cleanup.HooksConfig{Durable: hook, Poll: -1}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	sv, err := cleanup.New(memory.New(nil), nil)
	require.NoError(t, err)
	_, err = sv.PendingHooks(t.Context())
	require.ErrorIs(t, err, cleanup.ErrNoDurableHook)
	_, err = sv.DeliverHooks(t.Context())
	require.ErrorIs(t, err, cleanup.ErrNoDurableHook)
}

// TestDurableHookStartStopStress starts and stops Services with a durable
// hook while entries resolve, under -race; goleak (TestMain) checks that
// every goroutine ended.
func TestDurableHookStartStopStress(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	ctx := t.Context()
	leaseExpired(t, s, "stress", 20)
	hook := func(ctx context.Context, e store.Entry) error { return nil }
	for range 20 {
		sv, err := cleanup.New(s, &cleanup.Config{Hooks: &cleanup.HooksConfig{Durable: hook, Poll: time.Millisecond}})
		require.NoError(t, err)
		require.NoError(t, sv.Start(ctx))
		sv.Stop()
		sv.Stop()
		require.ErrorIs(t, sv.Start(ctx), cleanup.ErrStopped)
	}
}

// TestDurableHookClaimBounds: New refuses, naming the field, a durable hook
// whose claim (Hooks.Timeout plus QueryTimeout) would pass
// store.MaxHookClaim, which would make every claim fail and no hook run,
// and a MaxBackoff above MaxInterval; the longest claim it accepts
// delivers.
func TestDurableHookClaimBounds(t *testing.T) {
	t.Parallel()
	hook := func(context.Context, store.Entry) error { return nil }
	for _, c := range []struct {
		cfg   cleanup.Config
		blame string
	}{
		{cleanup.Config{Hooks: &cleanup.HooksConfig{Timeout: store.MaxHookClaim}}, "Config.Hooks.Timeout"},
		{cleanup.Config{Hooks: &cleanup.HooksConfig{Timeout: store.MaxHookClaim - cleanup.DefaultQueryTimeout + 1}}, "Config.Hooks.Timeout"},
		{cleanup.Config{QueryTimeout: store.MaxHookClaim - time.Hour + 1, Hooks: &cleanup.HooksConfig{Timeout: time.Hour}}, "Config.Hooks.Timeout"},
		{cleanup.Config{QueryTimeout: store.MaxHookClaim}, "Config.QueryTimeout"},
		{cleanup.Config{MaxBackoff: cleanup.MaxInterval + 1}, "Config.MaxBackoff"},
	} {
		if c.cfg.Hooks == nil {
			c.cfg.Hooks = &cleanup.HooksConfig{}
		}
		c.cfg.Hooks.Durable = hook
		_, err := cleanup.New(memory.New(nil), &c.cfg)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", c.cfg)
		require.ErrorContains(t, err, c.blame)
	}
	// Without a durable hook there is no claim: only MaxBackoff is bounded.
	sv, err := cleanup.New(memory.New(nil), &cleanup.Config{QueryTimeout: 48 * time.Hour, Hooks: &cleanup.HooksConfig{Timeout: 48 * time.Hour}})
	require.NoError(t, err)
	sv.Stop()
	_, err = cleanup.New(memory.New(nil), &cleanup.Config{MaxBackoff: cleanup.MaxInterval + 1})
	require.ErrorIs(t, err, store.ErrInvalidArgument)

	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			leaseExpired(t, s, "longclaim", 2)
			d := newDeliveries(nil)
			sv, err := cleanup.New(s, &cleanup.Config{
				MaxBackoff: cleanup.MaxInterval,
				Hooks:      &cleanup.HooksConfig{Durable: d.hook, Timeout: store.MaxHookClaim - cleanup.DefaultQueryTimeout},
			})
			require.NoError(t, err)
			defer sv.Stop()
			_, err = sv.RunOnce(ctx)
			require.NoError(t, err)
			n, err := sv.DeliverHooks(ctx)
			require.NoError(t, err, "a claim of exactly store.MaxHookClaim")
			require.Equal(t, 2, n)
			d.await(t, 1, 2)
		})
	}
}

// TestStopDoesNotWaitForDeliverHooks: a DeliverHooks call whose hook
// ignores its context holds the delivery rounds; Stop of the running
// Service still returns (its loop stops waiting for its turn), and
// DeliverHooks returns once the hook does.
func TestStopDoesNotWaitForDeliverHooks(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	ctx := t.Context()
	leaseExpired(t, s, "stuck", 1)
	started, release := make(chan struct{}), make(chan struct{})
	hook := func(context.Context, store.Entry) error {
		close(started) // called once: the record is acked below
		<-release      // ignores its context
		return nil
	}
	sv, err := cleanup.New(s, &cleanup.Config{
		Interval: time.Hour,
		Hooks:    &cleanup.HooksConfig{Durable: hook, Poll: time.Millisecond, Grace: time.Millisecond},
	})
	require.NoError(t, err)
	_, err = sv.RunOnce(ctx)
	require.NoError(t, err)
	type result struct {
		n   int
		err error
	}
	delivered := make(chan result, 1)
	go func() {
		n, err := sv.DeliverHooks(ctx)
		delivered <- result{n, err}
	}()
	<-started
	require.NoError(t, sv.Start(ctx))
	stopped := make(chan struct{})
	go func() {
		sv.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("Stop waited for a DeliverHooks call")
	}
	close(release)
	r := <-delivered
	require.NoError(t, r.err)
	require.Equal(t, 1, r.n)
	st, err := s.HookStats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Pending, "acknowledged")
}

// TestStopFromADurableHook: a durable hook the loop delivers may call
// Stop: Stop returns once the loop's other deliveries have returned, not
// waiting for the hook that called it (the loop waits for it), and the
// delivery of the calling hook is then acknowledged as usual.
func TestStopFromADurableHook(t *testing.T) {
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
				t.Error("Stop from a hook returned before the other delivery")
			}
			close(stopped)
			return nil
		}
		var err error
		sv, err = cleanup.New(s, &cleanup.Config{
			Elector: cleanup.NewLocalElector(),
			Hooks:   &cleanup.HooksConfig{Durable: hook, Concurrency: 2, Grace: time.Second},
		})
		require.NoError(t, err)
		leaseExpired(t, s, "stop", 2)
		require.NoError(t, sv.Start(context.Background()))
		<-stopped
		sv.Stop() // waits for the loop, which waited for the hook
		st, err := s.HookStats(context.Background())
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Pending, "the calling hook's delivery acknowledged, the cancelled one kept")
	})
}
