package cleanup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// Store is what the loop needs of a backend (store/memory, store/postgres).
type Store interface {
	ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error)
	ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error)
	recovery.Recoverer
	recovery.Resolver
}

// TTLBooster is the Leaser whose default lease duration cascade mode raises
// (*sequence.Leaser).
type TTLBooster interface {
	BoostTTL(factor float64)
}

// HookFunc releases what an expired operation held: its locks, temp files,
// cache entries. Hooks run for every expired lease the loop handles,
// concurrently and with Config.HookTimeout; a failing hook is logged and
// never delays the resolution of the number. A hook must return when its
// context ends: Stop waits for it.
type HookFunc func(ctx context.Context, e store.Entry) error

// Defaults of Config.
const (
	DefaultInterval         = 30 * time.Second
	DefaultBatchSize        = 1000
	DefaultCascadeThreshold = 100
	DefaultCascadeBatch     = 100
	DefaultCascadeDelay     = 100 * time.Millisecond
	DefaultCascadeTTLFactor = 2.0
	DefaultHookTimeout      = 10 * time.Second
	DefaultMaxBackoff       = time.Minute
	DefaultQueryTimeout     = 30 * time.Second
)

// Config configures a Service. A nil *Config means the defaults; so does the
// zero value of each field.
type Config struct {
	// Interval is the time between cycles (a cycle also runs at Start),
	// jittered by up to a tenth. Default: DefaultInterval (30 s).
	Interval time.Duration
	// Selector picks the recovery steps for a load level and kind. Default:
	// recovery.StepSelector with the Gap step, plus PartialWork when
	// WorkTracker is set and Retry when OperationTracker is set.
	Selector recovery.Selector
	// WorkTracker and OperationTracker feed the default Selector's
	// PartialWork and Retry steps. Optional.
	WorkTracker      recovery.WorkTracker
	OperationTracker recovery.OperationTracker
	// Probe classifies the load. Default: recovery.DefaultProbe.
	Probe recovery.LoadProbe
	// PoolSaturation reports the share of the connection pool in use
	// (0..1), a signal for Probe. Optional.
	PoolSaturation func() float64
	// Elector makes one process at a time clean a stream. Default: an
	// in-process elector, which is right only when a single process runs
	// cleanup; with several, pass a lease-backed one (LeaseElector).
	Elector Elector
	// BatchSize is how many expired leases one query lists. Default:
	// DefaultBatchSize.
	BatchSize int
	// CascadeThreshold is the number of expired leases in one scan above
	// which the cycle runs in cascade mode. Default: DefaultCascadeThreshold.
	CascadeThreshold int
	// CascadeBatch and CascadeDelay bound the work of cascade mode: batches
	// of CascadeBatch leases with CascadeDelay between them. Defaults:
	// DefaultCascadeBatch, DefaultCascadeDelay.
	CascadeBatch int
	CascadeDelay time.Duration
	// CascadeTTLFactor is how much cascade mode raises Booster's default
	// TTL. Default: DefaultCascadeTTLFactor (2).
	CascadeTTLFactor float64
	// Booster is the Leaser whose default TTL cascade mode raises. Optional.
	Booster TTLBooster
	// Hooks run for every expired lease handled. Optional.
	Hooks []HookFunc
	// HookTimeout bounds each hook. Default: DefaultHookTimeout (10 s).
	HookTimeout time.Duration
	// MaxBackoff caps the pause after failed cycles. Default:
	// DefaultMaxBackoff (1 min).
	MaxBackoff time.Duration
	// QueryTimeout bounds each listing query. Default: DefaultQueryTimeout.
	QueryTimeout time.Duration
	// Owner is recorded on entries that carry recovered work. Default:
	// "seqlease-cleanup".
	Owner string
	// Logger receives the loop's diagnostics. Default: discard.
	Logger *slog.Logger
	// Observer is told what every cycle and every entry came to (the
	// metrics package provides one). If it also implements StepObserver or
	// Tracer, it is told each recovery step, and follows cycles and
	// recoveries as they run. Optional.
	Observer Observer
}

// Observer is told what the loop does. Its methods must not block.
type Observer interface {
	// Handled reports one expired entry and its outcome; err is non-nil
	// when no step resolved it.
	Handled(e store.Entry, seenAt time.Time, r recovery.Result, err error)
	// Cycle reports a finished cycle.
	Cycle(r CycleResult, err error)
	// Cascade reports entering (true) or leaving (false) cascade mode.
	Cascade(active bool)
	// HookFailed reports a hook that failed or timed out.
	HookFailed(e store.Entry, err error)
}

// CycleResult is what one cycle did.
type CycleResult struct {
	Expired   int            // expired leases found
	Resolved  map[string]int // resolved, by the step that resolved them
	Failed    int            // left expired: no step resolved them
	NotLeader int            // skipped: another process cleans their stream
	Cascade   bool           // the cycle ran in cascade mode
	Duration  time.Duration
}

