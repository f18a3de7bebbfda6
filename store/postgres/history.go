package postgres

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

var _ store.HistoryChecker = (*Store)(nil)

// # Lost history
//
// A server that lost committed transactions (an asynchronous standby
// promoted before it received them) answers as if they never happened: a
// stream's counter is back where it was, and the next lease hands out
// numbers that were already handed out and perhaps committed; a named
// lease's fence is back, and the next acquire issues a fence that was
// already issued. Nothing in PostgreSQL tells: the promoted standby has
// the same system identifier as the old primary, and its timeline moved
// on just as it does after a failover that lost nothing.
//
// So the Store remembers, per stream, the highest number it saw exist
// (handed out by a lease, an append or a recovery, read as resolved, or a
// stream's counter) and the highest watermark it read, and per named
// lease the highest fence it saw (granted, or a holder's). It notes the
// marks before it sends a statement and checks the answer against them:
// a statement that starts after a number was answered must answer above
// it, whatever ran concurrently, unless the server lost it. Comparing
// with the marks at the start, not at the answer, keeps concurrent
// statements of this process, whose answers may come back in any order,
// from looking like a loss.
//
// An answer that goes back is refused (the numbers or the fence are not
// handed out; the entries the statement made on the new server stay
// leased by nobody and expire like an abandoned lease), the finding is
// logged at ERROR level and counted (HistoryHealth: once per refusal),
// and every later
// lease of the stream, or acquire of the name, fails with the same
// *store.HistoryLostError until AcceptHistory or AcceptLeaseHistory. A
// Store in a caller's transaction refuses what its root refuses but
// records and checks nothing: its statements may roll back, and a
// rolled-back number is rightly handed out again.
//
// The marks live in the process: one small record per stream and name it
// used, kept for the Store's life. A process started after the loss has
// no marks and cannot tell; a process that saw only some of the lost
// numbers tells only when the server answers at or below those.

// history holds the marks and findings of one Store (and of the Stores in
// its callers' transactions).
type history struct {
	logger *slog.Logger
	now    func() time.Time

	mu      sync.Mutex
	streams map[string]*streamMark
	names   map[string]*nameMark
	losses  map[lossKey]int64
}

// streamMark is what the Store saw of a stream.
type streamMark struct {
	high      int64                   // the highest number seen to exist
	watermark int64                   // the highest watermark read
	lost      *store.HistoryLostError // non-nil: leases refused
}

// nameMark is what the Store saw of a named lease.
type nameMark struct {
	fence int64                   // the highest fence seen
	lost  *store.HistoryLostError // non-nil: acquires refused
}

type lossKey struct{ stream, name string }

func newHistory(logger *slog.Logger) *history {
	return &history{logger: logger, now: time.Now, streams: map[string]*streamMark{},
		names: map[string]*nameMark{}, losses: map[lossKey]int64{}}
}

// stream returns the marks of stream as they are now, or the finding that
// refuses it.
func (h *history) stream(stream string) (streamMark, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.streams[stream]
	if m == nil {
		return streamMark{}, nil
	}
	if m.lost != nil {
		return *m, lostError(m.lost)
	}
	return *m, nil
}

// lostError is the error of a refused stream or name: a copy of its
// finding.
func lostError(lost *store.HistoryLostError) error {
	e := *lost
	return &e
}

