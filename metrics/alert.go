package metrics

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Level is the severity of an alert.
type Level string

// Levels of alerts.
const (
	LevelWarning  Level = "warning"
	LevelCritical Level = "critical"
)

// Names of the alerts.
const (
	// AlertExpirationRate: more than Thresholds.ExpirationRate of the
	// leases granted in the window expired (warning).
	AlertExpirationRate = "ExpirationRate"
	// AlertMassExpiry: one full cleanup scan found more than
	// Thresholds.MassExpiry expired leases at once (critical).
	AlertMassExpiry = "MassExpiry"
	// AlertRecoveryFailureRate: more than Thresholds.RecoveryFailureRate
	// of the recovery steps that decided in the window failed (warning).
	AlertRecoveryFailureRate = "RecoveryFailureRate"
	// AlertOpenGaps: more than Thresholds.OpenGaps open gaps over the
	// streams this process touched (warning).
	AlertOpenGaps = "OpenGaps"
	// AlertHistoryLost: more than Thresholds.HistoryLost streams and
	// named leases are refused because the database lost history this
	// process had seen (store.ErrHistoryLost: an asynchronous standby was
	// promoted), as the store's HistoryHealth last said (critical). It
	// resolves when the operator accepts the server's history.
	AlertHistoryLost = "HistoryLost"
	// AlertParked: more than Thresholds.Parked entries of the store are
	// parked (store.Parker): their recovery kept failing and their streams
	// wait until an operator chooses what becomes of them (warning).
	AlertParked = "Parked"
	// AlertNamedLeaseTimeouts: more than Thresholds.NamedLeaseTimeouts
	// blocking acquires of named leases timed out (lease.ErrTimeout) in
	// the window: a holder keeps a name too long, or too many wait for it
	// (warning).
	AlertNamedLeaseTimeouts = "NamedLeaseTimeouts"
	// AlertNamedLeaseLosses: more than Thresholds.NamedLeaseLosses
	// named-lease holdings of this process were lost in the window
	// (expired, could not be renewed in time, force-released, at their
	// maximum renewals): a holder was deposed (warning).
	AlertNamedLeaseLosses = "NamedLeaseLosses"
	// AlertNamedLeaseLongHeld: more than Thresholds.NamedLeaseLongHeld
	// holdings were held longer than the lease.Monitor's StuckAfter at
	// its last check (warning).
	AlertNamedLeaseLongHeld = "NamedLeaseLongHeld"
)

// Alert is one change of an alert's state: it fires (Firing true) when its
// condition starts to hold and resolves (Firing false) when the condition
// ends. While the condition holds nothing more is sent.
type Alert struct {
	Name      string
	Level     Level
	Firing    bool
	Value     float64 // what was observed: a share (0.06 is 6%) or a count
	Threshold float64 // the value it is compared with: it fires above it
	Message   string
	At        time.Time
}

// SinkFunc receives alerts as they fire and resolve.
type SinkFunc func(Alert)

// Defaults of EvaluatorConfig and Thresholds.
const (
	DefaultWindow              = time.Hour
	DefaultMinSamples          = 20
	DefaultExpirationRate      = 0.05
	DefaultMassExpiry          = 10
	DefaultRecoveryFailureRate = 0.01
	DefaultOpenGaps            = 100
	DefaultHistoryLost         = 0
	DefaultParked              = 0
	DefaultNamedLeaseTimeouts  = 10
	DefaultNamedLeaseLosses    = 0
	DefaultNamedLeaseLongHeld  = 0
)

