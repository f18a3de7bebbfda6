package seqleasetest

import (
	"sync"
	"time"
)

// DefaultStart is where a Clock made by Setup or New starts: a fixed instant,
// so that times a test prints or compares are the same on every run.
var DefaultStart = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is a clock that moves only when told to, for the memory backend
// (memory.Config.Now) and the Leaser (sequence.Config.Now): advancing it
// past a lease's expiry expires the lease at once, without sleeping. It is
// safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that reads start until it is moved. A zero start
// means DefaultStart.
func NewClock(start time.Time) *Clock {
	if start.IsZero() {
		start = DefaultStart
	}
	return &Clock{now: start.Round(0)}
}

// Now returns the clock's time. Pass it as memory.Config.Now and
// sequence.Config.Now.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and returns the new time. A negative
// d moves it back, which makes expired leases live again: a database clock
// never does that, so do it only to test exactly that.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set sets the clock to t. A t before the clock's time moves it back (see
// Advance).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.Round(0) // wall clock only, like every reading of this clock
}
