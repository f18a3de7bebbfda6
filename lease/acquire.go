package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/seqlease/seqlease/store"
)

// AcquireOpts are the options of an acquire. A nil *AcquireOpts means the
// defaults; so does the zero value of each field.
type AcquireOpts struct {
	// TTL is the lease duration, before the TTLPolicy has its say.
	// Default: Config.DefaultTTL, or what Config.AdaptiveTTL chooses.
	TTL time.Duration
	// MaxRenewals bounds the renewals of the holding; -1 means no limit.
	// Default: Config.MaxRenewals.
	MaxRenewals int
	// KeepAlive starts the keep-alive at once (see Lease.KeepAlive): the
	// lease is renewed in the background until released or lost.
	KeepAlive bool
	// Timeout bounds a blocking acquire (Acquire, AcquireAll, Hold): when
	// it passes, the call fails with ErrTimeout. Default: 0, wait until the
	// context ends.
	Timeout time.Duration
	// Kind is the class of the lease ("cleanup", "migration", "inbox") for
	// the Observer; never a per-entity name. Default: empty.
	Kind string
	// RenewShare is the share of the TTL after which the keep-alive renews
	// this lease, in (0, 1): leases of several cadences can share one
	// Manager (and so its ForceRelease and ListByOwner). Default:
	// Config.RenewShare.
	RenewShare float64
	// MaxJitter bounds the random delay added to each renewal of this
	// lease; it is capped at a tenth of the TTL. Default: Config.MaxJitter.
	MaxJitter time.Duration
}

// cadence is the renewal cadence of a lease: its AcquireOpts or the
// Manager's defaults.
type cadence struct {
	share  float64
	jitter time.Duration
}

// cadenceOf returns the cadence opts ask for.
func (m *Manager) cadenceOf(opts *AcquireOpts) cadence {
	return cadence{share: cmp.Or(opts.RenewShare, m.conf().RenewShare), jitter: cmp.Or(opts.MaxJitter, m.cfg.MaxJitter)}
}

// TTLPolicy chooses the TTL of an acquire: it is consulted before every
// attempt with the TTL asked for, and returns the one to use, which must be
// within (0, Config.MaxTTL]. A policy may, for example, shorten TTLs under
// high load, so that leases change hands more often.
type TTLPolicy interface {
	TTL(ctx context.Context, name string, requested time.Duration) time.Duration
}

// TTLPolicyFunc adapts a function to TTLPolicy.
type TTLPolicyFunc func(ctx context.Context, name string, requested time.Duration) time.Duration

// TTL implements TTLPolicy.
func (f TTLPolicyFunc) TTL(ctx context.Context, name string, requested time.Duration) time.Duration {
	return f(ctx, name, requested)
}

// checkOpts validates an acquire's name and options (all but the policy's
// verdict).
func (m *Manager) checkOpts(name string, opts *AcquireOpts) error {
	if err := store.ValidateLeaseName(name); err != nil {
		return err
	}
	if err := store.ValidateTTL(m.requestedTTL(opts), m.cfg.MaxTTL); err != nil {
		return err
	}
	if opts.MaxRenewals < -1 {
		return fmt.Errorf("%w: MaxRenewals %d, must be -1 or more", store.ErrInvalidCount, opts.MaxRenewals)
	}
	if opts.Timeout < 0 {
		return fmt.Errorf("%w: Timeout %v is negative", store.ErrInvalidTTL, opts.Timeout)
	}
	if !(opts.RenewShare >= 0 && opts.RenewShare < 1) { // NaN too; 0 is the default
		return fmt.Errorf("%w: AcquireOpts.RenewShare %v must be in (0, 1)", store.ErrInvalidArgument, opts.RenewShare)
	}
	if opts.MaxJitter < 0 {
		return fmt.Errorf("%w: AcquireOpts.MaxJitter %v is negative", store.ErrInvalidArgument, opts.MaxJitter)
	}
	return store.ValidateText("kind", opts.Kind)
}

// observeAcquire tells the observer an acquisition's outcome, and the
// subscribers a refusal (an error matching ErrHeld: the name was held
// throughout) of an acquire that began at since.
func (m *Manager) observeAcquire(ctx context.Context, name string, opts *AcquireOpts, since time.Time, err error) {
	if m.cfg.Observer != nil {
		m.cfg.Observer.Acquire(ctx, opts.Kind, err)
	}
	var held *HeldError
	if errors.As(err, &held) {
		m.events.emit(Event{Kind: Refused, Name: name, Owner: m.cfg.Owner, At: held.AsOf, ExpiresAt: held.ExpiresAt,
			Waited: m.cfg.Now().Sub(since), Err: err})
	}
}

