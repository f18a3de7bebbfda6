package cleanup_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/store/memory"
)

// TestStatus follows Status through a Service's life: not running before
// Start; a pass recorded by the first cycle, with the failed recoveries of
// none; failures counted while listing fails and cleared by the next pass;
// not running after Stop, the last pass kept.
func TestStatus(t *testing.T) {
	t.Parallel()
	f := &failingStore{backend: memory.New(nil)}
	sv, err := cleanup.New(f, &cleanup.Config{Interval: time.Hour})
	require.NoError(t, err)
	defer sv.Stop()
	st := sv.Status()
	require.False(t, st.Running)
	require.True(t, st.Started.IsZero())
	require.True(t, st.LastPass.IsZero())
	require.Equal(t, time.Hour, st.Interval)

	before := time.Now()
	require.NoError(t, sv.Start(t.Context()))
	require.Eventually(t, func() bool { return !sv.Status().LastPass.IsZero() }, 10*time.Second, time.Millisecond,
		"the cycle at Start is a pass")
	st = sv.Status()
	require.True(t, st.Running)
	require.False(t, st.Started.Before(before))
	require.False(t, st.LastPass.Before(st.Started))
	require.Zero(t, st.Failures)

	f.broken.Store(true)
	_, err = sv.RunOnce(context.Background())
	require.ErrorContains(t, err, "database is down")
	st = sv.Status()
	require.Equal(t, 1, st.Failures)
	require.ErrorContains(t, st.LastError, "database is down")
	pass := st.LastPass

	f.broken.Store(false)
	_, err = sv.RunOnce(context.Background())
	require.NoError(t, err)
	st = sv.Status()
	require.Zero(t, st.Failures)
	require.NoError(t, st.LastError)
	require.True(t, st.LastPass.After(pass))

	sv.Stop()
	st = sv.Status()
	require.False(t, st.Running)
	require.False(t, st.LastPass.IsZero())
}

// TestStatusEndsWithItsContext: a loop whose context ended runs no more.
func TestStatusEndsWithItsContext(t *testing.T) {
	t.Parallel()
	sv, err := cleanup.New(memory.New(nil), nil)
	require.NoError(t, err)
	defer sv.Stop()
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, sv.Start(ctx))
	require.True(t, sv.Status().Running)
	cancel()
	require.Eventually(t, func() bool { return !sv.Status().Running }, 10*time.Second, time.Millisecond)
}
