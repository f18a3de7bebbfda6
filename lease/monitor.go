package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/seqlease/seqlease/internal/lifecycle"
	"github.com/seqlease/seqlease/store"
)

// Defaults of MonitorConfig.
const (
	DefaultStuckAfter      = time.Hour
	DefaultMonitorInterval = time.Minute
)

// LongHeld is the event of a holding a Monitor found held for at least its
// MonitorConfig.StuckAfter: any owner's, this Manager's or not. Owner and
// Fence are the holding's, At the backend's now of the check, ExpiresAt
// its expiry, Waited how long it had been held by then, Renewals its
// renewal count. Err is ErrForceReleased when the Monitor ended it.
const LongHeld EventKind = "long-held"

// MonitorConfig configures a Monitor. A nil *MonitorConfig means the
// defaults; so does the zero value of each field.
type MonitorConfig struct {
	// StuckAfter is the age from which a live holding is reported stuck:
	// acquired at least this long ago by the backend's clock, renewals
	// notwithstanding (a holder renewing in a loop it never leaves).
	// Negative is bad input. Default: DefaultStuckAfter (1 h).
	StuckAfter time.Duration
	// Interval is the period of the checks (±10%, a first one at Start).
	// Negative is bad input. Default: DefaultMonitorInterval (1 min).
	Interval time.Duration
	// Owner, if set, limits the checks to that owner's holdings.
	// Default: every owner's.
	Owner string
	// ForceRelease makes the Monitor force-release the stuck holdings it
	// finds, each fenced by its token, so it never ends a later holding of
	// the name; the history records MonitorActor and why. Default: false,
	// report only.
	ForceRelease bool
	// Observer, if set, is told the result of every check, for metrics
	// (*metrics.NamedLeaseObserver satisfies it). Default: none.
	Observer MonitorObserver
	// Logger receives a warning per stuck holding at every check.
	// Default: the Manager's.
	Logger *slog.Logger
}

// MonitorObserver is told the result of each check of a Monitor. Its method
// must not block.
type MonitorObserver interface {
	Checked(ctx context.Context, r MonitorResult)
}

// MonitorResult is what one check of a Monitor found.
type MonitorResult struct {
	// Active is how many live holdings the check saw (of MonitorConfig.Owner
	// if set), the stuck ones included.
	Active int
	// Expired is how many holdings past their expiry the check saw that
	// maintenance has not marked yet (store.LeaseStatusExpired): a holder
	// that stopped renewing; a new acquire takes the name over.
	Expired int
	// Pending is how many waiters the check saw (store.LeaseStatusPending:
	// blocked acquires, of Owner if set, announced within
	// store.LeaseWaiterTTL), at most store.MaxListLimit; -1 when the store
	// cannot list them (it is no WaiterLister; both backends are).
	Pending int
	// Stuck are the live holdings acquired at least StuckAfter ago, by name.
	Stuck []Info
	// Released is how many of Stuck the Monitor ended (ForceRelease).
	Released int
}

// Monitor watches the named leases of a store for stuck holdings: those
// held longer than a threshold, renewals notwithstanding. Each check lists
// the live holdings, reports every stuck one (a warning in the log, a
// LongHeld event to the Manager's subscribers, the counts to the Observer
// for the gauge and the alert) and, with ForceRelease, ends it. Make one
// with Manager.NewMonitor; one per fleet is enough, though several do no
// harm (a holding ends once; the others find it ended).
type Monitor struct {
	m    *Manager
	cfg  MonitorConfig
	life *lifecycle.Life
}

// NewMonitor returns a Monitor of the store of m, which it uses to list and
// end holdings and to send its events. It returns an error naming the field
// (matching ErrInvalidArgument) when cfg is invalid. Stop the Monitor
// before the Manager.
func (m *Manager) NewMonitor(cfg *MonitorConfig) (*Monitor, error) {
	if cfg == nil {
		cfg = &MonitorConfig{}
	}
	switch {
	case cfg.StuckAfter < 0:
		return nil, fmt.Errorf("lease: MonitorConfig.StuckAfter %v must not be negative: %w", cfg.StuckAfter, store.ErrInvalidArgument)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("lease: MonitorConfig.Interval %v must not be negative: %w", cfg.Interval, store.ErrInvalidArgument)
	}
	if cfg.Owner != "" {
		if err := store.ValidateLeaseOwner(cfg.Owner); err != nil {
			return nil, fmt.Errorf("lease: MonitorConfig.Owner: %w", err)
		}
	}
	c := *cfg
	c.StuckAfter = cmp.Or(c.StuckAfter, DefaultStuckAfter)
	c.Interval = cmp.Or(c.Interval, DefaultMonitorInterval)
	if c.Logger == nil {
		c.Logger = m.cfg.Logger
	}
	return &Monitor{m: m, cfg: c, life: lifecycle.New(ErrStopped)}, nil
}

// Start starts the checks in the background: one at once, then every
// Interval. Start after Stop fails with ErrStopped; a second Start does
// nothing.
func (mo *Monitor) Start(ctx context.Context) error {
	return mo.life.Start(ctx, func(context.Context) error {
		mo.life.Go(mo.loop)
		return nil
	})
}

// Stop stops the checks and waits for the one in progress. It is safe
// before Start and twice.
func (mo *Monitor) Stop() { mo.life.Stop() }

// loop runs a check at once, then every Interval (±10%); errors back off.
func (mo *Monitor) loop(ctx context.Context) {
	every := mo.cfg.Interval
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = min(time.Second, every)
	bo.MaxInterval = every
	bo.MaxElapsedTime = 0
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pause := every - every/10 + rand.N(every/5+1)
		if _, err := mo.Check(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			pause = bo.NextBackOff()
			mo.cfg.Logger.Warn("lease: monitor: check failed", slog.Any("error", err), slog.Duration("pause", pause))
		} else {
			bo.Reset()
		}
		t.Reset(pause)
	}
}

