package sequence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/batch"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/ttl"
)

// Store is what the Leaser needs of a backend (store/memory,
// store/postgres). What a backend can do beyond it, the Leaser checks and
// uses: store.InProcess (no batching), store.OneByOne (a lease and a commit
// that allocate nothing), store.MultiLeaser (lease coalescing, across
// streams), store.MultiCommitter (group commit, across streams),
// store.TxCommitter (CommitTx) and store.Appender (Append).
type Store interface {
	Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error)
	Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error)
	Release(ctx context.Context, stream string, number int64, token store.Token, p *store.ReleaseParams) error
	Extend(ctx context.Context, stream string, number int64, token store.Token, p *store.ExtendParams) (now, expiresAt time.Time, err error)
}

// Waiter is what the Leaser needs of the barrier: *barrier.Barrier.
type Waiter interface {
	// Ready returns a channel closed once every number of stream below n
	// is resolved, and a function that withdraws the wait.
	Ready(ctx context.Context, stream string, n int64) (<-chan struct{}, func(), error)
	// Resolved reports a number this process resolved.
	Resolved(stream string, number int64)
	// Reached reports, without waiting or allocating, whether every number
	// of stream below n is known to be resolved.
	Reached(stream string, n int64) bool
}

var _ Waiter = (*barrier.Barrier)(nil)

// Defaults of Config.
const (
	DefaultTTL           = 30 * time.Second
	DefaultMaxTTL        = time.Hour
	DefaultMaxPayload    = 1 << 20
	DefaultMaxGroup      = 128
	DefaultMaxLeaseBatch = 1000
	DefaultWriteTimeout  = 30 * time.Second
	DefaultMaxMargin     = time.Second
	// MaxGroupDelay bounds Config.GroupDelay: a group commit never holds
	// its callers longer than this for company.
	MaxGroupDelay = time.Second
)

// Config configures a Leaser. A nil *Config means the defaults; so does the
// zero value of each field.
type Config struct {
	// Barrier is where ordered commits wait for their turn; it must be
	// started (barrier.Barrier.Start). Required, unless UnorderedOnly is
	// set: New refuses a nil Barrier with ErrNoBarrier, so that a Leaser
	// meant for ordered commits fails at its start rather than at its
	// first Commit, after the work was done.
	Barrier Waiter
	// UnorderedOnly declares that this Leaser never commits in order: its
	// leases resolve with Complete or Release, and its writes are Appends
	// (an outbox writer). It lets Barrier be nil; Commit and CommitTx then
	// fail with ErrNoBarrier. With a Barrier it changes nothing (the
	// Barrier still hears of this process's resolutions at once).
	UnorderedOnly bool
	// DefaultTTL is the lease duration when a call names none.
	// Default: DefaultTTL (30 s), or MaxTTL if that is shorter.
	DefaultTTL time.Duration
	// MaxTTL is the longest lease a call may ask for, at most store.MaxTTL.
	// Default: DefaultMaxTTL (1 h).
	MaxTTL time.Duration
	// AdaptiveTTL chooses the lease duration when a call names none, in
	// place of DefaultTTL (set one or the other): from its Min when idle
	// to its Max under load, times the fleet's boost (ttl.Fleet). Its Max
	// must be at most MaxTTL. The Leaser keeps a copy. Optional.
	AdaptiveTTL *ttl.Policy
	// MaxPayload is the largest payload Commit accepts, in bytes.
	// Default: DefaultMaxPayload (1 MiB).
	MaxPayload int
	// Owner is recorded on every entry this Leaser leases, so operators can
	// tell whose leases they see. Default: "<hostname>:<pid>".
	Owner string
	// MaxGroup bounds group commit: when consecutive numbers of a stream
	// are ready to commit in this process, up to MaxGroup of them commit in
	// one transaction, together with those of other streams ready at the
	// same time and with concurrent Complete calls. 1 turns group commit
	// off. Default: DefaultMaxGroup, or 1 on a store that answers in
	// process (store.InProcess), where there is no round trip to save.
	// Group commit needs a store.MultiCommitter.
	MaxGroup int
	// GroupDelay is how long a group may wait for more consecutive commits
	// to join it before it goes to the database. It adds latency to buy
	// larger groups; at most MaxGroupDelay. Default: 0 (a group takes what
	// is ready, nothing more).
	GroupDelay time.Duration
	// MaxLeaseBatch bounds lease coalescing: concurrent Lease calls, on any
	// streams, share one statement of up to MaxLeaseBatch numbers. 1 turns
	// coalescing off. Default: DefaultMaxLeaseBatch, or 1 on a store that
	// answers in process. Coalescing needs a store.MultiLeaser.
	MaxLeaseBatch int
	// WriteTimeout bounds a shared statement (a coalesced lease, a group
	// commit), which runs on behalf of several callers and so does not end
	// with any one caller's context. Default: DefaultWriteTimeout (30 s).
	WriteTimeout time.Duration
	// Margin is how much earlier than the database a lease counts as over on
	// the holder's side (Remaining, IsExpired, Done, Context): its local
	// deadline is the moment of the request plus the granted TTL, minus
	// Margin, so a holder stops before the database could give the number to
	// the cleanup loop even if the clocks' rates differ a little.
	// Default: the smaller of DefaultMaxMargin (1 s) and a tenth of the
	// lease's TTL. A Margin set here is capped at half the lease's TTL, so
	// that a lease shorter than twice the Margin still lives half its TTL
	// rather than none of it.
	Margin time.Duration
	// Now is the local clock for the holder's own deadline estimates; it
	// must carry a monotonic reading. Default: time.Now.
	Now func() time.Time
	// Observer is told what the Leaser does, for metrics and traces
	// (metrics.Metrics.Leaser provides one). Optional.
	Observer Observer
}

