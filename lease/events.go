package lease

import (
	"sync"
	"time"
)

// EventKind names a transition in the life of a lease.
type EventKind string

// The events of a lease. Every lease has one Acquired event first, then
// Renewed events, then exactly one end event: Released, Lost, Expired or
// ForceReleased. Refused is no lease's: an acquire that did not get its
// name.
const (
	Acquired      EventKind = "acquired"
	Renewed       EventKind = "renewed"
	Released      EventKind = "released"       // by its holder, or by Stop
	Lost          EventKind = "lost"           // ErrLost or ErrMaxRenewals
	Expired       EventKind = "expired"        // ErrExpired
	ForceReleased EventKind = "force-released" // ErrForceReleased
	// Refused is an acquire of this Manager that failed because another
	// holding held the name throughout: a TryAcquire (or TryAcquireAll)
	// that found it held, a blocking acquire whose AcquireOpts.Timeout
	// passed (ErrTimeout) or whose context ended while it waited. Err
	// wraps the *HeldError of the holder last seen; At is when it was seen
	// held and ExpiresAt its expiry, by the backend's clock; Fence is 0.
	// Acquires that failed for another reason (bad input, a backend
	// error, Stop) send no event.
	Refused EventKind = "refused"
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
	// Waited is, for Acquired, how long the acquire took, its wait behind
	// other holders included (by the local clock, from the call to the
	// grant), and the same for every later event of the lease; for
	// Refused, how long the acquire tried before it gave up.
	Waited time.Duration
	// Renewals is the holding's renewal count when the event happened:
	// 0 for Acquired, n for its n-th Renewed.
	Renewals int
	Err      error // for the end events, why (Lease.Err); for Refused, the acquire's error
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
	relay  *relay
}

// relay hands the events of a Manager's leases to its subscriptions. Its
// emit never blocks; close ends every subscription (Stop).
type relay struct {
	grace time.Duration // how long close waits for slow receivers: Config.ReleaseTimeout

	mu     sync.Mutex
	subs   []*Subscription
	closed bool           // close ended the subscriptions
	wg     sync.WaitGroup // the subscriptions' goroutines; Add under mu, before closed
	drop   chan struct{}  // closed when close stops waiting for slow receivers
}

func newRelay(grace time.Duration) *relay {
	return &relay{grace: grace, drop: make(chan struct{})}
}

// Subscribe returns a new Subscription to every event of this Manager's
// leases from now on. Read C until it closes (after Stop), or call Close.
// After Stop, it returns a Subscription whose C is closed.
func (m *Manager) Subscribe() *Subscription { return m.events.subscribe() }

func (r *relay) subscribe() *Subscription {
	s := &Subscription{
		ch: make(chan Event), ready: make(chan struct{}, 1), quit: make(chan struct{}),
		done: make(chan struct{}), relay: r,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		close(s.ch)
		close(s.done)
		return s
	}
	r.subs = append(r.subs, s)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
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
		r := s.relay
		r.mu.Lock()
		for i, x := range r.subs {
			if x == s {
				r.subs = append(r.subs[:i:i], r.subs[i+1:]...)
				break
			}
		}
		r.mu.Unlock()
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
			case <-s.relay.drop:
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
func (r *relay) emit(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.subs {
		s.add(e)
	}
}

// close makes every subscription close after its queued events and waits
// for their goroutines: up to r.grace for the events to be received, then
// it drops the rest.
func (r *relay) close() {
	r.mu.Lock()
	subs := r.subs
	r.subs = nil
	r.closed = true
	r.mu.Unlock()
	for _, s := range subs {
		s.end()
	}
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(r.grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		close(r.drop)
		<-done
	}
}
