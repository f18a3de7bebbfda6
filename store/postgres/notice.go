package postgres

import (
	"context"
	"encoding/hex"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqlease/seqlease/store"
)

const (
	// maxPayload bounds a notice's payload: PostgreSQL refuses more than
	// 8,000 bytes.
	maxPayload = 7900
	// maxListed bounds the numbers collected for one stream: beyond it the
	// stream is noticed as "s", re-read.
	maxListed = 10_000
	// noticeTimeout bounds a notices statement sent in the background.
	noticeTimeout = 10 * time.Second
	// idLen is the length of a Store's id in a payload.
	idLen = 16
)

// notices collects a Store's resolutions and sends them (see Notices).
type notices struct {
	s      *Store
	id     string     // this Store's, in every payload it sends
	sendMu sync.Mutex // one statement at a time: a stream's notices go out in order

	// Of a Store in a caller's transaction (InTx): the root's notices,
	// which confirm what this one hands over (tx.go), and the
	// transaction's id once known (0: not yet).
	root *notices
	xid  atomic.Int64
	// what this one handed over to root (guarded by mu), sent again with
	// the notices in the transaction if it falls back to those
	handed map[string]*streamNotice

	mu      sync.Mutex
	pending map[string]*streamNotice
	sinks   []store.Sink  // the running Watch calls' (each a registration of its own)
	serving int           // Watch calls that send in the background
	wake    chan struct{} // capacity 1: something was collected

	// Of a root Store: what Stores in callers' transactions handed over,
	// by transaction id, until their fate is known (tx.go).
	awaited   map[int64]*awaitedTx
	awaitWake chan struct{} // capacity 1: something was handed over
	// the bounds of awaited: maxAwaited and maxAwaitAge, but in tests
	maxAwaited  int
	maxAwaitAge time.Duration
	// hand-overs refused because maxAwaited transactions were awaited,
	// and when that was last logged (guarded by mu)
	overflows      atomic.Int64
	overflowLogged time.Time
}

// streamNotice is what was collected for one stream.
type streamNotice struct {
	through int64   // every number up to it is resolved; 0: none known
	numbers []int64 // resolved numbers above through, in no order
	reread  bool    // more than maxListed: notice "s"
}

func newNotices(s *Store) *notices {
	tok := store.NewToken()
	return &notices{s: s, id: hex.EncodeToString(tok[:idLen/2]), pending: map[string]*streamNotice{}, wake: make(chan struct{}, 1),
		awaited: map[int64]*awaitedTx{}, awaitWake: make(chan struct{}, 1), maxAwaited: maxAwaited, maxAwaitAge: maxAwaitAge}
}

// resolved records that the numbers of stream were resolved by a
// transaction that committed, and that every number up to through was
// (0: nothing more), and sends the notices or has them sent. An error is
// that of a statement in the caller's transaction (a Store in one only),
// which aborted that transaction; a root Store logs its failures.
func (n *notices) resolved(ctx context.Context, stream string, through int64, numbers ...int64) error {
	n.add(resolution{stream: stream, through: through, numbers: numbers})
	return n.flush(ctx)
}

// resolution is what one stream had resolved by a transaction that
// committed: every number up to through (0: nothing more), and numbers;
// with reread, more than could be listed (the stream is to be re-read).
type resolution struct {
	stream  string
	through int64
	numbers []int64
	reread  bool
}

// add records resolutions, wakes the sender of a Watch that serves, and
// tells the Store's own watchers; flush then has them sent.
func (n *notices) add(rs ...resolution) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range rs {
		n.addLocked(r.stream, r.through, r.numbers)
		if r.reread {
			n.pending[r.stream].numbers, n.pending[r.stream].reread = nil, true
		}
	}
	if n.inTx() {
		return // not committed yet: the caller's transaction decides
	}
	// The sender is woken before the watchers: of two goroutines readied
	// in a row, Go runs the later first, and a commit parked behind this
	// resolution should not wait for the notices statement to be written
	// (docs/internals/architecture.md has the measurement).
	if n.serving > 0 {
		select {
		case n.wake <- struct{}{}:
		default: // a send is due already
		}
	}
	for _, sink := range n.sinks {
		for _, r := range rs {
			if r.reread {
				sink.Reset()
			}
			if r.through > 0 {
				sink.ResolvedThrough(r.stream, r.through)
			}
			for _, num := range r.numbers {
				sink.Resolved(r.stream, num)
			}
		}
	}
}