// requestedTTL returns the TTL an acquire asks for: its own, or the one
// Config.AdaptiveTTL chooses now, or the DefaultTTL in force.
func (m *Manager) requestedTTL(opts *AcquireOpts) time.Duration {
	switch {
	case opts.TTL != 0:
		return opts.TTL
	case m.cfg.AdaptiveTTL != nil:
		return m.cfg.AdaptiveTTL.TTL()
	}
	return m.conf().DefaultTTL
}

// policyTTL returns the TTL the policy chooses for a request.
func (m *Manager) policyTTL(ctx context.Context, name string, requested time.Duration) (time.Duration, error) {
	if m.cfg.TTLPolicy == nil {
		return requested, nil
	}
	ttl := m.cfg.TTLPolicy.TTL(ctx, name, requested)
	if err := store.ValidateTTL(ttl, m.cfg.MaxTTL); err != nil {
		return 0, fmt.Errorf("TTLPolicy chose %v for %v: %w", ttl, requested, err)
	}
	return ttl, nil
}

// attempt makes one acquire attempt; with mark > 0 (a blocking acquire, see
// wantedFor), the backend marks the name wanted if it is held. Stop waits for
// the attempts in flight: one granted once Stop began releases its grant.
func (m *Manager) attempt(ctx context.Context, name string, opts *AcquireOpts, mark time.Duration, since time.Time) (*Lease, error) {
	if !m.gate.enter(&m.gate.attempts) {
		return nil, ErrStopped
	}
	defer m.gate.attempts.Done()
	ttl, err := m.policyTTL(ctx, name, m.requestedTTL(opts))
	if err != nil {
		return nil, err
	}
	maxRenewals := m.conf().MaxRenewals
	switch {
	case opts.MaxRenewals > 0:
		maxRenewals = opts.MaxRenewals
	case opts.MaxRenewals == -1:
		maxRenewals = 0
	}
	req := store.AcquireLeaseRequest{Name: name, Owner: m.cfg.Owner, TTL: ttl, MaxRenewals: maxRenewals, Wait: mark}
	m.orphans.begin(name)
	defer m.orphans.end(name) // after the grant is registered
	start := m.cfg.Now()
	g, unsure, err := m.calls.acquire(ctx, req)
	if unsure {
		// The grant may have been made: release it if it was (orphan.go).
		m.orphans.suspect(name, start, ttl)
		return nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	if err != nil {
		return nil, err
	}
	l := m.newLease(g, start, ttl, opts.Kind, m.cadenceOf(opts), since)
	// free releases the grant rather than leave it to the backend's expiry.
	free := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ReleaseTimeout)
		defer cancel()
		_ = l.Close(rctx)
	}
	if !m.register(l) {
		free()
		return nil, ErrStopped
	}
	if l.Remaining() <= 0 { // checked once registered: its timer may have fired before
		// The attempt outlasted the local deadline: the lease is over (or
		// about to be) as it arrives.
		if m.testHooks.late != nil {
			m.testHooks.late(name, g.Fence)
		}
		free()
		return nil, fmt.Errorf("%w: %s: %w (TTL %v)", ErrExpired, store.QuoteInput(name), errLateGrant, ttl)
	}
	if opts.KeepAlive {
		if err := l.KeepAlive(); err != nil {
			free() // over already, or the Manager stops
			return nil, err
		}
	}
	return l, nil
}

// errLateGrant is wrapped by the ErrExpired of an attempt whose grant came
// past its lease's local deadline (and was released).
var errLateGrant = errors.New("the attempt took longer than the TTL less the safety margin")

// register adds l to the Manager's holdings; false if the Manager is
// stopping.
func (m *Manager) register(l *Lease) bool {
	if m.gate.stopping() {
		return false
	}
	m.holdings.add(l)
	return true
}

// unregister removes l, which is over, from the leases that hold their
// names; it stays among the live leases until it is settled (retire).
func (m *Manager) unregister(l *Lease) {
	if m.holdings.drop(l) {
		m.queues.forgetRivals(l.name)
	}
}

// goReleaseAfterEnd runs l.releaseAfterEnd in the background, owned by m
// (Stop waits for it), and returns true; once Stop began, it returns false
// (Stop releases the live leases, l among them). l.mu must be held.
func (m *Manager) goReleaseAfterEnd(l *Lease) bool {
	l.cleaning = true
	if !m.gate.goWork(l.release) {
		l.cleaning = false
		return false
	}
	return true
}

