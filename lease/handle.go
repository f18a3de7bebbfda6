package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Lease is one holding of a named lease: the handle its holder renews,
// checks and releases. Its methods are safe for concurrent use.
//
// Like an etcd Session, a Lease tells its holder when it is over: Done and
// Context end the moment it is released, lost, expired or force-released,
// or can no longer be proven held (its local deadline passed), and Err says
// which. Do the lease's work under Context.
type Lease struct {
	m           *Manager
	name        string
	owner       string
	fence       int64
	acquiredAt  time.Time
	maxRenewals int
	cadence     cadence
	kind        string        // for the Observer
	waited      time.Duration // how long the acquire took, wait included (Event.Waited)
	start       time.Time     // local: when the acquire attempt started
	obsEnd      func()        // the Observer's end of the holding; nil without one

	renewing  chan struct{} // capacity 1: held by the renewal in progress
	releasing chan struct{} // capacity 1: held by the Release in progress

	mu         sync.Mutex
	ttl        time.Duration // asked for by every renewal; RenewWith changes it
	margin     time.Duration // the safety margin of ttl
	rtt        time.Duration // how long the last successful grant or renewal took (lastTry)
	renewedAt  time.Time     // by the backend's clock
	expiresAt  time.Time     // by the backend's clock
	renewals   int
	deadline   time.Time // local, monotonic: attempt start + TTL - margin
	timer      *time.Timer
	lastErr    error // the last failed renewal, for ErrLost
	keepAlive  *keepAlive
	releasedDB bool // the backend recorded a release of this holding
	released   bool // its holder's Release succeeded
	inFlight   bool // a renewal is out in the backend
	unsure     bool // a renewal's outcome was unknown, or it landed after the end: see settleLocked
	cleaning   bool // releaseAfterEnd runs
	ctx        context.Context
	cancelCtx  context.CancelCauseFunc
	over       chan struct{} // closed when the lease is over
	cause      error         // why; set before over closes
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Owner returns the owner that holds it (the Manager's).
func (l *Lease) Owner() string { return l.owner }

// Fence returns the fencing token of this holding: larger than that of every
// earlier holding of the name, the same across renewals. Hand it to the
// systems the lease guards, so they can refuse a deposed holder's writes
// (postgres.CheckFence, or a comparison of their own).
func (l *Lease) Fence() int64 { return l.fence }

// AcquiredAt returns when the backend granted the holding, by its clock.
func (l *Lease) AcquiredAt() time.Time { return l.acquiredAt }

// TTL returns the duration each renewal asks for: the grant's, or the last
// one RenewWith set.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// RenewedAt returns the backend's now at the last grant or renewal.
func (l *Lease) RenewedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewedAt
}

// ExpiresAt returns the expiry by the backend's clock, as of the last grant
// or renewal.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Renewals returns how many renewals the holding had.
func (l *Lease) Renewals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewals
}

// Remaining returns how long the holder can count on the lease, by the local
// monotonic clock: the local deadline minus now, never more than the backend
// would allow. Zero once the lease is over or may be.
func (l *Lease) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause != nil {
		return 0
	}
	return max(l.deadline.Sub(l.m.cfg.Now()), 0)
}

// Done returns a channel that is closed when the lease is over.
func (l *Lease) Done() <-chan struct{} { return l.over }

// Context returns a context that is cancelled, with Err as its cause, when
// the lease is over.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancelCtx = context.WithCancelCause(context.Background())
		if l.cause != nil {
			l.cancelCtx(l.cause)
		}
	}
	return l.ctx
}

// Err returns nil while the lease is held, and afterwards why it is over:
// ErrReleased (its holder released it, or the Manager's Stop did),
// ErrExpired (its local deadline passed without a keep-alive, or the backend
// said it expired), ErrLost (the keep-alive could not renew it in time, or
// another holding took the name), ErrMaxRenewals, or ErrForceReleased.
func (l *Lease) Err() error {
	select {
	case <-l.over:
		return l.cause
	default:
		return nil
	}
}

