package metrics

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
)

// Values of KeyResult.
const (
	ResultSuccess  = "success"  // a recovery step resolved the entry
	ResultDeclined = "declined" // a recovery step had nothing to recover
	ResultFailure  = "failure"  // a recovery step could not decide (an error)
	ResultOK       = "ok"       // a cleanup cycle or a renewal went through
	ResultError    = "error"    // it did not; an acquisition failed
	ResultAcquired = "acquired" // a named lease was acquired
	ResultHeld     = "held"     // another holder held it
	ResultReleased = "released" // a holding ended by its release
	ResultLost     = "lost"     // a holding ended by its loss
	ResultTimeout  = "timeout"  // a blocking acquire timed out (lease.ErrTimeout)
)

// Values of KeyStatus (NameNamedLeaseHoldings).
const (
	StatusActive   = "active"    // a live holding, younger than the Monitor's StuckAfter
	StatusLongHeld = "long-held" // a live holding held at least the Monitor's StuckAfter
	StatusExpired  = "expired"   // a holding past its expiry that maintenance has not marked yet
	StatusPending  = "pending"   // a process waiting for a name (a blocked acquire)
)

// Compile-time checks: the observers are what the packages take.
var (
	_ sequence.Observer         = (*LeaserObserver)(nil)
	_ cleanup.Observer          = (*CleanupObserver)(nil)
	_ cleanup.StepObserver      = (*CleanupObserver)(nil)
	_ cleanup.Tracer            = (*CleanupObserver)(nil)
	_ cleanup.HookStatsObserver = (*CleanupObserver)(nil)
	_ cleanup.ExpiryObserver    = (*CleanupObserver)(nil)
	_ lease.Observer            = (*CleanupObserver)(nil)
	_ lease.Observer            = (*NamedLeaseObserver)(nil)
	_ lease.MonitorObserver     = (*NamedLeaseObserver)(nil)
	_ gap.Observer              = (*GapObserver)(nil)
	_ WatermarkSource           = (*barrier.Barrier)(nil)
)

// LeaserObserver records what a sequence.Leaser does: leases granted,
// committed, released and extended, the commit wait, and the lease and
// commit spans. Pass it as sequence.Config.Observer.
type LeaserObserver struct{ m *Metrics }

// StartLease implements sequence.Observer: a "seqlease.lease" span, and
// NameLeaseGranted when it succeeds.
func (o *LeaserObserver) StartLease(ctx context.Context, stream, kind string, n int) (context.Context, func(int64, error)) {
	m := o.m
	ctx, span := m.tracer.Start(ctx, "seqlease.lease", trace.WithAttributes(
		spanStream.String(stream), spanKind.String(kind), spanCount.Int(n)))
	return ctx, func(first int64, err error) {
		if err == nil {
			st := m.stream(stream)
			m.granted.Add(ctx, int64(n), m.opt(attrKey{shape: shapeStreamKind, stream: st.name, kind: kind}))
			st.leased(first + int64(n) - 1)
			if m.alerts != nil {
				m.alerts.Granted(n)
			}
			span.SetAttributes(spanNumber.Int64(first))
		}
		endSpan(span, err)
	}
}

// StartCommit implements sequence.Observer: a "seqlease.commit" span, and
// NameLeaseCommitted when it succeeds.
func (o *LeaserObserver) StartCommit(ctx context.Context, stream, kind string, number int64, ordered bool) (context.Context, func(error)) {
	m := o.m
	ctx, span := m.tracer.Start(ctx, "seqlease.commit", trace.WithAttributes(
		spanStream.String(stream), spanKind.String(kind), spanNumber.Int64(number), spanOrdered.Bool(ordered)))
	return ctx, func(err error) {
		if err == nil {
			m.committed.Add(ctx, 1, m.opt(attrKey{shape: shapeStreamKind, stream: m.stream(stream).name, kind: kind}))
		}
		endSpan(span, err)
	}
}

