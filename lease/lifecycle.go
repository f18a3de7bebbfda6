package lease

import (
	"context"
	"log/slog"
	"sync"

	"github.com/seqlease/seqlease/store"
)

// gate admits the Manager's work until Stop begins: Run calls, acquire
// attempts, and the goroutines of its leases (keep-alive loops, background
// releases and withdrawals), which run with or without Start. Stop waits
// for them in that order: the leases of the first two are released before
// the goroutines that renew them are ended.
type gate struct {
	mu       sync.Mutex
	ctx      context.Context // ends (cause ErrStopped) when Stop begins
	end      context.CancelCauseFunc
	loopCtx  context.Context // the parent of the keep-alive loops' contexts
	endLoops context.CancelCauseFunc

	runs       sync.WaitGroup // the calls of Run
	attempts   sync.WaitGroup // acquire attempts in flight
	goroutines sync.WaitGroup // keep-alive loops, background releases and withdrawals
}

func newGate() *gate {
	g := &gate{}
	g.ctx, g.end = context.WithCancelCause(context.Background())
	g.loopCtx, g.endLoops = context.WithCancelCause(context.Background())
	return g
}

// enter counts one more piece of work in wg and returns true, unless Stop
// began: then it returns false and the work must not start.
func (g *gate) enter(wg *sync.WaitGroup) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx.Err() != nil {
		return false
	}
	wg.Add(1)
	return true
}

// goWork runs f in a goroutine Stop waits for and returns true, unless
// Stop began: then it returns false and f does not run.
func (g *gate) goWork(f func()) bool {
	if !g.enter(&g.goroutines) {
		return false
	}
	go func() {
		defer g.goroutines.Done()
		f()
	}()
	return true
}

// close refuses new work: Stop began.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.end(ErrStopped)
}

// stopping reports whether Stop began.
func (g *gate) stopping() bool { return g.ctx.Err() != nil }

// done is closed when Stop begins.
func (g *gate) done() <-chan struct{} { return g.ctx.Done() }

// Start starts the background work and returns: the watch of the backend's
// notices (releases wake blocked acquires at once; force-releases end kept-
// alive leases at once) and the maintenance loop (CleanupInterval). The
// goroutines run until Stop or until ctx ends. Start after Stop fails with
// ErrStopped; a second Start does nothing.
func (m *Manager) Start(ctx context.Context) error {
	return m.services.Start(ctx, func(ctx context.Context) error {
		m.applySettings(ctx)
		if _, ok := m.settingsStore(); ok {
			m.services.Go(m.followSettings)
		}
		m.watching.Store(true)
		if !m.services.Go(m.watch) {
			m.watching.Store(false)
		}
		if m.cfg.CleanupInterval > 0 {
			m.services.Go(m.maintain)
		}
		return nil
	})
}

// watch runs the backend's watch of notices until ctx ends.
func (m *Manager) watch(ctx context.Context) {
	err := m.store.WatchLeases(ctx, sink{m})
	m.watching.Store(false)
	if err != nil && ctx.Err() == nil {
		m.cfg.Logger.Error("lease: watch ended; blocked acquires fall back to polling", slog.Any("error", err))
	}
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
// releases in the background waited for, and so are the grants of acquires
// of unknown outcome that it finds (see TryAcquire). Once Stop returns,
// this Manager holds no lease in the backend but those whose release
// failed. It is safe before Start and twice.
func (m *Manager) Stop() {
	m.services.Drain() // no Start from now on; the watch goes on while the leases are released
	m.gate.close()     // no lease, loop, run, attempt or withdrawal starts after this
	g := m.gate
	g.runs.Wait() // their functions return, then they release their leases
	if m.testHooks.drain != nil {
		m.testHooks.drain()
	}
	g.attempts.Wait() // each returned its lease (live: released below) or released it
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
	m.orphans.sweep() // the grants of acquires of unknown outcome nobody holds a Lease of

	// The loops left are those of leases already over, one maybe still in
	// a backend call: end them.
	g.endLoops(ErrStopped)
	m.services.Stop()
	g.goroutines.Wait()
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
	s.m.wakeSettings()
	for _, l := range s.m.holdings.latest() {
		l.renewNow()
	}
}