// newLease makes the handle of a grant whose attempt started at start.
func (m *Manager) newLease(g store.NamedLease, start time.Time, ttl time.Duration, kind string, c cadence, since time.Time) *Lease {
	l := &Lease{
		m: m, name: g.Name, owner: g.Owner, fence: g.Fence, acquiredAt: g.AcquiredAt,
		ttl: ttl, margin: m.marginFor(ttl), maxRenewals: g.MaxRenewals, cadence: c, kind: kind, start: start,
		renewedAt: g.RenewedAt, expiresAt: g.ExpiresAt, renewals: g.Renewals,
		over: make(chan struct{}), renewing: make(chan struct{}, 1), releasing: make(chan struct{}, 1),
	}
	l.deadline = start.Add(ttl - l.margin)
	now := m.cfg.Now()
	l.rtt = max(now.Sub(start), 0)
	l.waited = max(now.Sub(since), 0)
	if m.cfg.Observer != nil {
		l.obsEnd = m.cfg.Observer.Held(kind)
	}
	l.mu.Lock() // so that Acquired is this lease's first event
	l.timer = time.AfterFunc(max(l.deadline.Sub(m.cfg.Now()), 0), l.onDeadline)
	m.events.emit(l.event(Acquired, g.AcquiredAt, nil))
	l.mu.Unlock()
	return l
}

// marginFor returns the safety margin of a lease of ttl.
func (m *Manager) marginFor(ttl time.Duration) time.Duration {
	if m.cfg.SafetyMargin == 0 {
		return min(DefaultSafetyMargin, ttl/10)
	}
	return min(m.cfg.SafetyMargin, ttl/2)
}

// onDeadline ends the lease when its local deadline passed without a
// renewal.
func (l *Lease) onDeadline() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause != nil {
		return
	}
	if left := l.deadline.Sub(l.m.cfg.Now()); left > 0 { // renewed meanwhile
		l.timer.Reset(left)
		return
	}
	if l.keepAlive != nil {
		err := l.lastErr
		if err == nil {
			err = errors.New("no renewal succeeded in time")
		}
		l.endLocked(fmt.Errorf("%w: %s could not be renewed before its local deadline: %w", ErrLost, store.QuoteInput(l.name), err))
		return
	}
	l.endLocked(fmt.Errorf("%w: %s reached its local deadline", ErrExpired, store.QuoteInput(l.name)))
}

// end ends the lease with cause, if it is not over yet.
func (l *Lease) end(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(cause)
}

// endLocked ends the lease with cause and emits its last event. l.mu must be
// held. The first cause wins.
func (l *Lease) endLocked(cause error) {
	if l.cause != nil {
		return
	}
	l.cause = cause
	l.timer.Stop()
	kind := endKind(cause)
	l.m.events.emit(l.event(kind, time.Time{}, cause))
	if obs := l.m.cfg.Observer; obs != nil {
		l.obsEnd()
		held := l.m.cfg.Now().Sub(l.start)
		if kind == Released {
			obs.Released(context.Background(), l.kind, held)
		} else {
			obs.Lost(context.Background(), l.kind, held)
		}
	}
	// Last, so that whoever sees Done has been told everything else.
	close(l.over)
	if l.cancelCtx != nil {
		l.cancelCtx(cause)
	}
	if l.m.testHooks.ended != nil {
		l.m.testHooks.ended(l.name, l.fence, cause)
	}
	// After everything: a Stop that no longer finds the lease among the
	// live ones knows its end was told (its last event queued before the
	// subscriptions end).
	l.m.unregister(l)
	l.settleLocked()
}

// settleLocked settles a lease that is over with what the backend may still
// hold: a renewal whose outcome was unknown, or that landed after the lease
// ended, may have moved the holding's expiry a full TTL past what its holder
// was told, so that nobody could take the name until then. Such a holding
// is released in the background (releaseAfterEnd: fenced by its token, it
// never ends a later holding of the name). Until it is settled the lease
// stays among the Manager's live leases, so that Stop releases it (or waits
// for its release). It waits for the renewal still out, if one is: Renew
// settles it when the answer comes. l.mu must be held.
func (l *Lease) settleLocked() {
	if l.cause == nil || l.inFlight || l.cleaning {
		return
	}
	if l.releasedDB || endedInBackend(l.cause) {
		l.unsure = false
	}
	if l.unsure && l.m.goReleaseAfterEnd(l) {
		return
	}
	if !l.unsure { // else Stop began, and releases it with the live leases
		l.m.holdings.retire(l)
	}
}

// endedInBackend reports whether cause says that the holding ended in the
// backend, or that its holder's Release ends it there: no renewal can land
// after that.
func endedInBackend(cause error) bool {
	return errors.Is(cause, ErrReleased) || errors.Is(cause, ErrForceReleased) ||
		errors.Is(cause, ErrNotHolder) || errors.Is(cause, ErrStaleFence)
}