// flush has what was collected sent: in the background while a Watch
// serves (add woke its sender already, unless the Watch began since), else
// now, with ctx (the resolving call's). An error is that of a statement
// in the caller's transaction (see resolved).
func (n *notices) flush(ctx context.Context) error {
	if n.inTx() {
		// Not committed yet: hand over to the root's Watch, which notices
		// what committed, or else notify in the transaction (tx.go).
		ok, err := n.handOff(ctx)
		if err != nil || ok {
			return err
		}
		return n.send(ctx)
	}
	n.mu.Lock()
	serving := n.serving > 0
	n.mu.Unlock()
	if serving {
		select {
		case n.wake <- struct{}{}:
		default: // a send is due already
		}
		return nil
	}
	_ = n.send(ctx) // logged; the notices go with the next
	return nil
}

func (n *notices) addLocked(stream string, through int64, numbers []int64) {
	sn := n.pending[stream]
	if sn == nil {
		sn = &streamNotice{}
		n.pending[stream] = sn
	}
	sn.through = max(sn.through, through)
	if sn.reread {
		return
	}
	sn.numbers = append(sn.numbers, numbers...)
	if len(sn.numbers) > maxListed {
		sn.numbers, sn.reread = nil, true
	}
}

// watch registers sink for the Store's own resolutions, in process, until
// the returned function is called. Each call is a registration of its
// own: the same sink registered twice hears twice.
func (n *notices) watch(sink store.Sink) (unwatch func()) {
	reg := &registration{sink}
	n.mu.Lock()
	n.sinks = append(slices.Clone(n.sinks), reg)
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.sinks = slices.DeleteFunc(slices.Clone(n.sinks), func(s store.Sink) bool { return s == store.Sink(reg) })
	}
}

// forget tells the running Watch calls' sinks that know how
// (store.Forgetter) to drop what they know of stream (AcceptHistory).
func (n *notices) forget(stream string) {
	n.mu.Lock()
	sinks := n.sinks // copied on write: safe to range without the lock
	n.mu.Unlock()
	for _, reg := range sinks {
		if f, ok := reg.(*registration).Sink.(store.Forgetter); ok {
			f.Forget(stream)
		}
	}
}

// registration is one Watch call's entry among the sinks: found again by
// its own pointer, so a sink need not be comparable.
type registration struct{ store.Sink }

// serve sends what is collected, in the background, until ctx ends; it is
// run by each Watch, which waits for it. What is left at the end is sent
// once more, bounded by noticeTimeout.
func (n *notices) serve(ctx context.Context) {
	n.mu.Lock()
	n.serving++
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.serving--
		if n.serving == 0 && len(n.awaited) > 0 {
			// Kept for the next Watch, which confirms them (tx.go); a
			// Store in one of those transactions that resolves more
			// meanwhile notifies in it what it handed over too.
			n.s.logger.DebugContext(ctx, "postgres: Watch stopped; resolutions of callers' transactions still awaited wait for the next Watch",
				slog.Int("transactions", len(n.awaited)))
		}
		n.mu.Unlock()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), noticeTimeout)
		defer cancel()
		_ = n.send(sctx) // logged
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		}
		sctx, cancel := context.WithTimeout(ctx, noticeTimeout)
		_ = n.send(sctx) // logged
		cancel()
	}
}