// Service is the cleanup loop.
type Service struct {
	store    Store
	interval time.Duration
	selector recovery.Selector
	probe    recovery.LoadProbe
	pool     func() float64
	elector  Elector
	batch    int
	cascade  struct {
		threshold, batch int
		delay            time.Duration
		factor           float64
	}
	booster     TTLBooster
	hooks       []HookFunc
	hookTimeout time.Duration
	maxBackoff  time.Duration
	qTimeout    time.Duration
	logger      *slog.Logger
	observer    Observer

	mu          sync.Mutex // serialises cycles (the loop and RunOnce)
	inCascade   bool
	lastLatency time.Duration

	hookWG  sync.WaitGroup
	lifeMu  sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelCauseFunc
	done    chan struct{}
}

// ErrStopped is returned by Start on a stopped Service.
var ErrStopped = errors.New("cleanup: stopped")

// New returns a cleanup Service on s.
func New(s Store, cfg *Config) (*Service, error) {
	if s == nil {
		return nil, errors.New("cleanup: nil Store")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	switch {
	case cfg.Interval < 0:
		return nil, fmt.Errorf("cleanup: Config.Interval %v is negative", cfg.Interval)
	case cfg.BatchSize < 0 || cfg.BatchSize > store.MaxListLimit:
		return nil, fmt.Errorf("cleanup: Config.BatchSize %d must be in 0..%d", cfg.BatchSize, store.MaxListLimit)
	case cfg.CascadeThreshold < 0:
		return nil, fmt.Errorf("cleanup: Config.CascadeThreshold %d is negative", cfg.CascadeThreshold)
	case cfg.CascadeBatch < 0:
		return nil, fmt.Errorf("cleanup: Config.CascadeBatch %d is negative", cfg.CascadeBatch)
	case cfg.CascadeDelay < 0:
		return nil, fmt.Errorf("cleanup: Config.CascadeDelay %v is negative", cfg.CascadeDelay)
	case cfg.CascadeTTLFactor != 0 && cfg.CascadeTTLFactor < 1:
		return nil, fmt.Errorf("cleanup: Config.CascadeTTLFactor %v must be at least 1", cfg.CascadeTTLFactor)
	case cfg.HookTimeout < 0:
		return nil, fmt.Errorf("cleanup: Config.HookTimeout %v is negative", cfg.HookTimeout)
	case cfg.MaxBackoff < 0:
		return nil, fmt.Errorf("cleanup: Config.MaxBackoff %v is negative", cfg.MaxBackoff)
	case cfg.QueryTimeout < 0:
		return nil, fmt.Errorf("cleanup: Config.QueryTimeout %v is negative", cfg.QueryTimeout)
	}
	owner := cmp.Or(cfg.Owner, "seqlease-cleanup")
	if err := store.ValidateText("owner", owner); err != nil {
		return nil, fmt.Errorf("cleanup: Config.Owner: %w", err)
	}
	sv := &Service{
		store:       s,
		interval:    cmp.Or(cfg.Interval, DefaultInterval),
		selector:    cfg.Selector,
		probe:       cfg.Probe,
		pool:        cfg.PoolSaturation,
		elector:     cfg.Elector,
		batch:       cmp.Or(cfg.BatchSize, DefaultBatchSize),
		booster:     cfg.Booster,
		hooks:       cfg.Hooks,
		hookTimeout: cmp.Or(cfg.HookTimeout, DefaultHookTimeout),
		maxBackoff:  cmp.Or(cfg.MaxBackoff, DefaultMaxBackoff),
		qTimeout:    cmp.Or(cfg.QueryTimeout, DefaultQueryTimeout),
		logger:      cfg.Logger,
		observer:    cfg.Observer,
	}
	sv.cascade.threshold = cmp.Or(cfg.CascadeThreshold, DefaultCascadeThreshold)
	sv.cascade.batch = cmp.Or(cfg.CascadeBatch, DefaultCascadeBatch)
	sv.cascade.delay = cmp.Or(cfg.CascadeDelay, DefaultCascadeDelay)
	sv.cascade.factor = cmp.Or(cfg.CascadeTTLFactor, DefaultCascadeTTLFactor)
	if sv.selector == nil {
		sel := recovery.StepSelector{Gap: recovery.Gap(s)}
		if cfg.WorkTracker != nil {
			sel.PartialWork = recovery.PartialWork(s, cfg.WorkTracker, owner)
		}
		if cfg.OperationTracker != nil {
			sel.Retry = recovery.Retry(s, cfg.OperationTracker, owner)
		}
		sv.selector = sel
	}
	if sv.probe == nil {
		sv.probe = recovery.DefaultProbe
	}
	if sv.elector == nil {
		sv.elector = NewLocalElector()
	}
	if sv.logger == nil {
		sv.logger = slog.New(slog.DiscardHandler)
	}
	return sv, nil
}

// Start runs the loop in the background until Stop or until ctx ends. The
// first cycle runs at once.
func (sv *Service) Start(ctx context.Context) error {
	sv.lifeMu.Lock()
	defer sv.lifeMu.Unlock()
	switch {
	case sv.stopped:
		return ErrStopped
	case sv.started:
		return nil
	}
	sv.started = true
	ctx, sv.cancel = context.WithCancelCause(ctx)
	sv.done = make(chan struct{})
	go func() {
		defer close(sv.done)
		sv.loop(ctx)
	}()
	return nil
}

// Stop stops the loop and waits for it and for every hook it started.
func (sv *Service) Stop() {
	sv.lifeMu.Lock()
	sv.stopped = true
	cancel, done := sv.cancel, sv.done
	sv.lifeMu.Unlock()
	if cancel != nil {
		cancel(ErrStopped)
		<-done
	}
	sv.hookWG.Wait()
}

func (sv *Service) loop(ctx context.Context) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = min(time.Second, sv.interval)
	bo.MaxInterval = sv.maxBackoff
	bo.MaxElapsedTime = 0
	timer := time.NewTimer(0) // the first cycle runs at once
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		_, err := sv.RunOnce(ctx)
		pause := sv.interval + time.Duration(rand.Int64N(int64(sv.interval/10)+1))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			pause = bo.NextBackOff()
			sv.logger.Error("cleanup: cycle failed", slog.Any("error", err), slog.Duration("retry_in", pause))
		default:
			bo.Reset()
		}
		timer.Reset(pause)
	}
}

