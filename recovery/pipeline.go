package recovery

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Store is what the default steps need of a backend (store/memory,
// store/postgres): moving work to a new number, and declaring a gap.
type Store interface {
	Recoverer
	Resolver
}

// Defaults of Config.
const (
	// DefaultOwner is recorded on entries that carry recovered work.
	DefaultOwner = "seqlease-cleanup"
	// DefaultStepRateWindow is the default Config.StepRateWindow.
	DefaultStepRateWindow = 100
)

// Config configures a Pipeline. A nil *Config means the defaults; so does
// the zero value of each field. The defaults need no configuration at all:
// every expired entry becomes a gap.
type Config struct {
	// WorkTracker and OperationTracker feed the default Selector's
	// PartialWork and Retry steps: without them there is no work to
	// recover and every expired entry becomes a gap. Optional; unused with
	// a Selector of the caller's.
	WorkTracker      WorkTracker
	OperationTracker OperationTracker
	// Selector picks the steps for a load level and kind. Default:
	// StepSelector with the Gap step, plus PartialWork when WorkTracker is
	// set and Retry when OperationTracker is set.
	Selector Selector
	// Owner is recorded on entries that carry recovered work, by the
	// default steps and by the cleanup loop's batched moves. Default:
	// DefaultOwner ("seqlease-cleanup").
	Owner string
	// Probe classifies the load. Default: DefaultProbe().
	Probe LoadProbe
	// PoolSaturation reports the share of the connection pool in use
	// (0..1), a signal for Probe. Default: the store's PoolSaturation
	// method if it has one (*postgres.Store on a *pgxpool.Pool), else none.
	PoolSaturation func() float64
	// MinStepSuccessRate, when above 0, wraps the Selector in a RateFilter
	// fed with every step tried (Pipeline.Record): a step whose success
	// rate for a kind over its last StepRateWindow attempts fell below it
	// is skipped (never the last step). In 0..1. Default: 0, off.
	MinStepSuccessRate float64
	// StepRateWindow is the number of attempts the rate is taken over, at
	// most MaxRateWindow. Default: DefaultStepRateWindow (100).
	StepRateWindow int
	// MaxAttempts, when above 0, is how many times in a row the recovery
	// of an expired entry may fail (a tracker or the database erred)
	// before the cleanup loop gives its work up and declares it a gap with
	// reason ReasonRecoveryFailed, unblocking its stream at the cost of
	// that work. The loop counts attempts in its process, once per cycle.
	// Default: 0, never give up: the entry stays expired and its stream
	// waits, in order, until the recovery succeeds; the watermark lag
	// grows, and the recovery failures (metrics, logs) say why.
	MaxAttempts int
	// OnExhausted is what the cleanup loop does with an entry whose
	// recovery failed MaxAttempts times: ExhaustedGap (the default, the
	// zero value) gives its work up as a gap; ExhaustedPark parks it, so
	// that nothing is resolved without an operator choosing to (see
	// Exhausted). ExhaustedPark needs MaxAttempts above 0 and a store
	// that keeps the attempts (store.Parker: both built-in backends do).
	OnExhausted Exhausted
}

// Exhausted is what becomes of an expired entry whose recovery failed
// Config.MaxAttempts times (Config.OnExhausted).
type Exhausted int

const (
	// ExhaustedGap declares the entry a gap with reason
	// ReasonRecoveryFailed: its stream goes on, its work is lost.
	ExhaustedGap Exhausted = iota
	// ExhaustedPark parks the entry (store.Parker): it stays leased and
	// expired, its stream keeps waiting behind it, and the cleanup loop
	// tries it no more. An operator sees it (the CLI's parked command,
	// store.Parker.ListParked, with the attempts and the last error) and
	// chooses: unpark it (the loop tries again from zero attempts), commit
	// its work under a new number, or give it up as a gap.
	ExhaustedPark
)

// String returns "gap" or "park".
func (x Exhausted) String() string {
	switch x {
	case ExhaustedGap:
		return "gap"
	case ExhaustedPark:
		return "park"
	}
	return fmt.Sprintf("Exhausted(%d)", int(x))
}

// Pipeline is the recovery a cleanup loop runs on expired entries: which
// steps run at which load, for which kind of work, and how often a failing
// recovery is tried before its work is given up. It is safe for concurrent
// use, and may serve several loops of one store (they then share the
// rate filter). Build it with New, on the store the loop runs on.
type Pipeline struct {
	selector    Selector
	rates       *RateFilter // nil unless Config.MinStepSuccessRate
	probe       LoadProbe
	pool        func() float64 // nil: unknown
	owner       string
	maxAttempts int
	onExhausted Exhausted
	hist        *history
}

// New returns the Pipeline cfg describes on s, or an error matching
// store.ErrInvalidArgument that names the field at fault.
func New(s Store, cfg *Config) (*Pipeline, error) {
	if s == nil {
		return nil, fmt.Errorf("recovery: nil Store: %w", store.ErrInvalidArgument)
	}
	if cfg == nil {
		cfg = &Config{}
	}
	switch {
	case !(cfg.MinStepSuccessRate >= 0 && cfg.MinStepSuccessRate <= 1): // also NaN
		return nil, fmt.Errorf("recovery: Config.MinStepSuccessRate %v must be in 0..1: %w", cfg.MinStepSuccessRate, store.ErrInvalidArgument)
	case cfg.StepRateWindow < 0 || cfg.StepRateWindow > MaxRateWindow:
		return nil, fmt.Errorf("recovery: Config.StepRateWindow %d must be in 0..%d: %w", cfg.StepRateWindow, MaxRateWindow, store.ErrInvalidArgument)
	case cfg.MaxAttempts < 0:
		return nil, fmt.Errorf("recovery: Config.MaxAttempts %d is negative: %w", cfg.MaxAttempts, store.ErrInvalidArgument)
	case cfg.OnExhausted != ExhaustedGap && cfg.OnExhausted != ExhaustedPark:
		return nil, fmt.Errorf("recovery: Config.OnExhausted %v is neither ExhaustedGap nor ExhaustedPark: %w", cfg.OnExhausted, store.ErrInvalidArgument)
	case cfg.OnExhausted == ExhaustedPark && cfg.MaxAttempts == 0:
		return nil, fmt.Errorf("recovery: Config.OnExhausted park needs Config.MaxAttempts above 0 (the attempts before parking): %w", store.ErrInvalidArgument)
	}
	owner := cmp.Or(cfg.Owner, DefaultOwner)
	if err := store.ValidateText("owner", owner); err != nil {
		return nil, fmt.Errorf("recovery: Config.Owner: %w", err)
	}
	p := &Pipeline{selector: cfg.Selector, probe: cfg.Probe, pool: cfg.PoolSaturation, owner: owner, maxAttempts: cfg.MaxAttempts, onExhausted: cfg.OnExhausted}
	p.hist = &history{now: time.Now}
	if rh, ok := s.(store.RecoveryHistory); ok {
		p.hist.store = rh
	}
	if p.selector == nil {
		sel := StepSelector{Gap: Gap(s)}
		if cfg.WorkTracker != nil {
			sel.PartialWork = PartialWork(s, cfg.WorkTracker, owner)
		}
		if cfg.OperationTracker != nil {
			sel.Retry = Retry(s, cfg.OperationTracker, owner)
		}
		p.selector = sel
	}
	if p.probe == nil {
		p.probe = DefaultProbe()
	}
	if p.pool == nil {
		if ps, ok := s.(interface{ PoolSaturation() float64 }); ok {
			p.pool = ps.PoolSaturation
		}
	}
	if cfg.MinStepSuccessRate > 0 {
		p.rates = &RateFilter{Selector: p.selector, MinRate: cfg.MinStepSuccessRate,
			Window: cmp.Or(cfg.StepRateWindow, DefaultStepRateWindow)}
		p.selector = p.rates
	}
	return p, nil
}

// Level classifies the load with the Probe. A zero s.PoolSaturation is
// filled in from Config.PoolSaturation (or the store's pool).
func (p *Pipeline) Level(ctx context.Context, s Signals) Level {
	if s.PoolSaturation == 0 && p.pool != nil {
		s.PoolSaturation = p.pool()
	}
	return p.probe.Level(ctx, s)
}

// Select returns the steps to run on an entry of kind at level: the
// Selector's, less those the rate filter skips.
func (p *Pipeline) Select(level Level, kind string) Steps {
	return p.selector.Select(level, kind)
}

// SelectFor returns the steps to run on s.Entry: the Selector's (its
// SelectSituation when it is a SituationSelector, else Select with the
// level and kind), less those the rate filter skips. It fills in
// s.SinceExpiry from s.Now when that is zero, and s.History with the
// record of the entry's kind (History).
func (p *Pipeline) SelectFor(s Situation) Steps {
	if s.SinceExpiry == 0 && !s.Now.IsZero() && !s.Entry.ExpiresAt.IsZero() {
		s.SinceExpiry = max(s.Now.Sub(s.Entry.ExpiresAt), 0)
	}
	if s.History == nil {
		s.History = p.History(s.Entry.Kind)
	}
	return selectFor(p.selector, s)
}

// History returns the recovery record of kind, by step name: what
// SyncHistory last read from the store (store.RecoveryHistory), plus the
// outcomes this Pipeline noted since. A store without a record keeps it in
// this process only. The caller's copy.
func (p *Pipeline) History(kind string) History { return p.hist.of(kind) }

// Outcome notes the outcome of one attempt of step on an entry of kind: r
// and err as the step reported them. It feeds the rate filter (as Record)
// and the recovery history (History); an entry found resolved elsewhere
// (r.Elsewhere) says nothing of the step and is not noted.
func (p *Pipeline) Outcome(step, kind string, r Result, err error) {
	if r.Elsewhere {
		return
	}
	p.Record(step, kind, err == nil && r.Recovered)
	p.hist.add(kind, step, r, err)
}

// SyncHistory writes the outcomes noted since the last sync to the store,
// in one call, and reads the record of every kind back (at most
// store.MaxListLimit kinds and steps), so the selector also sees what
// other processes, and this one before a restart, recorded. The cleanup
// loop calls it once per cycle. A failed write keeps the outcomes for the
// next sync. Without a store.RecoveryHistory it does nothing.
func (p *Pipeline) SyncHistory(ctx context.Context) error { return p.hist.syncStore(ctx) }

// Record feeds the rate filter (Config.MinStepSuccessRate) the outcome of
// one attempt of step on work of kind; without a filter it does nothing.
func (p *Pipeline) Record(step, kind string, success bool) {
	if p.rates != nil {
		p.rates.Record(step, kind, success)
	}
}

// Owner is the owner recorded on entries that carry recovered work
// (Config.Owner).
func (p *Pipeline) Owner() string { return p.owner }

// MaxAttempts is how many failed recoveries in a row of an entry make its
// work given up (Config.MaxAttempts); 0: never.
func (p *Pipeline) MaxAttempts() int { return p.maxAttempts }

// OnExhausted is what becomes of an entry whose recovery failed
// MaxAttempts times (Config.OnExhausted).
func (p *Pipeline) OnExhausted() Exhausted { return p.onExhausted }
