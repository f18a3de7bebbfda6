package postgres

import (
	"context"
	"time"
)

// AwaitedChecks reports how many callers' transactions the notices of
// root s await, and how many checks the next confirm statement would
// send for them.
func AwaitedChecks(s *Store) (txs, checks int) {
	n := s.notes
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range n.awaited {
		checks += len(a.checks())
	}
	return len(n.awaited), checks
}

// HandOver hands numbers of stream, resolved by transaction xid, to the
// root s's Watch, as a Store in that transaction would.
func HandOver(s *Store, xid int64, stream string, numbers ...int64) bool {
	return s.notes.await(xid, map[string]*streamNotice{stream: {numbers: numbers}})
}

// SetAwaitLimits sets how long and how many callers' transactions the
// root s awaits (0: unchanged); call it before s's Watch starts.
func SetAwaitLimits(s *Store, age time.Duration, count int) {
	if age > 0 {
		s.notes.maxAwaitAge = age
	}
	if count > 0 {
		s.notes.maxAwaited = count
	}
}

// AwaitOverflows is how many hand-overs root s refused because it
// awaited too many transactions.
func AwaitOverflows(s *Store) int64 { return s.notes.overflows.Load() }

// ConfirmAll asks at once, in one statement, about every transaction
// the root s awaits, as its Watch does about those due, and returns the
// statement's error.
func ConfirmAll(ctx context.Context, s *Store) error {
	n := s.notes
	n.mu.Lock()
	for _, a := range n.awaited {
		a.next = time.Time{}
	}
	n.mu.Unlock()
	return n.confirmDue(ctx, time.Now())
}

// HistoryMarks counts the streams and named leases whose history the
// root s remembers.
func HistoryMarks(s *Store) (streams, names int) {
	h, _ := s.hist()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.streams.len(), h.names.len()
}

// StandbyMarks is HistoryMarks of sb's Store.
func StandbyMarks(sb *Standby) (streams, names int) { return HistoryMarks(sb.s) }

// Watching is how many Watch calls of s are registered for its own
// resolutions.
func Watching(s *Store) int {
	s.notes.mu.Lock()
	defer s.notes.mu.Unlock()
	return len(s.notes.sinks)
}