// RunOnce runs one cycle: it resolves every expired lease it can lead, in
// stream and number order.
func (sv *Service) RunOnce(ctx context.Context) (CycleResult, error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	start := time.Now()
	ctx, end := sv.startCycle(ctx)
	c := &cycle{sv: sv, res: CycleResult{Resolved: map[string]int{}}, leads: map[string]Leadership{}, blocked: map[string]bool{}}
	err := c.run(ctx)
	c.releaseAll()
	c.res.Duration = time.Since(start)
	sv.lastLatency = c.res.Duration
	end(c.res, err)
	if sv.observer != nil {
		sv.observer.Cycle(c.res, err)
	}
	return c.res, err
}

// cycle is the state of one RunOnce.
type cycle struct {
	sv      *Service
	res     CycleResult
	leads   map[string]Leadership // streams this cycle leads
	blocked map[string]bool       // streams to leave for the next cycle
	errs    []error
}

func (c *cycle) run(ctx context.Context) error {
	sv := c.sv
	var afterStream string
	var afterNumber int64
	for {
		qctx, cancel := context.WithTimeout(ctx, sv.qTimeout)
		page, err := sv.store.ListExpired(qctx, &store.ListExpiredParams{
			AfterStream: afterStream, AfterNumber: afterNumber, Limit: sv.batch,
		})
		cancel()
		if err != nil {
			return errors.Join(append(c.errs, fmt.Errorf("cleanup: list expired: %w", err))...)
		}
		seenAt := time.Now()
		c.res.Expired += len(page)
		if !sv.inCascade && c.res.Expired > sv.cascade.threshold {
			sv.setCascade(true)
		}
		c.res.Cascade = c.res.Cascade || sv.inCascade
		if err := c.handle(ctx, page, seenAt); err != nil {
			return err
		}
		if len(page) < sv.batch {
			break
		}
		last := page[len(page)-1]
		afterStream, afterNumber = last.Stream, last.Number
	}
	if sv.inCascade {
		sv.setCascade(false) // a short page: the backlog drained
	}
	return errors.Join(c.errs...)
}

