package lifecycle_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqlease/seqlease/internal/lifecycle"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errStopped = errors.New("test: stopped")

// worker is a goroutine of a Life that records its context's cause and
// whether it returned.
type worker struct {
	cause    atomic.Pointer[error]
	returned atomic.Bool
}

func (w *worker) run(ctx context.Context) {
	<-ctx.Done()
	cause := context.Cause(ctx)
	w.cause.Store(&cause)
	w.returned.Store(true)
}

func (w *worker) causeErr() error {
	if p := w.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// start is a start function that launches w.
func start(l *lifecycle.Life, w *worker) func(context.Context) error {
	return func(context.Context) error {
		if !l.Go(w.run) {
			return errors.New("Go refused in start")
		}
		return nil
	}
}

func TestStartThenStop(t *testing.T) {
	t.Parallel()
	l := lifecycle.New(errStopped)
	require.Equal(t, lifecycle.NotStarted, l.State())
	var w worker
	require.NoError(t, l.Start(context.Background(), start(l, &w)))
	require.Equal(t, lifecycle.Running, l.State())
	require.False(t, w.returned.Load())
	l.Stop()
	require.True(t, w.returned.Load(), "Stop returned before its goroutine")
	require.ErrorIs(t, w.causeErr(), errStopped, "the cause tells a Stop")
	require.Equal(t, lifecycle.Stopped, l.State())
	require.ErrorIs(t, l.Start(context.Background(), start(l, &w)), errStopped)
}

func TestSecondStartDoesNothing(t *testing.T) {
	t.Parallel()
	l := lifecycle.New(errStopped)
	calls := 0
	fn := func(context.Context) error { calls++; return nil }
	require.NoError(t, l.Start(context.Background(), fn))
	require.NoError(t, l.Start(context.Background(), fn))
	require.Equal(t, 1, calls)
	l.Stop()
}

func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	l := lifecycle.New(errStopped)
	l.Stop()
	require.Equal(t, lifecycle.Stopped, l.State())
	called := false
	err := l.Start(context.Background(), func(context.Context) error { called = true; return nil })
	require.ErrorIs(t, err, errStopped)
	require.False(t, called, "a stopped Life runs no start function")
	require.False(t, l.Go(func(context.Context) {}))
	l.Stop()
}

func TestGoRefused(t *testing.T) {
	t.Parallel()
	l := lifecycle.New(errStopped)
	require.False(t, l.Go(func(context.Context) { t.Error("ran before Start") }))
	require.NoError(t, l.Start(context.Background(), nil))
	var w worker
	require.True(t, l.Go(w.run), "Go while running")
	l.Stop()
	require.True(t, w.returned.Load())
	require.False(t, l.Go(func(context.Context) { t.Error("ran after Stop") }))
}

// TestStopWaitsEveryCall: two concurrent Stops and a third after them each
// return only once the goroutine returned, however long it takes after its
// context ends.
func TestStopWaitsEveryCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := lifecycle.New(errStopped)
		release := make(chan struct{})
		var returned atomic.Bool
		require.NoError(t, l.Start(context.Background(), func(context.Context) error {
			l.Go(func(ctx context.Context) {
				<-ctx.Done()
				<-release // slow to return
				returned.Store(true)
			})
			return nil
		}))
		var stops sync.WaitGroup
		var stopped atomic.Int32
		for range 2 {
			stops.Go(func() {
				l.Stop()
				require.True(t, returned.Load(), "a Stop returned before the goroutine")
				stopped.Add(1)
			})
		}
		synctest.Wait()
		require.Zero(t, stopped.Load(), "Stop did not wait")
		close(release)
		stops.Wait()
		l.Stop()
		require.EqualValues(t, 2, stopped.Load())
	})
}

// TestParentCancelEndsTheRun: when Start's context ends, the goroutines
// see it (cause: the parent's), the Life reports Ended, Start still
// returns nil, and Stop still works.
func TestParentCancelEndsTheRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := lifecycle.New(errStopped)
		ctx, cancel := context.WithCancel(context.Background())
		var w worker
		require.NoError(t, l.Start(ctx, start(l, &w)))
		cancel()
		require.Equal(t, lifecycle.Ended, l.State())
		synctest.Wait()
		require.True(t, w.returned.Load(), "the parent's cancel ended the goroutine")
		require.ErrorIs(t, w.causeErr(), context.Canceled)
		require.NotErrorIs(t, w.causeErr(), errStopped)
		require.NoError(t, l.Start(context.Background(), nil), "Start on an ended Life")
		l.Stop()
		require.Equal(t, lifecycle.Stopped, l.State())
	})
}

