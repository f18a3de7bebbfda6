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
	recovery.Recoverer
	recovery.Resolver
}

// TTLBooster is the Leaser whose default lease duration cascade mode raises
// (*sequence.Leaser).
type TTLBooster interface {
	BoostTTL(factor float64)
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
// Config.HookConcurrency at a time) and each bounded by Config.HookTimeout;
// a failing hook is logged and reported and never delays a resolution. A
// hook must return when its context ends: Stop lets the hooks finish for
// up to Config.HookGrace, then cancels them and waits.
type HookFunc func(ctx context.Context, e store.Entry) error

// Defaults of Config.
const (
	DefaultInterval         = 30 * time.Second
	DefaultBatchSize        = 1000
	DefaultScanLimit        = 10_000
	DefaultStepRateWindow   = 100
	DefaultCascadeThreshold = 100
	DefaultCascadeBatch     = 500
	DefaultCascadeDelay     = 10 * time.Millisecond
	DefaultCascadeTTLFactor = 2.0
	// MaxCascadeTTLFactor bounds Config.CascadeTTLFactor (the boost is
	// capped at the Booster's maximum TTL anyway).
	MaxCascadeTTLFactor = 100.0
	// MaxInterval bounds Config.Interval: an expired lease waits up to an
	// interval for its cleaner, so a day is already far too long.
	MaxInterval            = 24 * time.Hour
	DefaultHookTimeout     = 10 * time.Second
	DefaultHookConcurrency = 16
	DefaultHookQueue       = 100_000
	DefaultHookGrace       = 5 * time.Second
	DefaultMaxBackoff      = time.Minute
	DefaultQueryTimeout    = 30 * time.Second
)

// Config configures a Service. A nil *Config means the defaults; so does the
// zero value of each field.
type Config struct {
	// Interval is the time from the start of one cycle to the start of the
	// next (a cycle also runs at Start; a cycle longer than the interval is
	// followed at once), plus a random 0..10% so that processes do not scan
	// in step; at most MaxInterval. Default: DefaultInterval (30 s).
	Interval time.Duration
	// Selector picks the recovery steps for a load level and kind. Default:
	// recovery.StepSelector with the Gap step, plus PartialWork when
	// WorkTracker is set and Retry when OperationTracker is set.
	Selector recovery.Selector
	// WorkTracker and OperationTracker feed the default Selector's
	// PartialWork and Retry steps. Optional.
	WorkTracker      recovery.WorkTracker
	OperationTracker recovery.OperationTracker
	// Probe classifies the load. Default: recovery.DefaultProbe().
	Probe recovery.LoadProbe
	// PoolSaturation reports the share of the connection pool in use
	// (0..1), a signal for Probe. Default: the store's PoolSaturation
	// method if it has one (*postgres.Store on a *pgxpool.Pool), else none.
	PoolSaturation func() float64
	// MinStepSuccessRate, when above 0, wraps the Selector in a
	// recovery.RateFilter fed with every step the loop tries: a step whose
	// success rate for a kind over its last StepRateWindow attempts fell
	// below it is skipped (never the last step of a pipeline). Default: 0,
	// off.
	MinStepSuccessRate float64
	// StepRateWindow is the number of attempts the rate is taken over, at
	// most recovery.MaxRateWindow. Default: DefaultStepRateWindow (100).
	StepRateWindow int
	// MaxRecoveryAttempts, when above 0, is how many times in a row the
	// recovery of an expired entry may fail (a tracker or the database
	// erred) before the loop gives its work up and declares it a gap with
	// reason recovery.ReasonRecoveryFailed, unblocking its stream at the
	// cost of that work. Attempts are counted in this process, once per
	// cycle (about one per Interval). Default: 0, never give up: the entry
	// stays expired and its stream waits, in order, until the recovery
	// succeeds; the watermark lag grows, and the recovery failures (the
	// metrics' failure results and the RecoveryFailureRate alert, the
	// logs) say why.
	MaxRecoveryAttempts int
	// Elector makes one cleaner at a time clean a stream. Default: a
	// LeaseElector on a lease.Manager of this Service's own when the store
	// has named leases (both backends do), else a LocalElector.
	Elector Elector
	// LeaseTTL is the TTL of the default elector's stream leases, in
	// [1µs, lease.DefaultMaxTTL]. Default: DefaultLeaseTTL (15 s).
	LeaseTTL time.Duration
	// Barrier, if set, wakes the loop when a live lease that holds expired
	// leases of its stream back resolves, so they are handled at once: a
	// started *barrier.Barrier, or any Waiter. Without it they are handled
	// at the blocking lease's expiry or the next cycle, whichever comes
	// first. Optional.
	Barrier Waiter
	// BatchSize is how many expired leases one listing query returns, and
	// how many resolutions one statement writes outside cascade mode.
	// Default: DefaultBatchSize (1,000).
	BatchSize int
	// ScanLimit is the most expired leases a cycle holds in memory at once
	// (the listing pages up to it, then handles them, then lists on). The
	// load probe's backlog counts them. Default: DefaultScanLimit (10,000).
	ScanLimit int
	// CascadeThreshold is the number of expired leases in one scan above
	// which the cycle runs in cascade mode. Default: DefaultCascadeThreshold
	// (100).
	CascadeThreshold int
	// CascadeBatch and CascadeDelay bound the work of cascade mode: it
	// writes at most CascadeBatch resolutions per statement and pauses
	// CascadeDelay (at most MaxInterval) after every CascadeBatch of them.
	// Defaults: DefaultCascadeBatch (500), DefaultCascadeDelay (10 ms).
	CascadeBatch int
	CascadeDelay time.Duration
	// CascadeTTLFactor is how much cascade mode raises Booster's default
	// TTL. Default: DefaultCascadeTTLFactor (2).
	CascadeTTLFactor float64
	// Booster is the Leaser whose default TTL cascade mode raises, while
	// the cycle lasts. The boost is process-local: only this Leaser's
	// default changes, not other processes'. Optional.
	Booster TTLBooster
	// Hooks run for every expired lease this Service resolves, best
	// effort: a crash between a resolution and its hooks skips them.
	// Optional.
	Hooks []HookFunc
	// DurableHook, if set, runs at least once for every expired lease
	// this Service resolves, surviving a crash: the resolving statement
	// records it (store.HookQueue; on PostgreSQL in the table
	// pending_hooks), and a deliverer of this Service (started by Start)
	// runs it and deletes the record only once it returned nil; a failure
	// is retried after a backoff (1 s doubling up to MaxBackoff). Any
	// Service with a DurableHook on the same store delivers the records
	// any other left, so a hook may run more than once (a crash after it
	// ran, before its record was deleted): make it idempotent, keyed by
	// the entry's stream and number. HookTimeout, HookConcurrency and
	// HookGrace apply to it too. Requires a store that is a
	// store.HookQueue (both backends are; in memory nothing survives the
	// process). Optional.
	DurableHook HookFunc
	// HookPoll is how often the deliverer looks for durable hooks due
	// (records left by other processes, retries); it also looks at once
	// whenever this Service resolved entries. Default: DefaultHookPoll
	// (5 s).
	HookPoll time.Duration
	// MoveTx, if set, runs inside the transaction that moves expired work
	// to new numbers (recovery steps PartialWork and Retry), with the
	// moves: the application's writes that the holders would have made in
	// their committing transactions (sequence.CommitTx) commit with the
	// moves or not at all. Set it to a MoveTxFunc[T] of the backend's
	// transaction type: cleanup.MoveTxFunc[pgx.Tx](fn) on PostgreSQL. If
	// it fails, nothing of the batch moves: the entries stay expired and
	// are tried again next cycle, a failed recovery (MaxRecoveryAttempts
	// applies); so does a transaction, function included, that outlives
	// MoveTxTimeout. New refuses it on a store that cannot run it
	// (store.TxRecoverer[T]; the memory backend cannot). Optional.
	MoveTx TxMover
	// MoveTxTimeout bounds the whole transaction that moves a batch with
	// MoveTx: its statements and MoveTx's function (its ctx ends then).
	// Set it above the function's slowest run for a batch (CascadeBatch
	// or BatchSize moves): a batch that times out rolls back and counts
	// as a failed recovery, so with MaxRecoveryAttempts a function that
	// is always too slow ends as gaps. It holds the moved entries' row
	// locks while it runs. At most MaxInterval. Default: QueryTimeout.
	MoveTxTimeout time.Duration
	// HookTimeout bounds each hook. With DurableHook, a delivery claims
	// its record for HookTimeout plus QueryTimeout, which New requires to
	// be at most store.MaxHookClaim (24 h). Default: DefaultHookTimeout
	// (10 s).
	HookTimeout time.Duration
	// HookConcurrency is how many hooks run at once. Default:
	// DefaultHookConcurrency (16).
	HookConcurrency int
	// HookQueue is the most hooks waiting to run. When it is full, the
	// hooks of further resolved entries are dropped: logged, and reported
	// to Observer.HookFailed with ErrHookDropped (the metrics count them
	// as hook failures). Default: DefaultHookQueue (100,000).
	HookQueue int
	// HookGrace is how long Stop lets the queued and running hooks finish
	// before it cancels those still running and drops those still queued
	// (logged, and reported with ErrHookDropped). Default:
	// DefaultHookGrace (5 s).
	HookGrace time.Duration
	// MaxBackoff caps the pause after a cycle that could not list the
	// expired leases (the store is unreachable): the pauses start at 1 s
	// (Interval if shorter), grow by half each time, randomized, and never
	// pass MaxBackoff. Meanwhile the loop reads the store's clock as often
	// as the first pause, and when the store answers again after it did
	// not (the end of an outage, a failover), a cycle runs at once. Failures of single streams (a tracker, a write, a
	// stream lease) do not back off: those streams are retried at the next
	// regular cycle and the others keep their pace. It also caps the pause
	// before a failed DurableHook runs again. At most MaxInterval.
	// Default: DefaultMaxBackoff (1 min).
	MaxBackoff time.Duration
	// QueryTimeout bounds each statement (with MoveTx: the whole moving
	// transaction, MoveTx's function included). With DurableHook,
	// HookTimeout plus QueryTimeout must be at most store.MaxHookClaim.
	// Default: DefaultQueryTimeout (30 s).
	QueryTimeout time.Duration
	// Owner is recorded on entries that carry recovered work. Default:
	// "seqlease-cleanup".
	Owner string
	// Logger receives the loop's diagnostics. Default: discard.
	Logger *slog.Logger
	// Observer is told what every cycle and every entry came to (the
	// metrics package provides one). If it also implements StepObserver or
	// Tracer, it is told each recovery step, and follows cycles and
	// recoveries as they run; if it implements lease.Observer, it is told
	// what the default elector's stream leases do (kind "cleanup").
	// Optional.
	Observer Observer
}

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
	Failed    int            // left expired: their recovery failed; tried again next cycle
	Deferred  int            // left waiting behind a live earlier lease of their stream
	NotLeader int            // streams skipped: another cleaner leads them
	Cascade   bool           // the cycle ran in cascade mode
	Duration  time.Duration
}

