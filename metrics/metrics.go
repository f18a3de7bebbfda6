package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqlease/seqlease/store"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/seqlease/seqlease"

// Names of the instruments, in OpenTelemetry style. The Prometheus exporter
// turns them into the names docs/operations.md lists: dots become
// underscores, the unit is appended ("s": _seconds) and counters end in
// _total, so NameLeaseExpired is scraped as seqlease_lease_expired_total.
const (
	NameLeaseGranted           = "seqlease.lease.granted"
	NameLeaseCommitted         = "seqlease.lease.committed"
	NameLeaseReleased          = "seqlease.lease.released"
	NameLeaseExtended          = "seqlease.lease.extended"
	NameLeaseExpired           = "seqlease.lease.expired"
	NameLeaseOverrun           = "seqlease.lease.overrun"
	NameCommitWait             = "seqlease.commit.wait"
	NameWatermarkLag           = "seqlease.watermark.lag"
	NameRecoveryAttempts       = "seqlease.recovery.attempts"
	NameCleanupCycleDuration   = "seqlease.cleanup.cycle.duration"
	NameCleanupCycleExpired    = "seqlease.cleanup.cycle.expired"
	NameCleanupCascadeActive   = "seqlease.cleanup.cascade.active"
	NameCleanupHookFailures    = "seqlease.cleanup.hook.failures"
	NameCleanupHooksPending    = "seqlease.cleanup.hooks.pending"
	NameCleanupExpiredShare    = "seqlease.cleanup.expired.share"
	NameGapOpen                = "seqlease.gap.open"
	NameGapCreated             = "seqlease.gap.created"
	NameGapFilled              = "seqlease.gap.filled"
	NameNamedLeaseAcquisitions = "seqlease.named_lease.acquisitions"
	NameNamedLeaseRenewals     = "seqlease.named_lease.renewals"
	NameNamedLeaseLosses       = "seqlease.named_lease.losses"
	NameNamedLeaseHoldDuration = "seqlease.named_lease.hold.duration"
	NameNamedLeaseLongHeld     = "seqlease.named_lease.long_held"
	NameNamedLeaseHoldings     = "seqlease.named_lease.holdings"
	NameAlertActive            = "seqlease.alert.active"
	NameReaderLag              = "seqlease.reader.lag"
	NameListenDeaf             = "seqlease.listen.deaf"
	NameListenDeafChecks       = "seqlease.listen.deaf_checks"
	NameHistoryLost            = "seqlease.history.lost"
	NameRecoveryParked         = "seqlease.recovery.parked"
)

// Attribute keys of the instruments. Every value comes from a small set:
// stream and kind names, step names, outcomes; never a number or an
// operation id (those go on spans).
const (
	KeyStream = attribute.Key("stream")
	KeyKind   = attribute.Key("kind")
	KeyMethod = attribute.Key("method")
	KeyResult = attribute.Key("result")
	KeyReason = attribute.Key("reason")
	KeyAlert  = attribute.Key("alert")
	KeyLevel  = attribute.Key("level")
	KeyReader = attribute.Key("reader")
	KeyLease  = attribute.Key("lease")
	KeyStatus = attribute.Key("status")
)

// OtherStream is the stream attribute of every stream beyond
// Config.MaxStreams: the streams' series are merged into one.
const OtherStream = "_other"

// Defaults of Config.
const (
	DefaultMaxStreams       = 1000
	DefaultGapCountInterval = 15 * time.Second
	DefaultQueryTimeout     = 5 * time.Second
	DefaultLongHeldAfter    = time.Hour
	DefaultMaxReaderSeries  = 1000
)

// WatermarkSource tells the watermark of a stream: *barrier.Barrier.
type WatermarkSource interface {
	Watermark(ctx context.Context, stream string) (int64, error)
}

// GapCounter counts the open gaps of a stream: the store (store/memory,
// store/postgres).
type GapCounter interface {
	CountGaps(ctx context.Context, stream string) (int64, error)
}

// ParkedCounter counts the parked entries of every stream: the store
// (store.Parker).
type ParkedCounter interface {
	CountParked(ctx context.Context) (int64, error)
}