// handle resolves the entries of one page, in order; in cascade mode in
// batches with a pause between them. Entries whose pipeline is only the Gap
// step are declared gaps together, a run of them per statement.
func (c *cycle) handle(ctx context.Context, page []store.Entry, seenAt time.Time) error {
	sv := c.sv
	level := sv.probe.Level(ctx, recovery.Signals{
		Backlog: len(page), PoolSaturation: sv.saturation(), CycleLatency: sv.lastLatency,
	})
	var gaps []store.Entry // a run of gap-only entries of one stream
	for i, e := range page {
		if sv.inCascade && i > 0 && i%sv.cascade.batch == 0 {
			c.gap(ctx, &gaps, seenAt)
			if err := sleep(ctx, sv.cascade.delay); err != nil {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(gaps) > 0 && gaps[0].Stream != e.Stream {
			c.gap(ctx, &gaps, seenAt)
		}
		if c.blocked[e.Stream] || !c.lead(ctx, e.Stream) {
			continue
		}
		sv.runHooks(ctx, e)
		p := sv.selector.Select(level, e.Kind)
		if p.IsGap() {
			gaps = append(gaps, e)
			continue
		}
		c.gap(ctx, &gaps, seenAt) // earlier numbers first
		if c.blocked[e.Stream] {
			continue // they failed: keep the order
		}
		r, err := sv.runPipeline(ctx, p, e)
		c.handled(e, seenAt, r, err)
	}
	c.gap(ctx, &gaps, seenAt)
	return ctx.Err()
}

// gap declares the run of entries gaps in one statement and empties it.
// Entries the statement did not resolve were resolved meanwhile (their
// holder committed or released at the last moment): nothing is left to do
// for them either.
func (c *cycle) gap(ctx context.Context, run *[]store.Entry, seenAt time.Time) {
	if len(*run) == 0 {
		return
	}
	es := *run
	*run = (*run)[:0]
	numbers := make([]int64, len(es))
	for i, e := range es {
		numbers[i] = e.Number
	}
	spans := c.sv.startBatch(ctx, es)
	qctx, cancel := context.WithTimeout(ctx, c.sv.qTimeout)
	_, err := c.sv.store.ResolveExpiredBatch(qctx, es[0].Stream, numbers, nil)
	cancel()
	for i, e := range es {
		if err != nil {
			spans.end(i, e, recovery.Result{}, err)
			c.handled(e, seenAt, recovery.Result{}, fmt.Errorf("%w: %s/%d: gap: %w", recovery.ErrUnrecovered, e.Stream, e.Number, err))
			continue
		}
		r := recovery.Result{Recovered: true, Method: recovery.MethodGap, Reason: store.ReasonExpired}
		spans.end(i, e, r, nil)
		c.handled(e, seenAt, r, nil)
	}
}

// handled records the outcome of one entry.
func (c *cycle) handled(e store.Entry, seenAt time.Time, r recovery.Result, err error) {
	if c.sv.observer != nil {
		c.sv.observer.Handled(e, seenAt, r, err)
	}
	if err != nil {
		// Later numbers of this stream wait for the next cycle, so that
		// recovered work keeps the original order.
		c.blocked[e.Stream] = true
		c.res.Failed++
		c.errs = append(c.errs, err)
		return
	}
	c.res.Resolved[r.Method]++
}

// lead makes sure this cycle leads stream.
func (c *cycle) lead(ctx context.Context, stream string) bool {
	if l, ok := c.leads[stream]; ok {
		if l.Context().Err() == nil {
			return true
		}
		delete(c.leads, stream) // lost meanwhile
	}
	l, ok, err := c.sv.elector.Lead(ctx, stream)
	switch {
	case err != nil:
		c.errs = append(c.errs, fmt.Errorf("cleanup: lead %s: %w", stream, err))
		c.blocked[stream] = true
		return false
	case !ok:
		c.res.NotLeader++
		c.blocked[stream] = true
		return false
	}
	c.leads[stream] = l
	return true
}

func (c *cycle) releaseAll() {
	for stream, l := range c.leads {
		ctx, cancel := context.WithTimeout(context.Background(), c.sv.qTimeout)
		if err := l.Release(ctx); err != nil {
			c.sv.logger.Warn("cleanup: release leadership", slog.String("stream", stream), slog.Any("error", err))
		}
		cancel()
	}
}

func (sv *Service) saturation() float64 {
	if sv.pool == nil {
		return 0
	}
	return sv.pool()
}

// setCascade enters or leaves cascade mode. sv.mu must be held.
func (sv *Service) setCascade(on bool) {
	sv.inCascade = on
	factor := 1.0
	if on {
		factor = sv.cascade.factor
		sv.logger.Warn("cleanup: cascade mode: mass expiry, working in batches", slog.Float64("ttl_factor", factor))
	} else {
		sv.logger.Info("cleanup: cascade mode over: backlog drained")
	}
	if sv.booster != nil {
		sv.booster.BoostTTL(factor)
	}
	if sv.observer != nil {
		sv.observer.Cascade(on)
	}
}

// runHooks starts the hooks for e; they run on their own, bounded by the
// hook timeout, and Stop waits for them.
func (sv *Service) runHooks(ctx context.Context, e store.Entry) {
	for _, h := range sv.hooks {
		sv.hookWG.Go(func() {
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sv.hookTimeout)
			defer cancel()
			if err := h(hctx, e); err != nil {
				sv.logger.Warn("cleanup: hook failed", slog.String("stream", e.Stream),
					slog.Int64("number", e.Number), slog.Any("error", err))
				if sv.observer != nil {
					sv.observer.HookFailed(e, err)
				}
			}
		})
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