// Service is the cleanup loop.
type Service struct {
	store       Store
	interval    time.Duration
	selector    recovery.Selector
	rates       *recovery.RateFilter // nil unless MinStepSuccessRate
	probe       recovery.LoadProbe
	pool        func() float64
	maxAttempts int // 0: never give up
	elector     Elector
	leases      *lease.Manager // the default elector's, stopped by Stop
	waiter      Waiter
	batch       int
	scanLimit   int
	cascade     struct {
		threshold, batch int
		delay            time.Duration
		factor           float64
	}
	booster    TTLBooster
	hooks      *hookRunner
	durable    *deliverer // nil without Config.DurableHook
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
	refused     map[string]time.Time // streams whose recoveries the store refused (lost history), by finding: few, kept; under mu

	wake   wake   // streams waiting behind a live lease
	status status // what the full cycles came to (Status)

	lifeMu  sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelCauseFunc
	done    chan struct{}
}

// attempt counts the failed recoveries in a row of a stream's first failing
// entry.
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
	switch {
	case cfg.Interval < 0 || cfg.Interval > MaxInterval:
		return nil, fmt.Errorf("cleanup: Config.Interval %v must be in 0..%v: %w", cfg.Interval, MaxInterval, store.ErrInvalidArgument)
	case !(cfg.MinStepSuccessRate >= 0 && cfg.MinStepSuccessRate <= 1): // also NaN
		return nil, fmt.Errorf("cleanup: Config.MinStepSuccessRate %v must be in 0..1: %w", cfg.MinStepSuccessRate, store.ErrInvalidArgument)
	case cfg.StepRateWindow < 0 || cfg.StepRateWindow > recovery.MaxRateWindow:
		return nil, fmt.Errorf("cleanup: Config.StepRateWindow %d must be in 0..%d: %w", cfg.StepRateWindow, recovery.MaxRateWindow, store.ErrInvalidArgument)
	case cfg.MaxRecoveryAttempts < 0:
		return nil, fmt.Errorf("cleanup: Config.MaxRecoveryAttempts %d is negative: %w", cfg.MaxRecoveryAttempts, store.ErrInvalidArgument)
	case cfg.LeaseTTL != 0 && (cfg.LeaseTTL < time.Microsecond || cfg.LeaseTTL > lease.DefaultMaxTTL):
		return nil, fmt.Errorf("cleanup: Config.LeaseTTL %v must be 0 (the default) or in [1µs, %v]: %w", cfg.LeaseTTL, lease.DefaultMaxTTL, store.ErrInvalidArgument)
	case cfg.BatchSize < 0 || cfg.BatchSize > store.MaxListLimit:
		return nil, fmt.Errorf("cleanup: Config.BatchSize %d must be in 0..%d: %w", cfg.BatchSize, store.MaxListLimit, store.ErrInvalidArgument)
	case cfg.ScanLimit < 0:
		return nil, fmt.Errorf("cleanup: Config.ScanLimit %d is negative: %w", cfg.ScanLimit, store.ErrInvalidArgument)
	case cfg.CascadeThreshold < 0:
		return nil, fmt.Errorf("cleanup: Config.CascadeThreshold %d is negative: %w", cfg.CascadeThreshold, store.ErrInvalidArgument)
	case cfg.CascadeBatch < 0 || cfg.CascadeBatch > store.MaxBatch:
		return nil, fmt.Errorf("cleanup: Config.CascadeBatch %d must be in 0..%d: %w", cfg.CascadeBatch, store.MaxBatch, store.ErrInvalidArgument)
	case cfg.CascadeDelay < 0 || cfg.CascadeDelay > MaxInterval:
		return nil, fmt.Errorf("cleanup: Config.CascadeDelay %v must be in 0..%v: %w", cfg.CascadeDelay, MaxInterval, store.ErrInvalidArgument)
	case cfg.CascadeTTLFactor != 0 && !(cfg.CascadeTTLFactor >= 1 && cfg.CascadeTTLFactor <= MaxCascadeTTLFactor): // also NaN, +Inf
		return nil, fmt.Errorf("cleanup: Config.CascadeTTLFactor %v must be in 1..%v: %w", cfg.CascadeTTLFactor, MaxCascadeTTLFactor, store.ErrInvalidArgument)
	case cfg.HookTimeout < 0:
		return nil, fmt.Errorf("cleanup: Config.HookTimeout %v is negative: %w", cfg.HookTimeout, store.ErrInvalidArgument)
	case cfg.HookConcurrency < 0:
		return nil, fmt.Errorf("cleanup: Config.HookConcurrency %d is negative: %w", cfg.HookConcurrency, store.ErrInvalidArgument)
	case cfg.HookQueue < 0:
		return nil, fmt.Errorf("cleanup: Config.HookQueue %d is negative: %w", cfg.HookQueue, store.ErrInvalidArgument)
	case cfg.HookGrace < 0:
		return nil, fmt.Errorf("cleanup: Config.HookGrace %v is negative: %w", cfg.HookGrace, store.ErrInvalidArgument)
	case cfg.MaxBackoff < 0 || cfg.MaxBackoff > MaxInterval:
		return nil, fmt.Errorf("cleanup: Config.MaxBackoff %v must be in 0..%v: %w", cfg.MaxBackoff, MaxInterval, store.ErrInvalidArgument)
	case cfg.QueryTimeout < 0:
		return nil, fmt.Errorf("cleanup: Config.QueryTimeout %v is negative: %w", cfg.QueryTimeout, store.ErrInvalidArgument)
	case cfg.HookPoll < 0 || cfg.HookPoll > MaxInterval:
		return nil, fmt.Errorf("cleanup: Config.HookPoll %v must be in 0..%v: %w", cfg.HookPoll, MaxInterval, store.ErrInvalidArgument)
	case cfg.MoveTxTimeout < 0 || cfg.MoveTxTimeout > MaxInterval:
		return nil, fmt.Errorf("cleanup: Config.MoveTxTimeout %v must be in 0..%v: %w", cfg.MoveTxTimeout, MaxInterval, store.ErrInvalidArgument)
	case cfg.MoveTx != nil && !cfg.MoveTx.supports(s):
		return nil, fmt.Errorf("cleanup: Config.MoveTx: %w: the store runs no functions of %s in the transaction that moves expired work (store.TxRecoverer): %w",
			store.ErrUnsupported, cfg.MoveTx.txType(), store.ErrInvalidArgument)
	}
	hq, isHookQueue := s.(store.HookQueue)
	if cfg.DurableHook != nil && !isHookQueue {
		return nil, fmt.Errorf("cleanup: Config.DurableHook: %w: the store keeps no hook records (store.HookQueue): %w",
			store.ErrUnsupported, store.ErrInvalidArgument)
	}
	if cfg.DurableHook != nil {
		if err := checkClaim(cfg); err != nil {
			return nil, err
		}
	}
	owner := cmp.Or(cfg.Owner, "seqlease-cleanup")
	if err := store.ValidateText("owner", owner); err != nil {
		return nil, fmt.Errorf("cleanup: Config.Owner: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sv := &Service{
		store:       s,
		interval:    cmp.Or(cfg.Interval, DefaultInterval),
		selector:    cfg.Selector,
		probe:       cfg.Probe,
		pool:        cfg.PoolSaturation,
		maxAttempts: cfg.MaxRecoveryAttempts,
		elector:     cfg.Elector,
		waiter:      cfg.Barrier,
		batch:       cmp.Or(cfg.BatchSize, DefaultBatchSize),
		scanLimit:   cmp.Or(cfg.ScanLimit, DefaultScanLimit),
		booster:     cfg.Booster,
		maxBackoff:  cmp.Or(cfg.MaxBackoff, DefaultMaxBackoff),
		qTimeout:    cmp.Or(cfg.QueryTimeout, DefaultQueryTimeout),
		owner:       owner,
		logger:      logger,
		observer:    cfg.Observer,
		attempts:    map[string]attempt{},
		refused:     map[string]time.Time{},
		moveTx:      cfg.MoveTx,
	}
	sv.moveTxTime = cmp.Or(cfg.MoveTxTimeout, sv.qTimeout)
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
		sv.probe = recovery.DefaultProbe()
	}
	if cfg.MinStepSuccessRate > 0 {
		sv.rates = &recovery.RateFilter{Selector: sv.selector, MinRate: cfg.MinStepSuccessRate,
			Window: cmp.Or(cfg.StepRateWindow, DefaultStepRateWindow)}
		sv.selector = sv.rates
	}
	if sv.pool == nil {
		if ps, ok := s.(interface{ PoolSaturation() float64 }); ok {
			sv.pool = ps.PoolSaturation
		}
	}
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
	sv.hooks = newHookRunner(cfg.Hooks, cmp.Or(cfg.HookTimeout, DefaultHookTimeout),
		cmp.Or(cfg.HookConcurrency, DefaultHookConcurrency), cmp.Or(cfg.HookQueue, DefaultHookQueue),
		cmp.Or(cfg.HookGrace, DefaultHookGrace), logger, cfg.Observer)
	if cfg.DurableHook != nil {
		sv.durable = newDeliverer(hq, sv, cfg)
	}
	sv.wake.init()
	return sv, nil
}

