package cleanup

import (
	"sync"
	"time"

	"github.com/seqlease/seqlease/internal/lifecycle"
)

// Status is what the loop has done lately (Service.Status), for a health
// check: whether it runs, and when its last full pass over every expired
// lease ended. Times are the process's clock.
type Status struct {
	// Running reports whether the loop runs: Start was called, Stop was
	// not, and the context Start was given has not ended.
	Running bool
	// Started is when Start started the loop; zero if it never did.
	Started time.Time
	// Interval is the time between the starts of two full cycles
	// (Config.Interval, else the settings table's cleanup.interval),
	// without the jitter.
	Interval time.Duration
	// LastPass is when the last full cycle that listed every expired lease
	// ended (the loop's or RunOnce's): every lease that had expired before
	// it began was then resolved, or found held back by a live earlier
	// lease, or failed its recovery (LastPassFailed). Zero if none yet.
	LastPass time.Time
	// LastPassFailed counts the expired leases whose recovery failed in
	// that pass: they stay expired and are tried again next cycle.
	LastPassFailed int
	// Failures counts the full cycles in a row, since LastPass, that could
	// not list the expired leases (the store did not answer); LastError is
	// the last one's error. The loop backs off between them.
	Failures  int
	LastError error
}

// status is the record behind Service.Status.
type status struct {
	mu sync.Mutex
	st Status // Running is computed; the rest is recorded
}

// pass records what a full cycle came to: listed says whether it listed
// every expired lease; err is its error.
func (s *status) pass(res CycleResult, listed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if listed {
		s.st.LastPass, s.st.LastPassFailed = time.Now(), res.Failed
		s.st.Failures, s.st.LastError = 0, nil
		return
	}
	s.st.Failures++
	s.st.LastError = err
}

// Status reports whether the loop runs and what its full cycles came to
// lately. It takes no lock that a cycle holds: it answers at once.
func (sv *Service) Status() Status {
	sv.status.mu.Lock()
	st := sv.status.st
	sv.status.mu.Unlock()
	st.Interval = sv.period()
	st.Running = sv.life.State() == lifecycle.Running
	return st
}