// send sends everything collected in one statement; if it fails, the
// notices are put back for the next one, and the error returned (in a
// caller's transaction, which it aborted, it is not logged: the caller
// returns it).
func (n *notices) send(ctx context.Context) error {
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	n.mu.Lock()
	if len(n.pending) == 0 {
		n.mu.Unlock()
		return nil
	}
	taken := n.pending
	n.pending = make(map[string]*streamNotice, len(taken))
	n.mu.Unlock()

	var records []string
	for stream, sn := range taken {
		records = sn.appendRecords(records, stream)
	}
	payloads := pack(n.id, records)
	var sent int64
	err := n.s.db.QueryRow(ctx, n.s.q.notices, n.s.channel, payloads, !n.inTx()).Scan(&sent)
	if err == nil {
		return nil
	}
	if !n.inTx() {
		n.s.logger.WarnContext(ctx, "postgres: resolution notices not sent; trying again with the next", slog.Int("notices", len(payloads)), slog.Any("error", err))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for stream, sn := range taken {
		mergeNotice(n.pending, stream, sn)
	}
	return err
}

// pack packs records into as few payloads as fit, each starting with the
// sender's id.
func pack(id string, records []string) []string {
	var out []string
	var b strings.Builder
	for _, r := range records {
		if b.Len() > 0 && b.Len()+1+len(r) > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(id)
		}
		b.WriteByte('\n')
		b.WriteString(r)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// appendRecords appends the records that notice sn of stream, none longer
// than a payload can carry next to the id.
func (sn *streamNotice) appendRecords(out []string, stream string) []string {
	if sn.through > 0 {
		out = append(out, "t\t"+stream+"\t"+strconv.FormatInt(sn.through, 10))
	}
	if sn.reread {
		return append(out, "s\t"+stream)
	}
	nums := slices.Sorted(slices.Values(sn.numbers))
	nums = slices.Compact(nums)
	i, _ := slices.BinarySearch(nums, sn.through+1)
	nums = nums[i:]
	prefix := "r\t" + stream + "\t"
	const room = maxPayload - idLen - 1
	var b strings.Builder
	for len(nums) > 0 {
		j := 1 // nums[:j] is a range
		for j < len(nums) && nums[j] == nums[j-1]+1 {
			j++
		}
		item := strconv.FormatInt(nums[0], 10)
		if j > 1 {
			item += "-" + strconv.FormatInt(nums[j-1], 10)
		}
		if b.Len() > 0 && b.Len()+1+len(item) > room {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(prefix)
		} else {
			b.WriteByte(',')
		}
		b.WriteString(item)
		nums = nums[j:]
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// notice is a parsed resolution record.
type notice struct {
	kind    byte // 't', 'r' or 's'
	stream  string
	through int64      // 't'
	ranges  [][2]int64 // 'r': inclusive ranges, each a <= b
}

// parsePayload parses a notices payload: the sender's id and its records.
// Any session may NOTIFY on the channel, so it accepts exactly what the
// Store sends (pack, appendRecords): an id of 16 lowercase hex digits,
// then at least one record, each valid (parseRecord).
func parsePayload(payload string) (sender string, records []notice, ok bool) {
	lines := strings.Split(payload, "\n")
	if len(lines) < 2 || !isID(lines[0]) {
		return "", nil, false
	}
	for _, line := range lines[1:] {
		nt, ok := parseRecord(line)
		if !ok {
			return "", nil, false
		}
		records = append(records, nt)
	}
	return lines[0], records, true
}

// isID reports whether s is a Store's id: 16 lowercase hex digits.
func isID(s string) bool {
	if len(s) != idLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// parseRecord parses one record: the kind, a valid stream name, and for
// "t" a number >= 1, for "r" a list of numbers >= 1 and ranges a-b with
// a < b (at most maxListed numbers in all), as PostgreSQL and strconv
// print them (no sign, no leading zero).
func parseRecord(line string) (notice, bool) {
	kind, rest, ok := strings.Cut(line, "\t")
	if !ok || len(kind) != 1 {
		return notice{}, false
	}
	nt := notice{kind: kind[0]}
	if nt.kind == 's' {
		nt.stream = rest
		return nt, store.ValidateStream(rest) == nil
	}
	stream, list, ok := strings.Cut(rest, "\t")
	if !ok || store.ValidateStream(stream) != nil {
		return notice{}, false
	}
	nt.stream = stream
	switch nt.kind {
	case 't':
		n, ok := parseBigint(list)
		if !ok || n < 1 {
			return notice{}, false
		}
		nt.through = n
		return nt, true
	case 'r':
		listed := int64(0) // the Store lists at most maxListed numbers of a stream
		for item := range strings.SplitSeq(list, ",") {
			lo, hi, isRange := strings.Cut(item, "-")
			a, ok := parseBigint(lo)
			if !ok || a < 1 {
				return notice{}, false
			}
			b := a
			if isRange {
				if b, ok = parseBigint(hi); !ok || b <= a || b-a >= maxListed {
					return notice{}, false
				}
			}
			if listed += b - a + 1; listed > maxListed {
				return notice{}, false
			}
			nt.ranges = append(nt.ranges, [2]int64{a, b})
		}
		return nt, true
	}
	return notice{}, false
}

// deliver passes the record to sink.
func (nt notice) deliver(sink store.Sink) {
	switch nt.kind {
	case 't':
		sink.ResolvedThrough(nt.stream, nt.through)
	case 'r':
		for _, r := range nt.ranges {
			for n := r[0]; n <= r[1]; n++ {
				sink.Resolved(nt.stream, n)
			}
		}
	case 's':
		sink.Reset()
	}
}
