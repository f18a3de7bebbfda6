package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

	life *lifecycle.Life // the workers; their context ends when the grace period ends

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
	for r.workers < r.limit && r.workers < len(r.queue) && r.life.Go(r.work) {
		r.workers++
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
	if err := t.h(hctx, t.e); err != nil {
		r.logger.Warn("cleanup: hook failed", slog.String("stream", t.e.Stream),
			slog.Int64("number", t.e.Number), slog.Any("error", err))
		if r.observer != nil {
			r.observer.HookFailed(t.e, err)
		}
	}
}

// stop queues nothing more and lets the queued and running hooks finish
// for up to the grace period; then it cancels those still running, waits
// for them, and drops and reports those still queued.
func (r *hookRunner) stop() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	drained := r.life.Drain() // the workers end at the latest after the Stop below
	waitUpTo(drained, r.grace)
	r.mu.Lock()
	r.stopped = true
	left := r.queue
	r.queue = nil
	r.mu.Unlock()
	r.life.Stop() // cancels the hooks still running, and waits for them
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