// endKind names the event of a lease that ended with cause.
func endKind(cause error) EventKind {
	switch {
	case errors.Is(cause, ErrReleased), errors.Is(cause, ErrStopped):
		return Released
	case errors.Is(cause, ErrForceReleased):
		return ForceReleased
	case errors.Is(cause, ErrLost), errors.Is(cause, ErrMaxRenewals):
		return Lost
	}
	return Expired
}

// Renew renews the lease once, now: the backend moves its expiry to its now +
// TTL. On success the local deadline moves to the start of this attempt +
// TTL - the safety margin. A refusal that can never succeed (the lease
// expired, was superseded, released or force-released) ends the lease;
// ErrMaxRenewals leaves it as it was, held until its local deadline.
//
// A renewal can also fail with its outcome unknown: its statement may have
// been sent, and the answer did not come (a lost connection, ctx ended
// while the backend worked). The error then matches ErrOutcomeUnknown
// (and wraps the failure): the backend may hold the holding up to a TTL
// past what its holder was told. If the lease is still held (Err is nil),
// it stays held until its local deadline, as before the call: renew again,
// or release it. If it is over (its local deadline passed while the
// renewal was out; the error matches Err's cause too), the handle is over
// for the caller, and the library settles the rest: it releases the
// holding in the background, fenced by its token (it never ends a later
// holding of the name), and Stop waits for that release. The same
// happens when a lease that had a renewal of unknown outcome ends at its
// local deadline later, and when a renewal is applied but its answer comes
// after the lease ended (Renew then returns the end, not
// ErrOutcomeUnknown). A renewal that certainly did not run releases
// nothing: refused by the backend, or not sent (ctx had ended before the
// call, or the store's error matches store.ErrNotSent: no connection could
// be had).
//
// Renewals of a lease take turns (the keep-alive's too). Renew is bounded
// by ctx, by the local deadline (a renewal that ends after it proves
// nothing) and by the end of the lease: once the lease is over, Renew
// returns why at once, whether it waits for its turn or for the backend.
func (l *Lease) Renew(ctx context.Context) error { return l.renew(ctx, 0) }

// RenewOpts are the options of RenewWith. A nil *RenewOpts means the
// defaults; so does the zero value of each field.
type RenewOpts struct {
	// TTL, if set, is the lease's TTL from this renewal on: this renewal
	// and the later ones (the keep-alive's too, which reschedules its next
	// renewal by it) ask for it, and the local deadline and safety margin
	// follow it. It is not set if the renewal fails. It must be within
	// [1µs, Config.MaxTTL]; the TTLPolicy is not consulted. Default: the
	// lease's TTL.
	TTL time.Duration
}

// RenewWith is Renew with options: RenewOpts.TTL changes the lease's TTL,
// so one holding can shorten or lengthen its lease as its work goes. Bad
// options (a TTL out of range) return an error matching
// ErrInvalidArgument that names the field, and change nothing.
func (l *Lease) RenewWith(ctx context.Context, opts *RenewOpts) error {
	if opts == nil {
		opts = &RenewOpts{}
	}
	if opts.TTL != 0 {
		if err := store.ValidateTTL(opts.TTL, l.m.cfg.MaxTTL); err != nil {
			return fmt.Errorf("lease: renew %s: RenewOpts.TTL: %w", store.QuoteInput(l.name), err)
		}
	}
	return l.renew(ctx, opts.TTL)
}