// Config configures Metrics. A nil *Config means the defaults; so does the
// zero value of each field.
type Config struct {
	// MeterProvider creates the instruments. Default: the global one
	// (otel.GetMeterProvider), a no-op until the application sets one.
	MeterProvider metric.MeterProvider
	// TracerProvider creates the spans. Default: the global one
	// (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
	// Logger receives diagnostics (failed gauge reads, alerts). Default:
	// discard.
	Logger *slog.Logger
	// Watermarks feeds the watermark lag gauge: the barrier the Leaser
	// commits through. Optional; without it there is no lag gauge.
	Watermarks WatermarkSource
	// Gaps feeds the open gaps gauge (and the open gaps alert). Optional;
	// without it there is no open gaps gauge.
	Gaps GapCounter
	// GapCountInterval is how long a stream's open gap count is reused
	// before a collection counts again (one query per stream on
	// PostgreSQL). Default: DefaultGapCountInterval (15 s).
	GapCountInterval time.Duration
	// QueryTimeout bounds each read a gauge makes (watermark, gap count).
	// Default: DefaultQueryTimeout (5 s).
	QueryTimeout time.Duration
	// MaxStreams bounds the streams that get series of their own; the
	// events of further streams are recorded under OtherStream, and they
	// get no gauges. Default: DefaultMaxStreams (1000).
	MaxStreams int
	// Alerts is fed every event the observers see, evaluated at every
	// collection, and its alerts are exported as NameAlertActive. Optional.
	Alerts *Evaluator
	// LongHeldAfter is the age from which a named-lease holding of this
	// process counts in the long-held gauge (NameNamedLeaseLongHeld).
	// Default: DefaultLongHeldAfter (1 h).
	LongHeldAfter time.Duration
	// Now is the clock of GapCountInterval and of the named leases' ages.
	// Default: time.Now.
	Now func() time.Time
	// Checkpoints feeds the reader lag gauge (NameReaderLag): the store
	// that keeps the readers' checkpoints (store/memory, store/postgres).
	// Optional; without it there is no reader lag gauge.
	Checkpoints CheckpointLister
	// Listen feeds the deaf listeners gauge (NameListenDeaf) and the deaf
	// checks counter (NameListenDeafChecks): the store whose watches
	// prove that they hear (store/postgres). Default: Gaps or
	// Checkpoints, when it is a store.ListenChecker; without one there
	// are no such series.
	Listen store.ListenChecker
	// History feeds the lost history counter (NameHistoryLost) and the
	// HistoryLost alert: the store that notices when the database goes
	// back on history it showed (store/postgres). Default: Gaps,
	// Checkpoints or Listen, when it is a store.HistoryChecker; without
	// one there is no such series.
	History store.HistoryChecker
	// Parked feeds the parked entries gauge (NameRecoveryParked) and the
	// Parked alert: the store that parks entries (store.Parker: both
	// built-in backends), counted at most every GapCountInterval (one
	// query on PostgreSQL, for the whole store). Optional; without it
	// there is no such series.
	Parked ParkedCounter
	// MaxReaderSeries bounds the (reader, stream) pairs the reader lag
	// gauge reports, in (reader, stream) order: one listing page per
	// store.MaxListLimit of them at each collection. Default:
	// DefaultMaxReaderSeries (1000).
	MaxReaderSeries int
}

