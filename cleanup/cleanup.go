package cleanup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/seqlease/seqlease/internal/lifecycle"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// Store is what the loop needs of a backend (store/memory, store/postgres).
type Store interface {
	ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error)
	// Snapshot tells the walk which earlier numbers of a stream are still
	// leased (the ordering rule).
	Snapshot(ctx context.Context, stream string, limit int) (store.Snapshot, error)
	// Now is the database clock, read once per cycle: for the expiry of a
	// blocking lease, and for when the cycle found entries expired.
	Now(ctx context.Context) (time.Time, error)
	ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error)
	RecoverExpiredBatch(ctx context.Context, stream string, items []store.RecoverItem, p *store.RecoverBatchParams) ([]store.RecoverResult, error)
	recovery.Store
}

// TTLBooster is the Leaser whose default lease duration cascade mode raises
// (*sequence.Leaser).
type TTLBooster interface {
	BoostTTL(factor float64)
}

// FleetBooster raises the TTL boost a whole fleet shares (*ttl.Fleet).
type FleetBooster interface {
	Raise(ctx context.Context, factor float64, hold time.Duration) error
}

// Waiter tells when every number of a stream below n is resolved
// (*barrier.Barrier): the channel closes then; the function withdraws the
// wait.
type Waiter interface {
	Ready(ctx context.Context, stream string, n int64) (<-chan struct{}, func(), error)
}

// HookFunc releases what an expired operation held: its locks, temp files,
// cache entries. Hooks run once for every expired lease this Service
// resolved, after it resolved it, concurrently (at most
// HooksConfig.Concurrency at a time) and each bounded by
// HooksConfig.Timeout; a failing hook is logged and reported and never
// delays a resolution. A hook must return when its context ends: Stop lets
// the hooks finish for up to HooksConfig.Grace, then cancels them and
// waits. A hook may call Stop (see Stop).
type HookFunc func(ctx context.Context, e store.Entry) error

// Observer is told what the loop does. Its methods must not block.
type Observer interface {
	// Handled reports one expired entry this Service resolved, or failed
	// to (err non-nil: it stays expired and is tried again). Entries found
	// resolved by someone else are not reported (CycleResult.Elsewhere).
	// seenAt is when the cycle found e expired, on the database clock (the
	// clock of e.ExpiresAt: seenAt minus e.ExpiresAt is how long past its
	// expiry e was, whatever the local clock says); zero when the
	// database clock could not be read.
	Handled(e store.Entry, seenAt time.Time, r recovery.Result, err error)
	// Cycle reports a finished cycle: a full scan (r.Full), or a re-run of
	// streams whose blocking lease resolved or expired, which sees only
	// those streams.
	Cycle(r CycleResult, err error)
	// Cascade reports entering (true) or leaving (false) cascade mode;
	// every entry is followed by a leave, whatever ends the cycle.
	Cascade(active bool)
	// HookFailed reports a hook that failed, timed out or was cut short by
	// Stop, or one that never ran (err matches ErrHookDropped).
	HookFailed(e store.Entry, err error)
}

// CycleResult is what one cycle did.
type CycleResult struct {
	Full      bool           // a scan of every stream, not a re-run of some (Expired counts only theirs)
	Expired   int            // expired leases found
	Resolved  map[string]int // resolved by this Service, by the step that resolved them
	Elsewhere int            // found resolved meanwhile by someone else (a late release, another cleaner)
	Failed    int            // left expired: their recovery failed; tried again next cycle (unless parked by it)
	Parked    int            // parked entries found: not tried; each stream waits behind its own (store.Parker)
	Deferred  int            // left waiting behind a live earlier lease of their stream
	NotLeader int            // streams skipped: another cleaner leads them
	Cascade   bool           // the cycle ran in cascade mode
	Duration  time.Duration
}