// CommitReady implements sequence.Observer: NameCommitWait, and the
// "seqlease.barrier.wait" event on the commit's span.
func (o *LeaserObserver) CommitReady(ctx context.Context, stream, kind string, wait time.Duration) {
	m := o.m
	m.commitWait.Record(ctx, wait.Seconds(), m.opt(attrKey{shape: shapeStreamKind, stream: m.stream(stream).name, kind: kind}))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("seqlease.barrier.wait", trace.WithAttributes(spanWait.Float64(wait.Seconds())))
	}
}

// Released implements sequence.Observer: NameLeaseReleased and
// NameGapCreated (reason released).
func (o *LeaserObserver) Released(ctx context.Context, stream, kind string, err error) {
	if err != nil {
		return
	}
	m := o.m
	name := m.stream(stream).name
	m.released.Add(ctx, 1, m.opt(attrKey{shape: shapeStreamKind, stream: name, kind: kind}))
	m.gapCreated.Add(ctx, 1, m.opt(attrKey{shape: shapeGap, stream: name, kind: kind, a: store.ReasonReleased}))
}

// Extended implements sequence.Observer: NameLeaseExtended.
func (o *LeaserObserver) Extended(ctx context.Context, stream, kind string, err error) {
	if err != nil {
		return
	}
	m := o.m
	m.extended.Add(ctx, 1, m.opt(attrKey{shape: shapeStreamKind, stream: m.stream(stream).name, kind: kind}))
}

// CleanupObserver records what the cleanup loop does: expired leases by
// outcome, overruns, recovery attempts, cycles, cascade mode, hook
// failures, the cycle and recovery spans, and the loop's own stream leases
// (named leases of kind "cleanup"). Pass it as cleanup.Config.Observer; it
// implements cleanup.StepObserver, cleanup.Tracer and lease.Observer too.
type CleanupObserver struct{ m *Metrics }

// Acquire implements lease.Observer for the cleanup loop's stream leases,
// as NamedLeaseObserver.Acquire.
func (o *CleanupObserver) Acquire(ctx context.Context, kind string, err error) {
	o.m.namedLeases.Acquire(ctx, kind, err)
}

// Renew implements lease.Observer for the cleanup loop's stream leases, as
// NamedLeaseObserver.Renew.
func (o *CleanupObserver) Renew(ctx context.Context, kind string, err error) {
	o.m.namedLeases.Renew(ctx, kind, err)
}

// Lost implements lease.Observer for the cleanup loop's stream leases, as
// NamedLeaseObserver.Lost.
func (o *CleanupObserver) Lost(ctx context.Context, kind string, held time.Duration) {
	o.m.namedLeases.Lost(ctx, kind, held)
}

// Released implements lease.Observer for the cleanup loop's stream leases,
// as NamedLeaseObserver.Released.
func (o *CleanupObserver) Released(ctx context.Context, kind string, held time.Duration) {
	o.m.namedLeases.Released(ctx, kind, held)
}

// Held implements lease.Observer for the cleanup loop's stream leases, as
// NamedLeaseObserver.Held.
func (o *CleanupObserver) Held(kind string) (end func()) { return o.m.namedLeases.Held(kind) }

// Handled implements cleanup.Observer. A resolved entry counts once in
// NameLeaseExpired (method: the step that resolved it) and
// NameLeaseOverrun (seenAt minus its expiry, both on the database clock;
// not recorded when the loop could not read that clock), and in
// NameGapCreated when it became a gap. An entry no step resolved is left
// for a later cycle and counted then; its failed steps count in
// NameRecoveryAttempts.
func (o *CleanupObserver) Handled(e store.Entry, seenAt time.Time, r recovery.Result, err error) {
	if err != nil {
		return
	}
	m := o.m
	ctx := context.Background()
	name := m.stream(e.Stream).name
	m.expired.Add(ctx, 1, m.opt(attrKey{shape: shapeStreamKindMethod, stream: name, kind: e.Kind, a: r.Method}))
	if !seenAt.IsZero() {
		m.overrun.Record(ctx, max(seenAt.Sub(e.ExpiresAt), 0).Seconds(), m.opt(attrKey{shape: shapeStreamKind, stream: name, kind: e.Kind}))
	}
	switch {
	case r.Method == recovery.MethodGap:
		reason := store.ReasonExpired
		if r.Reason == recovery.ReasonRecoveryFailed {
			reason = r.Reason // the steps kept failing: the work was given up
		}
		m.gapCreated.Add(ctx, 1, m.opt(attrKey{shape: shapeGap, stream: name, kind: e.Kind, a: reason}))
	case r.NewNumber != 0:
		m.gapCreated.Add(ctx, 1, m.opt(attrKey{shape: shapeGap, stream: name, kind: e.Kind, a: store.ReasonRecovered}))
	}
	if m.alerts != nil {
		m.alerts.Expired(1)
	}
}