// TestFailedStart: the goroutines a failed start launched are cancelled
// with its error and waited for; the Life can start again.
func TestFailedStart(t *testing.T) {
	t.Parallel()
	l := lifecycle.New(errStopped)
	errBoom := errors.New("boom")
	var w worker
	err := l.Start(context.Background(), func(context.Context) error {
		l.Go(w.run)
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.True(t, w.returned.Load(), "Start returned before the failed run's goroutine")
	require.ErrorIs(t, w.causeErr(), errBoom)
	require.Equal(t, lifecycle.NotStarted, l.State())
	require.False(t, l.Go(func(context.Context) { t.Error("ran after a failed start") }))

	var w2 worker
	require.NoError(t, l.Start(context.Background(), start(l, &w2)))
	require.Equal(t, lifecycle.Running, l.State())
	l.Stop()
	require.True(t, w2.returned.Load())
}

// TestCancelFromInside: a goroutine of the Life ends the run itself with
// Cancel; a Stop then waits for it.
func TestCancelFromInside(t *testing.T) {
	t.Parallel()
	l := lifecycle.New(errStopped)
	var w worker
	inside := make(chan (<-chan struct{}))
	require.NoError(t, l.Start(context.Background(), func(context.Context) error {
		l.Go(w.run)
		l.Go(func(ctx context.Context) { inside <- l.Cancel() })
		return nil
	}))
	done := <-inside
	<-done
	require.True(t, w.returned.Load())
	require.ErrorIs(t, w.causeErr(), errStopped)
	require.Equal(t, lifecycle.Stopped, l.State())
	l.Stop()
	require.ErrorIs(t, l.Start(context.Background(), nil), errStopped)
}

// TestCancelFromStart: a start function that cancels the Life makes Start
// return the stop error once the goroutines it launched returned.
func TestCancelFromStart(t *testing.T) {
	t.Parallel()
	l := lifecycle.New(errStopped)
	var w worker
	err := l.Start(context.Background(), func(ctx context.Context) error {
		l.Go(w.run)
		l.Cancel()
		require.False(t, l.Go(w.run), "Go after Cancel")
		return nil
	})
	require.ErrorIs(t, err, errStopped)
	require.True(t, w.returned.Load())
	require.Equal(t, lifecycle.Stopped, l.State())
	l.Stop()
}

// TestConcurrentStartWaitsForTheFirst: a Start that finds another one
// running returns only once that one's start function returned.
func TestConcurrentStartWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	l := lifecycle.New(errStopped)
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	first := make(chan error, 1)
	go func() {
		first <- l.Start(context.Background(), func(context.Context) error {
			close(entered)
			<-release
			finished.Store(true)
			return nil
		})
	}()
	<-entered
	second := make(chan bool, 1)
	go func() {
		require.NoError(t, l.Start(context.Background(), func(context.Context) error {
			t.Error("the second start function ran")
			return nil
		}))
		second <- finished.Load()
	}()
	close(release)
	require.True(t, <-second, "the second Start returned before the first's start function")
	require.NoError(t, <-first)
	l.Stop()
}

// TestStopRacingStartWaitsForIt: a Stop that comes while a start function
// runs returns only after it, and after the goroutines it launched.
func TestStopRacingStartWaitsForIt(t *testing.T) {
	t.Parallel()
	l := lifecycle.New(errStopped)
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	var w worker
	first := make(chan error, 1)
	go func() {
		first <- l.Start(context.Background(), func(context.Context) error {
			close(entered)
			<-release
			l.Go(w.run)
			finished.Store(true)
			return nil
		})
	}()
	<-entered
	stopping, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		close(stopping)
		l.Stop()
		require.True(t, finished.Load(), "Stop returned before the start function")
		require.True(t, w.returned.Load(), "Stop returned before the goroutine")
		close(stopped)
	}()
	<-stopping
	runtime.Gosched() // let Stop reach the lock; it must wait there in any case
	close(release)
	<-stopped
	require.NoError(t, <-first)
}

// TestDrain: Drain cancels nothing and refuses new goroutines; its channel
// closes when the running ones return; a Stop cancels those still running.
func TestDrain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := lifecycle.New(errStopped)
		require.NoError(t, l.Start(context.Background(), nil))
		finish := make(chan struct{})
		var quick, slow worker
		l.Go(func(ctx context.Context) { <-finish; quick.returned.Store(true) })
		l.Go(slow.run)
		drained := l.Drain()
		require.False(t, l.Go(func(context.Context) { t.Error("ran after Drain") }))
		require.Equal(t, lifecycle.Stopped, l.State())
		close(finish)
		synctest.Wait()
		require.True(t, quick.returned.Load())
		require.False(t, slow.returned.Load(), "Drain cancelled the run")
		select {
		case <-drained:
			t.Fatal("drained with a goroutine running")
		default:
		}
		l.Stop()
		require.True(t, slow.returned.Load())
		require.ErrorIs(t, slow.causeErr(), errStopped)
		<-drained
	})
}

// TestStartStopStress runs Start, Stop, Cancel, Go and State at once on
// many Lives (with -race): after every Stop no goroutine of the Life runs,
// and a Start that succeeded before a Stop began had its goroutine waited.
func TestStartStopStress(t *testing.T) {
	t.Parallel()
	for range 200 {
		l := lifecycle.New(errStopped)
		var running atomic.Int32
		body := func(ctx context.Context) {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
		}
		parent, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				switch i % 4 {
				case 0:
					if err := l.Start(parent, func(context.Context) error { l.Go(body); return nil }); err != nil {
						require.ErrorIs(t, err, errStopped)
					}
				case 1:
					l.Go(body)
					_ = l.State()
				case 2:
					l.Stop()
					require.Zero(t, running.Load(), "a goroutine outlived Stop")
				case 3:
					if i == 3 {
						cancel()
					}
					<-l.Cancel()
				}
			})
		}
		wg.Wait()
		l.Stop()
		require.Zero(t, running.Load())
		require.Equal(t, lifecycle.Stopped, l.State())
		cancel()
	}
}