// Leaser hands out numbers of streams under leases. It is safe for concurrent
// use.
type Leaser struct {
	store         Store
	barrier       Waiter
	defaultTTL    time.Duration
	policy        *ttl.Policy // nil: defaultTTL
	maxTTL        time.Duration
	maxPayload    int
	owner         string
	maxGroup      int
	groupDelay    time.Duration
	maxLeaseBatch int
	writeTimeout  time.Duration
	margin        time.Duration
	now           func() time.Time
	sysClock      bool // now is time.Now: durations to a deadline need only the monotonic clock
	observer      Observer
	observed      bool // Config.Observer was set: only then are waits timed
	leaseParams   *store.LeaseParams
	inProcess     bool           // the store answers in process and notifies its watchers before it returns
	one           store.OneByOne // the store's calls for one number, if it has them (store/memory)

	wave       *batch.Wave                                           // shared by the lease and commit engines
	leases     *batch.Batcher[store.StreamLeases, store.LeaseResult] // nil: leases go alone (batching.go)
	commits    *batch.Batcher[*group, groupResult]                   // nil: no group commit
	txEngines  sync.Map                                              // txKey[T] -> the engine of CommitTx[T]
	committers sync.Map                                              // stream -> *committer
	boost      atomic.Uint64                                         // the factor of BoostTTL, as float64 bits; 0: not boosted

	// Of a Leaser in an application's transaction (InTx): the Leaser it
	// came from, and that resolutions are not committed when a call
	// returns (tx.go).
	parent *Leaser
	inTx   bool
}

