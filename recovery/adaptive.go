package recovery

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Level is a load level.
type Level int

// The load levels, from least to most loaded.
const (
	Low Level = iota
	Medium
	High
)

// String returns "low", "medium" or "high".
func (l Level) String() string {
	switch l {
	case Low:
		return "low"
	case Medium:
		return "medium"
	case High:
		return "high"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// Signals are what the cleanup loop knows of the load when it picks steps.
type Signals struct {
	// Backlog is the number of expired leases the current cleanup scan
	// found, over every page and stream it listed so far (the cleanup loop
	// lists up to its Config.ScanLimit before it handles any).
	Backlog int
	// PoolSaturation is the share of the connection pool in use, 0..1;
	// 0 when unknown.
	PoolSaturation float64
	// CycleLatency is how long recent cleanup cycles took.
	CycleLatency time.Duration
}

// LoadProbe classifies the load.
type LoadProbe interface {
	Level(ctx context.Context, s Signals) Level
}

// LoadProbeFunc adapts a function to a LoadProbe.
type LoadProbeFunc func(ctx context.Context, s Signals) Level

// Level calls f.
func (f LoadProbeFunc) Level(ctx context.Context, s Signals) Level { return f(ctx, s) }

// ThresholdProbe is the default LoadProbe: each signal is compared with its
// two thresholds and the highest level any signal reaches wins. A zero
// threshold pair disables that signal.
type ThresholdProbe struct {
	BacklogMedium, BacklogHigh       int
	SaturationMedium, SaturationHigh float64
	LatencyMedium, LatencyHigh       time.Duration
}

// DefaultProbe returns the ThresholdProbe the cleanup loop uses by default:
// a backlog of 1,000 expired leases is medium load and 10,000 high; a pool
// 70% in use is medium and 90% high; cycles of 5 s are medium and 20 s high.
// Each call returns a new value: change a copy's thresholds to tune it.
//
// The backlog thresholds bound the time the trackers add to a mass expiry,
// not the database's work: the loop writes recoveries in batches, so moving
// work costs the database about what a gap does, while the trackers are the
// caller's and may be remote (10,000 calls of 1 ms are 10 s during which the
// barrier waits).
func DefaultProbe() ThresholdProbe {
	return ThresholdProbe{
		BacklogMedium: 1000, BacklogHigh: 10_000,
		SaturationMedium: 0.7, SaturationHigh: 0.9,
		LatencyMedium: 5 * time.Second, LatencyHigh: 20 * time.Second,
	}
}

// Level implements LoadProbe.
func (p ThresholdProbe) Level(_ context.Context, s Signals) Level {
	level := Low
	raise := func(reached bool, to Level) {
		if reached && to > level {
			level = to
		}
	}
	raise(p.BacklogMedium > 0 && s.Backlog >= p.BacklogMedium, Medium)
	raise(p.BacklogHigh > 0 && s.Backlog >= p.BacklogHigh, High)
	raise(p.SaturationMedium > 0 && s.PoolSaturation >= p.SaturationMedium, Medium)
	raise(p.SaturationHigh > 0 && s.PoolSaturation >= p.SaturationHigh, High)
	raise(p.LatencyMedium > 0 && s.CycleLatency >= p.LatencyMedium, Medium)
	raise(p.LatencyHigh > 0 && s.CycleLatency >= p.LatencyHigh, High)
	return level
}

// Selector picks the steps to run for a load level and a kind of work.
type Selector interface {
	Select(level Level, kind string) Steps
}

// SelectorFunc adapts a function to a Selector.
type SelectorFunc func(level Level, kind string) Steps

// Select calls f.
func (f SelectorFunc) Select(level Level, kind string) Steps { return f(level, kind) }

// StepSelector is the default Selector: Low runs PartialWork, Retry and Gap;
// Medium skips Retry; High runs Gap only. Nil steps are left out (a caller
// without an OperationTracker has no Retry step).
type StepSelector struct {
	PartialWork, Retry, Gap Step
}

// Select implements Selector.
func (s StepSelector) Select(level Level, _ string) Steps {
	var steps []Step
	switch level {
	case Low:
		steps = []Step{s.PartialWork, s.Retry, s.Gap}
	case Medium:
		steps = []Step{s.PartialWork, s.Gap}
	default:
		steps = []Step{s.Gap}
	}
	out := steps[:0]
	for _, st := range steps {
		if st != nil {
			out = append(out, st)
		}
	}
	return out
}

// RateFilter wraps a Selector and leaves out a step whose success rate for a
// kind, over its last Window attempts, is below MinRate, once it has at
// least Window attempts. The last step of a pipeline (the fallback) is
// never left out, and a left-out step is let through once every Window
// selections, so it can show that it works again. Record feeds it outcomes;
// it is safe for concurrent use. A Window above MaxRateWindow counts as
// MaxRateWindow; zero or less turns the filter off.
type RateFilter struct {
	Selector Selector
	MinRate  float64 // e.g. 0.05
	Window   int     // e.g. 100

	mu    sync.Mutex
	stats map[rateKey]*outcomes
}

// MaxRateWindow is the largest RateFilter.Window: the filter keeps that many
// outcomes per step and kind.
const MaxRateWindow = 10_000

type rateKey struct{ step, kind string }

// outcomes is a ring of the last attempts.
type outcomes struct {
	ring    []bool
	ok      int // successes in ring
	next    int
	full    bool
	skipped int // selections that left the step out since it last ran
}

// window is the filter's effective Window.
func (f *RateFilter) window() int { return min(f.Window, MaxRateWindow) }

// Select implements Selector.
func (f *RateFilter) Select(level Level, kind string) Steps {
	return f.filter(f.Selector.Select(level, kind), kind)
}

// SelectSituation implements SituationSelector: it asks the wrapped
// Selector with the whole Situation when it is a SituationSelector.
func (f *RateFilter) SelectSituation(s Situation) Steps {
	return f.filter(selectFor(f.Selector, s), s.Entry.Kind)
}

// filter leaves out of steps those whose rate for kind is too low.
func (f *RateFilter) filter(steps Steps, kind string) Steps {
	if len(steps) < 2 || f.window() <= 0 {
		return steps
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(Steps, 0, len(steps))
	for i, s := range steps {
		if i < len(steps)-1 && f.skipLocked(s.Name(), kind) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// skipLocked reports whether to leave step out for kind now.
func (f *RateFilter) skipLocked(step, kind string) bool {
	o := f.stats[rateKey{step, kind}]
	if o == nil || o.rate() >= f.MinRate {
		return false
	}
	o.skipped++
	if o.skipped >= f.window() {
		o.skipped = 0
		return false // let it through once
	}
	return true
}

// rate returns the success rate over the ring, 1 until the ring is full.
func (o *outcomes) rate() float64 {
	if !o.full {
		return 1
	}
	return float64(o.ok) / float64(len(o.ring))
}

// Record notes an attempt of step on work of kind.
func (f *RateFilter) Record(step, kind string, success bool) {
	if f.window() <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stats == nil {
		f.stats = map[rateKey]*outcomes{}
	}
	k := rateKey{step, kind}
	o := f.stats[k]
	if o == nil {
		o = &outcomes{ring: make([]bool, f.window())}
		f.stats[k] = o
	}
	if o.ring[o.next] {
		o.ok--
	}
	if success {
		o.ok++
	}
	o.ring[o.next] = success
	o.next = (o.next + 1) % len(o.ring)
	o.full = o.full || o.next == 0
}