// TryAcquire acquires name if it is free, and returns at once: a *HeldError
// (matching ErrHeld) tells who holds it otherwise. It does not wait behind
// the blocked Acquire calls of this process for the same name. An attempt
// that took longer than the TTL less the safety margin (a slow backend, a
// short TTL) would return a lease already over: it releases the grant and
// fails with an error matching ErrExpired instead.
//
// A failure that may have come after the backend granted the name (the
// answer lost with the connection, or ctx ended while the backend worked)
// matches ErrOutcomeUnknown. The name is not left blocked by a grant
// nobody holds a Lease of: the Manager looks for it in the background and
// releases it, fenced by its token (see "Acquires of unknown outcome" in
// the package doc). Try again to hold the name.
func (m *Manager) TryAcquire(ctx context.Context, name string, opts *AcquireOpts) (*Lease, error) {
	if opts == nil {
		opts = &AcquireOpts{}
	}
	if err := m.checkOpts(name, opts); err != nil {
		return nil, fmt.Errorf("lease: try acquire %s: %w", store.QuoteInput(name), err)
	}
	since := m.cfg.Now()
	l, err := m.attempt(ctx, name, opts, 0, since)
	m.observeAcquire(ctx, name, opts, since, err)
	if err != nil {
		return nil, fmt.Errorf("lease: try acquire %s: %w", store.QuoteInput(name), err)
	}
	return l, nil
}

// Acquire acquires name, waiting while others hold it, until it succeeds,
// ctx ends, opts.Timeout passes (ErrTimeout, wrapping the last *HeldError)
// or the Manager stops (ErrStopped). When ctx's own deadline ends the wait
// first, the error matches context.DeadlineExceeded and not ErrTimeout. An
// attempt that outlasted the lease's local deadline is retried.
//
// Waiters of this process queue per name: only the first one tries, so they
// get the name in the order they asked, and a release in this process hands
// it to the next at once. The first waiter is woken by the backend's notice
// of a release (Start must have been called), and otherwise polls (every
// Config.PollInterval, jittered, and at the holder's expiry). Transient
// errors are retried with backoff; bad input and store.ErrHistoryLost (the
// database lost the name's fences: see the backend) end the wait at once,
// the error unchanged. After an attempt of unknown outcome
// (ErrOutcomeUnknown), a grant it may have had is released rather than
// waited for, as TryAcquire's. With Config.DisableBlocking (lease.blocking
// = false) it is TryAcquire: a held name fails at once with its
// *HeldError.
func (m *Manager) Acquire(ctx context.Context, name string, opts *AcquireOpts) (*Lease, error) {
	if opts == nil {
		opts = &AcquireOpts{}
	}
	if err := m.checkOpts(name, opts); err != nil {
		return nil, fmt.Errorf("lease: acquire %s: %w", store.QuoteInput(name), err)
	}
	if m.conf().DisableBlocking {
		return m.TryAcquire(ctx, name, opts)
	}
	opts = m.withAcquireTimeout(opts)
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, opts.Timeout, errAcquireTimeout)
		defer cancel()
	}
	since := m.cfg.Now()
	l, err := m.waitAndAcquire(ctx, name, opts, since)
	err = timeoutError(ctx, opts.Timeout, err)
	m.observeAcquire(ctx, name, opts, since, err)
	if err != nil {
		return nil, fmt.Errorf("lease: acquire %s: %w", store.QuoteInput(name), err)
	}
	return l, nil
}

// Hold is Acquire with the keep-alive started: the runner of a name, for
// leader election and long jobs.
func (m *Manager) Hold(ctx context.Context, name string, opts *AcquireOpts) (*Lease, error) {
	o := AcquireOpts{}
	if opts != nil {
		o = *opts
	}
	o.KeepAlive = true
	return m.Acquire(ctx, name, &o)
}

// errAcquireTimeout is the cause of the end of a context bounded by
// AcquireOpts.Timeout, as opposed to a deadline of the caller's.
var errAcquireTimeout = errors.New("lease: AcquireOpts.Timeout passed")

// timeoutError turns the end of a context whose AcquireOpts.Timeout passed
// into ErrTimeout; a deadline of the caller's context stays what it is.
func timeoutError(ctx context.Context, timeout time.Duration, err error) error {
	if timeout <= 0 || !errors.Is(err, context.DeadlineExceeded) || context.Cause(ctx) != errAcquireTimeout {
		return err
	}
	return fmt.Errorf("%w after %v: %w", ErrTimeout, timeout, err)
}

