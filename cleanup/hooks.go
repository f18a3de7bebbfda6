package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/seqlease/seqlease/internal/lifecycle"
	"github.com/seqlease/seqlease/store"
)

// ErrHookDropped is reported (Observer.HookFailed) for a hook that never
// ran: the queue was full (HooksConfig.Queue), Stop's grace period
// (HooksConfig.Grace) ended first, or the Service was stopped already.
var ErrHookDropped = errors.New("cleanup: hook dropped")

// hookRunner runs the hooks of resolved entries on at most limit
// goroutines, from a queue of at most capacity hooks, so a mass expiry
// neither starts a goroutine per hook and entry nor holds unbounded memory.
// Stop lets the queue drain for a grace period, then cancels the running
// hooks and drops the rest.
type hookRunner struct {
	hooks    []HookFunc
	timeout  time.Duration
	limit    int
	capacity int
	grace    time.Duration
	logger   *slog.Logger
	observer Observer

	life  *lifecycle.Life // the workers; their context ends when the grace period ends
	count hookCount       // the workers, and those whose hook called Stop

	mu      sync.Mutex
	queue   []hookTask
	workers int
	closed  bool // Stop began: nothing more is queued
	stopped bool // the grace period ended: the workers take nothing more
	full    bool // the last add found the queue full (logged once per episode)
}

type hookTask struct {
	ctx context.Context // the recovery's values, without its cancellation
	h   HookFunc
	e   store.Entry
}

func newHookRunner(hooks []HookFunc, timeout time.Duration, limit, capacity int, grace time.Duration, logger *slog.Logger, observer Observer) *hookRunner {
	r := &hookRunner{hooks: hooks, timeout: timeout, limit: limit, capacity: capacity, grace: grace, logger: logger, observer: observer,
		life: lifecycle.New(ErrStopped)}
	_ = r.life.Start(context.Background(), nil) // cannot fail: a new Life; the workers run from New to stop
	return r
}

// add queues the hooks of e, which this Service just resolved; those that
// do not fit are dropped and reported.
func (r *hookRunner) add(ctx context.Context, e store.Entry) {
	if len(r.hooks) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.drop(len(r.hooks), e, fmt.Errorf("%w: the Service is stopped", ErrHookDropped))
		return
	}
	queued := 0
	for _, h := range r.hooks {
		if len(r.queue) < r.capacity {
			r.queue = append(r.queue, hookTask{ctx: ctx, h: h, e: e})
			queued++
		}
	}
	// Go refuses nothing here: stop drains the Life only once closed is set.
	// The worker counts before it can end: it takes r.mu first.
	for r.workers < r.limit && r.workers < len(r.queue) && r.life.Go(r.work) {
		r.workers++
		r.count.enter()
	}
	dropped := len(r.hooks) - queued
	newlyFull := dropped > 0 && !r.full
	r.full = dropped > 0
	r.mu.Unlock()
	if newlyFull {
		r.logger.Warn("cleanup: hook queue full; dropping the hooks of resolved entries until it drains",
			slog.Int("hook_queue", r.capacity))
	}
	r.drop(dropped, e, fmt.Errorf("%w: the queue is full (Hooks.Queue %d)", ErrHookDropped, r.capacity))
}

// drop reports n hooks of e that will not run.
func (r *hookRunner) drop(n int, e store.Entry, err error) {
	for range n {
		r.logger.Debug("cleanup: hook dropped", slog.String("stream", e.Stream), slog.Int64("number", e.Number), slog.Any("error", err))
		if r.observer != nil {
			r.observer.HookFailed(e, err)
		}
	}
}

// work runs queued hooks until the queue is empty or the runner stops; ctx
// ends when stop's grace period ends.
func (r *hookRunner) work(ctx context.Context) {
	for {
		r.mu.Lock()
		if len(r.queue) == 0 || r.stopped {
			r.workers--
			r.mu.Unlock()
			r.count.exit()
			return
		}
		t := r.queue[0]
		r.queue[0] = hookTask{}
		r.queue = r.queue[1:]
		r.mu.Unlock()
		r.run(ctx, t)
	}
}

