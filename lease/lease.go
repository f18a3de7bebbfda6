package lease

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/seqlease/seqlease/internal/lifecycle"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/ttl"
)

// Store is what a Manager needs of a backend (store/memory, store/postgres).
// storetest.NamedLeaseStore states the contract. Acquires and releases go
// through the batch calls (see coalesce.go).
type Store interface {
	Now(ctx context.Context) (time.Time, error)
	AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult
	RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error)
	ReleaseLeases(ctx context.Context, reqs []store.LeaseHolding, p *store.LeaseBatchParams) []error
	ForceReleaseLeases(ctx context.Context, owner string, p *store.LeaseOpParams) ([]store.NamedLease, error)
	CleanupExpiredLeases(ctx context.Context, p *store.CleanupLeasesParams) (int, error)
	GetLease(ctx context.Context, name string, p *store.LeaseOpParams) (store.NamedLease, error)
	CheckLeaseFence(ctx context.Context, name string, fence int64, p *store.LeaseOpParams) error
	ListLeases(ctx context.Context, p *store.ListLeasesParams) ([]store.NamedLease, error)
	LeaseHistory(ctx context.Context, name string, p *store.LeaseHistoryParams) ([]store.LeaseEvent, error)
	TrimLeaseHistory(ctx context.Context, before time.Time, limit int) (int64, error)
	WatchLeases(ctx context.Context, sink store.LeaseSink) error
	AnnounceLeaseWaiter(ctx context.Context, w store.LeaseWaiter) error
}

// Errors. The sentinels shared with package store are the same values, so
// errors.Is works with either.
var (
	// ErrInvalidArgument is matched by every error about bad input: names,
	// owners, durations, options. Such a call changes nothing.
	ErrInvalidArgument = store.ErrInvalidArgument
	// ErrHeld is matched by the *HeldError of an acquire of a name another
	// holding holds.
	ErrHeld = store.ErrHeld
	// ErrNotHolder reports a renew or release of a holding the caller does
	// not hold (another owner's, or superseded).
	ErrNotHolder = store.ErrNotHolder
	// ErrLeaseNotFound reports a name that was never acquired.
	ErrLeaseNotFound = store.ErrLeaseNotFound
	// ErrExpired is why a lease ended when its expiry passed: its local
	// deadline passed without a renewal, or the backend refused a renewal
	// because the expiry had passed by its clock. A TryAcquire whose
	// attempt outlasted the lease's local deadline fails with it too (the
	// grant is released).
	ErrExpired = store.ErrExpired
	// ErrReleased is why a lease ended when its holder released it, and the
	// error of a second Release.
	ErrReleased = store.ErrReleased
	// ErrForceReleased is why a lease ended when ForceRelease ended it.
	ErrForceReleased = store.ErrForceReleased
	// ErrMaxRenewals is why a kept-alive lease ended when it reached its
	// MaxRenewals, and the error of Renew past them.
	ErrMaxRenewals = store.ErrMaxRenewals
	// ErrStaleFence is matched by the *FenceError of a fence that no longer
	// holds its name (Check, postgres.CheckFence).
	ErrStaleFence = store.ErrStaleFence

	// ErrLost is why a kept-alive lease ended when it could no longer be
	// proven held: its renewals failed until the local deadline (the last
	// error is wrapped), or another holding took the name (ErrNotHolder is
	// wrapped too).
	ErrLost = errors.New("lease: lease lost")
	// ErrOutcomeUnknown is matched by the error of a renewal or an
	// acquire that may or may not have been applied: the call failed
	// after its statement may have been sent (a lost connection, a
	// context that ended while the backend worked), or a renewal's lease
	// ended while it was out. The library settles either: see Lease.Renew,
	// and for an acquire TryAcquire (it releases the grant if there was
	// one).
	ErrOutcomeUnknown = errors.New("lease: outcome unknown")
	// ErrTimeout is returned by a blocking acquire whose AcquireOpts.Timeout
	// passed; the *HeldError of the last holder seen is wrapped.
	ErrTimeout = errors.New("lease: acquire timed out")
	// ErrStopped is returned by the calls of a stopped Manager, and by the
	// blocked acquires and Run calls that Stop ended.
	ErrStopped = errors.New("lease: manager stopped")
)

