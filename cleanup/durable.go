package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/seqlease/seqlease/internal/lifecycle"
	"github.com/seqlease/seqlease/store"
)

// DefaultHookPoll is the default of HooksConfig.Poll.
const DefaultHookPoll = 5 * time.Second

// minHookRetry is the pause after a durable hook's first failure; each
// further failure doubles it, up to Config.MaxBackoff.
const minHookRetry = time.Second

// HookStatsObserver is an Observer that is also told how many durable
// hooks are pending (the metrics package's CleanupObserver exports it as a
// gauge): after the delivery loop's rounds, at most once per HooksConfig.Poll (the
// count reads every record of every process), and after every
// DeliverHooks. Its method must not block.
type HookStatsObserver interface {
	PendingHooks(st store.HookStats)
}

// deliverer delivers the durable hook (HooksConfig.Durable) of every record
// of the store's HookQueue, at least once: it claims due records, runs the
// hook on each, at most limit at a time, and deletes a record only once its
// hook returned nil; a failure makes the record due again after a backoff.
// A claim lasts the hook's timeout plus a query timeout: a deliverer that
// dies mid-delivery leaves its records to the next one after that.
type deliverer struct {
	q        store.HookQueue
	hook     HookFunc
	timeout  time.Duration
	limit    int
	grace    time.Duration
	poll     time.Duration
	maxPause time.Duration
	qTimeout time.Duration
	logger   *slog.Logger
	observer Observer

	kick chan struct{} // a resolution recorded hooks: deliver now

	life  *lifecycle.Life // the delivery loop
	count hookCount       // the loop's deliveries, and those whose hook called Stop
	// graceCtx is cancelled when Stop's grace period ends: the running
	// hooks are cancelled then.
	graceCtx    context.Context
	graceCancel context.CancelFunc

	// turn serialises rounds (the loop and DeliverHooks): a one-slot
	// semaphore, so that the loop, stopping, need not wait for a
	// DeliverHooks to finish.
	turn     chan struct{}
	reported time.Time // when the loop last reported; while holding turn
}

func newDeliverer(q store.HookQueue, sv *Service, hc *HooksConfig) *deliverer {
	d := &deliverer{
		q: q, hook: hc.Durable,
		timeout:  sv.hooks.timeout,
		limit:    sv.hooks.limit,
		grace:    sv.hooks.grace,
		poll:     max(hc.Poll, 0),
		maxPause: sv.maxBackoff,
		qTimeout: sv.qTimeout,
		logger:   sv.logger,
		observer: sv.observer,
		kick:     make(chan struct{}, 1),
		turn:     make(chan struct{}, 1),
		life:     lifecycle.New(ErrStopped),
	}
	if d.poll == 0 {
		d.poll = DefaultHookPoll
	}
	d.graceCtx, d.graceCancel = context.WithCancel(context.Background())
	return d
}

// wake has the loop deliver at once (a resolution recorded hooks).
func (d *deliverer) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// start runs the delivery loop until stop or until ctx ends.
func (d *deliverer) start(ctx context.Context) error {
	return d.life.Start(ctx, func(context.Context) error {
		d.life.Go(d.loop)
		return nil
	})
}

// stop ends the loop and waits for it, giving the running hooks (whose
// contexts outlive the loop's) up to the grace period before it cancels
// them. It is safe before start and twice. From a hook of the loop (self),
// it waits for the loop's other deliveries only: the loop itself waits for
// the calling hook.
func (d *deliverer) stop(self bool) {
	ended := d.life.Cancel() // the loop ends at the latest after the grace cancel below
	if self {
		defer d.count.stopping()()
		ended = d.count.others()
	}
	waitUpTo(ended, d.grace)
	d.graceCancel()
	<-ended
}

func (d *deliverer) loop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.kick:
		}
		if _, err := d.deliver(ctx, true); err != nil && ctx.Err() == nil {
			d.logger.Warn("cleanup: durable hooks: a round failed; retrying", slog.Any("error", err),
				slog.Duration("retry_in", d.poll))
		}
		t.Reset(d.poll + rand.N(d.poll/10+1))
	}
}