// Service is the cleanup loop.
type Service struct {
	store       Store
	interval    atomic.Int64    // time.Duration: Config.Interval, else the settings table's cleanup.interval, else DefaultInterval
	settings    store.Settings  // nil: Config.Interval set, or no table
	watcher     settingsWatcher // nil: no notices of the table's changes
	retune      chan struct{}   // the table may have changed
	pipeline    *recovery.Pipeline
	maxAttempts int          // 0: never give up
	park        bool         // park an entry at maxAttempts instead of declaring a gap
	parker      store.Parker // nil: the store keeps no attempts; they are counted here
	elector     Elector
	leases      *lease.Manager // the default elector's, stopped by Stop
	waiter      Waiter
	batch       int
	scanLimit   int
	cascade     struct {
		threshold, batch int
		delay            time.Duration
		factor           float64
		hold             time.Duration
	}
	booster    TTLBooster
	fleet      FleetBooster
	hooks      *hookRunner
	expiry     *expiryWatch
	durable    *deliverer // nil without HooksConfig.Durable
	moveTx     TxMover    // nil without Config.MoveTx
	moveTxTime time.Duration
	maxBackoff time.Duration
	qTimeout   time.Duration
	owner      string
	logger     *slog.Logger
	observer   Observer

	mu          sync.Mutex // serialises cycles (the loop and RunOnce)
	lastLatency time.Duration
	attempts    map[string]attempt   // failed recoveries, by stream; under mu
	refused     map[string]time.Time // streams whose recoveries the store refuses (lost history), by finding, until a write goes through; under mu
	history     historySync          // the pipeline's recovery history, synced with the store; under mu

	wake   wake   // streams waiting behind a live lease
	status status // what the full cycles came to (Status)

	life *lifecycle.Life // the loop; the deliverer has its own
}