// run runs one hook with the values of t.ctx, cancelled when its timeout
// passes or when ctx (the workers') ends.
func (r *hookRunner) run(ctx context.Context, t hookTask) {
	hctx, cancel := context.WithTimeout(t.ctx, r.timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	if err := callHook(hctx, t.h, t.e); err != nil {
		r.logger.Warn("cleanup: hook failed", slog.String("stream", t.e.Stream),
			slog.Int64("number", t.e.Number), slog.Any("error", err))
		if r.observer != nil {
			r.observer.HookFailed(t.e, err)
		}
	}
}

// stop queues nothing more and lets the queued and running hooks finish
// for up to the grace period; then it cancels those still running, waits
// for them, and drops and reports those still queued. From a hook (self),
// it waits for the other workers only.
func (r *hookRunner) stop(self bool) {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	drained := r.life.Drain() // the workers end at the latest after the Stop below
	if self {
		defer r.count.stopping()()
		drained = r.count.others()
	}
	waitUpTo(drained, r.grace)
	r.mu.Lock()
	r.stopped = true
	left := r.queue
	r.queue = nil
	r.mu.Unlock()
	if self {
		r.life.Cancel() // cancels the hooks still running, this one's too
		<-drained
	} else {
		r.life.Stop() // cancels the hooks still running, and waits for them
	}
	if len(left) > 0 {
		r.logger.Warn("cleanup: stopped with hooks not run: the grace period ended", slog.Int("hooks", len(left)),
			slog.Duration("hook_grace", r.grace))
	}
	for _, t := range left {
		r.drop(1, t.e, fmt.Errorf("%w: Stop's grace period (Hooks.Grace %v) ended first", ErrHookDropped, r.grace))
	}
}

// waitUpTo waits until c is closed or grace has passed.
func waitUpTo(c <-chan struct{}, grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c:
	case <-t.C:
	}
}

// A hook may call Stop. Stop must then not wait for the goroutine that runs
// it, which waits for Stop: it waits for the others, and the Service has
// stopped once that hook returns. Stop learns that a hook called it from
// the calling goroutine's stack: a hook of this package runs below
// callHook (a best-effort hook, or a durable one the loop delivers) or
// callDurableHook.

// callHook runs a best-effort hook.
//
//go:noinline
func callHook(ctx context.Context, h HookFunc, e store.Entry) error { return h(ctx, e) }

// callDurableHook runs a durable hook that the delivery loop delivers.
//
//go:noinline
func callDurableHook(ctx context.Context, h HookFunc, e store.Entry) error { return h(ctx, e) }

// The functions' names, as the frames of a stack give them.
var (
	hookFrame    = runtime.FuncForPC(reflect.ValueOf(callHook).Pointer()).Name()
	durableFrame = runtime.FuncForPC(reflect.ValueOf(callDurableHook).Pointer()).Name()
)

// hookCaller reports whether the calling goroutine runs a best-effort hook
// or a durable hook of the delivery loop.
func hookCaller() (bestEffort, durable bool) {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	for n == len(pcs) { // a deep stack: read it all
		pcs = make([]uintptr, 2*len(pcs))
		n = runtime.Callers(2, pcs)
	}
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		switch f.Function {
		case hookFrame:
			return true, false
		case durableFrame:
			return false, true
		}
		if !more {
			return false, false
		}
	}
}

// hookCount counts the goroutines of a runner that run hooks, and those
// among them whose hook is in Stop, so that a Stop from a hook waits for the
// others only.
type hookCount struct {
	mu      sync.Mutex
	running int
	inStop  int
	settled chan struct{} // closed when running == inStop; made by others
}

func (c *hookCount) enter() {
	c.mu.Lock()
	c.running++
	c.mu.Unlock()
}

func (c *hookCount) exit() {
	c.mu.Lock()
	c.running--
	c.settleLocked()
	c.mu.Unlock()
}

// stopping counts the calling goroutine as one in Stop until the function
// it returns is called.
func (c *hookCount) stopping() func() {
	c.mu.Lock()
	c.inStop++
	c.settleLocked()
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.inStop--
		c.mu.Unlock()
	}
}

// others returns a channel closed once every goroutine left is in Stop.
func (c *hookCount) others() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running <= c.inStop {
		return closedChan
	}
	if c.settled == nil {
		c.settled = make(chan struct{})
	}
	return c.settled
}

// closedChan is a closed channel.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c *hookCount) settleLocked() {
	if c.settled != nil && c.running <= c.inStop {
		close(c.settled)
		c.settled = nil
	}
}