// Thresholds of the alerts; each fires when its value is above its
// threshold. Zero means the default; a negative value turns the alert off.
type Thresholds struct {
	// ExpirationRate is the share of granted leases that may expire.
	// Default: DefaultExpirationRate (5%).
	ExpirationRate float64
	// MassExpiry is how many expired leases one full cleanup scan may find.
	// Default: DefaultMassExpiry (10).
	MassExpiry int
	// RecoveryFailureRate is the share of recovery steps that may fail.
	// Default: DefaultRecoveryFailureRate (1%).
	RecoveryFailureRate float64
	// OpenGaps is how many open gaps the touched streams may have.
	// Default: DefaultOpenGaps (100).
	OpenGaps int64
	// HistoryLost is how many streams and named leases may be refused
	// for lost history. Default: DefaultHistoryLost (0: any fires).
	HistoryLost int
	// Parked is how many entries may be parked. Default: DefaultParked
	// (0: any fires).
	Parked int64
	// NamedLeaseTimeouts is how many named-lease acquires may time out in
	// the window. Default: DefaultNamedLeaseTimeouts (10).
	NamedLeaseTimeouts int
	// NamedLeaseLosses is how many named-lease holdings may be lost in the
	// window. Default: DefaultNamedLeaseLosses (0: any fires).
	NamedLeaseLosses int
	// NamedLeaseLongHeld is how many holdings may be stuck at the
	// Monitor's last check. Default: DefaultNamedLeaseLongHeld (0: any
	// fires).
	NamedLeaseLongHeld int
}

// EvaluatorConfig configures an Evaluator. A nil *EvaluatorConfig means the
// defaults; so does the zero value of each field.
type EvaluatorConfig struct {
	// Window is the sliding window of the rates. Default: DefaultWindow
	// (1 h). Events are kept in 60 slots of Window/60, so an event counts
	// for between Window and Window+Window/60.
	Window time.Duration
	// Thresholds of the alerts.
	Thresholds Thresholds
	// MinSamples is how many granted leases (recovery steps that decided)
	// the window must hold before its expiration (recovery failure) rate
	// counts: 1 expiry in the first 3 leases is no trend. Default:
	// DefaultMinSamples (20).
	MinSamples int
	// Sink receives the alerts, synchronously and in order, on the
	// goroutine that reported the event that changed them; it must return
	// quickly and must not call the Evaluator. Optional: Alerts reports the
	// state either way.
	Sink SinkFunc
	// Logger logs each alert (firing: Warn or Error by level; resolved:
	// Info). Default: discard.
	Logger *slog.Logger
	// Now is the clock of the window. Default: time.Now.
	Now func() time.Time
}

// Evaluator watches the events Metrics reports (or that the caller reports
// itself) and raises alerts when thresholds are crossed. The rates are over
// a sliding window; the mass expiry alert follows the last full cleanup
// scan and the open gaps alert the last count. Conditions are evaluated at
// every event and at Evaluate (Metrics calls it at every collection), so a
// rate alert resolves once its window slides past the trouble.
//
// An Evaluator sees one process: the leases it granted and the expiries its
// cleanup loop resolved. For a fleet, alert on the exported metrics as
// docs/operations.md shows. It is safe for concurrent use.
type Evaluator struct {
	window     time.Duration
	slot       time.Duration
	minSamples int64
	th         Thresholds
	sink       SinkFunc
	logger     *slog.Logger
	now        func() time.Time

	mu       sync.Mutex
	slots    []slot // oldest first
	total    slot   // sums over slots
	cycle    int64  // expired leases found by the last cycle; -1: none yet
	openGaps int64  // last count; -1: none yet
	lost     int    // refused streams and names, as last told
	parked   int64  // parked entries, last count; -1: none yet
	longHeld int    // stuck named-lease holdings, last check; -1: none yet
	alerts   map[string]*Alert
}

// slot holds the events of one Window/60.
type slot struct {
	start                     time.Time
	granted, expired          int64
	recoveryOK, recoveryFails int64
	nlTimeouts, nlLosses      int64
}

