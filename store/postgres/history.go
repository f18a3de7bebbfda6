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

// history holds the marks and findings of one Store (and of the Stores in
// its callers' transactions).
type history struct {
	logger *slog.Logger
	now    func() time.Time

	mu      sync.Mutex
	epoch   uint64 // bumped by every acceptance
	streams marks[streamMark]
	names   marks[nameMark]
	refused map[lossKey]*store.HistoryLostError // leases (acquires) refused until accepted
	losses  map[lossKey]int64
	forget  func(stream string) // tells the Store's watches that stream's history was accepted
}

// streamMark is what the Store saw of a stream.
type streamMark struct {
	high      int64  // the highest number seen to exist
	watermark int64  // the highest watermark read
	since     uint64 // the epoch the mark was made (or accepted) at
	behind    bool   // the last read went back: warned once
}

// nameMark is what the Store saw of a named lease.
type nameMark struct {
	fence int64  // the highest fence seen
	since uint64 // the epoch the mark was made (or accepted) at
}

type lossKey struct{ stream, name string }

func newHistory(logger *slog.Logger, limit int) *history {
	return &history{logger: logger, now: time.Now, streams: newMarks[streamMark](limit),
		names: newMarks[nameMark](limit), refused: map[lossKey]*store.HistoryLostError{}, losses: map[lossKey]int64{}}
}

// marks holds at most limit marks in two generations: new marks go to
// cur, and when cur holds limit/2 it becomes prev and the old prev is
// dropped. A mark found in prev moves back to cur, so the marks of the
// streams and names in use stay, and those unused for two generations go.
// Refusals are kept apart (history.refused), never dropped.
type marks[V any] struct {
	half      int
	cur, prev map[string]V
}

func newMarks[V any](limit int) marks[V] {
	return marks[V]{half: max(limit/2, 1), cur: map[string]V{}, prev: map[string]V{}}
}

// get returns the mark of k, moving it to the current generation.
func (m *marks[V]) get(k string) (V, bool) {
	if v, ok := m.cur[k]; ok {
		return v, true
	}
	v, ok := m.prev[k]
	if ok {
		delete(m.prev, k)
		m.put(k, v)
	}
	return v, ok
}

// put sets the mark of k in the current generation.
func (m *marks[V]) put(k string, v V) {
	if _, ok := m.cur[k]; !ok && len(m.cur) >= m.half {
		m.prev, m.cur = m.cur, make(map[string]V, m.half)
	}
	m.cur[k] = v
}

// len is how many marks are kept.
func (m *marks[V]) len() int { return len(m.cur) + len(m.prev) }

// seenStream is what a statement was sent with: the stream's marks, or
// none (zero).
type seenStream struct {
	streamMark
	ok bool // a mark existed
}

// stream returns the marks of stream as they are now, or the finding that
// refuses it.
func (h *history) stream(stream string) (seenStream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.streams.get(stream)
	if lost := h.refused[lossKey{stream: stream}]; lost != nil {
		return seenStream{m, ok}, lostError(lost)
	}
	return seenStream{m, ok}, nil
}

// streamNow returns the mark of stream to check an answer against and
// update, and whether the answer is to be checked: no when the mark the
// statement was sent with was accepted (or dropped) since, for the answer
// then belongs to history already accepted. h.mu must be held.
func (h *history) streamNow(stream string, seen seenStream) (streamMark, bool) {
	m, ok := h.streams.get(stream)
	if !ok {
		m = streamMark{since: h.epoch}
	}
	return m, seen.ok == ok && (!ok || m.since == seen.since)
}

// lostError is the error of a refused stream or name: a copy of its
// finding.
func lostError(lost *store.HistoryLostError) error {
	e := *lost
	return &e
}

// numbers checks the numbers lo..hi that a write sent with the marks seen
// answered for stream: nil, having raised the stream's high mark, or the
// finding if lo is not above what was seen.
func (h *history) numbers(stream string, seen seenStream, lo, hi int64) error {
	h.mu.Lock()
	m, check := h.streamNow(stream, seen)
	if check && lo <= seen.high {
		h.mu.Unlock()
		return h.lose(stream, "", store.LostNumber, seen.high, lo, true)
	}
	m.high = max(m.high, hi)
	h.streams.put(stream, m)
	h.mu.Unlock()
	return nil
}