// Cycle implements cleanup.Observer: NameCleanupCycleDuration for every
// cycle; NameCleanupCycleExpired and the mass expiry alert for full scans
// only, since a re-run of a few streams finds only their expired leases
// and would resolve the alert (and drop the gauge) until the next scan.
func (o *CleanupObserver) Cycle(r cleanup.CycleResult, err error) {
	if errors.Is(err, context.Canceled) {
		return // stopped part way: not a cycle to measure, nor a failure
	}
	m := o.m
	result := ResultOK
	if err != nil {
		result = ResultError
	}
	m.cycleDuration.Record(context.Background(), r.Duration.Seconds(), m.opt(attrKey{shape: shapeResult, b: result}))
	if !r.Full {
		return
	}
	m.lastExpired.Store(int64(r.Expired))
	if m.alerts != nil {
		m.alerts.Cycle(r.Expired)
	}
}

// Cascade implements cleanup.Observer: NameCleanupCascadeActive.
func (o *CleanupObserver) Cascade(active bool) {
	if active {
		o.m.cascade.Store(1)
	} else {
		o.m.cascade.Store(0)
	}
}

// HookFailed implements cleanup.Observer: NameCleanupHookFailures, which
// counts the hooks dropped (cleanup.ErrHookDropped) too.
func (o *CleanupObserver) HookFailed(e store.Entry, _ error) {
	m := o.m
	m.hookFailures.Add(context.Background(), 1, m.opt(attrKey{shape: shapeStreamKind, stream: m.stream(e.Stream).name, kind: e.Kind}))
}

// PendingHooks implements cleanup.HookStatsObserver:
// NameCleanupHooksPending.
func (o *CleanupObserver) PendingHooks(st store.HookStats) { o.m.pending.Store(st.Pending) }

// ExpiryShare implements cleanup.ExpiryObserver: NameCleanupExpiredShare.
func (o *CleanupObserver) ExpiryShare(s cleanup.ExpiryShare) {
	o.m.share.Store(math.Float64bits(s.Share()))
}

// Step implements cleanup.StepObserver: NameRecoveryAttempts, the recovery
// failure rate alert, and a "seqlease.recovery.step" event on the
// recovery's span.
func (o *CleanupObserver) Step(ctx context.Context, e store.Entry, step string, r recovery.Result, err error) {
	if errors.Is(err, context.Canceled) {
		return // the loop stopped, or lost the stream's lead: no failure of the step
	}
	m := o.m
	result := ResultDeclined
	switch {
	case err != nil:
		result = ResultFailure
	case r.Recovered:
		result = ResultSuccess
	}
	m.recoveries.Add(ctx, 1, m.opt(attrKey{shape: shapeRecovery, stream: m.stream(e.Stream).name, kind: e.Kind, a: step, b: result}))
	if m.alerts != nil && result != ResultDeclined {
		m.alerts.Recovery(err == nil)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		attrs := []attribute.KeyValue{spanMethod.String(step), spanResult.String(result)}
		if err != nil {
			attrs = append(attrs, attribute.String("error", err.Error()))
		}
		span.AddEvent("seqlease.recovery.step", trace.WithAttributes(attrs...))
	}
}

