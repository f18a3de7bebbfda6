package cleanup

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// hookRunner runs the hooks of resolved entries on at most limit
// goroutines, from a queue, so a mass expiry does not start a goroutine per
// hook and entry. Stop cancels the running hooks and drops the queue.
type hookRunner struct {
	hooks    []HookFunc
	timeout  time.Duration
	limit    int
	logger   *slog.Logger
	observer Observer

	ctx    context.Context // cancelled by stop
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []hookTask
	workers int
	stopped bool
	wg      sync.WaitGroup
}

type hookTask struct {
	ctx context.Context // the recovery's values, without its cancellation
	h   HookFunc
	e   store.Entry
}

func newHookRunner(hooks []HookFunc, timeout time.Duration, limit int, logger *slog.Logger, observer Observer) *hookRunner {
	r := &hookRunner{hooks: hooks, timeout: timeout, limit: limit, logger: logger, observer: observer}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// add queues the hooks of e, which this Service just resolved.
func (r *hookRunner) add(ctx context.Context, e store.Entry) {
	if len(r.hooks) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, h := range r.hooks {
		r.queue = append(r.queue, hookTask{ctx: ctx, h: h, e: e})
	}
	for r.workers < r.limit && r.workers < len(r.queue) {
		r.workers++
		r.wg.Go(r.work)
	}
}

// work runs queued hooks until the queue is empty or the runner stops.
func (r *hookRunner) work() {
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
		r.run(t)
	}
}

func (r *hookRunner) run(t hookTask) {
	ctx, cancel := context.WithTimeout(t.ctx, r.timeout)
	defer cancel()
	stop := context.AfterFunc(r.ctx, cancel)
	defer stop()
	if err := t.h(ctx, t.e); err != nil {
		r.logger.Warn("cleanup: hook failed", slog.String("stream", t.e.Stream),
			slog.Int64("number", t.e.Number), slog.Any("error", err))
		if r.observer != nil {
			r.observer.HookFailed(t.e, err)
		}
	}
}

// stop cancels the running hooks, waits for them, and drops the queue.
func (r *hookRunner) stop() {
	r.mu.Lock()
	r.stopped = true
	r.cancel()
	r.mu.Unlock()
	r.wg.Wait()
	r.mu.Lock()
	dropped := len(r.queue)
	r.queue = nil
	r.mu.Unlock()
	if dropped > 0 {
		r.logger.Warn("cleanup: stopped with hooks not run", slog.Int("hooks", dropped))
	}
}