// HeldError tells who holds a name: the current holder, its fence and its
// expiry by the backend's clock. It matches ErrHeld.
type HeldError = store.HeldError

// FenceError says why a fencing token no longer holds its name. It matches
// ErrStaleFence.
type FenceError = store.FenceError

// Defaults of Config.
const (
	DefaultTTL              = 30 * time.Second
	DefaultMaxTTL           = time.Hour
	DefaultRenewShare       = 0.6
	DefaultMaxJitter        = time.Second
	DefaultSafetyMargin     = time.Second
	DefaultPollInterval     = time.Second
	DefaultHandoffGrace     = 50 * time.Millisecond
	DefaultCleanupInterval  = time.Minute
	DefaultHistoryRetention = 7 * 24 * time.Hour
	DefaultQueryTimeout     = 10 * time.Second
	DefaultReleaseTimeout   = 5 * time.Second
)

// Config configures a Manager. A nil *Config means the defaults; so does the
// zero value of each field.
type Config struct {
	// Owner identifies this process as the holder of its leases; it is what
	// ForceRelease takes to end a crashed agent's leases. At most
	// store.MaxNameLen bytes of text. Give each Manager its own: two
	// Managers with one Owner are one holder to the backend (see "Acquires
	// of unknown outcome" in the package doc). Default: "<hostname>:<pid>:<6
	// random hex digits>", different for every Manager.
	Owner string
	// DefaultTTL is the lease duration when AcquireOpts names none. The
	// settings table may set it (lease.default_ttl), as it may
	// RenewShare, MaxRenewals, AcquireTimeout, DisableBlocking,
	// CleanupInterval, HistoryRetention and DisableHistory: a field set
	// here wins over the table, the table over the default (see
	// NoSettings).
	// Default: the smaller of DefaultTTL (30 s) and MaxTTL.
	DefaultTTL time.Duration
	// MaxTTL is the longest lease a call (or the TTLPolicy) may ask for,
	// from 1 µs to store.MaxTTL. Default: DefaultMaxTTL (1 h).
	MaxTTL time.Duration
	// MaxRenewals bounds the renewals of each holding unless AcquireOpts
	// says otherwise; past it, renewals fail with ErrMaxRenewals and a
	// kept-alive lease ends (and is released), so long jobs give others a
	// turn. Default: 0, no limit.
	MaxRenewals int
	// RenewShare is the share of the TTL after which a kept-alive lease is
	// renewed, in (0, 1). Default: DefaultRenewShare (0.6).
	RenewShare float64
	// MaxJitter bounds the random delay added to each renewal, so holders
	// do not renew in step. It is capped at a tenth of the TTL.
	// Default: DefaultMaxJitter (1 s).
	MaxJitter time.Duration
	// SafetyMargin is how long before the expiry the holder stops trusting
	// its lease: the local deadline is the start of the last successful
	// acquire or renew attempt + TTL - SafetyMargin, on the monotonic
	// clock. It is capped at half the TTL. Default: the smaller of
	// DefaultSafetyMargin (1 s) and a tenth of the TTL.
	SafetyMargin time.Duration
	// PollInterval is how often a blocked Acquire re-checks a held name when
	// no notice arrives (and never later than the holder's expiry), with a
	// random ±20% so waiters of many processes do not poll in step.
	// Default: DefaultPollInterval (1 s).
	PollInterval time.Duration
	// HandoffGrace is how long a blocked acquire of this process holds back,
	// when the name may have become free, for an older blocked acquire of
	// another process (one that asked earlier, as it announced), so that
	// one gets the name first; then it tries anyway. A waiter that does not
	// take the name in that time is not held back for again until it
	// announces anew. Default: DefaultHandoffGrace (50 ms).
	HandoffGrace time.Duration
	// CleanupInterval is the period of the maintenance loop that marks
	// expired holdings and trims the history; negative turns the loop off.
	// Default: DefaultCleanupInterval (1 min).
	CleanupInterval time.Duration
	// HistoryRetention is how long audit events are kept; the maintenance
	// loop deletes older ones. Negative keeps them forever.
	// Default: DefaultHistoryRetention (7 days).
	HistoryRetention time.Duration
	// DisableHistory stops this Manager from recording the audit history
	// of its leases. Default: false, record it.
	DisableHistory bool
	// AcquireTimeout is the Timeout of a blocking acquire whose
	// AcquireOpts set none (lease.acquire_timeout). Not negative.
	// Default: 0, wait until the context ends.
	AcquireTimeout time.Duration
	// DisableBlocking makes the blocking acquires (Acquire, Hold,
	// AcquireAll, and so Run's campaigns) try once and fail at once with
	// the *HeldError of a held name, as TryAcquire (TryAcquireAll) does,
	// instead of waiting (lease.blocking = false). Run then campaigns
	// again every PollInterval. An acquire already waiting when the
	// settings table turns blocking off waits on. Default: false, wait.
	DisableBlocking bool
	// NoSettings stops this Manager from reading the settings table of
	// its store (store.Settings): without it, Start reads the table and
	// the Manager follows its changes, for the fields this Config leaves
	// zero. Default: false, follow the table.
	NoSettings bool
	// AdaptiveTTL chooses the lease duration when AcquireOpts names none,
	// in place of DefaultTTL (set one or the other; with it, the settings
	// table's lease.default_ttl is not followed): from its Min when idle to
	// its Max under load, times the fleet's boost (ttl.Fleet). Its Max
	// must be at most MaxTTL. The Manager keeps a copy. Optional.
	AdaptiveTTL *ttl.Policy
	// TTLPolicy, if set, chooses the TTL of every acquire (see TTLPolicy),
	// from the one asked for or AdaptiveTTL's. Default: none, the TTL
	// asked for.
	TTLPolicy TTLPolicy
	// QueryTimeout bounds each statement the Manager runs in the
	// background (maintenance, announcements) and each backend call shared
	// by several acquires or releases (see Manager). Default:
	// DefaultQueryTimeout (10 s).
	QueryTimeout time.Duration
	// ReleaseTimeout bounds the releases of Stop and of the keep-alive
	// after a lease ended, and how long Stop waits for subscribers to
	// receive the events still queued (see Subscription). Default:
	// DefaultReleaseTimeout (5 s).
	ReleaseTimeout time.Duration
	// Observer, if set, is told of acquisitions, renewals and the ends of
	// holdings, for metrics (*metrics.NamedLeaseObserver satisfies it).
	// Default: none.
	Observer Observer
	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
	// Now is the local clock for deadlines; it must carry a monotonic
	// reading. Default: time.Now.
	Now func() time.Time
}

