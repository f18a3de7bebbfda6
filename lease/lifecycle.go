package lease

import (
	"context"
	"log/slog"
	"sync"

	"github.com/seqlease/seqlease/store"
)

// lifecycle is the Manager's Start and Stop state, and the gate of its
// work: Run calls, acquire attempts and goroutines start only until Stop
// begins, and Stop waits for them in that order (the leases of the first
// two are released before the goroutines that renew them are ended).
type lifecycle struct {
	mu       sync.Mutex
	started  bool
	stopped  bool
	cancel   context.CancelCauseFunc // ends Start's goroutines
	ctx      context.Context         // ends (cause ErrStopped) when Stop begins
	endCtx   context.CancelCauseFunc
	loopCtx  context.Context // the parent of the keep-alive loops' contexts
	endLoops context.CancelCauseFunc

	runs       sync.WaitGroup // the calls of Run
	attempts   sync.WaitGroup // acquire attempts in flight
	goroutines sync.WaitGroup // the watch, maintenance and keep-alive loops, background releases and withdrawals
}

func newLifecycle() *lifecycle {
	lc := &lifecycle{}
	lc.ctx, lc.endCtx = context.WithCancelCause(context.Background())
	lc.loopCtx, lc.endLoops = context.WithCancelCause(context.Background())
	return lc
}

// enter counts one more piece of work in wg and returns true, unless Stop
// began: then it returns false and the work must not start.
func (lc *lifecycle) enter(wg *sync.WaitGroup) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.stopped {
		return false
	}
	wg.Add(1)
	return true
}

// goWork runs f in a goroutine Stop waits for and returns true, unless
// Stop began: then it returns false and f does not run.
func (lc *lifecycle) goWork(f func()) bool {
	if !lc.enter(&lc.goroutines) {
		return false
	}
	go func() {
		defer lc.goroutines.Done()
		f()
	}()
	return true
}

// stopping reports whether Stop began.
func (lc *lifecycle) stopping() bool { return lc.ctx.Err() != nil }

// done is closed when Stop begins.
func (lc *lifecycle) done() <-chan struct{} { return lc.ctx.Done() }

// Start starts the background work and returns: the watch of the backend's
// notices (releases wake blocked acquires at once; force-releases end kept-
// alive leases at once) and the maintenance loop (CleanupInterval). The
// goroutines run until Stop or until ctx ends. Start after Stop fails with
// ErrStopped; a second Start does nothing.
func (m *Manager) Start(ctx context.Context) error {
	lc := m.life
	lc.mu.Lock()
	defer lc.mu.Unlock()
	switch {
	case lc.stopped:
		return ErrStopped
	case lc.started:
		return nil
	}
	lc.started = true
	ctx, lc.cancel = context.WithCancelCause(ctx)
	m.watching.Store(true)
	lc.goroutines.Go(func() {
		err := m.store.WatchLeases(ctx, sink{m})
		m.watching.Store(false)
		if err != nil && ctx.Err() == nil {
			m.cfg.Logger.Error("lease: watch ended; blocked acquires fall back to polling", slog.Any("error", err))
		}
	})
	if m.cfg.CleanupInterval > 0 {
		lc.goroutines.Go(func() { m.maintain(ctx) })
	}
	return nil
}

// Stop shuts the Manager down gracefully: blocked acquires return
// ErrStopped, the functions of Run see their contexts end and Stop waits
// for them to return, the acquire attempts in flight are waited for (each
// bounded by its caller's context, or by Config.QueryTimeout when it shares
// a backend call: an attempt granted once Stop began releases its grant and
// fails with ErrStopped), every lease this Manager holds is released (each
// release bounded by Config.ReleaseTimeout; a lease whose release fails
// still ends here and expires in the backend), the keep-alive loops, the
// background goroutines and the backend calls shared by several callers
// are stopped and waited for, and every Subscription delivers its remaining
// events (for up to Config.ReleaseTimeout; what a subscriber has not
// received by then is dropped), closes its C, and its goroutine is waited
// for. The leases already over whose backend holding may outlive them (a
// renewal of unknown outcome, see Lease.Renew) are released too, or their
// releases in the background waited for. Once Stop returns, this Manager
// holds no lease in the backend but those whose release failed. It is safe
// before Start and twice.
func (m *Manager) Stop() {
	lc := m.life
	lc.mu.Lock()
	lc.stopped = true
	lc.endCtx(ErrStopped) // under mu: no lease, loop, run, attempt or withdrawal starts after this
	cancel := lc.cancel
	lc.mu.Unlock()

	lc.runs.Wait() // their functions return, then they release their leases
	if m.testHooks.drain != nil {
		m.testHooks.drain()
	}
	lc.attempts.Wait() // each returned its lease (live: released below) or released it
	var wg sync.WaitGroup
	for _, l := range m.holdings.allLive() {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ReleaseTimeout)
			defer cancel()
			if err := l.Close(ctx); err != nil {
				m.cfg.Logger.Warn("lease: release at stop failed; the lease will expire", slog.String("name", l.name), slog.Any("error", err))
			}
		})
	}
	wg.Wait()

	// The loops left are those of leases already over, one maybe still in
	// a backend call: end them.
	lc.endLoops(ErrStopped)
	if cancel != nil {
		cancel(ErrStopped)
	}
	lc.goroutines.Wait()
	m.calls.close()
	m.events.close()
}

// sink receives the backend's notices.
type sink struct{ m *Manager }

// Freed wakes the first waiter of name, and makes a kept-alive lease of this
// Manager on name renew now: if an operator force-released it, it learns so
// at once.
func (s sink) Freed(name string) {
	if s.m.testHooks.freed != nil {
		s.m.testHooks.freed(name)
	}
	s.m.queues.wakeHead(name)
	if l := s.m.holdings.get(name); l != nil {
		l.renewNow()
	}
}

// Wanted records the announcement of a waiter of another process.
func (s sink) Wanted(w store.LeaseWaiter) {
	s.m.queues.rivalAnnounced(w)
	if s.m.testHooks.wanted != nil && w.Waiter != s.m.cfg.Owner {
		s.m.testHooks.wanted(w)
	}
}

// Poll wakes every first waiter to try again: the backend's watch hears
// nothing (store.Poller), so a release may have gone unheard. Kept-alive
// leases renew at their own pace; a force-release is then learnt at the
// next renewal.
func (s sink) Poll() { s.m.queues.wakeHeads(false) }

// Reset wakes every first waiter and makes every kept-alive lease renew now:
// notices may have been missed.
func (s sink) Reset() {
	if s.m.testHooks.reset != nil {
		defer s.m.testHooks.reset()
	}
	s.m.queues.wakeHeads(true)
	for _, l := range s.m.holdings.latest() {
		l.renewNow()
	}
}
