package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// orphans are the acquires of this Manager whose outcome is unknown (see
// "Acquires of unknown outcome" in doc.go): a failure that may have come
// after the backend granted the name, so that a holding of this Manager's
// Owner may stand that no Lease handle knows of, blocking the name for its
// TTL, this Manager's own acquires too. It looks for such a holding (an
// orphan) and releases it, fenced by its token, without ever touching a
// holding this Manager has a handle on or may be about to get one for.
type orphans struct {
	m *Manager

	mu       sync.Mutex
	trying   map[string]int      // acquire attempts in flight, by name: from before the call until the grant is registered
	suspects map[string]*suspect // names whose acquire had an unknown outcome
}

// suspect is a name that an acquire of unknown outcome may have granted.
type suspect struct {
	sent  time.Time     // local: when the earliest such acquire was sent
	until time.Time     // local: when to stop looking (the TTL of the last one after its failure)
	kick  chan struct{} // capacity 1: look now
}

func newOrphans(m *Manager) *orphans {
	return &orphans{m: m, trying: map[string]int{}, suspects: map[string]*suspect{}}
}

// outcomeUnknown reports whether an acquire that failed with err may have
// been granted all the same: err is neither a refusal (a *HeldError, a
// read-only server), nor bad input, nor a call that was not sent.
func outcomeUnknown(err error) bool {
	return err != nil && !errors.Is(err, ErrHeld) && !store.IsInvalid(err) &&
		!errors.Is(err, store.ErrNotSent) && !errors.Is(err, store.ErrReadOnly)
}

// begin counts an acquire attempt of name in flight; end, once its grant
// is registered (or released, or the attempt failed).
func (o *orphans) begin(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.trying[name]++
}

func (o *orphans) end(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.trying[name]--; o.trying[name] == 0 {
		delete(o.trying, name)
	}
}

// suspect records that an acquire of name for ttl, sent at sent (local),
// failed with its outcome unknown, and has the name looked at now and
// then in the background (watch) until ttl has passed.
func (o *orphans) suspect(name string, sent time.Time, ttl time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	until := o.m.cfg.Now().Add(ttl)
	s := o.suspects[name]
	if s != nil {
		if sent.Before(s.sent) {
			s.sent = sent
		}
		if until.After(s.until) {
			s.until = until
		}
		select {
		case s.kick <- struct{}{}:
		default:
		}
		return
	}
	s = &suspect{sent: sent, until: until, kick: make(chan struct{}, 1)}
	o.suspects[name] = s
	// Once Stop began, Stop looks at every suspect itself (sweep).
	o.m.gate.goWork(func() { o.watch(name, s) })
}

// watch looks for an orphan of name at once, then with pauses that double
// from PollInterval (a statement whose answer was lost may still be
// running in the backend), until the suspect's time is up or Stop begins.
func (o *orphans) watch(name string, s *suspect) {
	var pause time.Duration
	for {
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-s.kick:
			t.Stop()
		case <-o.m.gate.done():
			t.Stop()
			return
		}
		o.check(o.m.gate.ctx, name)
		o.mu.Lock()
		left := s.until.Sub(o.m.cfg.Now())
		if left <= 0 {
			delete(o.suspects, name)
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		pause = min(max(2*pause, o.m.cfg.PollInterval), time.Minute, left)
	}
}

// check looks for an orphan of name and releases it, fenced by its token;
// it reports whether it released one. An orphan is a live holding of this
// Manager's Owner, if an acquire of name had an unknown outcome, that such
// an acquire could have been granted: acquired after the earliest of them
// was sent (to within the read's return trip), never renewed, and neither
// the holding of a lease of this Manager nor one an attempt in flight may
// be about to return.
func (o *orphans) check(ctx context.Context, name string) bool {
	o.mu.Lock()
	s := o.suspects[name]
	var sent time.Time
	if s != nil {
		sent = s.sent
	}
	o.mu.Unlock()
	if s == nil {
		return false
	}
	qctx, cancel := o.m.queryContext(ctx)
	g, err := o.m.store.GetLease(qctx, name, nil)
	cancel()
	// The backend read its clock (AsOf) at most this long after the
	// acquire was sent: a holding acquired before that was not its grant.
	since := o.m.cfg.Now().Sub(sent)
	if err != nil || !g.Held() || g.Owner != o.m.cfg.Owner {
		return false
	}
	orphan := g.Renewals == 0 && !g.AcquiredAt.Before(g.AsOf.Add(-since))
	if orphan {
		// In this order: an attempt that returned the grant registered
		// its lease before it stopped counting as in flight.
		o.mu.Lock()
		busy := o.trying[name] > 0
		o.mu.Unlock()
		orphan = !busy && !o.m.holdings.has(name, g.Fence)
	}
	if !orphan {
		if o.m.testHooks.orphan != nil {
			o.m.testHooks.orphan(name, g.Fence, false)
		}
		return false
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.m.cfg.ReleaseTimeout)
	defer cancel()
	err = o.m.calls.release(rctx, store.LeaseHolding{Name: name, Owner: g.Owner, Fence: g.Fence})
	if err != nil && !errors.Is(err, ErrReleased) {
		o.m.cfg.Logger.Warn("lease: release of the grant of an acquire of unknown outcome failed; it will expire",
			slog.String("name", name), slog.Int64("fence", g.Fence), slog.Any("error", err))
		return false
	}
	o.m.cfg.Logger.Info("lease: released the grant of an acquire of unknown outcome", slog.String("name", name), slog.Int64("fence", g.Fence))
	if o.m.testHooks.orphan != nil {
		o.m.testHooks.orphan(name, g.Fence, true)
	}
	o.m.queues.wakeHead(name)
	return true
}

// sweep looks at every suspect once more, for Stop: the attempts are over
// and the leases released, so an orphan left now would outlive the
// Manager.
func (o *orphans) sweep() {
	o.mu.Lock()
	names := make([]string, 0, len(o.suspects))
	for name := range o.suspects {
		names = append(names, name)
	}
	o.mu.Unlock()
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), o.m.cfg.ReleaseTimeout)
			defer cancel()
			o.check(ctx, name)
		})
	}
	wg.Wait()
}
