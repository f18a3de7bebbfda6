package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/seqlease/seqlease/store"
)

// How long an announcement of a waiter lasts (see "Waiting and fairness" in
// doc.go).
const (
	// announceRefresh is how often a waiting head repeats its announcement.
	announceRefresh = 3 * time.Second
	// announceTTL is how long an announcement counts without a refresh
	// (the backend shows it to operators as long: ListLeaseWaiters).
	announceTTL = store.LeaseWaiterTTL
)

// queues are the blocked acquires of this process, one queue per name in
// the order they asked, and the waiters of other processes for the same
// names, as they announced themselves (rivals). Only the head of a queue
// tries to acquire; it yields to a rival that asked earlier, for at most
// Config.HandoffGrace. See "Waiting and fairness" in doc.go.
type queues struct {
	m *Manager // settings, the backend, the holdings and the lifecycle

	mu     sync.Mutex
	byName map[string]*queue
	rivals map[string]map[string]*rival // name -> owner -> its waiter
	// A reading of the backend's clock (from the last *HeldError) and the
	// local time it was taken at: they turn local times into backend times.
	clockDB, clockLocal time.Time
}

// queue is the waiters of a name in this process, head first, and what the
// head announced to other processes.
type queue struct {
	waiters     []*waiter
	announcedAt time.Time // local: when the head last announced; zero: nothing out
	announced   time.Time // the backend time of asking it announced
	reannounce  bool      // a newcomer announced itself, or notices were missed
	yielding    bool      // the head yields to a rival
}

// waiter is one blocked acquire.
type waiter struct {
	woken     chan struct{} // capacity 1
	asked     time.Time     // local: when the acquire began
	askedDB   time.Time     // asked by the backend's clock; zero until known (askedAt)
	foundHeld bool          // it found the name held at least once (queues.mu)
}

// rival is a waiter of another process for a name, as it announced itself.
type rival struct {
	asked      time.Time // by the backend's clock: when its acquire began
	fence      int64     // the last holding of the name it saw
	heardAt    time.Time // local: when the announcement arrived
	yieldSince time.Time // local: when a head here began to yield to it
	passed     bool      // yielded to for a full grace, and it did not take the name
}

func newQueues(m *Manager) *queues {
	return &queues{m: m, byName: map[string]*queue{}, rivals: map[string]map[string]*rival{}}
}

// heldWaitError is the error of a wait that ended while the name was held:
// the context's error and the last *HeldError seen.
type heldWaitError struct {
	ctxErr error
	held   *HeldError
}

func (e *heldWaitError) Error() string   { return fmt.Sprintf("%v (last seen: %v)", e.ctxErr, e.held) }
func (e *heldWaitError) Unwrap() []error { return []error{e.ctxErr, e.held} }

// waitAndAcquire is the wait loop of a blocking acquire: it queues for
// name, waits for its turn, and tries until it wins. since is when the
// acquire began (Event.Waited).
func (m *Manager) waitAndAcquire(ctx context.Context, name string, opts *AcquireOpts, since time.Time) (*Lease, error) {
	w := m.queues.join(name)
	acquired := false
	defer func() { m.queues.leave(name, w, acquired) }()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 10 * time.Millisecond
	bo.MaxInterval = max(m.cfg.PollInterval, bo.InitialInterval)
	bo.MaxElapsedTime = 0
	var lastHeld *HeldError
	ended := func(err error) error {
		if lastHeld != nil && ctx.Err() != nil {
			return &heldWaitError{ctxErr: err, held: lastHeld}
		}
		return err
	}
	for {
		if err := m.queues.waitTurn(ctx, name, w); err != nil {
			return nil, ended(err)
		}
		before := m.cfg.Now()
		mark := m.wantedFor(name)
		l, err := m.attempt(ctx, name, opts, mark, since)
		if err == nil {
			acquired = true
			m.queues.headAcquired(name)
			return l, nil
		}
		after := m.cfg.Now()
		var held *HeldError
		var pause time.Duration
		switch {
		case errors.As(err, &held) && held.Owner == m.cfg.Owner && m.orphans.check(ctx, name):
			// Held by the grant of an acquire of this Manager whose outcome
			// was unknown, now released: try again at once.
			w.drain()
			pause = 0
		case errors.As(err, &held):
			lastHeld = held
			pause = min(m.jitteredPoll(), held.Remaining()+time.Millisecond)
			// The backend read its clock about halfway through the attempt.
			if next := m.queues.headFoundHeld(ctx, name, w, held, before.Add(after.Sub(before)/2)); next > 0 {
				pause = min(pause, next) // refresh the announcement in time
			}
			if mark == 0 && m.wantedFor(name) > 0 {
				pause = 0 // the lease of this Manager it did not mark for is gone: try again, marking
			}
			bo.Reset()
			if m.testHooks.paused != nil {
				m.testHooks.paused(name)
			}
		case errors.Is(err, ErrStopped), store.IsInvalid(err), errors.Is(err, store.ErrHistoryLost), ctx.Err() != nil:
			return nil, ended(err)
		default:
			if errors.Is(err, errLateGrant) {
				// Releasing the late grant woke w, the first waiter: that
				// is no news of the name, and the retry waits its pause.
				w.drain()
			}
			pause = bo.NextBackOff()
			m.cfg.Logger.Warn("lease: acquire failed, retrying", slog.String("name", name), slog.Any("error", err), slog.Duration("pause", pause))
		}
		if err := m.pause(ctx, w, pause); err != nil {
			return nil, ended(err)
		}
	}
}