// StartCycle implements cleanup.Tracer: a "seqlease.cleanup.cycle" span.
func (o *CleanupObserver) StartCycle(ctx context.Context) (context.Context, func(cleanup.CycleResult, error)) {
	ctx, span := o.m.tracer.Start(ctx, "seqlease.cleanup.cycle")
	return ctx, func(r cleanup.CycleResult, err error) {
		span.SetAttributes(spanExpired.Int(r.Expired), spanFailed.Int(r.Failed),
			spanNotLeader.Int(r.NotLeader), spanCascade.Bool(r.Cascade))
		if errors.Is(err, context.Canceled) {
			err = nil // a stop, not a failure
		}
		endSpan(span, err)
	}
}

// StartRecovery implements cleanup.Tracer: a "seqlease.recover" span for
// one expired lease.
func (o *CleanupObserver) StartRecovery(ctx context.Context, e store.Entry) (context.Context, func(recovery.Result, error)) {
	ctx, span := o.m.tracer.Start(ctx, "seqlease.recover", trace.WithAttributes(
		spanStream.String(e.Stream), spanNumber.Int64(e.Number), spanKind.String(e.Kind),
		spanOperationID.String(e.OperationID)))
	return ctx, func(r recovery.Result, err error) {
		if span.IsRecording() {
			span.SetAttributes(spanMethod.String(r.Method), spanResult.Bool(r.Recovered))
			if r.NewNumber != 0 {
				span.SetAttributes(spanNewNumber.Int64(r.NewNumber))
			}
		}
		endSpan(span, err)
	}
}

// GapObserver records gaps filled. Pass it as gap.Config.Observer.
type GapObserver struct{ m *Metrics }

// Filled implements gap.Observer: NameGapFilled, by the gap's reason.
func (o *GapObserver) Filled(ctx context.Context, g gap.Gap) {
	m := o.m
	m.gapFilled.Add(ctx, 1, m.opt(attrKey{shape: shapeGap, stream: m.stream(g.Stream).name, kind: g.Kind, a: g.Reason}))
}

// NamedLeaseObserver records what named leases (package lease) do. kind is
// a low-cardinality class of leases chosen by the caller ("cleanup",
// "migration", "inbox"), never a lease's name when names are made per
// entity. Its methods are safe for concurrent use and do not block.
type NamedLeaseObserver struct {
	m         *Metrics
	longAfter time.Duration

	mu       sync.Mutex
	holdings map[*holding]struct{} // the holdings in progress (Held)
	kinds    map[string]struct{}   // every kind seen, so counts fall back to 0
	checked  bool                  // a Monitor reported a check
	active   int64                 // live holdings under StuckAfter, last check
	stuck    int64                 // live holdings at or over StuckAfter, last check
	expired  int64                 // unmarked expired holdings, last check
	pending  int64                 // waiters, last check; -1: the store lists none
}

// holding is a named-lease holding in progress.
type holding struct {
	kind  string
	since time.Time
}

// Held implements lease.Observer: it keeps the holding, for
// NameNamedLeaseLongHeld, until end is called.
func (o *NamedLeaseObserver) Held(kind string) (end func()) {
	h := &holding{kind: kind, since: o.m.now()}
	o.mu.Lock()
	o.holdings[h] = struct{}{}
	o.kinds[kind] = struct{}{}
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		delete(o.holdings, h)
		o.mu.Unlock()
	}
}