// attempt counts the failed recoveries in a row of a stream's first failing
// entry, when the store keeps no count (store.Parker) or could not record
// one.
type attempt struct {
	number int64
	n      int
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
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MoveTx != nil && !cfg.MoveTx.supports(s) {
		return nil, fmt.Errorf("cleanup: Config.MoveTx: %w: the store runs no functions of %s in the transaction that moves expired work (store.TxRecoverer): %w",
			store.ErrUnsupported, cfg.MoveTx.txType(), store.ErrInvalidArgument)
	}
	cc, hc := cmp.Or(cfg.Cascade, &CascadeConfig{}), cmp.Or(cfg.Hooks, &HooksConfig{})
	hq, isHookQueue := s.(store.HookQueue)
	if hc.Durable != nil && !isHookQueue {
		return nil, fmt.Errorf("cleanup: Config.Hooks.Durable: %w: the store keeps no hook records (store.HookQueue): %w",
			store.ErrUnsupported, store.ErrInvalidArgument)
	}
	pipeline := cfg.Pipeline
	if pipeline == nil {
		var err error
		if pipeline, err = recovery.New(s, nil); err != nil {
			return nil, fmt.Errorf("cleanup: %w", err)
		}
	}
	parker, isParker := s.(store.Parker)
	park := pipeline.OnExhausted() == recovery.ExhaustedPark
	if park && !isParker {
		return nil, fmt.Errorf("cleanup: Config.Pipeline: %w: parking (recovery.ExhaustedPark) needs a store that keeps the attempts (store.Parker): %w",
			store.ErrUnsupported, store.ErrInvalidArgument)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sv := &Service{
		store:       s,
		pipeline:    pipeline,
		maxAttempts: pipeline.MaxAttempts(),
		park:        park,
		parker:      parker,
		elector:     cfg.Elector,
		waiter:      cfg.Barrier,
		batch:       cmp.Or(cfg.BatchSize, DefaultBatchSize),
		scanLimit:   cmp.Or(cfg.ScanLimit, DefaultScanLimit),
		booster:     cc.Booster,
		fleet:       cc.Fleet,
		maxBackoff:  cmp.Or(cfg.MaxBackoff, DefaultMaxBackoff),
		qTimeout:    cmp.Or(cfg.QueryTimeout, DefaultQueryTimeout),
		owner:       pipeline.Owner(),
		logger:      logger,
		observer:    cfg.Observer,
		attempts:    map[string]attempt{},
		refused:     map[string]time.Time{},
		moveTx:      cfg.MoveTx,
		life:        lifecycle.New(ErrStopped),
	}
	sv.moveTxTime = cmp.Or(cfg.MoveTxTimeout, sv.qTimeout)
	sv.expiry = newExpiryWatch(s, cmp.Or(cfg.ExpiryWarnShare, DefaultExpiryWarnShare), cfg.Observer)
	sv.interval.Store(int64(cmp.Or(cfg.Interval, DefaultInterval)))
	if cfg.Interval == 0 {
		sv.settings, _ = s.(store.Settings)
		sv.watcher, _ = s.(settingsWatcher)
	}
	sv.retune = make(chan struct{}, 1)
	sv.cascade.threshold = cmp.Or(cc.Threshold, DefaultCascadeThreshold)
	sv.cascade.batch = cmp.Or(cc.Batch, DefaultCascadeBatch)
	sv.cascade.delay = cmp.Or(cc.Delay, DefaultCascadeDelay)
	sv.cascade.factor = cmp.Or(cc.TTLFactor, DefaultCascadeTTLFactor)
	sv.cascade.hold = cmp.Or(cc.Hold, DefaultCascadeHold)
	if sv.elector == nil {
		if ls, ok := s.(lease.Store); ok {
			lc := &lease.Config{DisableHistory: true, Logger: logger}
			if o, ok := cfg.Observer.(lease.Observer); ok {
				lc.Observer = o
			}
			m, err := lease.New(ls, lc)
			if err != nil {
				return nil, fmt.Errorf("cleanup: stream leases: %w", err)
			}
			sv.leases = m
			if sv.elector, err = NewLeaseElector(m, cfg.LeaseTTL); err != nil {
				return nil, err
			}
		} else {
			sv.elector = NewLocalElector()
		}
	}
	sv.hooks = newHookRunner(hc.BestEffort, cmp.Or(hc.Timeout, DefaultHookTimeout),
		cmp.Or(hc.Concurrency, DefaultHookConcurrency), cmp.Or(hc.Queue, DefaultHookQueue),
		cmp.Or(hc.Grace, DefaultHookGrace), logger, cfg.Observer)
	if hc.Durable != nil {
		sv.durable = newDeliverer(hq, sv, hc)
	}
	sv.wake.init()
	return sv, nil
}

// Start runs the loop in the background until Stop or until ctx ends. The
// first cycle runs at once.
func (sv *Service) Start(ctx context.Context) error {
	return sv.life.Start(ctx, func(ctx context.Context) error {
		sv.status.mu.Lock()
		sv.status.st.Started = time.Now()
		sv.status.mu.Unlock()
		sv.applySettings(ctx)
		if sv.settings != nil && sv.watcher != nil {
			sv.life.Go(sv.watchSettings)
		}
		sv.wake.open(ctx)
		if sv.durable != nil {
			if err := sv.durable.start(ctx); err != nil {
				return err
			}
		}
		sv.life.Go(sv.loop)
		return nil
	})
}

// Stop stops the loop, lets the hooks of the entries already resolved run
// for up to Hooks.Grace, cancels those still running and drops the rest, and
// waits for every goroutine it started. It releases the stream lease it
// holds (a cycle holds one at a time), within one QueryTimeout when the
// store does not answer; the default elector's Manager then gives up the
// rest within its release timeout. It is safe before Start and twice.
//
// A hook that ignores its context keeps Stop waiting until it returns:
// Stop cancels it after Hooks.Grace and then waits, as it waits for every
// goroutine it started. Stop does not wait for DeliverHooks calls, which
// belong to their callers.
//
// A hook may call Stop (from its own goroutine): Stop then stops the rest
// as above, cancels the calling hook's context, and returns once every
// other goroutine has returned, without waiting for the hook that called
// it (which waits for Stop). The Service has stopped when that hook
// returns; for a durable hook, its delivery then records the outcome as
// usual.
func (sv *Service) Stop() {
	bestEffort, durable := hookCaller()
	sv.life.Stop()
	sv.wake.close()
	var hooks sync.WaitGroup // the grace periods run side by side
	hooks.Go(func() { sv.hooks.stop(bestEffort) })
	if sv.durable != nil {
		hooks.Go(func() { sv.durable.stop(durable) })
	}
	hooks.Wait()
	if sv.leases != nil {
		sv.leases.Stop()
	}
}

// loop runs a full cycle every interval and in between re-runs the streams
// whose blocking lease resolved or expired. Only a cycle that could not
// list the expired leases (the store unreachable) backs off: the failures
// of single streams (a tracker, a write, a lead) are retried at the next
// regular cycle, so they never delay the other streams. While it backs
// off, a probe notices the store coming back after an outage and runs a
// cycle at once.
func (sv *Service) loop(ctx context.Context) {
	initial := min(time.Second, sv.period(), sv.maxBackoff)
	bo := newPauses(initial, sv.maxBackoff)
	next := time.NewTimer(0) // the first cycle runs at once
	defer next.Stop()
	// After a cycle that could not list, a probe reads the store's clock
	// every initial pause: once the store answers again after a probe
	// found it away (an outage, a failover), a full cycle runs at once
	// rather than at the end of a pause that grew meanwhile. A store that
	// answered the probes since the last cycle they triggered is up but
	// failing listings (overloaded): the backoff stands.
	probe := time.NewTimer(0)
	probe.Stop()
	defer probe.Stop()
	away := false // a probe failed since the last cycle that listed or that a probe triggered
	nextAt := time.Now()
	schedule := func(d time.Duration) {
		next.Reset(d)
		nextAt = time.Now().Add(d)
	}
	// lastFull is when the last full cycle that listed began: the next
	// one starts an interval after it, so a new interval from the
	// settings table reschedules it (not while a failure backs off).
	var lastFull time.Time
	// retrying says a failed cycle scheduled the next one at its backoff
	// pause: a new interval must not move that retry.
	retrying := false
	regular := func() time.Duration {
		iv := sv.period()
		return max(time.Until(lastFull.Add(iv+rand.N(iv/10+1))), 0)
	}
	recheck := time.NewTimer(0)
	recheck.Stop()
	defer recheck.Stop()
	for {
		full := false
		select {
		case <-ctx.Done():
			return
		case <-next.C:
			full = true
		case <-sv.wake.kicks:
		case <-recheck.C:
		case <-sv.retune:
			if sv.applySettings(ctx) && !lastFull.IsZero() && !retrying {
				schedule(regular())
			}
			continue
		case <-probe.C:
			switch err := sv.answers(ctx); {
			case err != nil:
				away = true
				probe.Reset(initial)
				continue
			case !away:
				continue // up all along: the backoff stands
			}
			away = false
			full = true // back after an outage
		}
		var err error
		listed := true
		began := time.Now()
		if full {
			_, listed, err = sv.run(ctx, nil)
		} else if streams := sv.wake.due(time.Now()); len(streams) > 0 {
			_, listed, err = sv.run(ctx, streams)
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case !listed:
			if full {
				lastFull = time.Time{} // backing off: a new interval waits for the next cycle that lists
			}
			pause := bo.next()
			sv.logger.Error("cleanup: cycle failed", slog.Any("error", err), slog.Duration("retry_in", pause))
			if full || time.Now().Add(pause).Before(nextAt) {
				schedule(pause) // a failed re-run of some streams only brings the next cycle forward
				retrying = true
			}
			probe.Reset(initial)
		case full:
			away = false
			probe.Stop()
			if err != nil {
				sv.logger.Warn("cleanup: cycle left streams unresolved; they are retried at the next cycle", slog.Any("error", err))
			}
			// Start to start, like a ticker: an entry that expired just
			// after a cycle listed waits at most an interval (+ jitter)
			// from that cycle's start, plus the cycle that resolves it.
			bo.reset()
			lastFull = began
			retrying = false
			schedule(regular())
		case err != nil:
			sv.logger.Warn("cleanup: re-run left streams unresolved; they are retried at the next cycle", slog.Any("error", err))
		}
		if at, ok := sv.wake.next(); ok {
			recheck.Reset(max(time.Until(at), 0))
		} else {
			recheck.Stop()
		}
	}
}

// answers reads the store's clock, within the query timeout and at most a
// second: whether the store answers.
func (sv *Service) answers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(sv.qTimeout, time.Second))
	defer cancel()
	_, err := sv.store.Now(ctx)
	return err
}

// pauses are the pauses of the loop after failed cycles: exponential
// (cenkalti/backoff) from initial, randomized by ±50%, and never above max,
// which the randomization alone would pass by half.
type pauses struct {
	bo  *backoff.ExponentialBackOff
	max time.Duration
}

func newPauses(initial, max time.Duration) *pauses {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = initial
	bo.MaxInterval = max
	bo.MaxElapsedTime = 0
	bo.Reset()
	return &pauses{bo: bo, max: max}
}

func (p *pauses) next() time.Duration { return min(p.bo.NextBackOff(), p.max) }

func (p *pauses) reset() { p.bo.Reset() }

// RunOnce runs one full cycle: it resolves every expired lease it can lead,
// in stream and number order, and returns what it did. The error joins the
// failures of the cycle (a listing that failed, the recoveries that did);
// it is the context's error when ctx ended.
func (sv *Service) RunOnce(ctx context.Context) (CycleResult, error) {
	res, _, err := sv.run(ctx, nil)
	return res, err
}