// AcquireAll acquires every name, waiting as Acquire does, in sorted order
// (so that two callers asking for overlapping sets cannot deadlock), all or
// nothing: if one fails, the leases acquired so far are released, and so
// is the grant of the failed name's last attempt if its outcome was
// unknown and the grant is found by then (else it is released in the
// background, see TryAcquire), and the error returned. The leases come in
// sorted order. opts.Timeout bounds the whole call. Duplicate names are
// bad input.
//
// While it waits for a name, the leases it holds already are kept renewed
// (as by KeepAlive, each renewal counting toward MaxRenewals; without
// opts.KeepAlive, that stops when it returns), and if one of them ends all
// the same (lost, force-released, at its MaxRenewals), it stops waiting,
// releases the others and fails with that lease's error. It never returns
// a lease that is over. With Config.DisableBlocking it is TryAcquireAll.
func (m *Manager) AcquireAll(ctx context.Context, names []string, opts *AcquireOpts) ([]*Lease, error) {
	return m.acquireAll(ctx, names, opts, !m.conf().DisableBlocking)
}

// TryAcquireAll is AcquireAll without waiting: it fails with the *HeldError
// of the first name (in sorted order) that is held, having released the
// others.
func (m *Manager) TryAcquireAll(ctx context.Context, names []string, opts *AcquireOpts) ([]*Lease, error) {
	return m.acquireAll(ctx, names, opts, false)
}

func (m *Manager) acquireAll(ctx context.Context, names []string, opts *AcquireOpts, wait bool) ([]*Lease, error) {
	if opts == nil {
		opts = &AcquireOpts{}
	}
	sorted := slices.Sorted(slices.Values(names))
	if len(sorted) == 0 {
		return nil, fmt.Errorf("lease: acquire all: %w: no names", store.ErrInvalidCount)
	}
	for i, name := range sorted {
		if err := m.checkOpts(name, opts); err != nil {
			return nil, fmt.Errorf("lease: acquire all: %s: %w", store.QuoteInput(name), err)
		}
		if i > 0 && name == sorted[i-1] {
			return nil, fmt.Errorf("lease: acquire all: %w: %s twice", store.ErrInvalidLeaseName, store.QuoteInput(name))
		}
	}
	opts = m.withAcquireTimeout(opts)
	if opts.Timeout > 0 && wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, opts.Timeout, errAcquireTimeout)
		defer cancel()
	}
	out := make([]*Lease, 0, len(sorted))
	fail := func(name string, err error) ([]*Lease, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ReleaseTimeout)
		defer cancel()
		for _, got := range out {
			if rerr := got.Close(rctx); rerr != nil {
				m.cfg.Logger.Warn("lease: rollback of acquire all: release failed; the lease will expire", slog.String("name", got.name), slog.Any("error", rerr))
			}
		}
		m.orphans.check(rctx, name) // the grant of an attempt of unknown outcome, found by now
		return nil, fmt.Errorf("lease: acquire all: %s: %w", store.QuoteInput(name), err)
	}
	for i, name := range sorted {
		var l *Lease
		var err error
		since := m.cfg.Now()
		if wait {
			l, err = m.acquireNext(ctx, name, opts, out, since)
		} else {
			l, err = m.attempt(ctx, name, opts, 0, since)
		}
		err = timeoutError(ctx, opts.Timeout, err)
		m.observeAcquire(ctx, name, opts, since, err)
		if err != nil {
			return fail(name, err)
		}
		out = append(out, l)
		if wait && !opts.KeepAlive && i < len(sorted)-1 {
			// Renewed while the next names are awaited (see dropKeepAlive).
			if err := l.KeepAlive(); err != nil {
				return fail(name, err)
			}
		}
	}
	if !opts.KeepAlive {
		for _, l := range out {
			l.dropKeepAlive()
		}
	}
	for _, l := range out {
		if l.Remaining() <= 0 {
			l.onDeadline() // passed, its timer not yet fired
		}
		if err := l.Err(); err != nil {
			return fail(l.name, fmt.Errorf("ended before every name was acquired: %w", err))
		}
	}
	return out, nil
}

// acquireNext is the blocking acquire of AcquireAll's next name, which gives
// up when one of the leases it acquired already (got) ends: it fails with
// that lease's error.
func (m *Manager) acquireNext(ctx context.Context, name string, opts *AcquireOpts, got []*Lease, since time.Time) (*Lease, error) {
	if len(got) == 0 {
		return m.waitAndAcquire(ctx, name, opts, since)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, g := range got {
		gctx := g.Context()
		stop := context.AfterFunc(gctx, func() {
			cancel(fmt.Errorf("%s ended while %s was awaited: %w", store.QuoteInput(g.name), store.QuoteInput(name), context.Cause(gctx)))
		})
		defer stop()
	}
	l, err := m.waitAndAcquire(wctx, name, opts, since)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return nil, context.Cause(wctx)
	}
	return l, err
}