// NewEvaluator returns an Evaluator. It returns an error naming the field
// when cfg is invalid.
func NewEvaluator(cfg *EvaluatorConfig) (*Evaluator, error) {
	if cfg == nil {
		cfg = &EvaluatorConfig{}
	}
	switch {
	case cfg.Window < 0:
		return nil, fmt.Errorf("metrics: EvaluatorConfig.Window %v is negative: %w", cfg.Window, store.ErrInvalidArgument)
	case cfg.MinSamples < 0:
		return nil, fmt.Errorf("metrics: EvaluatorConfig.MinSamples %d is negative: %w", cfg.MinSamples, store.ErrInvalidArgument)
	case !(cfg.Thresholds.ExpirationRate <= 1): // also NaN
		return nil, fmt.Errorf("metrics: EvaluatorConfig.Thresholds.ExpirationRate %v must be at most 1: %w", cfg.Thresholds.ExpirationRate, store.ErrInvalidArgument)
	case !(cfg.Thresholds.RecoveryFailureRate <= 1): // also NaN
		return nil, fmt.Errorf("metrics: EvaluatorConfig.Thresholds.RecoveryFailureRate %v must be at most 1: %w", cfg.Thresholds.RecoveryFailureRate, store.ErrInvalidArgument)
	}
	e := &Evaluator{
		window:     cmp.Or(cfg.Window, DefaultWindow),
		minSamples: int64(cmp.Or(cfg.MinSamples, DefaultMinSamples)),
		th: Thresholds{
			ExpirationRate:      cmp.Or(cfg.Thresholds.ExpirationRate, DefaultExpirationRate),
			MassExpiry:          cmp.Or(cfg.Thresholds.MassExpiry, DefaultMassExpiry),
			RecoveryFailureRate: cmp.Or(cfg.Thresholds.RecoveryFailureRate, DefaultRecoveryFailureRate),
			OpenGaps:            cmp.Or(cfg.Thresholds.OpenGaps, DefaultOpenGaps),
			HistoryLost:         cmp.Or(cfg.Thresholds.HistoryLost, DefaultHistoryLost),
			Parked:              cmp.Or(cfg.Thresholds.Parked, DefaultParked),
			NamedLeaseTimeouts:  cmp.Or(cfg.Thresholds.NamedLeaseTimeouts, DefaultNamedLeaseTimeouts),
			NamedLeaseLosses:    cmp.Or(cfg.Thresholds.NamedLeaseLosses, DefaultNamedLeaseLosses),
			NamedLeaseLongHeld:  cmp.Or(cfg.Thresholds.NamedLeaseLongHeld, DefaultNamedLeaseLongHeld),
		},
		sink:     cfg.Sink,
		logger:   cfg.Logger,
		now:      cfg.Now,
		cycle:    -1,
		openGaps: -1,
		parked:   -1,
		longHeld: -1,
		alerts:   map[string]*Alert{},
	}
	e.slot = max(e.window/60, time.Nanosecond)
	if e.logger == nil {
		e.logger = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	for _, a := range []Alert{
		{Name: AlertExpirationRate, Level: LevelWarning, Threshold: e.th.ExpirationRate},
		{Name: AlertMassExpiry, Level: LevelCritical, Threshold: float64(e.th.MassExpiry)},
		{Name: AlertRecoveryFailureRate, Level: LevelWarning, Threshold: e.th.RecoveryFailureRate},
		{Name: AlertOpenGaps, Level: LevelWarning, Threshold: float64(e.th.OpenGaps)},
		{Name: AlertHistoryLost, Level: LevelCritical, Threshold: float64(e.th.HistoryLost)},
		{Name: AlertParked, Level: LevelWarning, Threshold: float64(e.th.Parked)},
		{Name: AlertNamedLeaseTimeouts, Level: LevelWarning, Threshold: float64(e.th.NamedLeaseTimeouts)},
		{Name: AlertNamedLeaseLosses, Level: LevelWarning, Threshold: float64(e.th.NamedLeaseLosses)},
		{Name: AlertNamedLeaseLongHeld, Level: LevelWarning, Threshold: float64(e.th.NamedLeaseLongHeld)},
	} {
		if a.Threshold >= 0 {
			e.alerts[a.Name] = &a
		}
	}
	return e, nil
}

// Granted reports n leases granted.
func (e *Evaluator) Granted(n int) { e.add(func(s *slot) { s.granted += int64(n) }) }

// Expired reports n expired leases resolved.
func (e *Evaluator) Expired(n int) { e.add(func(s *slot) { s.expired += int64(n) }) }

// Recovery reports a recovery step that decided: it resolved its entry
// (ok) or failed. Steps that declined are not reported.
func (e *Evaluator) Recovery(ok bool) {
	e.add(func(s *slot) {
		if ok {
			s.recoveryOK++
		} else {
			s.recoveryFails++
		}
	})
}

// Cycle reports how many expired leases a full cleanup scan found (a
// re-run of a few streams sees only theirs: Metrics reports full scans
// only).
func (e *Evaluator) Cycle(expired int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cycle = int64(expired)
	e.evaluateLocked(e.now())
}

// OpenGaps reports the open gaps of the streams this process touched.
func (e *Evaluator) OpenGaps(n int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.openGaps = n
	e.evaluateLocked(e.now())
}

// HistoryLost reports how many streams and named leases the store refuses
// now because the database lost history (store.HistoryHealth's Refused).
func (e *Evaluator) HistoryLost(refused int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lost = refused
	e.evaluateLocked(e.now())
}

// Parked reports how many entries of the store are parked
// (store.Parker.CountParked).
func (e *Evaluator) Parked(n int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.parked = n
	e.evaluateLocked(e.now())
}

// NamedLeaseTimeout reports a blocking named-lease acquire that timed out
// (lease.ErrTimeout).
func (e *Evaluator) NamedLeaseTimeout() { e.add(func(s *slot) { s.nlTimeouts++ }) }

// NamedLeaseLost reports a named-lease holding its holder lost.
func (e *Evaluator) NamedLeaseLost() { e.add(func(s *slot) { s.nlLosses++ }) }

// NamedLeasesLongHeld reports how many holdings the lease.Monitor's last
// check found stuck.
func (e *Evaluator) NamedLeasesLongHeld(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.longHeld = n
	e.evaluateLocked(e.now())
}

// Evaluate slides the window to now and re-evaluates every alert.
func (e *Evaluator) Evaluate() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evaluateLocked(e.now())
}

