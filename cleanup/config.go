package cleanup

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// Defaults of Config.
const (
	DefaultInterval         = 5 * time.Second
	DefaultBatchSize        = 1000
	DefaultScanLimit        = 10_000
	DefaultCascadeThreshold = 100
	DefaultCascadeBatch     = 500
	DefaultCascadeDelay     = 10 * time.Millisecond
	DefaultCascadeTTLFactor = 2.0
	// DefaultCascadeHold is how long the fleet's boost lasts after each
	// cycle enters cascade mode (CascadeConfig.Hold).
	DefaultCascadeHold = time.Minute
	// MaxCascadeTTLFactor bounds CascadeConfig.TTLFactor (the boost is
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
	// DefaultExpiryWarnShare is the default of Config.ExpiryWarnShare: 5%,
	// the figure of the metrics package's expiration rate alert.
	DefaultExpiryWarnShare = 0.05
)

// Config configures a Service. A nil *Config means the defaults; so does the
// zero value of each field, and a nil sub-config (Cascade, Hooks) means its
// defaults.
type Config struct {
	// Interval is the time from the start of one cycle to the start of the
	// next (a cycle also runs at Start; a cycle longer than the interval is
	// followed at once), plus a random 0..10% so that processes do not scan
	// in step; at most MaxInterval. An expired lease waits up to an
	// interval for its cleaner: a dead worker holds its stream for about
	// its TTL plus the interval. The scan reads only the partial index of
	// unresolved entries, so a short interval is cheap. Default:
	// DefaultInterval (5 s).
	Interval time.Duration
	// Pipeline decides what becomes of each expired lease: the recovery
	// steps by load and kind, and when a failing recovery is given up
	// (recovery.New). Build it on the same store as the Service. Default:
	// recovery.New(s, nil), which declares every expired lease a gap, with
	// the owner recovery.DefaultOwner and no attempt limit.
	Pipeline *recovery.Pipeline
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
	// Cascade configures cascade mode, the cycle's answer to a mass
	// expiry. Default: the defaults of CascadeConfig.
	Cascade *CascadeConfig
	// Hooks are what runs for every expired lease this Service resolves.
	// Default: none.
	Hooks *HooksConfig
	// MoveTx, if set, runs inside the transaction that moves expired work
	// to new numbers (recovery steps PartialWork and Retry), with the
	// moves: the application's writes that the holders would have made in
	// their committing transactions (sequence.CommitTx) commit with the
	// moves or not at all. Set it to a MoveTxFunc[T] of the backend's
	// transaction type: cleanup.MoveTxFunc[pgx.Tx](fn) on PostgreSQL. If
	// it fails, nothing of the batch moves: the entries stay expired and
	// are tried again next cycle, a failed recovery (the Pipeline's
	// recovery.Config.MaxAttempts applies); so does a transaction,
	// function included, that outlives MoveTxTimeout. New refuses it on a
	// store that cannot run it (store.TxRecoverer[T]; the memory backend
	// cannot). Optional.
	MoveTx TxMover
	// MoveTxTimeout bounds the whole transaction that moves a batch with
	// MoveTx: its statements and MoveTx's function (its ctx ends then).
	// Set it above the function's slowest run for a batch
	// (CascadeConfig.Batch or BatchSize moves): a batch that times out
	// rolls back and counts as a failed recovery, so with an attempt limit
	// a function that is always too slow ends as gaps. It holds the moved
	// entries' row locks while it runs. At most MaxInterval. Default:
	// QueryTimeout.
	MoveTxTimeout time.Duration
	// MaxBackoff caps the pause after a cycle that could not list the
	// expired leases (the store is unreachable): the pauses start at 1 s
	// (Interval if shorter), grow by half each time, randomized, and never
	// pass MaxBackoff. Meanwhile the loop reads the store's clock as often
	// as the first pause, and when the store answers again after it did
	// not (the end of an outage, a failover), a cycle runs at once.
	// Failures of single streams (a tracker, a write, a stream lease) do
	// not back off: those streams are retried at the next regular cycle
	// and the others keep their pace. It also caps the pause before a
	// failed durable hook runs again. At most MaxInterval. Default:
	// DefaultMaxBackoff (1 min).
	MaxBackoff time.Duration
	// QueryTimeout bounds each statement (with MoveTx: the whole moving
	// transaction, MoveTx's function included). With a durable hook,
	// HooksConfig.Timeout plus QueryTimeout must be at most
	// store.MaxHookClaim. Default: DefaultQueryTimeout (30 s).
	QueryTimeout time.Duration
	// ExpiryWarnShare is the share of the numbers handed out on the
	// streams whose expired leases this Service resolves that may expire,
	// over a window of ExpiryWindow, before it warns (at Warn on Logger,
	// at most every 10 minutes) that the lease TTL looks too short for the
	// work: a share above it means holders that do not finish in time,
	// and as many gaps or recoveries. The share needs the store's Stats
	// (both backends have it): one query per such stream after a cycle.
	// An Observer that is an ExpiryObserver is told every window's share.
	// At most 1; negative: no warning. Default: DefaultExpiryWarnShare
	// (5%).
	ExpiryWarnShare float64
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

// CascadeConfig configures cascade mode: a cycle that finds more than
// Threshold expired leases writes its resolutions in smaller statements,
// paced, and raises the default TTL of Booster while it lasts, so that a
// mass expiry neither floods the database nor feeds itself. A nil
// *CascadeConfig, like the zero value of each field, means the defaults.
type CascadeConfig struct {
	// Threshold is the number of expired leases in one scan above which
	// the cycle runs in cascade mode. Default: DefaultCascadeThreshold
	// (100).
	Threshold int
	// Batch and Delay bound the work of cascade mode: it writes at most
	// Batch resolutions per statement and pauses Delay (at most
	// MaxInterval) after every Batch of them. Defaults:
	// DefaultCascadeBatch (500), DefaultCascadeDelay (10 ms).
	Batch int
	Delay time.Duration
	// TTLFactor is how much cascade mode raises Booster's default TTL, in
	// 1..MaxCascadeTTLFactor. Default: DefaultCascadeTTLFactor (2).
	TTLFactor float64
	// Booster is the Leaser whose default TTL cascade mode raises, while
	// the cycle lasts. The boost is process-local: only this Leaser's
	// default changes, not other processes'. Optional.
	Booster TTLBooster
	// Fleet shares the boost with every process (*ttl.Fleet): entering
	// cascade mode raises it by TTLFactor for Hold, in the database, and
	// every process whose ttl.Policy follows a Fleet on the same schema
	// hands out longer TTLs until it ends. The boost outlives the cycle
	// (the leases taken meanwhile are still out) and ends by itself at
	// its end; a failed raise is logged. Optional.
	Fleet FleetBooster
	// Hold is how long the fleet's boost lasts after a cycle enters
	// cascade mode, in (0, store.MaxTTL]. Default: DefaultCascadeHold
	// (1 min).
	Hold time.Duration
}

// HooksConfig configures the hooks that run for every expired lease a
// Service resolves, after it resolved it. A nil *HooksConfig means no hooks;
// the zero value of each field means its default.
type HooksConfig struct {
	// BestEffort hooks run for every expired lease this Service resolves,
	// best effort: a crash between a resolution and its hooks skips them.
	// Optional.
	BestEffort []HookFunc
	// Durable, if set, runs at least once for every expired lease this
	// Service resolves, surviving a crash: the resolving statement
	// records it (store.HookQueue; on PostgreSQL in the table
	// pending_hooks), and a deliverer of this Service (started by Start)
	// runs it and deletes the record only once it returned nil; a failure
	// is retried after a backoff (1 s doubling up to Config.MaxBackoff).
	// Any Service with a Durable hook on the same store delivers the
	// records any other left, so a hook may run more than once (a crash
	// after it ran, before its record was deleted): make it idempotent,
	// keyed by the entry's stream and number. Timeout, Concurrency and
	// Grace apply to it too. Requires a store that is a store.HookQueue
	// (both backends are; in memory nothing survives the process).
	// Optional.
	Durable HookFunc
	// Poll is how often the deliverer looks for durable hooks due (records
	// left by other processes, retries); it also looks at once whenever
	// this Service resolved entries. At most MaxInterval. Default:
	// DefaultHookPoll (5 s).
	Poll time.Duration
	// Timeout bounds each hook. With Durable, a delivery claims its record
	// for Timeout plus Config.QueryTimeout, which New requires to be at
	// most store.MaxHookClaim (24 h). Default: DefaultHookTimeout (10 s).
	Timeout time.Duration
	// Concurrency is how many hooks run at once. Default:
	// DefaultHookConcurrency (16).
	Concurrency int
	// Queue is the most hooks waiting to run. When it is full, the hooks
	// of further resolved entries are dropped: logged, and reported to
	// Observer.HookFailed with ErrHookDropped (the metrics count them as
	// hook failures). Default: DefaultHookQueue (100,000).
	Queue int
	// Grace is how long Stop lets the queued and running hooks finish
	// before it cancels those still running and drops those still queued
	// (logged, and reported with ErrHookDropped). Default:
	// DefaultHookGrace (5 s).
	Grace time.Duration
}

// validate checks the fields of cfg, and of its sub-configs, that need no
// store; an error names the field at fault.
func (cfg *Config) validate() error {
	cc, hc := cmp.Or(cfg.Cascade, &CascadeConfig{}), cmp.Or(cfg.Hooks, &HooksConfig{})
	switch {
	case cfg.Interval < 0 || cfg.Interval > MaxInterval:
		return invalid("Interval %v must be in 0..%v", cfg.Interval, MaxInterval)
	case cfg.LeaseTTL != 0 && (cfg.LeaseTTL < time.Microsecond || cfg.LeaseTTL > lease.DefaultMaxTTL):
		return invalid("LeaseTTL %v must be 0 (the default) or in [1µs, %v]", cfg.LeaseTTL, lease.DefaultMaxTTL)
	case cfg.BatchSize < 0 || cfg.BatchSize > store.MaxListLimit:
		return invalid("BatchSize %d must be in 0..%d", cfg.BatchSize, store.MaxListLimit)
	case cfg.ScanLimit < 0:
		return invalid("ScanLimit %d is negative", cfg.ScanLimit)
	case cc.Threshold < 0:
		return invalid("Cascade.Threshold %d is negative", cc.Threshold)
	case cc.Batch < 0 || cc.Batch > store.MaxBatch:
		return invalid("Cascade.Batch %d must be in 0..%d", cc.Batch, store.MaxBatch)
	case cc.Delay < 0 || cc.Delay > MaxInterval:
		return invalid("Cascade.Delay %v must be in 0..%v", cc.Delay, MaxInterval)
	case cc.TTLFactor != 0 && !(cc.TTLFactor >= 1 && cc.TTLFactor <= MaxCascadeTTLFactor): // also NaN, +Inf
		return invalid("Cascade.TTLFactor %v must be in 1..%v", cc.TTLFactor, MaxCascadeTTLFactor)
	case cc.Hold < 0 || cc.Hold > store.MaxTTL:
		return invalid("Cascade.Hold %v must be in 0..%v", cc.Hold, store.MaxTTL)
	case hc.Timeout < 0:
		return invalid("Hooks.Timeout %v is negative", hc.Timeout)
	case hc.Concurrency < 0:
		return invalid("Hooks.Concurrency %d is negative", hc.Concurrency)
	case hc.Queue < 0:
		return invalid("Hooks.Queue %d is negative", hc.Queue)
	case hc.Grace < 0:
		return invalid("Hooks.Grace %v is negative", hc.Grace)
	case hc.Poll < 0 || hc.Poll > MaxInterval:
		return invalid("Hooks.Poll %v must be in 0..%v", hc.Poll, MaxInterval)
	case cfg.MaxBackoff < 0 || cfg.MaxBackoff > MaxInterval:
		return invalid("MaxBackoff %v must be in 0..%v", cfg.MaxBackoff, MaxInterval)
	case cfg.QueryTimeout < 0:
		return invalid("QueryTimeout %v is negative", cfg.QueryTimeout)
	case !(cfg.ExpiryWarnShare <= 1): // also NaN
		return invalid("ExpiryWarnShare %v must be at most 1", cfg.ExpiryWarnShare)
	case cfg.MoveTxTimeout < 0 || cfg.MoveTxTimeout > MaxInterval:
		return invalid("MoveTxTimeout %v must be in 0..%v", cfg.MoveTxTimeout, MaxInterval)
	case hc.Durable != nil:
		return checkClaim(cfg, hc)
	}
	return nil
}

// invalid returns an error matching store.ErrInvalidArgument about the
// field of Config that format begins with.
func invalid(format string, args ...any) error {
	return fmt.Errorf("cleanup: Config."+format+": %w", append(args, store.ErrInvalidArgument)...)
}

// A failed durable hook waits at most MaxBackoff, which is at most
// MaxInterval, before it is due again: store.HookQueue.RetryHook takes
// pauses up to store.MaxHookClaim. (This constant fails to compile if
// MaxInterval grows past it.)
const _ = uint64(store.MaxHookClaim - MaxInterval)

// checkClaim checks that a durable hook's claim, Hooks.Timeout plus
// QueryTimeout, fits in store.MaxHookClaim: else every claim would be
// refused and no durable hook delivered. It blames QueryTimeout when even
// the default hook timeout would not fit beside it, else Hooks.Timeout.
func checkClaim(cfg *Config, hc *HooksConfig) error {
	hook, query := cmp.Or(hc.Timeout, DefaultHookTimeout), cmp.Or(cfg.QueryTimeout, DefaultQueryTimeout)
	switch {
	case query > store.MaxHookClaim-DefaultHookTimeout:
		return invalid("QueryTimeout %v is too long for a durable hook: a delivery claims its record for Hooks.Timeout plus QueryTimeout, at most %v (store.MaxHookClaim)",
			cfg.QueryTimeout, store.MaxHookClaim)
	case hook > store.MaxHookClaim-query:
		return invalid("Hooks.Timeout %v is too long for a durable hook: a delivery claims its record for Hooks.Timeout plus QueryTimeout (%v), at most %v (store.MaxHookClaim)",
			hc.Timeout, query, store.MaxHookClaim)
	}
	return nil
}