// Metrics holds the instruments and the tracer, and hands out the observers
// the other packages take: Leaser (sequence.Config.Observer), Cleanup
// (cleanup.Config.Observer), Gaps (gap.Config.Observer) and NamedLeases. It
// is safe for concurrent use.
type Metrics struct {
	tracer     trace.Tracer
	logger     *slog.Logger
	watermarks WatermarkSource
	gapCounter GapCounter
	gapEvery   time.Duration
	qTimeout   time.Duration
	maxStreams int
	alerts     *Evaluator
	now        func() time.Time
	readers    CheckpointLister
	maxReaders int
	listen     store.ListenChecker
	history    store.HistoryChecker
	parker     ParkedCounter

	parkedMu sync.Mutex
	parked   int64
	parkedAt time.Time // zero: never counted

	granted, committed, released, extended metric.Int64Counter
	expired, recoveries, hookFailures      metric.Int64Counter
	gapCreated, gapFilled                  metric.Int64Counter
	nlAcquisitions, nlRenewals, nlLosses   metric.Int64Counter
	overrun, commitWait, cycleDuration     metric.Float64Histogram
	nlHold                                 metric.Float64Histogram
	lag, gapOpen, cycleExpired             metric.Int64ObservableGauge
	cascadeActive, alertActive             metric.Int64ObservableGauge
	hooksPending, parkedGauge              metric.Int64ObservableGauge
	nlLongHeld, readerLag, listenDeaf      metric.Int64ObservableGauge
	nlHoldings                             metric.Int64ObservableGauge
	expiredShare                           metric.Float64ObservableGauge
	listenDeafChecks, historyLost          metric.Int64ObservableCounter
	registration                           metric.Registration

	streamsMu  sync.Mutex
	streams    sync.Map // string -> *streamState
	nStreams   int
	other      *streamState
	overflowed atomic.Bool

	attrs sync.Map // attrKey -> metric.MeasurementOption

	cascade     atomic.Int64  // 1 while cleanup is in cascade mode
	lastExpired atomic.Int64  // expired leases found by the last cycle
	pending     atomic.Int64  // durable hooks pending, as last told; 0 until told
	share       atomic.Uint64 // the expiry watch's last share, as float64 bits; 0 until told

	leaser      *LeaserObserver
	cleanup     *CleanupObserver
	gaps        *GapObserver
	namedLeases *NamedLeaseObserver
	closeOnce   sync.Once
}

// streamState is what Metrics keeps of a stream it saw.
type streamState struct {
	name       string
	lastLeased atomic.Int64 // the highest number this process leased

	gapsMu sync.Mutex
	gaps   int64
	gapsAt time.Time // zero: never counted
}