// observe reports NameNamedLeaseLongHeld: per kind, the holdings in
// progress older than Config.LongHeldAfter. It reads only memory.
func (o *NamedLeaseObserver) observe(obs metric.Observer) {
	now := o.m.now()
	o.mu.Lock()
	counts := make(map[string]int64, len(o.kinds))
	for kind := range o.kinds {
		counts[kind] = 0
	}
	for h := range o.holdings {
		if now.Sub(h.since) >= o.longAfter {
			counts[h.kind]++
		}
	}
	checked, active, stuck, expired, pending := o.checked, o.active, o.stuck, o.expired, o.pending
	o.mu.Unlock()
	for kind, n := range counts {
		obs.ObserveInt64(o.m.nlLongHeld, n, o.m.opt(attrKey{shape: shapeKind, kind: kind}))
	}
	if checked {
		obs.ObserveInt64(o.m.nlHoldings, active, o.m.opt(attrKey{shape: shapeStatus, a: StatusActive}))
		obs.ObserveInt64(o.m.nlHoldings, stuck, o.m.opt(attrKey{shape: shapeStatus, a: StatusLongHeld}))
		obs.ObserveInt64(o.m.nlHoldings, expired, o.m.opt(attrKey{shape: shapeStatus, a: StatusExpired}))
		if pending >= 0 {
			obs.ObserveInt64(o.m.nlHoldings, pending, o.m.opt(attrKey{shape: shapeStatus, a: StatusPending}))
		}
	}
}

// Checked implements lease.MonitorObserver: the holdings the Monitor's last
// check saw feed NameNamedLeaseHoldings (by status: active, long-held,
// expired, and pending for the waiters when the store lists them), and
// the stuck ones the NamedLeaseLongHeld alert.
func (o *NamedLeaseObserver) Checked(_ context.Context, r lease.MonitorResult) {
	stuck := len(r.Stuck)
	o.mu.Lock()
	o.checked = true
	o.active, o.stuck = int64(r.Active-stuck), int64(stuck)
	o.expired, o.pending = int64(r.Expired), int64(r.Pending)
	o.mu.Unlock()
	if o.m.alerts != nil {
		o.m.alerts.NamedLeasesLongHeld(stuck)
	}
}

// Acquire records one acquisition (a try, or a blocking acquire, once, with
// its final error) in NameNamedLeaseAcquisitions: result acquired when err
// is nil, timeout when it matches lease.ErrTimeout (and the
// NamedLeaseTimeouts alert), held when it matches store.ErrHeld, error
// otherwise.
func (o *NamedLeaseObserver) Acquire(ctx context.Context, kind string, err error) {
	result := ResultAcquired
	switch {
	case errors.Is(err, lease.ErrTimeout):
		result = ResultTimeout
		if o.m.alerts != nil {
			o.m.alerts.NamedLeaseTimeout()
		}
	case errors.Is(err, store.ErrHeld):
		result = ResultHeld
	case err != nil:
		result = ResultError
	}
	o.m.nlAcquisitions.Add(ctx, 1, o.m.opt(attrKey{shape: shapeKindResult, kind: kind, b: result}))
}

// Renew records one renewal in NameNamedLeaseRenewals: result ok when err
// is nil, error otherwise.
func (o *NamedLeaseObserver) Renew(ctx context.Context, kind string, err error) {
	result := ResultOK
	if err != nil {
		result = ResultError
	}
	o.m.nlRenewals.Add(ctx, 1, o.m.opt(attrKey{shape: shapeKindResult, kind: kind, b: result}))
}

// Lost records a holding its holder lost (it expired, could no longer be
// proven held, or was force-released) after held: NameNamedLeaseLosses,
// NameNamedLeaseHoldDuration (result lost) and the NamedLeaseLosses alert.
func (o *NamedLeaseObserver) Lost(ctx context.Context, kind string, held time.Duration) {
	m := o.m
	if m.alerts != nil {
		m.alerts.NamedLeaseLost()
	}
	m.nlLosses.Add(ctx, 1, m.opt(attrKey{shape: shapeKind, kind: kind}))
	m.nlHold.Record(ctx, held.Seconds(), m.opt(attrKey{shape: shapeKindResult, kind: kind, b: ResultLost}))
}

// Released records a holding its holder released after held:
// NameNamedLeaseHoldDuration (result released).
func (o *NamedLeaseObserver) Released(ctx context.Context, kind string, held time.Duration) {
	o.m.nlHold.Record(ctx, held.Seconds(), o.m.opt(attrKey{shape: shapeKindResult, kind: kind, b: ResultReleased}))
}
