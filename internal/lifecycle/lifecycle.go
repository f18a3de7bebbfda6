package lifecycle

import (
	"context"
	"sync"
	"sync/atomic"
)

// State is where a Life is in its lifecycle.
type State int32

// The states of a Life.
const (
	// NotStarted: Start was not called, or its start function failed.
	NotStarted State = iota
	// Running: started, and the run's context has not ended.
	Running
	// Ended: started, and Start's context ended; Stop was not called.
	Ended
	// Stopped: Stop, Cancel or Drain was called. It is final.
	Stopped
)

// Life starts the goroutines of one background component, stops them and
// waits for them. Its zero value is not usable: make one with New. It is
// safe for concurrent use.
type Life struct {
	stopErr error

	mu    sync.Mutex          // serialises Start and Stop
	state atomic.Int32        // NotStarted, Running or Stopped; Ended is Running with the run's context over
	run   atomic.Pointer[run] // the current run; nil before Start and after a failed one
}

// New returns a Life that is not started. stopped is the cause of the run's
// context when Stop ends it, and the error of Start once stopped (the
// component's ErrStopped).
func New(stopped error) *Life {
	if stopped == nil {
		panic("lifecycle: nil stop error")
	}
	return &Life{stopErr: stopped}
}

// Start starts the run under ctx and calls start with the run's context,
// which ends at Stop (cause: the stop error) or when ctx ends. start
// launches the component's goroutines with Go and returns; start may be
// nil. Start returns once start has returned: the component runs. A second
// Start does nothing and returns nil; a Start after Stop returns the stop
// error. If start fails, the goroutines it launched are cancelled (cause:
// its error) and waited for, the Life stays not started, and Start returns
// the error.
func (l *Life) Start(ctx context.Context, start func(ctx context.Context) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch State(l.state.Load()) {
	case Stopped:
		return l.stopErr
	case Running:
		return nil
	}
	r := newRun(ctx)
	l.run.Store(r)
	// A Cancel that found no run to end (it does not take mu) marked the
	// Life stopped first: seen here, since it loads the run after.
	var err error
	if State(l.state.Load()) != Stopped && start != nil {
		err = start(r.ctx)
	}
	if err == nil && l.state.CompareAndSwap(int32(NotStarted), int32(Running)) {
		return nil
	}
	if err == nil { // stopped meanwhile (a Cancel, from start itself perhaps)
		err = l.stopErr
	}
	r.end(err)
	<-r.done
	l.run.Store(nil)
	return err
}

// Go runs fn in a new goroutine of the run, with the run's context, and
// reports true; Stop waits for it to return. fn must return when its
// context ends. Go runs nothing and reports false before Start, and once
// the Life is stopping (Stop, Cancel or Drain began) or its start failed.
func (l *Life) Go(fn func(ctx context.Context)) bool {
	r := l.run.Load()
	return r != nil && r.spawn(fn)
}

// State reports where the Life is, without taking a lock.
func (l *Life) State() State {
	s := State(l.state.Load())
	if s == Running && l.run.Load().ctx.Err() != nil {
		return Ended
	}
	return s
}

// Stop ends the run, cancelling its context with the stop error as cause,
// and returns once every goroutine launched with Go has returned. A Stop
// that races a Start waits for it. It is safe before Start (Start then
// returns the stop error), twice and concurrently. It must not be called
// from a goroutine of the Life (it would wait for itself): use Cancel
// there.
func (l *Life) Stop() {
	l.mu.Lock()
	done := l.Cancel()
	l.mu.Unlock()
	<-done
}

// Cancel is Stop without the wait: it marks the Life stopped, refuses new
// goroutines, cancels the run's context (cause: the stop error) and returns
// a channel that is closed once every goroutine of the run has returned.
// It takes no lock: it is safe anywhere, from the Life's goroutines and its
// start function too.
func (l *Life) Cancel() <-chan struct{} {
	return l.halt(true)
}

// Drain marks the Life stopped and refuses new goroutines, but cancels
// nothing: the running goroutines go on. It returns a channel that is
// closed once they have all returned. A later Stop or Cancel cancels those
// still running (a grace period ended).
func (l *Life) Drain() <-chan struct{} {
	return l.halt(false)
}

func (l *Life) halt(cancel bool) <-chan struct{} {
	l.state.Store(int32(Stopped))
	r := l.run.Load()
	if r == nil {
		return closed
	}
	if cancel {
		r.end(l.stopErr)
	} else {
		r.close()
	}
	return r.done
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// run is one start of a Life: its context and its goroutines.
type run struct {
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	n      int           // goroutines running
	closed bool          // no goroutine starts any more
	done   chan struct{} // closed once closed and n is 0
}

func newRun(parent context.Context) *run {
	r := &run{done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancelCause(parent)
	return r
}

func (r *run) spawn(fn func(ctx context.Context)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.n++
	go func() {
		defer r.exit()
		fn(r.ctx)
	}()
	return true
}

func (r *run) exit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n--
	if r.closed && r.n == 0 {
		close(r.done)
	}
}

// close refuses new goroutines; done closes once the running ones return.
func (r *run) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		if r.n == 0 {
			close(r.done)
		}
	}
}

// end closes the run and cancels its context with cause (the first cause
// given wins).
func (r *run) end(cause error) {
	r.close()
	r.cancel(cause)
}
