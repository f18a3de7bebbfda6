package lease

import (
	"sync"
	"time"
)

// EventKind names a transition in the life of a lease.
type EventKind string

// The events of a lease. Every lease has one Acquired event first, then
// Renewed events, then exactly one end event: Released, Lost, Expired or
// ForceReleased.
const (
	Acquired      EventKind = "acquired"
	Renewed       EventKind = "renewed"
	Released      EventKind = "released"       // by its holder, or by Stop
	Lost          EventKind = "lost"           // ErrLost or ErrMaxRenewals
	Expired       EventKind = "expired"        // ErrExpired
	ForceReleased EventKind = "force-released" // ErrForceReleased
)

// Event is a transition of a lease of the Manager.
type Event struct {
	Kind  EventKind
	Name  string
	Owner string
	Fence int64
	// At is the backend's time of an Acquired or Renewed event; zero for the
	// end events, which the holder learns of on its own side.
	At        time.Time
	ExpiresAt time.Time // the expiry by the backend's clock, as last known
	Err       error     // for the end events, why (Lease.Err)
}

// Subscription receives the events of a Manager's leases, in the order they
// happened, each exactly once while it is open. Events queue without bound
// while the receiver is slow, so the loops that make them never wait for it
// and no transition is dropped; a goroutine of the Subscription, owned by
// the Manager, feeds them to C. It ends with Close, or with the Manager's
// Stop: Stop ends every lease first (their last events are queued), then
// gives the subscriptions up to Config.ReleaseTimeout to deliver what is
// queued, drops what is left after that (a receiver that stopped reading),
// closes every C and waits for every goroutine.
type Subscription struct {
	ch    chan Event
	ready chan struct{} // capacity 1: the queue grew or the subscription ends
	quit  chan struct{} // closed by Close
	done  chan struct{} // closed when the goroutine returned

	mu     sync.Mutex
	queue  []Event
	ending bool // deliver what is queued, then close C
	once   sync.Once
	m      *Manager
}

// Subscribe returns a new Subscription to every event of this Manager's
// leases from now on. Read C until it closes (after Stop), or call Close.
// After Stop, it returns a Subscription whose C is closed.
func (m *Manager) Subscribe() *Subscription {
	s := &Subscription{
		ch: make(chan Event), ready: make(chan struct{}, 1), quit: make(chan struct{}),
		done: make(chan struct{}), m: m,
	}
	m.subMu.Lock()
	defer m.subMu.Unlock()
	if m.ended {
		close(s.ch)
		close(s.done)
		return s
	}
	m.subs = append(m.subs, s)
	m.subWG.Add(1) // under subMu: Stop waits only after ended is set
	go func() {
		defer m.subWG.Done()
		s.run()
	}()
	return s
}

// C returns the channel of events. It is closed by Close, or by Stop once
// every queued event was delivered (or dropped: see Subscription).
func (s *Subscription) C() <-chan Event { return s.ch }

// Close ends the subscription at once: events not yet received are
// dropped, C is closed, and the subscription's goroutine is waited for. It
// is safe twice, and after Stop.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.m.subMu.Lock()
		for i, x := range s.m.subs {
			if x == s {
				s.m.subs = append(s.m.subs[:i:i], s.m.subs[i+1:]...)
				break
			}
		}
		s.m.subMu.Unlock()
		close(s.quit)
	})
	<-s.done
}

func (s *Subscription) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// add queues an event; it never blocks.
func (s *Subscription) add(e Event) {
	s.mu.Lock()
	s.queue = append(s.queue, e)
	s.mu.Unlock()
	s.signal()
}

// end makes the subscription close C after the queued events.
func (s *Subscription) end() {
	s.mu.Lock()
	s.ending = true
	s.mu.Unlock()
	s.signal()
}

func (s *Subscription) run() {
	defer close(s.done)
	defer close(s.ch)
	defer func() { // free what a receiver that stopped reading left queued
		s.mu.Lock()
		s.queue = nil
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		var e Event
		have := len(s.queue) > 0
		if have {
			e = s.queue[0]
			s.queue[0] = Event{}
			s.queue = s.queue[1:]
		}
		ending := s.ending
		s.mu.Unlock()
		switch {
		case have:
			select {
			case s.ch <- e:
			case <-s.quit:
				return
			case <-s.m.subDrop:
				return
			}
		case ending:
			return
		default:
			select {
			case <-s.ready:
			case <-s.quit:
				return
			}
		}
	}
}

// emit queues e for every subscriber. Callers that need their events in
// order hold the lease's lock.
func (m *Manager) emit(e Event) {
	m.subMu.Lock()
	defer m.subMu.Unlock()
	for _, s := range m.subs {
		s.add(e)
	}
}

// endSubscriptions makes every subscription close after its queued events
// and waits for their goroutines: up to Config.ReleaseTimeout for the
// events to be received, then it drops the rest.
func (m *Manager) endSubscriptions() {
	m.subMu.Lock()
	subs := m.subs
	m.subs = nil
	m.ended = true
	m.subMu.Unlock()
	for _, s := range subs {
		s.end()
	}
	done := make(chan struct{})
	go func() {
		m.subWG.Wait()
		close(done)
	}()
	t := time.NewTimer(m.releaseTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		close(m.subDrop)
		<-done
	}
}
