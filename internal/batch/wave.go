package batch

import (
	"sync"
	"time"
)

const (
	// waveWindow is how soon after a batch was answered a leader waits for
	// its callers: callers that call again at once do within tens of
	// microseconds (16 woken together: the last within 40 µs, 80 µs at the
	// 90th percentile, measured); later, the wave is over.
	waveWindow = 200 * time.Microsecond
	// maxWaveWait bounds a leader's wait for the callers of a wave (with a
	// quarter of the last backend call).
	maxWaveWait = 250 * time.Microsecond
	// maxRoundWait bounds a leader's wait for the backend calls still out
	// (with the longest recent backend call, plus waveWindow).
	maxRoundWait = 2 * time.Millisecond
	// loopShare is the share of answered callers that must call again
	// within waveWindow, on average, for a leader to wait for the backend
	// calls still out: below it, the callers do other things between their
	// calls, and waiting would only delay the leader.
	loopShare = 0.75
)

// Wave tracks the callers of the batches of the Batchers that share it,
// for the leaders that wait for them (see Waves in the package doc).
// Goroutines that take turns on those Batchers (lease, commit, lease...)
// are woken together by a batch's results and call again together: a
// leader that waits until those answered a moment ago have all called again
// sends them in one batch, rather than the first alone and then the rest.
// And while the callers mostly call again at once (loop: a moving average
// of the share of the callers of batches of several that did, within
// waveWindow, is at least loopShare), a leader also waits for the callers
// of the backend calls still out: they are about to call again too, and
// every caller then goes in one backend call per round. A caller that does
// not call again soon (it works between its calls) costs a leader its
// bounded wait once, and lowers the share.
type Wave struct {
	mu      sync.Mutex
	now     func() time.Time // time.Now; tests set it
	minWait time.Duration    // the least a leader waits for a wave; tests only
	out     int              // callers in backend calls not yet answered
	pending int              // callers answered in the window that have not called again
	at      time.Time        // when the window opened: the first batch answered in it
	counted int              // callers answered in the window
	loop    float64          // moving share of answered callers that called again in the window
	longest time.Duration    // the longest recent backend call (decaying)
	changed chan struct{}    // closed at the next change; nil if no leader waits
}

// NewWave returns a Wave on the system clock.
func NewWave() *Wave { return &Wave{now: time.Now} }

// SetClock makes w read now instead of the time (tests).
func (w *Wave) SetClock(now func() time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = now
}

// SetMinWait makes leaders wait for a wave at least d, instead of a share
// of the last backend call, which an in-process backend makes tiny (tests).
func (w *Wave) SetMinWait(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.minWait = d
}

// SetLoop sets the share of answered callers that came back at once, as
// if measured (tests).
func (w *Wave) SetLoop(share float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loop = share
}

// sent counts the n callers of a backend call sent.
func (w *Wave) sent(n int) {
	w.mu.Lock()
	w.out += n
	w.mu.Unlock()
}

// answered counts the n callers of a backend call that took took, of which
// back may call again (the others gave up).
func (w *Wave) answered(n, back int, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out -= n
	w.longest = max(took, w.longest-w.longest/8)
	if n > 1 { // a lone call says nothing of waves
		if w.counted > 0 && w.now().Sub(w.at) > waveWindow {
			w.settle()
		}
		if w.counted == 0 {
			w.at = w.now()
		}
		w.pending += back
		w.counted += back
	}
	w.notify()
}

// Arrive counts a caller that arrived: Batchers count their calls
// themselves, but for those configured with ArriveElsewhere.
func (w *Wave) Arrive() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending > 0 {
		if w.now().Sub(w.at) > waveWindow {
			w.settle()
			return
		}
		if w.pending--; w.pending == 0 {
			w.settle()
			w.notify()
		}
	}
}

// settle closes the window: the share of its callers that called again
// moves loop. w.mu must be held.
func (w *Wave) settle() {
	if w.counted > 0 {
		share := float64(w.counted-w.pending) / float64(w.counted)
		w.loop += (share - w.loop) / 4
	}
	w.pending, w.counted = 0, 0
}

// notify wakes the leaders that wait. w.mu must be held.
func (w *Wave) notify() {
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
}

// await returns a channel closed at the next change, if a leader should
// wait now, or nil: callers answered in the window have not all called
// again, or the callers loop and backend calls are out. loop tells which
// bound applies, longest is the longest recent backend call, and least
// the least wait (tests).
func (w *Wave) await() (changed chan struct{}, loop bool, longest, least time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending > 0 && w.now().Sub(w.at) > waveWindow {
		w.settle()
	}
	loop = w.loop >= loopShare
	if w.pending == 0 && !(loop && w.out > 0) {
		return nil, loop, w.longest, w.minWait
	}
	if w.changed == nil {
		w.changed = make(chan struct{})
	}
	return w.changed, loop, w.longest, w.minWait
}

// forget gives up on the callers still awaited; a wait for the backend
// calls still out that ran out lowers the share.
func (w *Wave) forget() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.counted == 0 {
		w.loop -= w.loop / 4
	}
	w.settle()
	w.notify()
}