// A failed durable hook waits at most MaxBackoff, which is at most
// MaxInterval, before it is due again: store.HookQueue.RetryHook takes
// pauses up to store.MaxHookClaim. (This constant fails to compile if
// MaxInterval grows past it.)
const _ = uint64(store.MaxHookClaim - MaxInterval)

// checkClaim checks that a durable hook's claim, HookTimeout plus
// QueryTimeout, fits in store.MaxHookClaim: else every claim would be
// refused and no durable hook delivered. It blames QueryTimeout when even
// the default HookTimeout would not fit beside it, else HookTimeout.
func checkClaim(cfg *Config) error {
	hook, query := cmp.Or(cfg.HookTimeout, DefaultHookTimeout), cmp.Or(cfg.QueryTimeout, DefaultQueryTimeout)
	switch {
	case query > store.MaxHookClaim-DefaultHookTimeout:
		return fmt.Errorf("cleanup: Config.QueryTimeout %v is too long for a DurableHook: a delivery claims its record for HookTimeout plus QueryTimeout, at most %v (store.MaxHookClaim): %w",
			cfg.QueryTimeout, store.MaxHookClaim, store.ErrInvalidArgument)
	case hook > store.MaxHookClaim-query:
		return fmt.Errorf("cleanup: Config.HookTimeout %v is too long for a DurableHook: a delivery claims its record for HookTimeout plus QueryTimeout (%v), at most %v (store.MaxHookClaim): %w",
			cfg.HookTimeout, query, store.MaxHookClaim, store.ErrInvalidArgument)
	}
	return nil
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
	sv.status.mu.Lock()
	sv.status.st.Started = time.Now()
	sv.status.mu.Unlock()
	ctx, sv.cancel = context.WithCancelCause(ctx)
	sv.wake.open(ctx)
	if sv.durable != nil {
		sv.durable.start(ctx)
	}
	sv.done = make(chan struct{})
	go func() {
		defer close(sv.done)
		sv.loop(ctx)
	}()
	return nil
}