// renew is Renew, asking for newTTL (and making it the lease's TTL) when it
// is not zero.
func (l *Lease) renew(ctx context.Context, newTTL time.Duration) error {
	if err := l.takeTurn(ctx); err != nil {
		return err
	}
	defer func() { <-l.renewing }()
	l.mu.Lock()
	cause, ttl := l.cause, cmp.Or(newTTL, l.ttl)
	left := l.deadline.Sub(l.m.cfg.Now()) // fixed while this renewal has its turn
	l.mu.Unlock()
	switch {
	case cause != nil:
		return fmt.Errorf("lease: renew %s: %w", store.QuoteInput(l.name), cause)
	case left <= 0:
		l.onDeadline() // passed, its timer not yet fired
		return fmt.Errorf("lease: renew %s: %w", store.QuoteInput(l.name), l.Err())
	}
	rctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	defer context.AfterFunc(l.Context(), cancel)()
	if !l.send(rctx) {
		return fmt.Errorf("lease: renew %s: %w", store.QuoteInput(l.name), cmp.Or(l.Err(), rctx.Err()))
	}
	start := l.m.cfg.Now()
	g, serr := l.m.store.RenewLease(rctx, l.name, l.owner, l.fence, &store.RenewLeaseParams{TTL: ttl, NoHistory: l.m.conf().DisableHistory})
	if obs := l.m.cfg.Observer; obs != nil {
		obs.Renew(ctx, l.kind, serr)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight = false
	var err, refused error
	notSent := errors.Is(serr, store.ErrNotSent) // certainly did not run, and changed nothing
	if serr != nil {
		err = fmt.Errorf("lease: %w", serr)
		refused = renewFailure(err) // nil: the statement may have run
	}
	if l.cause != nil {
		// Over locally in the meantime (released, or the deadline passed
		// while the renewal was out): stay over, and settle what the
		// backend may hold.
		l.unsure = l.unsure || refused == nil && !notSent
		l.settleLocked()
		switch {
		case endedInBackend(l.cause) || refused != nil || notSent:
			return fmt.Errorf("lease: renew %s: %w", store.QuoteInput(l.name), l.cause)
		case err == nil:
			return fmt.Errorf("lease: renew %s: %w (the renewal was applied after the lease ended: the library releases it)", store.QuoteInput(l.name), l.cause)
		}
		return fmt.Errorf("lease: renew %s: %w (%w), and the lease is over: %w (the library releases it in case the renewal was applied)",
			store.QuoteInput(l.name), ErrOutcomeUnknown, serr, l.cause)
	}
	if err != nil {
		if refused != nil {
			if errors.Is(refused, ErrMaxRenewals) {
				// The holding stays valid until its expiry; keep the
				// deadline and let the caller (or the keep-alive) decide.
				return err
			}
			l.endLocked(refused)
			return err
		}
		if notSent {
			// It did not run: the lease stays as it was, held until its
			// local deadline.
			err = fmt.Errorf("lease: renew %s: %w", store.QuoteInput(l.name), serr)
		} else {
			// The statement may have run: if the lease ends without a
			// release, the backend may hold it past its local deadline
			// (settleLocked).
			l.unsure = true
			err = fmt.Errorf("lease: renew %s: %w: %w", store.QuoteInput(l.name), ErrOutcomeUnknown, serr)
		}
		if rctx.Err() == nil || l.lastErr == nil {
			l.lastErr = err // keep the real failure over the deadline's cancellation
		}
		return err
	}
	l.renewedAt, l.expiresAt, l.renewals = g.RenewedAt, g.ExpiresAt, g.Renewals
	l.lastErr = nil
	if ttl != l.ttl {
		l.ttl, l.margin = ttl, l.m.marginFor(ttl)
		if l.keepAlive != nil {
			l.keepAlive.reschedule()
		}
	}
	l.deadline = start.Add(ttl - l.margin)
	now := l.m.cfg.Now()
	l.rtt = max(now.Sub(start), 0)
	l.timer.Reset(max(l.deadline.Sub(now), 0))
	l.m.events.emit(l.event(Renewed, g.RenewedAt, nil))
	return nil
}

// send marks a renewal out in the backend (settleLocked waits for its
// answer), unless the lease is over or ctx ended: then nothing is sent,
// and false returned.
func (l *Lease) send(ctx context.Context) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause != nil || ctx.Err() != nil {
		return false
	}
	l.inFlight = true
	return true
}

// takeTurn waits for the renewal in progress, if any, to end, and takes
// the turn (l.renewing); it gives up when ctx ends or the lease is over.
func (l *Lease) takeTurn(ctx context.Context) error {
	select {
	case l.renewing <- struct{}{}:
		return nil
	default:
	}
	if l.m.testHooks.renewWaits != nil {
		l.m.testHooks.renewWaits(l.name)
	}
	select {
	case l.renewing <- struct{}{}:
		return nil
	case <-l.over:
		return fmt.Errorf("lease: renew %s: %w", store.QuoteInput(l.name), l.Err())
	case <-ctx.Done():
		return fmt.Errorf("lease: renew %s: %w", store.QuoteInput(l.name), ctx.Err())
	}
}