// deliver runs rounds until no record is due: it claims up to limit
// records, runs their hooks concurrently and acknowledges or retries each.
// It returns how many hooks it delivered. The hooks of the loop (loop
// true) outlive ctx until Stop's grace period ends; the others end with
// ctx.
func (d *deliverer) deliver(ctx context.Context, loop bool) (int, error) {
	select {
	case d.turn <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-d.turn }()
	delivered := 0
	defer d.report(loop)
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, d.qTimeout)
		hs, err := d.q.ClaimHooks(qctx, &store.ClaimHooksParams{Limit: d.limit, For: d.timeout + d.qTimeout})
		cancel()
		if err != nil {
			return delivered, fmt.Errorf("cleanup: claim hooks: %w", err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, h := range hs {
			if loop {
				d.count.enter()
			}
			wg.Go(func() {
				if loop {
					defer d.count.exit()
				}
				if d.run(ctx, loop, h) {
					mu.Lock()
					delivered++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(hs) < d.limit {
			return delivered, nil
		}
	}
	return delivered, ctx.Err()
}

// run delivers one claimed record; true if its hook succeeded.
func (d *deliverer) run(ctx context.Context, loop bool, h store.PendingHook) bool {
	e := h.Entry
	parent, stop := ctx, func() bool { return false }
	if loop {
		parent = context.WithoutCancel(ctx)
	}
	hctx, cancel := context.WithTimeout(parent, d.timeout)
	call := d.hook
	if loop {
		stop = context.AfterFunc(d.graceCtx, cancel)
		call = func(ctx context.Context, e store.Entry) error { return callDurableHook(ctx, d.hook, e) }
	}
	err := call(hctx, e)
	stop()
	cancel()
	// The record is settled even when the loop is stopping: a hook that ran
	// is acknowledged, or its failure recorded.
	qctx, qcancel := context.WithTimeout(context.WithoutCancel(ctx), d.qTimeout)
	defer qcancel()
	attrs := []any{slog.String("stream", e.Stream), slog.Int64("number", e.Number),
		slog.String("operation_id", e.OperationID), slog.Int("attempt", h.Attempts)}
	if err == nil {
		if _, aerr := d.q.AckHook(qctx, e.Stream, e.Number, h.Attempts); aerr != nil {
			// delivered again later: at least once
			d.logger.Warn("cleanup: durable hook ran but its record could not be deleted; it runs again",
				append(attrs, slog.Any("error", aerr))...)
		}
		return true
	}
	pause := d.retryPause(h.Attempts)
	d.logger.Warn("cleanup: durable hook failed; retrying", append(attrs, slog.Any("error", err),
		slog.Duration("retry_in", pause), slog.Time("pending_since", h.CreatedAt))...)
	if d.observer != nil {
		d.observer.HookFailed(e, err)
	}
	if _, rerr := d.q.RetryHook(qctx, e.Stream, e.Number, h.Attempts, pause, err.Error()); rerr != nil {
		d.logger.Warn("cleanup: durable hook: recording its failure failed; it is due again when its claim ends",
			append(attrs, slog.Any("error", rerr))...)
	}
	return false
}

// retryPause is the pause after a record's attempts-th failed delivery:
// minHookRetry doubled per failure, randomized by ±25%, at most maxPause.
func (d *deliverer) retryPause(attempts int) time.Duration {
	p := minHookRetry << min(attempts-1, 20)
	p = min(p, d.maxPause)
	return min(p/4*3+rand.N(p/2+1), d.maxPause)
}

// report tells a HookStatsObserver how many hooks are pending: after a
// DeliverHooks, and after a round of the loop if the loop did not report
// in the last poll period (a resolution kicks a round at once, so rounds
// may come much faster than that). The caller holds turn.
func (d *deliverer) report(loop bool) {
	o, ok := d.observer.(HookStatsObserver)
	if !ok {
		return
	}
	if loop {
		if !d.reported.IsZero() && time.Since(d.reported) < d.poll {
			return
		}
		d.reported = time.Now()
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.qTimeout)
	defer cancel()
	if st, err := d.q.HookStats(ctx); err == nil {
		o.PendingHooks(st)
	}
}

// ErrNoDurableHook is returned by DeliverHooks and PendingHooks of a
// Service without a durable hook (HooksConfig.Durable).
var ErrNoDurableHook = errors.New("cleanup: no durable hook configured")

// DeliverHooks delivers the durable hooks that are due, in the caller's
// goroutine, until none is: for tests and operator tools (the running loop
// does the same in the background). The hooks run under ctx (and
// HooksConfig.Timeout), also on a stopped Service. It returns how many hooks ran
// without error.
//
// One round runs at a time: DeliverHooks waits (until ctx ends) for a
// round of the loop, and the loop for a DeliverHooks, whose hooks are
// cancelled only by ctx and HooksConfig.Timeout, not by Stop. A round waits for
// each of its hooks to return, so a hook that ignores its context blocks
// DeliverHooks until it returns (and holds the loop's deliveries back
// meanwhile); Stop does not wait for it.
func (sv *Service) DeliverHooks(ctx context.Context) (int, error) {
	if sv.durable == nil {
		return 0, ErrNoDurableHook
	}
	return sv.durable.deliver(ctx, false)
}

// PendingHooks counts the durable hooks not yet delivered, across every
// process that shares the store: a count that stays up, or an OldestAt
// that grows old, is a hook that keeps failing (the logs say why).
func (sv *Service) PendingHooks(ctx context.Context) (store.HookStats, error) {
	if sv.durable == nil {
		return store.HookStats{}, ErrNoDurableHook
	}
	return sv.durable.q.HookStats(ctx)
}