// Stop stops the loop, lets the hooks of the entries already resolved run
// for up to HookGrace, cancels those still running and drops the rest, and
// waits for every goroutine it started. It releases the stream lease it
// holds (a cycle holds one at a time), within one QueryTimeout when the
// store does not answer; the default elector's Manager then gives up the
// rest within its release timeout. It is safe before Start and twice.
//
// A hook that ignores its context keeps Stop waiting until it returns:
// Stop cancels it after HookGrace and then waits, as it waits for every
// goroutine it started. Stop does not wait for DeliverHooks calls, which
// belong to their callers.
func (sv *Service) Stop() {
	sv.lifeMu.Lock()
	sv.stopped = true
	cancel, done := sv.cancel, sv.done
	sv.lifeMu.Unlock()
	if cancel != nil {
		cancel(ErrStopped)
		<-done
	}
	sv.wake.close()
	var hooks sync.WaitGroup // the grace periods run side by side
	hooks.Go(sv.hooks.stop)
	if sv.durable != nil {
		hooks.Go(sv.durable.stop)
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
	initial := min(time.Second, sv.interval, sv.maxBackoff)
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
			pause := bo.next()
			sv.logger.Error("cleanup: cycle failed", slog.Any("error", err), slog.Duration("retry_in", pause))
			if full || time.Now().Add(pause).Before(nextAt) {
				schedule(pause) // a failed re-run of some streams only brings the next cycle forward
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
			schedule(max(time.Until(began.Add(sv.interval+rand.N(sv.interval/10+1))), 0))
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

func (sv *Service) saturation() float64 {
	if sv.pool == nil {
		return 0
	}
	return sv.pool()
}