// wantedFor returns how long a blocked acquire of name asks the backend to
// keep the name marked wanted when it finds it held (so that its release
// notifies: store.AcquireLeaseParams.Wait): longer than the longest pause
// before the first waiter tries again (a jittered poll, a hand-off grace,
// a round trip). Zero, no mark, when nobody would hear the notice (the
// watch does not run) or when this Manager holds the name: its release
// wakes this process's waiters itself.
func (m *Manager) wantedFor(name string) time.Duration {
	if !m.watching.Load() {
		return 0
	}
	if m.holdings.get(name) != nil {
		return 0
	}
	poll := min(m.cfg.PollInterval, store.MaxTTL)
	return min(poll+poll/5+min(m.cfg.HandoffGrace, store.MaxTTL)+time.Second, store.MaxTTL)
}

// jitteredPoll returns the poll interval ±20%.
func (m *Manager) jitteredPoll() time.Duration {
	spread := m.cfg.PollInterval / 5
	if spread <= 0 {
		return m.cfg.PollInterval
	}
	return m.cfg.PollInterval - spread + rand.N(2*spread+1)
}

// pause waits d, or until w is woken, ctx ends or the Manager stops.
func (m *Manager) pause(ctx context.Context, w *waiter, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.woken:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.gate.done():
		return ErrStopped
	}
}

// wake wakes w, unless a wake-up is pending.
func (w *waiter) wake() {
	select {
	case w.woken <- struct{}{}:
	default:
	}
}

// drain takes back a wake-up of w that is not acted on.
func (w *waiter) drain() {
	select {
	case <-w.woken:
	default:
	}
}

// servedFirst reports whether a waiter of owner x that asked at a comes
// before one of owner y that asked at b: the earlier, and on a tie the
// smaller owner.
func servedFirst(a time.Time, x string, b time.Time, y string) bool {
	if c := a.Compare(b); c != 0 {
		return c < 0
	}
	return x < y
}

// join queues a new waiter for name.
func (qs *queues) join(name string) *waiter {
	w := &waiter{woken: make(chan struct{}, 1), asked: qs.m.cfg.Now()}
	qs.mu.Lock()
	q := qs.byName[name]
	if q == nil {
		q = &queue{}
		qs.byName[name] = q
	}
	q.waiters = append(q.waiters, w)
	n := len(q.waiters)
	qs.mu.Unlock()
	if qs.m.testHooks.waiting != nil {
		qs.m.testHooks.waiting(name, n)
	}
	return w
}

// leave removes w from the queue of name and wakes the next waiter. When
// the queue empties because w gave up, this process's announcement for
// name is withdrawn, in the background (see withdraw; Stop ends it); when w
// acquired the name, the others learn it from the name's holding (see
// readHolder).
func (qs *queues) leave(name string, w *waiter, acquired bool) {
	qs.mu.Lock()
	q := qs.byName[name]
	i := slices.Index(q.waiters, w)
	q.waiters = slices.Delete(q.waiters, i, i+1)
	withdraw, announcedAt := false, q.announcedAt
	switch {
	case len(q.waiters) == 0:
		delete(qs.byName, name)
		qs.forgetRivalsLocked(name)
		withdraw = !acquired && !announcedAt.IsZero()
	case i == 0:
		q.yielding = false
		q.waiters[0].wake()
	}
	qs.mu.Unlock()
	// In the background, so that the caller returns at once (its timeout
	// passed, or its context ended); Stop ends it.
	if withdraw {
		qs.m.gate.goWork(func() { qs.withdraw(name, announcedAt) })
	}
}