// renewFailure returns the cause that ends a lease after a renewal failed
// with err, or nil when err may be transient.
func renewFailure(err error) error {
	switch {
	case errors.Is(err, ErrNotHolder):
		return fmt.Errorf("%w: %w", ErrLost, err)
	case errors.Is(err, ErrExpired), errors.Is(err, ErrReleased), errors.Is(err, ErrForceReleased),
		errors.Is(err, ErrMaxRenewals):
		return err
	case store.IsInvalid(err):
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	return nil
}

// Release stops the keep-alive, if one runs, ends the lease (Done closes,
// Context is cancelled) and then releases it in the backend: its name is
// free at once for the next holder, and the waiters of this process and
// (through the backend's notice) of others are woken. The lease ends before
// the backend frees the name, so its Context never overlaps the next
// holder's.
//
// Release after the lease expired, was lost or force-released is safe: it
// never touches a newer holding and returns nil. When nothing else ended
// the holding in the backend (nobody took the name over, the maintenance
// did not mark it expired, it was not force-released), the backend records
// it as released; that also frees at once a holding whose local deadline
// passed but whose backend expiry has not. A second Release returns an
// error matching ErrReleased; Close does not. Concurrent Releases take
// turns: one releases, the others wait for its outcome (or their ctx) and
// then return ErrReleased, or try again if it failed. If the release could
// not reach the backend, the lease is over all the same (its holder gave it
// up) and the error is returned: call Release again to retry, or let the
// lease expire.
func (l *Lease) Release(ctx context.Context) error {
	select {
	case l.releasing <- struct{}{}:
	default:
		select {
		case l.releasing <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("lease: release %s: %w", store.QuoteInput(l.name), ctx.Err())
		}
	}
	defer func() { <-l.releasing }()
	l.stopKeepAlive()
	l.mu.Lock()
	again, inDB := l.released, l.releasedDB
	l.endLocked(fmt.Errorf("%w: %s by its holder", ErrReleased, store.QuoteInput(l.name))) // the first cause wins
	l.mu.Unlock()
	if again {
		return fmt.Errorf("lease: release %s: %w", store.QuoteInput(l.name), ErrReleased)
	}
	if !inDB { // else the keep-alive released it when it gave it up
		err := l.m.calls.release(ctx, store.LeaseHolding{Name: l.name, Owner: l.owner, Fence: l.fence})
		if err != nil && !errors.Is(err, ErrReleased) { // ErrReleased: a retry whose first attempt went through
			return fmt.Errorf("lease: release %s: %w", store.QuoteInput(l.name), err)
		}
	}
	l.mu.Lock()
	l.releasedDB, l.released = true, true
	l.settleLocked() // kept among the live leases until released, if a renewal's outcome was unknown
	l.mu.Unlock()
	l.m.queues.wakeHead(l.name)
	return nil
}

// Close releases the lease like Release, and returns nil if it was released
// already. It is the deferrable form.
func (l *Lease) Close(ctx context.Context) error {
	err := l.Release(ctx)
	if errors.Is(err, ErrReleased) {
		return nil
	}
	return err
}

// Check asks the backend whether this holding still holds its name
// (unexpired by the backend's clock, not ended, not superseded). It returns
// nil, or a *FenceError (matching ErrStaleFence), in which case the lease
// ends. To guard a write in PostgreSQL, use postgres.CheckFence inside the
// writing transaction instead: it also holds the name until the
// transaction ends.
func (l *Lease) Check(ctx context.Context) error {
	err := l.m.store.CheckLeaseFence(ctx, l.name, l.fence, nil)
	var fe *FenceError
	if errors.As(err, &fe) {
		var cause error
		switch fe.Reason {
		case string(store.LeaseExpired):
			cause = ErrExpired
		case string(store.LeaseReleased):
			cause = ErrReleased
		case string(store.LeaseForceReleased):
			cause = ErrForceReleased
		default:
			cause = ErrLost
		}
		l.end(fmt.Errorf("%w: %w", cause, err))
	}
	if err != nil {
		return fmt.Errorf("lease: check %s: %w", store.QuoteInput(l.name), err)
	}
	return nil
}

// event returns an event of this lease. l.mu must be held.
func (l *Lease) event(kind EventKind, at time.Time, err error) Event {
	return Event{Kind: kind, Name: l.name, Owner: l.owner, Fence: l.fence, At: at, ExpiresAt: l.expiresAt,
		Waited: l.waited, Renewals: l.renewals, Err: err}
}