// New returns a Leaser on s. It returns an error naming the field when cfg
// is invalid.
func New(s Store, cfg *Config) (*Leaser, error) {
	if s == nil {
		return nil, errors.New("sequence: nil Store")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.Barrier == nil && !cfg.UnorderedOnly {
		return nil, fmt.Errorf("sequence: Config.Barrier is nil: %w (set Config.UnorderedOnly for a Leaser that only completes, releases and appends): %w",
			ErrNoBarrier, ErrInvalidArgument)
	}
	maxGroup, maxLeaseBatch := DefaultMaxGroup, DefaultMaxLeaseBatch
	ip, inProcess := s.(store.InProcess)
	inProcess = inProcess && ip.InProcess()
	if inProcess {
		// Coalescing and group commit save database round trips; a store
		// that answers in process has none to save, and they would only
		// add hand-offs between goroutines.
		maxGroup, maxLeaseBatch = 1, 1
	}
	defaultTTL := cfg.DefaultTTL
	if defaultTTL == 0 && cfg.MaxTTL > 0 {
		defaultTTL = min(DefaultTTL, cfg.MaxTTL) // a short MaxTTL alone is fine
	}
	l := &Leaser{
		store:         s,
		barrier:       cfg.Barrier,
		defaultTTL:    cmp.Or(defaultTTL, DefaultTTL),
		maxTTL:        cmp.Or(cfg.MaxTTL, DefaultMaxTTL),
		maxPayload:    cmp.Or(cfg.MaxPayload, DefaultMaxPayload),
		owner:         cfg.Owner,
		maxGroup:      cmp.Or(cfg.MaxGroup, maxGroup),
		groupDelay:    cfg.GroupDelay,
		maxLeaseBatch: cmp.Or(cfg.MaxLeaseBatch, maxLeaseBatch),
		writeTimeout:  cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout),
		margin:        cfg.Margin,
		now:           cfg.Now,
		observer:      cfg.Observer,
	}
	switch {
	case l.maxTTL < time.Microsecond || l.maxTTL > store.MaxTTL:
		return nil, configError("Config.MaxTTL", "%v must be in [1µs, %v]", cfg.MaxTTL, store.MaxTTL)
	case l.defaultTTL < time.Microsecond || l.defaultTTL > l.maxTTL:
		return nil, configError("Config.DefaultTTL", "%v must be in [1µs, MaxTTL %v]", cfg.DefaultTTL, l.maxTTL)
	case l.maxPayload < 0:
		return nil, configError("Config.MaxPayload", "%d must not be negative", cfg.MaxPayload)
	case l.maxGroup < 0 || l.maxGroup > store.MaxBatch:
		return nil, configError("Config.MaxGroup", "%d must be in 0..%d", cfg.MaxGroup, store.MaxBatch)
	case l.groupDelay < 0 || l.groupDelay > MaxGroupDelay:
		return nil, configError("Config.GroupDelay", "%v must be in [0, %v]", cfg.GroupDelay, MaxGroupDelay)
	case l.maxLeaseBatch < 0 || l.maxLeaseBatch > store.MaxBatch:
		return nil, configError("Config.MaxLeaseBatch", "%d must be in 0..%d", cfg.MaxLeaseBatch, store.MaxBatch)
	case l.writeTimeout < 0:
		return nil, configError("Config.WriteTimeout", "%v must not be negative", cfg.WriteTimeout)
	case l.margin < 0 || l.margin >= l.maxTTL:
		return nil, configError("Config.Margin", "%v must be in [0, MaxTTL %v)", cfg.Margin, l.maxTTL)
	}
	if p := cfg.AdaptiveTTL; p != nil {
		if cfg.DefaultTTL != 0 {
			return nil, configError("Config.AdaptiveTTL", "and Config.DefaultTTL %v are exclusive: set one", cfg.DefaultTTL)
		}
		if err := p.Validate(l.maxTTL); err != nil {
			return nil, fmt.Errorf("sequence: Config.AdaptiveTTL: %w", err) // a *ttl.FieldError, matches ErrInvalidArgument
		}
		pc := *p
		l.policy = &pc
	}
	if err := store.ValidateText("owner", l.owner); err != nil {
		return nil, fmt.Errorf("sequence: Config.Owner: %w", err) // matches ErrInvalidArgument
	}
	if l.owner == "" {
		host, _ := os.Hostname()
		l.owner = host + ":" + strconv.Itoa(os.Getpid())
	}
	if l.now == nil {
		l.now, l.sysClock = time.Now, true
	}
	l.leaseParams = &store.LeaseParams{Owner: l.owner} // read-only, shared by every call
	l.inProcess = inProcess
	// Lease uses these when it does not coalesce, and Commit and Complete
	// when they do not group, instead of the general calls, whose slices
	// and parameters cost an allocation each on every operation.
	l.one, _ = s.(store.OneByOne)
	l.wave = batch.NewWave()
	l.newEngines()
	l.observed = l.observer != nil
	if l.observer == nil {
		l.observer = nopObserver{}
	}
	return l, nil
}