// withdraw withdraws this process's announcement for name, made at
// announcedAt (local), whose last waiter gave up. A new waiter of name may
// have come since (the caller tried again at once), and its announcement
// must not be undone by the withdrawal arriving after it: the others would
// forget it. So the withdrawal is not sent when a queue of name exists (its
// head announces anew, or withdraws, in its turn: it takes the
// announcement over), and a head that announced while the withdrawal was
// out announces again (as after missed notices) once the withdrawal is
// through.
func (qs *queues) withdraw(name string, announcedAt time.Time) {
	qs.mu.Lock()
	if q := qs.byName[name]; q != nil {
		if q.announcedAt.IsZero() {
			q.announcedAt = announcedAt // so that it announces when it waits, or withdraws
		}
		qs.mu.Unlock()
		return
	}
	qs.mu.Unlock()
	qs.announce(qs.m.gate.ctx, store.LeaseWaiter{Name: name, Waiter: qs.m.cfg.Owner})
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.byName[name]; q != nil && !q.announcedAt.IsZero() {
		q.reannounce = true
		q.waiters[0].wake()
	}
}

// waitTurn waits until w is the head of name and no older rival is being
// given its turn (HandoffGrace). Before it yields, and whenever it is woken
// while it does, it reads the name's holder: a rival seen holding it since
// it announced itself got its turn.
func (qs *queues) waitTurn(ctx context.Context, name string, w *waiter) error {
	read := true
	for {
		qs.mu.Lock()
		q := qs.byName[name]
		head := q.waiters[0] == w
		var yield time.Duration
		if head {
			yield = qs.yieldLocked(name, w)
		}
		if yield > 0 && read {
			qs.mu.Unlock()
			read = false
			qs.readHolder(ctx, name)
			continue
		}
		began := yield > 0 && !q.yielding
		if head {
			q.yielding = yield > 0
		}
		qs.mu.Unlock()
		if head && yield <= 0 {
			return nil
		}
		if began && qs.m.testHooks.holding != nil {
			qs.m.testHooks.holding(name)
		}
		woken, err := qs.sleep(ctx, w, head, yield)
		if err != nil {
			return err
		}
		read = read || woken
	}
}

// sleep waits until w is woken (true), the head's yield passes, ctx ends
// or Stop begins.
func (qs *queues) sleep(ctx context.Context, w *waiter, head bool, yield time.Duration) (bool, error) {
	var timeout <-chan time.Time
	if head {
		t := time.NewTimer(yield)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-w.woken:
		return true, nil
	case <-timeout:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-qs.m.gate.done():
		return false, ErrStopped
	}
}

// yieldLocked returns how long the head w of name must still yield to
// older rivals. A head that has not yet found the name held (it just came
// first in this process's queue, most often because the waiter before it
// took the name) tries at once.
func (qs *queues) yieldLocked(name string, w *waiter) time.Duration {
	rs := qs.rivals[name]
	if len(rs) == 0 || !w.foundHeld {
		return 0
	}
	asked, ok := qs.askedAtLocked(w)
	if !ok {
		return 0
	}
	now := qs.m.cfg.Now()
	var yield time.Duration
	for owner, r := range rs {
		switch {
		case now.Sub(r.heardAt) > announceTTL:
			delete(rs, owner)
			continue
		case r.passed || !servedFirst(r.asked, owner, asked, qs.m.cfg.Owner):
			continue
		}
		if r.yieldSince.IsZero() {
			r.yieldSince = now
		}
		yield = max(yield, r.yieldSince.Add(qs.m.cfg.HandoffGrace).Sub(now))
	}
	return yield
}

// askedAtLocked returns when w asked by the backend's clock, estimated from
// the last clock reading; false before any.
func (qs *queues) askedAtLocked(w *waiter) (time.Time, bool) {
	if w.askedDB.IsZero() && !qs.clockLocal.IsZero() {
		w.askedDB = qs.clockDB.Add(w.asked.Sub(qs.clockLocal))
	}
	return w.askedDB, !w.askedDB.IsZero()
}

// headAcquired is called when the head of name acquired it: the rivals it
// yielded to for a full grace did not take it, so they are passed over
// until they announce anew.
func (qs *queues) headAcquired(name string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for _, r := range qs.rivals[name] {
		if !r.yieldSince.IsZero() {
			r.passed, r.yieldSince = true, time.Time{}
		}
	}
}