// Observer is told what a Manager's leases do. kind is AcquireOpts.Kind, a
// low-cardinality class of leases. Its methods must not block: they are
// called from the renewing loops.
type Observer interface {
	// Acquire reports an acquisition's outcome: once per TryAcquire, once
	// per blocking acquire (its final error, matching ErrTimeout when
	// AcquireOpts.Timeout passed).
	Acquire(ctx context.Context, kind string, err error)
	// Renew reports each renewal attempt.
	Renew(ctx context.Context, kind string, err error)
	// Lost reports a holding that ended other than by its holder's release
	// (ErrLost, ErrExpired, ErrMaxRenewals, ErrForceReleased) after held.
	Lost(ctx context.Context, kind string, held time.Duration)
	// Released reports a holding its holder (or Stop) released after held.
	Released(ctx context.Context, kind string, held time.Duration)
	// Held reports that a holding of kind began; the Manager calls end once,
	// when the holding ends, before Lost or Released. It lets the observer
	// keep the holdings in progress without asking the backend (metrics:
	// the long-held gauge).
	Held(kind string) (end func())
}

// Manager acquires, holds and releases named leases for one owner (this
// process). It is safe for concurrent use; concurrent acquires (and
// releases) share backend calls: on PostgreSQL, one statement and one
// commit for every call that queued while the previous one ran.
type Manager struct {
	store Store
	cfg   Config // with the defaults filled in

	services *lifecycle.Life // Start's goroutines: the notice watch and the maintenance loop
	gate     *gate           // the work Stop waits for (lifecycle.go)
	holdings *holdings       // the leases this Manager holds (holdings.go)
	queues   *queues         // blocked acquires, and the other processes' waiters (wait.go)
	orphans  *orphans        // acquires of unknown outcome, whose grants it releases (orphan.go)
	events   *relay          // the subscriptions (events.go)

	calls    *coalescer  // acquires and releases sharing backend calls (coalesce.go)
	watching atomic.Bool // the watch of the backend's notices runs

	listPage  int // holdings per ListLeases statement: store.MaxListLimit
	testHooks testHooks

	// The settings table (settings.go): the Config as given, the values
	// in force, and the signals of a change to them and of a re-read due.
	given        Config
	tuned        atomic.Pointer[tuning]
	retuned      chan struct{}
	settingsWake chan struct{}
}