// WaiterLister is implemented by a store that lists the waiters of names
// (both backends): a Monitor counts them as pending.
type WaiterLister interface {
	ListLeaseWaiters(ctx context.Context, p *store.ListLeaseWaitersParams) ([]store.LeaseWaiter, error)
}

// Check runs one check now: it lists the live holdings and those expired
// but not yet marked (the listing, and each release, bounded by the
// Manager's Config.QueryTimeout) and the waiters, reports the stuck
// holdings and, with ForceRelease, ends them. A holding that ended or
// changed hands meanwhile is left alone. The listing pages through every
// holding (of Owner, if set) at each check.
func (mo *Monitor) Check(ctx context.Context) (MonitorResult, error) {
	m := mo.m
	var res MonitorResult
	qctx, cancel := m.queryContext(ctx)
	ls, err := m.listAll(qctx, &store.ListLeasesParams{Owner: mo.cfg.Owner, Expired: true})
	cancel()
	if err != nil {
		return res, fmt.Errorf("lease: monitor: %w", err)
	}
	if res.Pending, err = mo.pending(ctx); err != nil {
		return res, fmt.Errorf("lease: monitor: %w", err)
	}
	for _, info := range ls {
		if info.Status() != store.LeaseStatusActive {
			res.Expired++
			continue
		}
		res.Active++
		held := info.AsOf.Sub(info.AcquiredAt)
		if held < mo.cfg.StuckAfter {
			continue
		}
		res.Stuck = append(res.Stuck, info)
		e := Event{Kind: LongHeld, Name: info.Name, Owner: info.Owner, Fence: info.Fence, At: info.AsOf,
			ExpiresAt: info.ExpiresAt, Waited: held, Renewals: info.Renewals}
		mo.cfg.Logger.Warn("lease: monitor: holding held longer than the threshold",
			slog.String("name", info.Name), slog.String("owner", info.Owner), slog.Int64("fence", info.Fence),
			slog.Duration("held", held), slog.Int("renewals", info.Renewals), slog.Duration("threshold", mo.cfg.StuckAfter),
			slog.Bool("force_release", mo.cfg.ForceRelease))
		if mo.cfg.ForceRelease {
			switch err := mo.end(ctx, info); {
			case err == nil:
				res.Released++
				e.Err = ErrForceReleased
			case ctx.Err() != nil:
				return res, fmt.Errorf("lease: monitor: %w", ctx.Err())
			case !endedAlready(err):
				mo.cfg.Logger.Warn("lease: monitor: force-release of a stuck holding failed",
					slog.String("name", info.Name), slog.Int64("fence", info.Fence), slog.Any("error", err))
			}
		}
		m.events.emit(e)
	}
	if mo.cfg.Observer != nil {
		mo.cfg.Observer.Checked(ctx, res)
	}
	return res, nil
}

// pending counts the waiters (of Owner, if set), or returns -1 when the
// store cannot list them.
func (mo *Monitor) pending(ctx context.Context) (int, error) {
	wl, ok := mo.m.store.(WaiterLister)
	if !ok {
		return -1, nil
	}
	qctx, cancel := mo.m.queryContext(ctx)
	defer cancel()
	ws, err := wl.ListLeaseWaiters(qctx, &store.ListLeaseWaitersParams{Limit: store.MaxListLimit})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, w := range ws {
		if mo.cfg.Owner == "" || w.Waiter == mo.cfg.Owner {
			n++
		}
	}
	return n, nil
}

// MonitorActor is the actor a Monitor records in the lease history of the
// holdings it force-releases (LeaseEvent.Actor); the comment says why and
// which Manager's monitor it was.
const MonitorActor = "lease.Monitor"

// errEndedAlready says the holding a Monitor meant to end had ended, or
// changed hands, on its own meanwhile.
var errEndedAlready = errors.New("lease: monitor: the holding had ended already")

// end force-releases a stuck holding, fenced by its token, recording
// MonitorActor and why in its history: a lease of this Manager ends at
// once with ErrForceReleased; another process's holder learns of it at
// its next renewal (ErrForceReleased too).
func (mo *Monitor) end(ctx context.Context, info Info) error {
	m := mo.m
	qctx, cancel := m.queryContext(ctx)
	defer cancel()
	ended, err := m.store.ForceReleaseLeases(qctx, info.Owner, &store.LeaseOpParams{
		Name: info.Name, Fence: info.Fence, NoHistory: m.conf().DisableHistory, Actor: MonitorActor,
		Reason: fmt.Sprintf("held longer than %v (the monitor of %s)", mo.cfg.StuckAfter, store.QuoteInput(m.cfg.Owner)),
	})
	switch {
	case err != nil:
		return err
	case len(ended) == 0:
		return errEndedAlready
	}
	if l := m.holdings.get(info.Name); l != nil && l.fence == info.Fence && l.owner == info.Owner {
		l.end(fmt.Errorf("%w: %s by the monitor: held longer than %v", ErrForceReleased, store.QuoteInput(l.name), mo.cfg.StuckAfter))
	}
	m.queues.wakeHead(info.Name)
	return nil
}

// endedAlready reports whether err says that the holding the monitor meant
// to end had ended, or changed hands, on its own meanwhile.
func endedAlready(err error) bool {
	return errors.Is(err, errEndedAlready) || errors.Is(err, ErrReleased) || errors.Is(err, ErrNotHolder) ||
		errors.Is(err, ErrExpired) || errors.Is(err, ErrForceReleased) || errors.Is(err, ErrStaleFence)
}