// numbers checks the numbers lo..hi that a statement sent with the marks
// seen answered for stream: nil, having raised the stream's high mark, or
// the finding if lo is not above what was seen.
func (h *history) numbers(stream string, seen streamMark, lo, hi int64) error {
	if lo <= seen.high {
		return h.lose(stream, "", store.LostNumber, seen.high, lo)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.mark(stream)
	m.high = max(m.high, hi)
	return nil
}

// read checks a stream's counter (the last number handed out) and
// watermark that a read sent with the marks seen answered, and raises the
// marks; it reports a loss (the error is for logging: reads still return
// what they read).
func (h *history) read(stream string, seen streamMark, counter, watermark int64) error {
	switch {
	case counter < seen.high:
		return h.lose(stream, "", store.LostNumber, seen.high, counter)
	case watermark < seen.watermark:
		return h.lose(stream, "", store.LostWatermark, seen.watermark, watermark)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.mark(stream)
	m.high, m.watermark = max(m.high, counter), max(m.watermark, watermark)
	return nil
}

// moved checks the new numbers of a recovery statement (the values of
// moved) as numbers does.
func (h *history) moved(stream string, seen streamMark, moved map[int64]int64) error {
	if len(moved) == 0 {
		return nil
	}
	lo, hi := int64(1<<63-1), int64(0)
	for _, to := range moved {
		lo, hi = min(lo, to), max(hi, to)
	}
	return h.numbers(stream, seen, lo, hi)
}

// sawNumber raises the high mark of stream to n, a number seen to exist.
func (h *history) sawNumber(stream string, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.mark(stream)
	m.high = max(m.high, n)
}

// mark returns the marks of stream, made if new. h.mu must be held.
func (h *history) mark(stream string) *streamMark {
	m := h.streams[stream]
	if m == nil {
		m = &streamMark{}
		h.streams[stream] = m
	}
	return m
}

// name returns the fence mark of a named lease, or the finding that
// refuses it.
func (h *history) name(name string) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.names[name]
	switch {
	case m == nil:
		return 0, nil
	case m.lost != nil:
		return m.fence, lostError(m.lost)
	}
	return m.fence, nil
}

// fence checks a fence that a statement sent with the mark seen answered
// for name: a fence granted must be above seen, a holder's fence at least
// seen. It raises the mark, or returns the finding.
func (h *history) fence(name string, seen, got int64, granted bool) error {
	if got < seen || granted && got == seen {
		return h.lose("", name, store.LostFence, seen, got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.names[name]
	if m == nil {
		m = &nameMark{}
		h.names[name] = m
	}
	m.fence = max(m.fence, got)
	return nil
}

// lose records a finding on a stream (or a name), refuses it from now on,
// logs and counts it (unless it was refused already), and returns it.
func (h *history) lose(stream, name, what string, seen, got int64) error {
	e := &store.HistoryLostError{Stream: stream, Name: name, What: what, Seen: seen, Got: got, At: h.now()}
	h.mu.Lock()
	var lost **store.HistoryLostError
	if stream != "" {
		lost = &h.mark(stream).lost
	} else {
		m := h.names[name]
		if m == nil {
			m = &nameMark{fence: seen}
			h.names[name] = m
		}
		lost = &m.lost
	}
	first := *lost == nil
	if first {
		// Statements sent before the first finding may find it again:
		// one finding per refusal.
		*lost = e
		h.losses[lossKey{stream, name}]++
	}
	h.mu.Unlock()
	if !first {
		return lostError(e)
	}
	h.logger.Error("postgres: the database lost history it had shown: refusing it; "+
		"an asynchronous standby was promoted? see docs/operations.md, Asynchronous replication",
		slog.String("stream", stream), slog.String("lease", name), slog.String("what", what),
		slog.Int64("seen", seen), slog.Int64("got", got))
	return lostError(e)
}

// accept forgets the marks and the finding of a stream (or a name): the
// server's history is taken as it is.
func (h *history) accept(stream, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if stream != "" {
		delete(h.streams, stream)
	} else {
		delete(h.names, name)
	}
}

// health reports the refusals and the counts, in a fixed order.
func (h *history) health() store.HistoryHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out store.HistoryHealth
	for _, m := range h.streams {
		if m.lost != nil {
			out.Refused = append(out.Refused, *m.lost)
		}
	}
	for _, m := range h.names {
		if m.lost != nil {
			out.Refused = append(out.Refused, *m.lost)
		}
	}
	for k, n := range h.losses {
		out.Losses = append(out.Losses, store.HistoryLoss{Stream: k.stream, Name: k.name, Count: n})
	}
	slices.SortFunc(out.Refused, func(a, b store.HistoryLostError) int {
		return strings.Compare(a.Stream+"\x00"+a.Name, b.Stream+"\x00"+b.Name)
	})
	slices.SortFunc(out.Losses, func(a, b store.HistoryLoss) int {
		return strings.Compare(a.Stream+"\x00"+a.Name, b.Stream+"\x00"+b.Name)
	})
	return out
}

// hist returns the history of the Store's root, and whether this Store
// records and checks (a Store on the pool) or only refuses (in a
// caller's transaction).
func (s *Store) hist() (*history, bool) {
	if s.root != nil {
		return s.root.history, false
	}
	return s.history, s.tracks
}

// HistoryHealth implements store.HistoryChecker: the streams and named
// leases refused because the database lost history this Store had seen,
// and the count of such findings per stream and name since New.
func (s *Store) HistoryHealth() store.HistoryHealth {
	h, _ := s.hist()
	return h.health()
}

// AcceptHistory ends the refusal of stream after the database lost its
// history (store.ErrHistoryLost), and forgets what this Store saw of it:
// its next lease takes the numbers the server hands out now. Call it once
// you have decided what to do about the lost numbers (see
// docs/operations.md). Accepting a stream that is not refused only
// forgets its marks. A bad name fails with store.ErrInvalidStream.
func (s *Store) AcceptHistory(stream string) error {
	if err := store.ValidateStream(stream); err != nil {
		return fmt.Errorf("accept history: %w", err)
	}
	h, _ := s.hist()
	h.accept(stream, "")
	return nil
}

// AcceptLeaseHistory is AcceptHistory for a named lease whose fence went
// back: its next acquire takes the fence the server issues now. A bad
// name fails with store.ErrInvalidLeaseName.
func (s *Store) AcceptLeaseHistory(name string) error {
	if err := store.ValidateLeaseName(name); err != nil {
		return fmt.Errorf("accept lease history: %w", err)
	}
	h, _ := s.hist()
	h.accept("", name)
	return nil
}