// Alerts returns the state of every alert that is on, in a fixed order:
// Firing, and the last Value observed.
func (e *Evaluator) Alerts() []Alert {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Alert, 0, len(e.alerts))
	for _, name := range []string{AlertExpirationRate, AlertMassExpiry, AlertRecoveryFailureRate, AlertOpenGaps, AlertHistoryLost, AlertParked,
		AlertNamedLeaseTimeouts, AlertNamedLeaseLosses, AlertNamedLeaseLongHeld} {
		if a, ok := e.alerts[name]; ok {
			out = append(out, *a)
		}
	}
	return out
}

// add records an event in the current slot and re-evaluates.
func (e *Evaluator) add(f func(*slot)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	e.slide(now)
	if n := len(e.slots); n == 0 || !now.Before(e.slots[n-1].start.Add(e.slot)) {
		e.slots = append(e.slots, slot{start: now.Truncate(e.slot)})
	}
	cur := &e.slots[len(e.slots)-1]
	before := *cur
	f(cur)
	e.total.granted += cur.granted - before.granted
	e.total.expired += cur.expired - before.expired
	e.total.recoveryOK += cur.recoveryOK - before.recoveryOK
	e.total.recoveryFails += cur.recoveryFails - before.recoveryFails
	e.total.nlTimeouts += cur.nlTimeouts - before.nlTimeouts
	e.total.nlLosses += cur.nlLosses - before.nlLosses
	e.evaluateLocked(now)
}

// slide drops the slots that ended before the window. e.mu must be held.
func (e *Evaluator) slide(now time.Time) {
	cutoff := now.Add(-e.window)
	drop := 0
	for _, s := range e.slots {
		if s.start.Add(e.slot).After(cutoff) {
			break
		}
		e.total.granted -= s.granted
		e.total.expired -= s.expired
		e.total.recoveryOK -= s.recoveryOK
		e.total.recoveryFails -= s.recoveryFails
		e.total.nlTimeouts -= s.nlTimeouts
		e.total.nlLosses -= s.nlLosses
		drop++
	}
	e.slots = e.slots[drop:]
}