// headFoundHeld is called when the head w of name found it held, at (local):
// it keeps the backend clock's reading, forgets the rival that got its
// turn, and announces w when due. It returns how long w may wait before it
// must announce again (0: no announcement out).
func (qs *queues) headFoundHeld(ctx context.Context, name string, w *waiter, held *HeldError, at time.Time) time.Duration {
	qs.mu.Lock()
	qs.clockDB, qs.clockLocal = held.AsOf, at
	rs := qs.rivals[name]
	if r := rs[held.Owner]; r != nil && r.fence < held.Fence {
		delete(rs, held.Owner) // it got its turn
	}
	for _, r := range rs {
		r.yieldSince = time.Time{} // the name was not free: the grace tested nothing
	}
	w.foundHeld = true
	q := qs.byName[name]
	asked, _ := qs.askedAtLocked(w)
	var due bool
	if q.announcedAt.IsZero() {
		due = held.Owner != qs.m.cfg.Owner || len(rs) > 0
	} else {
		due = q.reannounce || !q.announced.Equal(asked) || at.Sub(q.announcedAt) >= announceRefresh
	}
	if due {
		q.announcedAt, q.announced, q.reannounce = at, asked, false
	}
	next := time.Duration(0)
	if !q.announcedAt.IsZero() {
		next = max(q.announcedAt.Add(announceRefresh).Sub(at), time.Millisecond)
	}
	qs.mu.Unlock()
	if due {
		qs.announce(ctx, store.LeaseWaiter{Name: name, Waiter: qs.m.cfg.Owner, Since: asked, Fence: held.Fence})
	}
	return next
}

// readHolder reads the holding of name (a plain read) and forgets the rival
// it shows got its turn: the current or last holder, if it holds or held
// the name with a larger fence than it announced.
func (qs *queues) readHolder(ctx context.Context, name string) {
	qctx, cancel := qs.m.queryContext(ctx)
	defer cancel()
	g, err := qs.m.store.GetLease(qctx, name, nil)
	if err != nil {
		return // the yield goes on; the next read tells
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if r := qs.rivals[name][g.Owner]; r != nil && r.fence < g.Fence {
		delete(qs.rivals[name], g.Owner)
	}
}

// announce sends an announcement (or a withdrawal), best effort.
func (qs *queues) announce(ctx context.Context, w store.LeaseWaiter) {
	actx, cancel := qs.m.queryContext(ctx)
	defer cancel()
	if err := qs.m.store.AnnounceLeaseWaiter(actx, w); err != nil && ctx.Err() == nil {
		qs.m.cfg.Logger.Warn("lease: announcing a waiter failed", slog.String("name", w.Name), slog.Any("error", err))
	}
}

// rivalAnnounced records another process's announcement, if this process
// holds or waits for the name, and wakes the head when that may change its
// course.
func (qs *queues) rivalAnnounced(w store.LeaseWaiter) {
	if w.Waiter == qs.m.cfg.Owner {
		return
	}
	qs.mu.Lock()
	q := qs.byName[w.Name]
	if q == nil && qs.m.holdings.get(w.Name) == nil {
		qs.mu.Unlock()
		return
	}
	rs := qs.rivals[w.Name]
	var wake bool
	switch r := rs[w.Waiter]; {
	case w.Withdrawn():
		delete(rs, w.Waiter)
		if len(rs) == 0 {
			delete(qs.rivals, w.Name)
		}
		wake = r != nil && q != nil && q.yielding
	default:
		now := qs.m.cfg.Now()
		if rs == nil {
			rs = map[string]*rival{}
			qs.rivals[w.Name] = rs
		}
		for owner, x := range rs {
			if now.Sub(x.heardAt) > announceTTL {
				delete(rs, owner)
			}
		}
		n := &rival{asked: w.Since, fence: w.Fence, heardAt: now}
		if r != nil && r.asked.Equal(w.Since) {
			n.yieldSince = r.yieldSince // a refresh: the grace goes on
		}
		rs[w.Waiter] = n
		if q != nil {
			if r == nil && !q.announcedAt.IsZero() {
				q.reannounce = true // a newcomer: tell it about this process's head
			}
			wake = q.reannounce || q.yielding
		}
	}
	var head *waiter
	if wake {
		head = q.waiters[0]
	}
	qs.mu.Unlock()
	if head != nil {
		head.wake()
	}
}

// forgetRivals drops the rivals of name once this process neither holds nor
// waits for it.
func (qs *queues) forgetRivals(name string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.forgetRivalsLocked(name)
}

func (qs *queues) forgetRivalsLocked(name string) {
	if qs.byName[name] == nil && qs.m.holdings.get(name) == nil {
		delete(qs.rivals, name)
	}
}

// wakeHead wakes the head of name, if any.
func (qs *queues) wakeHead(name string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.byName[name]; q != nil {
		q.waiters[0].wake()
	}
}

// wakeHeads wakes the head of every name to try again, as a notice of a
// release would have. With reannounce (notices may have been missed), the
// heads that announced themselves announce again.
func (qs *queues) wakeHeads(reannounce bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for _, q := range qs.byName {
		if reannounce {
			q.reannounce = !q.announcedAt.IsZero()
		}
		q.waiters[0].wake()
	}
}

// rivalCount returns how many announcements of other processes' waiters
// are kept.
func (qs *queues) rivalCount() int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	n := 0
	for _, rs := range qs.rivals {
		n += len(rs)
	}
	return n
}
