package cleanup

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// TestRetryPauseFitsRetryHook: with the longest MaxBackoff New accepts, the
// pause after any number of failed deliveries is one RetryHook takes.
func TestRetryPauseFitsRetryHook(t *testing.T) {
	t.Parallel()
	hook := func(context.Context, store.Entry) error { return nil }
	sv, err := New(memory.New(nil), &Config{MaxBackoff: MaxInterval, Hooks: &HooksConfig{Durable: hook}})
	require.NoError(t, err)
	defer sv.Stop()
	var longest time.Duration
	for attempts := 1; attempts <= 100; attempts++ {
		p := sv.durable.retryPause(attempts)
		_, err := store.ValidateRetryHook("s", 1, attempts, p, "")
		require.NoError(t, err, "attempt %d: pause %v", attempts, p)
		longest = max(longest, p)
	}
	require.GreaterOrEqual(t, longest, MaxInterval*3/4, "the pauses grow to MaxBackoff")
}

// statsCounter counts the reports of pending hooks.
type statsCounter struct{ n atomic.Int32 }

func (c *statsCounter) Handled(store.Entry, time.Time, recovery.Result, error) {}
func (c *statsCounter) Cycle(CycleResult, error)                               {}
func (c *statsCounter) Cascade(bool)                                           {}
func (c *statsCounter) HookFailed(store.Entry, error)                          {}
func (c *statsCounter) PendingHooks(store.HookStats)                           { c.n.Add(1) }

// TestLoopReportsOncePerPoll: the delivery loop's rounds count the pending
// hooks (a count(*) on PostgreSQL) at most once per Hooks.Poll, however often
// resolutions kick them; DeliverHooks counts after every call.
func TestLoopReportsOncePerPoll(t *testing.T) {
	t.Parallel()
	hook := func(context.Context, store.Entry) error { return nil }
	c := &statsCounter{}
	sv, err := New(memory.New(nil), &Config{Observer: c, Hooks: &HooksConfig{Durable: hook, Poll: time.Hour}})
	require.NoError(t, err)
	defer sv.Stop()
	ctx := t.Context()
	for range 3 {
		_, err := sv.durable.deliver(ctx, true)
		require.NoError(t, err)
	}
	require.Equal(t, int32(1), c.n.Load(), "the loop's first round reports, the next ones within Hooks.Poll do not")
	for range 2 {
		_, err := sv.DeliverHooks(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, int32(3), c.n.Load(), "each DeliverHooks reports")
	sv.durable.reported = time.Now().Add(-time.Hour) // a poll period passed
	_, err = sv.durable.deliver(ctx, true)
	require.NoError(t, err)
	require.Equal(t, int32(4), c.n.Load(), "the loop reports again after Hooks.Poll")
}