// evaluateLocked checks every condition at now. e.mu must be held.
func (e *Evaluator) evaluateLocked(now time.Time) {
	e.slide(now)
	t := e.total
	if t.granted >= e.minSamples && t.granted > 0 {
		v := float64(t.expired) / float64(t.granted)
		e.set(now, AlertExpirationRate, v, v > e.th.ExpirationRate, func(a *Alert) string {
			return fmt.Sprintf("%.1f%% of the %d leases granted in the last %v expired (%d); threshold %.1f%%: workers crash, stall or get too short a TTL",
				100*v, t.granted, e.window, t.expired, 100*a.Threshold)
		})
	} else {
		e.set(now, AlertExpirationRate, 0, false, nil)
	}
	if n := t.recoveryOK + t.recoveryFails; n >= e.minSamples && n > 0 {
		v := float64(t.recoveryFails) / float64(n)
		e.set(now, AlertRecoveryFailureRate, v, v > e.th.RecoveryFailureRate, func(a *Alert) string {
			return fmt.Sprintf("%.1f%% of the %d recovery steps in the last %v failed (%d); threshold %.1f%%: a tracker or the database fails",
				100*v, n, e.window, t.recoveryFails, 100*a.Threshold)
		})
	} else {
		e.set(now, AlertRecoveryFailureRate, 0, false, nil)
	}
	if e.cycle >= 0 {
		v := float64(e.cycle)
		e.set(now, AlertMassExpiry, v, e.cycle > int64(e.th.MassExpiry), func(a *Alert) string {
			return fmt.Sprintf("one cleanup scan found %d expired leases at once; threshold %.0f: a worker node died or the database paused", e.cycle, a.Threshold)
		})
	}
	if e.openGaps >= 0 {
		v := float64(e.openGaps)
		e.set(now, AlertOpenGaps, v, e.openGaps > e.th.OpenGaps, func(a *Alert) string {
			return fmt.Sprintf("%d open gaps; threshold %.0f: numbers whose work was lost or moved to a new number (seqlease gaps STREAM tells which)", e.openGaps, a.Threshold)
		})
	}
	e.set(now, AlertHistoryLost, float64(e.lost), e.lost > e.th.HistoryLost, func(a *Alert) string {
		return fmt.Sprintf("%d streams and named leases refused: the database lost history this process had seen "+
			"(an asynchronous standby promoted?); numbers and fences on them stop until the operator decides "+
			"(docs/operations.md, Asynchronous replication); threshold %.0f", e.lost, a.Threshold)
	})
	if e.parked >= 0 {
		e.set(now, AlertParked, float64(e.parked), e.parked > e.th.Parked, func(a *Alert) string {
			return fmt.Sprintf("%d parked entries; threshold %.0f: their recovery kept failing and their streams wait "+
				"until an operator unparks, fills or gives them up (seqlease parked lists them)", e.parked, a.Threshold)
		})
	}
	e.set(now, AlertNamedLeaseTimeouts, float64(t.nlTimeouts), t.nlTimeouts > int64(e.th.NamedLeaseTimeouts), func(a *Alert) string {
		return fmt.Sprintf("%d named-lease acquires timed out in the last %v; threshold %.0f: a holder keeps its name "+
			"too long or too many wait for it (seqlease leases lists the holders)", t.nlTimeouts, e.window, a.Threshold)
	})
	e.set(now, AlertNamedLeaseLosses, float64(t.nlLosses), t.nlLosses > int64(e.th.NamedLeaseLosses), func(a *Alert) string {
		return fmt.Sprintf("%d named-lease holdings lost in the last %v; threshold %.0f: holders were deposed "+
			"(renewals failing, the database slow, force-releases)", t.nlLosses, e.window, a.Threshold)
	})
	if e.longHeld >= 0 {
		e.set(now, AlertNamedLeaseLongHeld, float64(e.longHeld), e.longHeld > e.th.NamedLeaseLongHeld, func(a *Alert) string {
			return fmt.Sprintf("%d named-lease holdings held longer than the monitor's threshold; threshold %.0f: "+
				"a holder renews in a loop it never leaves (the monitor's log names them)", e.longHeld, a.Threshold)
		})
	}
}

// set records the value of an alert and, if its condition changed, sends
// the change. e.mu must be held.
func (e *Evaluator) set(now time.Time, name string, v float64, cond bool, msg func(*Alert) string) {
	a, ok := e.alerts[name]
	if !ok {
		return // turned off
	}
	a.Value = v
	if cond == a.Firing {
		return
	}
	a.Firing, a.At = cond, now
	if cond {
		a.Message = msg(a)
		level := slog.LevelWarn
		if a.Level == LevelCritical {
			level = slog.LevelError
		}
		e.logger.Log(context.Background(), level, "metrics: alert firing: "+a.Message,
			slog.String("alert", a.Name), slog.String("level", string(a.Level)), slog.Float64("value", v))
	} else {
		a.Message = fmt.Sprintf("%s resolved: value %g, threshold %g", name, v, a.Threshold)
		e.logger.Info("metrics: alert resolved", slog.String("alert", a.Name), slog.Float64("value", v))
	}
	if e.sink != nil {
		e.sink(*a)
	}
}
