package cleanup

import (
	"context"
	"slices"
	"sync"
	"time"
)

// minRecheck is the least time before a deferred stream is walked again at
// its blocking lease's expiry, so that a clock estimate a little off cannot
// make the loop spin.
const minRecheck = 5 * time.Millisecond

// wake keeps the streams whose expired leases wait behind a live earlier
// lease (the ordering rule), and tells the loop when to walk them again: a
// kick when the Waiter says the blocking lease resolved, a deadline at its
// expiry.
type wake struct {
	kicks chan struct{} // capacity 1: the loop has streams to walk

	mu       sync.Mutex
	ctx      context.Context // the loop's, while it runs; nil otherwise
	kicked   map[string]bool
	deferred map[string]*deferral
	wg       sync.WaitGroup // the waiters' goroutines
}

// deferral is one stream waiting behind its live lease blocker.
type deferral struct {
	blocker  int64
	deadline time.Time     // walk again then (the blocker's expiry); zero: taken
	stop     chan struct{} // ends the Waiter's goroutine; nil without one
}

func (w *wake) init() {
	w.kicks = make(chan struct{}, 1)
	w.kicked = map[string]bool{}
	w.deferred = map[string]*deferral{}
}

// open starts keeping deferrals for the loop running under ctx.
func (w *wake) open(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctx = ctx
}

// close forgets every deferral and waits for the waiters' goroutines; the
// loop's context has ended.
func (w *wake) close() {
	w.mu.Lock()
	w.ctx = nil
	for s, d := range w.deferred {
		d.end()
		delete(w.deferred, s)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

func (d *deferral) end() {
	if d.stop != nil {
		close(d.stop)
		d.stop = nil
	}
}

// kick asks the loop to walk stream now.
func (w *wake) kick(stream string) {
	w.mu.Lock()
	w.kicked[stream] = true
	w.mu.Unlock()
	w.poke()
}

// poke wakes the loop, which walks the streams due and re-arms its timer.
func (w *wake) poke() {
	select {
	case w.kicks <- struct{}{}:
	default:
	}
}

// hold notes that stream waits behind its live lease blocker, to be walked
// again at deadline or, with a Waiter, as soon as blocker resolves. It does
// nothing unless the loop runs.
func (w *wake) hold(waiter Waiter, stream string, blocker int64, deadline time.Time, onErr func(error)) {
	w.mu.Lock()
	if w.ctx == nil || w.ctx.Err() != nil {
		w.mu.Unlock()
		return
	}
	if d := w.deferred[stream]; d != nil && d.blocker == blocker {
		d.deadline = deadline // the same wait goes on
		w.mu.Unlock()
		w.poke()
		return
	}
	if d := w.deferred[stream]; d != nil {
		d.end()
	}
	d := &deferral{blocker: blocker, deadline: deadline}
	w.deferred[stream] = d
	ctx := w.ctx
	w.mu.Unlock()
	w.poke() // the loop re-arms its timer for the new deadline
	if waiter == nil {
		return
	}
	// Ready may read a snapshot: not under the lock.
	ready, withdraw, err := waiter.Ready(ctx, stream, blocker+1)
	if err != nil {
		onErr(err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deferred[stream] != d || w.ctx == nil {
		withdraw() // replaced or closed meanwhile
		return
	}
	d.stop = make(chan struct{})
	stop := d.stop
	w.wg.Go(func() {
		defer withdraw()
		select {
		case <-ready:
			w.kick(stream)
		case <-stop:
		case <-ctx.Done():
		}
	})
}

// release forgets the deferral of stream: it no longer waits.
func (w *wake) release(stream string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.deferred[stream]; d != nil {
		d.end()
		delete(w.deferred, stream)
	}
}

// retain forgets every deferral but those of keep (after a full scan).
func (w *wake) retain(keep map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s, d := range w.deferred {
		if !keep[s] {
			d.end()
			delete(w.deferred, s)
		}
	}
}

// due returns the streams to walk now: those kicked, and those whose
// deadline passed (their deadline is taken: a walk that still finds them
// blocked sets a new one).
func (w *wake) due(now time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for s := range w.kicked {
		out = append(out, s)
		delete(w.kicked, s)
	}
	for s, d := range w.deferred {
		if !d.deadline.IsZero() && !now.Before(d.deadline) {
			d.deadline = time.Time{}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out
}

// next returns the earliest deadline of a deferred stream.
func (w *wake) next() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var at time.Time
	for _, d := range w.deferred {
		if !d.deadline.IsZero() && (at.IsZero() || d.deadline.Before(at)) {
			at = d.deadline
		}
	}
	return at, !at.IsZero()
}