// read checks a stream's counter (the last number handed out) and
// watermark that a read sent with the marks seen answered, and raises the
// marks. A read that goes back refuses nothing: it may have gone to a
// replica that is behind (a pooler balancing reads, a wrapper of the
// application's), so only writes refuse; it is logged at WARN and counted,
// once until a read comes back level.
func (h *history) read(stream string, seen seenStream, counter, watermark int64) {
	h.mu.Lock()
	m, check := h.streamNow(stream, seen)
	what, was, got := "", int64(0), int64(0)
	switch {
	case !check:
	case counter < seen.high:
		what, was, got = store.LostNumber, seen.high, counter
	case watermark < seen.watermark:
		what, was, got = store.LostWatermark, seen.watermark, watermark
	}
	if what == "" {
		m.high, m.watermark, m.behind = max(m.high, counter), max(m.watermark, watermark), false
		h.streams.put(stream, m)
		h.mu.Unlock()
		return
	}
	first := !m.behind
	m.behind = true
	h.streams.put(stream, m)
	h.mu.Unlock()
	if first {
		_ = h.lose(stream, "", what, was, got, false)
	}
}

// moved checks the new numbers of a recovery statement (the values of
// moved) as numbers does.
func (h *history) moved(stream string, seen seenStream, moved map[int64]int64) error {
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
	m, ok := h.streams.get(stream)
	if !ok {
		m.since = h.epoch
	}
	m.high = max(m.high, n)
	h.streams.put(stream, m)
}

// seenName is the fence mark a statement was sent with.
type seenName struct {
	nameMark
	ok bool // a mark existed
}

// name returns the fence mark of a named lease, or the finding that
// refuses it.
func (h *history) name(name string) (seenName, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.names.get(name)
	if lost := h.refused[lossKey{name: name}]; lost != nil {
		return seenName{m, ok}, lostError(lost)
	}
	return seenName{m, ok}, nil
}

// fence checks a fence that a statement sent with the mark seen answered
// for name: a fence granted must be above seen, a holder's fence at least
// seen. It raises the mark, or returns the finding.
func (h *history) fence(name string, seen seenName, got int64, granted bool) error {
	h.mu.Lock()
	m, ok := h.names.get(name)
	if !ok {
		m = nameMark{since: h.epoch}
	}
	check := seen.ok == ok && (!ok || m.since == seen.since)
	if check && (got < seen.fence || granted && got == seen.fence) {
		h.mu.Unlock()
		return h.lose("", name, store.LostFence, seen.fence, got, true)
	}
	m.fence = max(m.fence, got)
	h.names.put(name, m)
	h.mu.Unlock()
	return nil
}

// lose records a finding on a stream (or a name), logs and counts it,
// and returns it. With refuse (the answer of a write), it refuses the
// stream or name from now on, and logs and counts only the first finding
// of a refusal; otherwise (a read) it logs at WARN.
func (h *history) lose(stream, name, what string, seen, got int64, refuse bool) error {
	e := &store.HistoryLostError{Stream: stream, Name: name, What: what, Seen: seen, Got: got, At: h.now()}
	k := lossKey{stream, name}
	h.mu.Lock()
	first := h.refused[k] == nil
	if refuse && first {
		// Statements sent before the first finding may find it again:
		// one finding per refusal.
		h.refused[k] = e
	}
	if first {
		h.losses[k]++
	}
	h.mu.Unlock()
	attrs := []any{slog.String("stream", stream), slog.String("lease", name), slog.String("what", what),
		slog.Int64("seen", seen), slog.Int64("got", got)}
	switch {
	case !first:
	case refuse:
		h.logger.Error("postgres: the database lost history it had shown: refusing it; "+
			"an asynchronous standby was promoted? see docs/operations.md, Asynchronous replication", attrs...)
	default:
		h.logger.Warn("postgres: a read went back on history this process had seen: a replica behind, "+
			"or the database lost history (then the next lease or acquire is refused); see docs/operations.md, "+
			"Asynchronous replication", attrs...)
	}
	return lostError(e)
}

// accept ends the refusal of a stream (or a name) and forgets its marks:
// the server's history is taken as it is. Answers of statements sent
// before are not checked (their marks' epoch is older).
func (h *history) accept(stream, name string) {
	h.mu.Lock()
	h.epoch++
	delete(h.refused, lossKey{stream, name})
	if stream != "" {
		h.streams.put(stream, streamMark{since: h.epoch})
	} else {
		h.names.put(name, nameMark{since: h.epoch})
	}
	forget := h.forget
	h.mu.Unlock()
	if stream != "" && forget != nil {
		forget(stream)
	}
}

// health reports the refusals and the counts, in a fixed order.
func (h *history) health() store.HistoryHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out store.HistoryHealth
	for _, e := range h.refused {
		out.Refused = append(out.Refused, *e)
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
// its next lease takes the numbers the server hands out now. The Store's
// running watches are told too (store.Forgetter), so a barrier started
// on this Store drops the stream's watermark and reads the server's. It
// acts on this process only, and not on a reader's position or
// checkpoint (reset those yourself). Call it once you have decided what
// to do about the lost numbers (see docs/operations.md). Accepting a
// stream that is not refused only forgets its marks. A bad name fails
// with store.ErrInvalidStream.
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