// configError reports an invalid Config field; it matches
// ErrInvalidArgument.
func configError(field, format string, args ...any) error {
	return fmt.Errorf("sequence: %s %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidArgument)
}

// LeaseOpts are the options of a lease. A nil *LeaseOpts means the defaults.
type LeaseOpts struct {
	// OperationID is the caller's id for the work, recorded on the entry; the
	// cleanup loop passes it to the recovery steps. Optional.
	OperationID string
	// Kind is the caller's kind of work (e.g. the projection type), recorded
	// on the entry and used as a metrics attribute. Optional.
	Kind string
	// TTL is the lease duration. Default: Config.DefaultTTL.
	TTL time.Duration
}

// Lease leases the next number of stream. Concurrent calls on one stream
// share one round trip (lease coalescing).
func (l *Leaser) Lease(ctx context.Context, stream string, opts *LeaseOpts) (*Lease, error) {
	if l.one != nil && l.leases == nil {
		return l.leaseOne(ctx, stream, opts)
	}
	entries, start, err := l.lease(ctx, stream, 1, opts)
	if err != nil {
		return nil, err
	}
	return l.handle(&entries[0], start), nil
}

// LeaseN leases the next n consecutive numbers of stream in one round trip,
// all with the same options. n must be in 1..store.MaxBatch.
func (l *Leaser) LeaseN(ctx context.Context, stream string, n int, opts *LeaseOpts) ([]*Lease, error) {
	entries, start, err := l.lease(ctx, stream, n, opts)
	if err != nil {
		return nil, err
	}
	out := make([]*Lease, len(entries))
	for i := range entries {
		out[i] = l.handle(&entries[i], start)
	}
	return out, nil
}

// leaseOne is Lease through the store's call for one number, when leases
// are not coalesced: lease with n of 1, without its slices.
func (l *Leaser) leaseOne(ctx context.Context, stream string, opts *LeaseOpts) (*Lease, error) {
	if opts == nil {
		opts = &LeaseOpts{}
	}
	ttl, err := l.leaseTTL(opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sequence: lease: %w", err)
	}
	ctx, end := l.observer.StartLease(ctx, stream, opts.Kind, 1)
	start := l.now()
	e, err := l.one.LeaseOne(ctx, stream, store.LeaseRequest{OperationID: opts.OperationID, Kind: opts.Kind, TTL: ttl}, l.leaseParams)
	if err != nil {
		end(0, err)
		return nil, fmt.Errorf("sequence: %w", err)
	}
	end(e.Number, nil)
	return l.handle(&e, start), nil
}

// leaseTTL returns the TTL a lease with opts asks for, or why it is
// invalid.
func (l *Leaser) leaseTTL(opts *LeaseOpts) (time.Duration, error) {
	ttl := cmp.Or(opts.TTL, l.DefaultTTL())
	if err := store.ValidateTTL(ttl, l.maxTTL); err != nil {
		return 0, fmt.Errorf("sequence: lease: %w", err)
	}
	return ttl, nil
}

// lease leases n numbers; start is when the request began, on the local
// clock (the base of the handles' local deadlines).
func (l *Leaser) lease(ctx context.Context, stream string, n int, opts *LeaseOpts) (entries []store.Entry, start time.Time, err error) {
	if opts == nil {
		opts = &LeaseOpts{}
	}
	ttl, err := l.leaseTTL(opts)
	if err != nil {
		return nil, time.Time{}, err
	}
	if n < 1 || n > store.MaxBatch {
		return nil, time.Time{}, fmt.Errorf("sequence: lease: %w: %d, must be 1..%d", ErrInvalidCount, n, store.MaxBatch)
	}
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{OperationID: opts.OperationID, Kind: opts.Kind, TTL: ttl}
	}
	coalesce := l.leases != nil && n < l.maxLeaseBatch
	// Validate here, not in the shared statement: one caller's bad input
	// must not fail the others it would be coalesced with. (Alone, the
	// store's own validation says the same.)
	if coalesce {
		if err := store.ValidateLease(stream, reqs, l.leaseParams); err != nil {
			return nil, time.Time{}, fmt.Errorf("sequence: lease: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("sequence: lease: %w", err)
	}
	ctx, end := l.observer.StartLease(ctx, stream, opts.Kind, n)
	start = l.now()
	if coalesce {
		var r store.LeaseResult
		if r, err = l.leases.Do(ctx, store.StreamLeases{Stream: stream, Requests: reqs}); err == nil {
			entries, err = r.Entries, r.Err
		}
	} else {
		entries, err = l.store.Lease(ctx, stream, reqs, l.leaseParams)
	}
	if err != nil {
		end(0, err)
		return nil, time.Time{}, fmt.Errorf("sequence: %w", err)
	}
	end(entries[0].Number, nil)
	return entries, start, nil
}

func (l *Leaser) handle(e *store.Entry, start time.Time) *Lease {
	return &Lease{
		waitIndex:     -1,
		leaser:        l,
		stream:        e.Stream,
		number:        e.Number,
		token:         e.Token,
		operationID:   e.OperationID,
		kind:          e.Kind,
		leasedAt:      e.LeasedAt,
		expiresAt:     e.ExpiresAt,
		localDeadline: l.localDeadline(start, e.LeasedAt, e.ExpiresAt),
	}
}

// localDeadline is the holder's conservative estimate of a lease's end on
// the local monotonic clock: the moment the request started (start) plus the
// TTL the database granted at now, minus the safety margin.
func (l *Leaser) localDeadline(start, now, expiresAt time.Time) time.Time {
	ttl := expiresAt.Sub(now)
	margin := l.margin
	if margin == 0 {
		margin = min(DefaultMaxMargin, ttl/10)
	}
	return start.Add(ttl - min(margin, ttl/2))
}

// until returns the time from now to t on the local clock.
func (l *Leaser) until(t time.Time) time.Duration {
	if l.sysClock {
		return -time.Since(t) // reads only the monotonic clock, which is all t.Sub(time.Now()) uses
	}
	return t.Sub(l.now())
}

// DefaultTTL returns the lease duration used when a call names none:
// Config.DefaultTTL or what Config.AdaptiveTTL chooses now, or more while
// BoostTTL is in force.
func (l *Leaser) DefaultTTL() time.Duration {
	boost := &l.boost
	if l.parent != nil {
		boost = &l.parent.boost
	}
	factor := math.Float64frombits(boost.Load())
	if l.policy != nil {
		return boosted(l.policy.TTL(), factor, l.policy.Max)
	}
	return boosted(l.defaultTTL, factor, l.maxTTL)
}

// boosted returns d times factor, capped at limit; d when factor is 1 or
// less.
func boosted(d time.Duration, factor float64, limit time.Duration) time.Duration {
	if !(factor > 1) { // also NaN
		return d
	}
	if f := float64(d) * factor; f < float64(limit) { // also +Inf
		return max(d, time.Duration(f))
	}
	return max(d, limit)
}

// BoostTTL multiplies the default lease duration by factor, capped at
// Config.MaxTTL (at the Max of Config.AdaptiveTTL, with a policy), until
// called again; a factor of 1 or less ends the boost. The cleanup loop
// boosts while it works through a mass expiry (cascade mode), so that new
// leases do not expire in the same overload. The boost is this Leaser's
// only: ttl.Fleet shares one with every process.
func (l *Leaser) BoostTTL(factor float64) {
	if !(factor > 1) { // also NaN
		factor = 0
	}
	l.boost.Store(math.Float64bits(factor))
}

// sharedContext is the context of a statement run on behalf of several
// callers: it keeps the leader's values but not its cancellation, and ends
// after the write timeout.
func (l *Leaser) sharedContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), l.writeTimeout)
}