// testHooks are signals for the package's tests; nil outside them.
type testHooks struct {
	waiting    func(name string, queued int)             // a waiter joined the queue of name
	wanted     func(w store.LeaseWaiter)                 // another process announced a waiter
	reset      func()                                    // the watch (re)started listening
	paused     func(name string)                         // a blocked acquire found name held and waits
	holding    func(name string)                         // the head of name holds back for a rival
	ended      func(name string, fence int64, err error) // a lease ended (Done closed, Context cancelled)
	freed      func(name string)                         // the backend noticed that a holding of name ended
	drain      func()                                    // Stop waits for the acquire attempts in flight
	late       func(name string, fence int64)            // an attempt outlasted its lease's local deadline: released
	renewWaits func(name string)                         // a renewal of name waits for the one in progress
	cleanup    func(name string, fence int64)            // a holding whose lease is over is released (releaseAfterEnd)
	settings   func()                                    // the settings table was re-read after a notice
	orphan     func(name string, fence int64, ok bool)   // a grant of an acquire of unknown outcome was found: released (ok), or not (orphan.go)
}

// New returns a Manager on s. It returns an error naming the field when cfg
// is invalid. Leases can be acquired at once; Start adds prompt wake-ups of
// blocked acquires (backend notices) and the maintenance loop.
func New(s Store, cfg *Config) (*Manager, error) {
	if s == nil {
		return nil, errors.New("lease: nil Store")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := *cfg
	c.MaxTTL = cmp.Or(c.MaxTTL, DefaultMaxTTL)
	c.RenewShare = cmp.Or(c.RenewShare, DefaultRenewShare)
	c.MaxJitter = cmp.Or(c.MaxJitter, DefaultMaxJitter)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.HandoffGrace = cmp.Or(c.HandoffGrace, DefaultHandoffGrace)
	c.CleanupInterval = cmp.Or(c.CleanupInterval, DefaultCleanupInterval)
	c.HistoryRetention = cmp.Or(c.HistoryRetention, DefaultHistoryRetention)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, DefaultQueryTimeout)
	c.ReleaseTimeout = cmp.Or(c.ReleaseTimeout, DefaultReleaseTimeout)
	m := &Manager{
		store:    s,
		cfg:      c,
		services: lifecycle.New(ErrStopped),
		gate:     newGate(),
		holdings: newHoldings(),
		events:   newRelay(c.ReleaseTimeout),
		listPage: store.MaxListLimit,
	}
	if m.cfg.DefaultTTL == 0 {
		m.cfg.DefaultTTL = min(DefaultTTL, m.cfg.MaxTTL)
	}
	switch {
	case m.cfg.MaxTTL < time.Microsecond || m.cfg.MaxTTL > store.MaxTTL:
		return nil, fmt.Errorf("lease: Config.MaxTTL %v must be in [1µs, %v]: %w", cfg.MaxTTL, store.MaxTTL, store.ErrInvalidArgument)
	case m.cfg.DefaultTTL < time.Microsecond || m.cfg.DefaultTTL > m.cfg.MaxTTL:
		return nil, fmt.Errorf("lease: Config.DefaultTTL %v must be in [1µs, MaxTTL %v]: %w", cfg.DefaultTTL, m.cfg.MaxTTL, store.ErrInvalidArgument)
	case m.cfg.MaxRenewals < 0:
		return nil, fmt.Errorf("lease: Config.MaxRenewals %d must not be negative: %w", cfg.MaxRenewals, store.ErrInvalidArgument)
	case !(m.cfg.RenewShare > 0 && m.cfg.RenewShare < 1): // NaN too
		return nil, fmt.Errorf("lease: Config.RenewShare %v must be in (0, 1): %w", cfg.RenewShare, store.ErrInvalidArgument)
	case m.cfg.MaxJitter < 0:
		return nil, fmt.Errorf("lease: Config.MaxJitter %v must not be negative: %w", cfg.MaxJitter, store.ErrInvalidArgument)
	case m.cfg.SafetyMargin < 0:
		return nil, fmt.Errorf("lease: Config.SafetyMargin %v must not be negative: %w", cfg.SafetyMargin, store.ErrInvalidArgument)
	case m.cfg.PollInterval < 0:
		return nil, fmt.Errorf("lease: Config.PollInterval %v must not be negative: %w", cfg.PollInterval, store.ErrInvalidArgument)
	case m.cfg.HandoffGrace < 0:
		return nil, fmt.Errorf("lease: Config.HandoffGrace %v must not be negative: %w", cfg.HandoffGrace, store.ErrInvalidArgument)
	case m.cfg.QueryTimeout < 0:
		return nil, fmt.Errorf("lease: Config.QueryTimeout %v must not be negative: %w", cfg.QueryTimeout, store.ErrInvalidArgument)
	case m.cfg.ReleaseTimeout < 0:
		return nil, fmt.Errorf("lease: Config.ReleaseTimeout %v must not be negative: %w", cfg.ReleaseTimeout, store.ErrInvalidArgument)
	case m.cfg.AcquireTimeout < 0:
		return nil, fmt.Errorf("lease: Config.AcquireTimeout %v must not be negative: %w", cfg.AcquireTimeout, store.ErrInvalidArgument)
	}
	if p := cfg.AdaptiveTTL; p != nil {
		if cfg.DefaultTTL != 0 {
			return nil, fmt.Errorf("lease: Config.AdaptiveTTL and Config.DefaultTTL %v are exclusive: set one: %w", cfg.DefaultTTL, store.ErrInvalidArgument)
		}
		if err := p.Validate(m.cfg.MaxTTL); err != nil {
			return nil, fmt.Errorf("lease: Config.AdaptiveTTL: %w", err) // a *ttl.FieldError, matches ErrInvalidArgument
		}
		pc := *p
		m.cfg.AdaptiveTTL = &pc
	}
	if m.cfg.Owner == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		m.cfg.Owner = host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:])
	}
	if err := store.ValidateLeaseOwner(m.cfg.Owner); err != nil {
		return nil, fmt.Errorf("lease: Config.Owner: %w", err)
	}
	if m.cfg.Logger == nil {
		m.cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if m.cfg.Now == nil {
		m.cfg.Now = time.Now
	}
	m.queues = newQueues(m)
	m.orphans = newOrphans(m)
	m.calls = newCoalescer(m)
	m.initTuning(cfg)
	return m, nil
}

// Owner returns the owner this Manager acquires leases as.
func (m *Manager) Owner() string { return m.cfg.Owner }

// queryContext bounds a background statement.
func (m *Manager) queryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.cfg.QueryTimeout)
}