// New creates every instrument once and registers the gauges' callback.
// It returns an error naming the field when cfg is invalid, or the
// MeterProvider's error.
func New(cfg *Config) (*Metrics, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	switch {
	case cfg.GapCountInterval < 0:
		return nil, fmt.Errorf("metrics: Config.GapCountInterval %v is negative: %w", cfg.GapCountInterval, store.ErrInvalidArgument)
	case cfg.QueryTimeout < 0:
		return nil, fmt.Errorf("metrics: Config.QueryTimeout %v is negative: %w", cfg.QueryTimeout, store.ErrInvalidArgument)
	case cfg.MaxStreams < 0:
		return nil, fmt.Errorf("metrics: Config.MaxStreams %d is negative: %w", cfg.MaxStreams, store.ErrInvalidArgument)
	case cfg.LongHeldAfter < 0:
		return nil, fmt.Errorf("metrics: Config.LongHeldAfter %v is negative: %w", cfg.LongHeldAfter, store.ErrInvalidArgument)
	case cfg.MaxReaderSeries < 0:
		return nil, fmt.Errorf("metrics: Config.MaxReaderSeries %d is negative: %w", cfg.MaxReaderSeries, store.ErrInvalidArgument)
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := &Metrics{
		tracer:     tp.Tracer(ScopeName),
		logger:     cfg.Logger,
		watermarks: cfg.Watermarks,
		gapCounter: cfg.Gaps,
		gapEvery:   cmp.Or(cfg.GapCountInterval, DefaultGapCountInterval),
		qTimeout:   cmp.Or(cfg.QueryTimeout, DefaultQueryTimeout),
		maxStreams: cmp.Or(cfg.MaxStreams, DefaultMaxStreams),
		alerts:     cfg.Alerts,
		now:        cfg.Now,
		other:      &streamState{name: OtherStream},
		readers:    cfg.Checkpoints,
		maxReaders: cmp.Or(cfg.MaxReaderSeries, DefaultMaxReaderSeries),
		listen:     cfg.Listen,
		parker:     cfg.Parked,
	}
	for _, src := range []any{cfg.Gaps, cfg.Checkpoints} {
		if lc, ok := src.(store.ListenChecker); ok && m.listen == nil {
			m.listen = lc
		}
	}
	m.history = cfg.History
	for _, src := range []any{cfg.Gaps, cfg.Checkpoints, cfg.Listen} {
		if hc, ok := src.(store.HistoryChecker); ok && m.history == nil {
			m.history = hc
		}
	}
	if m.logger == nil {
		m.logger = slog.New(slog.DiscardHandler)
	}
	if m.now == nil {
		m.now = time.Now
	}
	if err := m.instruments(mp.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m.leaser = &LeaserObserver{m: m}
	m.cleanup = &CleanupObserver{m: m}
	m.gaps = &GapObserver{m: m}
	m.namedLeases = &NamedLeaseObserver{m: m, longAfter: cmp.Or(cfg.LongHeldAfter, DefaultLongHeldAfter),
		holdings: map[*holding]struct{}{}, kinds: map[string]struct{}{}}
	return m, nil
}

// Bucket boundaries of the histograms, in seconds.
var (
	overrunBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	waitBuckets    = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	cycleBuckets   = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120}
	holdBuckets    = []float64{1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 86400}
)

func (m *Metrics) instruments(meter metric.Meter) error {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	m.granted = counter(NameLeaseGranted, "{lease}", "Leases granted, by stream and kind.")
	m.committed = counter(NameLeaseCommitted, "{lease}", "Leases committed by their holders (Commit, CommitTx, Complete).")
	m.released = counter(NameLeaseReleased, "{lease}", "Leases released by their holders (they became gaps).")
	m.extended = counter(NameLeaseExtended, "{extension}", "Lease extensions, keep-alive renewals included.")
	m.expired = counter(NameLeaseExpired, "{lease}", "Expired leases the cleanup loop resolved, by the recovery step that resolved them (method).")
	m.overrun = histogram(NameLeaseOverrun, "How long past its expiry an expired lease was when the cleanup loop found it.", overrunBuckets)
	m.commitWait = histogram(NameCommitWait, "How long ordered commits waited for earlier numbers (at the barrier).", waitBuckets)
	m.lag = gauge(NameWatermarkLag, "{entry}", "The highest number this process leased minus the stream's watermark.")
	m.recoveries = counter(NameRecoveryAttempts, "{attempt}", "Recovery steps tried on expired leases, by step (method) and result (success, declined, failure).")
	m.cycleDuration = histogram(NameCleanupCycleDuration, "Duration of cleanup cycles, by result (ok, error).", cycleBuckets)
	m.cycleExpired = gauge(NameCleanupCycleExpired, "{lease}", "Expired leases the last full cleanup scan found (re-runs of some streams do not count).")
	m.cascadeActive = gauge(NameCleanupCascadeActive, "{mode}", "1 while the cleanup loop is in cascade mode (a mass expiry), else 0.")
	m.hookFailures = counter(NameCleanupHookFailures, "{failure}", "Resource-cleanup hooks that failed, timed out, or never ran (dropped: the queue was full, or Stop's grace period ended).")
	m.hooksPending = gauge(NameCleanupHooksPending, "{hook}", "Durable hooks recorded and not yet delivered, on the whole store, as this process's cleanup loop last counted them; 0 without a durable hook (take the max across processes; a count that stays up is a hook that keeps failing).")
	m.parkedGauge = gauge(NameRecoveryParked, "{entry}", "Parked entries of the whole store: their recovery kept failing and their streams wait until an operator unparks, fills or gives them up (take the max across processes).")
	m.gapOpen = gauge(NameGapOpen, "{gap}", "Open (unfilled) gaps of the stream.")
	m.gapCreated = counter(NameGapCreated, "{gap}", "Gaps created, by reason (released, expired, recovered, recovery-failed).")
	m.gapFilled = counter(NameGapFilled, "{gap}", "Gaps filled through a fill policy, by their reason.")
	m.nlAcquisitions = counter(NameNamedLeaseAcquisitions, "{acquisition}", "Named lease acquisitions, by result (acquired, held, error).")
	m.nlRenewals = counter(NameNamedLeaseRenewals, "{renewal}", "Named lease renewals, by result (ok, error).")
	m.nlLosses = counter(NameNamedLeaseLosses, "{loss}", "Named leases lost by their holders (expired or could not be renewed in time, force-released).")
	m.nlHold = histogram(NameNamedLeaseHoldDuration, "How long named leases were held, by how the holding ended (released, lost).", holdBuckets)
	m.nlLongHeld = gauge(NameNamedLeaseLongHeld, "{lease}", "Named leases this process has held for longer than Config.LongHeldAfter, by kind.")
	m.nlHoldings = gauge(NameNamedLeaseHoldings, "{lease}", "Named-lease holdings and waiters of the whole store (of its Owner, if set) as the lease.Monitor's last check listed them, by status (active; long-held: held at least its StuckAfter; expired: past expiry, not yet marked; pending: waiters).")
	m.alertActive = gauge(NameAlertActive, "{alert}", "1 while an alert of the evaluator fires, else 0.")
	m.readerLag = gauge(NameReaderLag, "{entry}", "The stream's watermark minus the reader's saved checkpoint, by reader and stream.")
	m.listenDeaf = gauge(NameListenDeaf, "{listener}", "Listeners (LISTEN connections of the barrier's and the named leases' watches) whose self-check heard nothing: they poll instead. A transaction-mode pooler? Set postgres.Config.ListenDSN.")
	var err error
	m.expiredShare, err = meter.Float64ObservableGauge(NameCleanupExpiredShare, metric.WithUnit("1"),
		metric.WithDescription("The share of the numbers handed out on the streams whose expired leases this process's cleanup loop resolved that expired, over its last window of a minute (cleanup.ExpiryShare); above a few percent, the lease TTL is too short for the work."))
	errs = append(errs, err)
	m.listenDeafChecks, err = meter.Int64ObservableCounter(NameListenDeafChecks, metric.WithUnit("{check}"),
		metric.WithDescription("LISTEN self-checks that did not hear their own notice in time (a deaf listener checks again every 30 s)."))
	errs = append(errs, err)
	m.historyLost, err = meter.Int64ObservableCounter(NameHistoryLost, metric.WithUnit("{finding}"),
		metric.WithDescription("Answers of the database that went back on history this process had seen (a number or fence issued again, a watermark back), by stream or named lease: an asynchronous standby promoted? Leases of the stream stop until the operator accepts."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("creating instruments: %w", err)
	}
	reg, err := meter.RegisterCallback(m.observe, m.lag, m.gapOpen, m.cycleExpired, m.cascadeActive, m.alertActive, m.nlLongHeld, m.hooksPending, m.readerLag,
		m.listenDeaf, m.listenDeafChecks, m.historyLost, m.parkedGauge, m.nlHoldings, m.expiredShare)
	if err != nil {
		return fmt.Errorf("registering the gauges' callback: %w", err)
	}
	m.registration = reg
	return nil
}

// Close unregisters the gauges' callback, so the MeterProvider stops
// calling into Metrics (and its WatermarkSource and GapCounter). The
// counters keep working. Close is safe twice.
func (m *Metrics) Close() error {
	var err error
	m.closeOnce.Do(func() { err = m.registration.Unregister() })
	return err
}

// Leaser returns the observer to pass as sequence.Config.Observer.
func (m *Metrics) Leaser() *LeaserObserver { return m.leaser }

// Cleanup returns the observer to pass as cleanup.Config.Observer.
func (m *Metrics) Cleanup() *CleanupObserver { return m.cleanup }

// Gaps returns the observer to pass as gap.Config.Observer.
func (m *Metrics) Gaps() *GapObserver { return m.gaps }

// NamedLeases returns the observer of named leases (package lease).
func (m *Metrics) NamedLeases() *NamedLeaseObserver { return m.namedLeases }

// stream returns the state of the stream name, registering it, or the
// shared overflow state beyond MaxStreams.
func (m *Metrics) stream(name string) *streamState {
	if v, ok := m.streams.Load(name); ok {
		return v.(*streamState)
	}
	m.streamsMu.Lock()
	defer m.streamsMu.Unlock()
	if v, ok := m.streams.Load(name); ok {
		return v.(*streamState)
	}
	if m.nStreams >= m.maxStreams {
		if !m.overflowed.Swap(true) {
			m.logger.Warn("metrics: more streams than Config.MaxStreams; further streams are recorded as "+OtherStream,
				slog.Int("max_streams", m.maxStreams))
		}
		return m.other
	}
	st := &streamState{name: name}
	m.streams.Store(name, st)
	m.nStreams++
	return st
}

// leased records that this process leased numbers up to last.
func (st *streamState) leased(last int64) {
	for {
		cur := st.lastLeased.Load()
		if last <= cur || st.lastLeased.CompareAndSwap(cur, last) {
			return
		}
	}
}

// The attribute shapes of the instruments.
const (
	shapeStream           uint8 = iota // stream
	shapeStreamKind                    // stream, kind
	shapeStreamKindMethod              // stream, kind, method
	shapeRecovery                      // stream, kind, method, result
	shapeGap                           // stream, kind, reason
	shapeKindResult                    // kind, result
	shapeKind                          // kind
	shapeResult                        // result
	shapeAlert                         // alert, level
	shapeLease                         // lease
	shapeStatus                        // status
)

type attrKey struct {
	shape        uint8
	stream, kind string
	a, b         string
}

// opt returns the attributes of k as a measurement option, built once.
func (m *Metrics) opt(k attrKey) metric.MeasurementOption {
	if v, ok := m.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	var kv []attribute.KeyValue
	switch k.shape {
	case shapeStream:
		kv = []attribute.KeyValue{KeyStream.String(k.stream)}
	case shapeStreamKind:
		kv = []attribute.KeyValue{KeyStream.String(k.stream), KeyKind.String(k.kind)}
	case shapeStreamKindMethod:
		kv = []attribute.KeyValue{KeyStream.String(k.stream), KeyKind.String(k.kind), KeyMethod.String(k.a)}
	case shapeRecovery:
		kv = []attribute.KeyValue{KeyStream.String(k.stream), KeyKind.String(k.kind), KeyMethod.String(k.a), KeyResult.String(k.b)}
	case shapeGap:
		kv = []attribute.KeyValue{KeyStream.String(k.stream), KeyKind.String(k.kind), KeyReason.String(k.a)}
	case shapeKindResult:
		kv = []attribute.KeyValue{KeyKind.String(k.kind), KeyResult.String(k.b)}
	case shapeKind:
		kv = []attribute.KeyValue{KeyKind.String(k.kind)}
	case shapeResult:
		kv = []attribute.KeyValue{KeyResult.String(k.b)}
	case shapeAlert:
		kv = []attribute.KeyValue{KeyAlert.String(k.a), KeyLevel.String(k.b)}
	case shapeLease:
		kv = []attribute.KeyValue{KeyLease.String(k.a)}
	case shapeStatus:
		kv = []attribute.KeyValue{KeyStatus.String(k.a)}
	default:
		panic(fmt.Sprintf("metrics: unknown attribute shape %d", k.shape))
	}
	v, _ := m.attrs.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return v.(metric.MeasurementOption)
}

// observe is the gauges' callback, run at every collection.
func (m *Metrics) observe(ctx context.Context, o metric.Observer) error {
	o.ObserveInt64(m.cascadeActive, m.cascade.Load())
	o.ObserveInt64(m.cycleExpired, m.lastExpired.Load())
	o.ObserveInt64(m.hooksPending, m.pending.Load())
	o.ObserveFloat64(m.expiredShare, math.Float64frombits(m.share.Load()))
	m.namedLeases.observe(o)
	m.observeReaders(ctx, o)
	if m.listen != nil {
		h := m.listen.ListenHealth()
		o.ObserveInt64(m.listenDeaf, int64(h.Deaf))
		o.ObserveInt64(m.listenDeafChecks, h.DeafChecks)
	}
	if m.history != nil {
		h := m.history.HistoryHealth()
		for _, l := range h.Losses {
			k := attrKey{shape: shapeStream, stream: l.Stream}
			if l.Stream == "" {
				k = attrKey{shape: shapeLease, a: l.Name}
			}
			o.ObserveInt64(m.historyLost, l.Count, m.opt(k))
		}
		if m.alerts != nil {
			m.alerts.HistoryLost(len(h.Refused))
		}
	}
	if m.parker != nil {
		if n, ok := m.countParked(ctx); ok {
			o.ObserveInt64(m.parkedGauge, n)
			if m.alerts != nil {
				m.alerts.Parked(n)
			}
		}
	}
	var openGaps int64
	counted := false
	m.streams.Range(func(_, v any) bool {
		st := v.(*streamState)
		opt := m.opt(attrKey{shape: shapeStream, stream: st.name})
		if m.watermarks != nil {
			if last := st.lastLeased.Load(); last > 0 {
				qctx, cancel := context.WithTimeout(ctx, m.qTimeout)
				w, err := m.watermarks.Watermark(qctx, st.name)
				cancel()
				if err != nil {
					m.logger.Warn("metrics: watermark", slog.String("stream", st.name), slog.Any("error", err))
				} else {
					o.ObserveInt64(m.lag, max(last-w, 0), opt)
				}
			}
		}
		if m.gapCounter != nil {
			if n, ok := m.countGaps(ctx, st); ok {
				o.ObserveInt64(m.gapOpen, n, opt)
				openGaps += n
				counted = true
			}
		}
		return ctx.Err() == nil
	})
	if m.alerts != nil {
		if counted {
			m.alerts.OpenGaps(openGaps)
		}
		m.alerts.Evaluate()
		for _, a := range m.alerts.Alerts() {
			v := int64(0)
			if a.Firing {
				v = 1
			}
			o.ObserveInt64(m.alertActive, v, m.opt(attrKey{shape: shapeAlert, a: a.Name, b: string(a.Level)}))
		}
	}
	return nil
}

// countParked returns the parked entries of the store, counted at most
// every GapCountInterval.
func (m *Metrics) countParked(ctx context.Context) (int64, bool) {
	m.parkedMu.Lock()
	defer m.parkedMu.Unlock()
	now := m.now()
	if !m.parkedAt.IsZero() && now.Sub(m.parkedAt) < m.gapEvery {
		return m.parked, true
	}
	qctx, cancel := context.WithTimeout(ctx, m.qTimeout)
	n, err := m.parker.CountParked(qctx)
	cancel()
	if err != nil {
		m.logger.Warn("metrics: count parked", slog.Any("error", err))
		return m.parked, !m.parkedAt.IsZero() // the last count, rather than a hole in the series
	}
	m.parked, m.parkedAt = n, now
	return n, true
}

// countGaps returns the open gaps of st, counted at most every
// GapCountInterval.
func (m *Metrics) countGaps(ctx context.Context, st *streamState) (int64, bool) {
	st.gapsMu.Lock()
	defer st.gapsMu.Unlock()
	now := m.now()
	if !st.gapsAt.IsZero() && now.Sub(st.gapsAt) < m.gapEvery {
		return st.gaps, true
	}
	qctx, cancel := context.WithTimeout(ctx, m.qTimeout)
	n, err := m.gapCounter.CountGaps(qctx, st.name)
	cancel()
	if err != nil {
		m.logger.Warn("metrics: count gaps", slog.String("stream", st.name), slog.Any("error", err))
		if st.gapsAt.IsZero() {
			return 0, false
		}
		return st.gaps, true // the last count, rather than a hole in the series
	}
	st.gaps, st.gapsAt = n, now
	return n, true
}

// endSpan ends span with err's status.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Span attribute keys. Spans describe one operation, so they carry its
// number and operation id too.
const (
	spanStream      = attribute.Key("seqlease.stream")
	spanKind        = attribute.Key("seqlease.kind")
	spanNumber      = attribute.Key("seqlease.number")
	spanCount       = attribute.Key("seqlease.count")
	spanOrdered     = attribute.Key("seqlease.ordered")
	spanOperationID = attribute.Key("seqlease.operation_id")
	spanMethod      = attribute.Key("seqlease.method")
	spanResult      = attribute.Key("seqlease.result")
	spanNewNumber   = attribute.Key("seqlease.new_number")
	spanWait        = attribute.Key("seqlease.wait_seconds")
	spanOverrun     = attribute.Key("seqlease.overrun_seconds")
	spanExpired     = attribute.Key("seqlease.expired")
	spanFailed      = attribute.Key("seqlease.failed")
	spanNotLeader   = attribute.Key("seqlease.not_leader")
	spanCascade     = attribute.Key("seqlease.cascade")
)
