package memory_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// FuzzSchedule decodes its input into a schedule of operations on two
// streams of one memory.Store (whose clock the schedule moves) and checks,
// after every operation, its outcome against a model of the ledger, and at
// the end the whole ledger with the audit package.
//
// The operations: Lease of 1..3 numbers (on the store, or through a
// sequence.Leaser whose handles later complete, release or extend), ordered
// Commit, unordered Commit, ordered CommitBatch, Release, Extend, a clock
// step, ResolveExpired, ResolveExpiredBatch, RecoverExpired, gap.Fill, Trim
// (never past the reader) and a reader catching up through the barrier.
// Any operation may use a foreign token. Stream "a" is written with ordered
// commits only; stream "b" mixes both.
//
// Per operation: the exact outcome the contract gives (I3: a commit at or
// after the expiry is refused with ErrExpired; I7: a repeated commit with
// the holder's token returns the first resolution time; I4: an ordered
// commit over an unresolved number fails with ErrNotReady, ...), the
// stream's Stats, and the barrier's watermark (equal to the store's, never
// going back). At the end, audit.Stream finds no violation of I1, I2, I4
// (stream "a"), I5 (what the reader saw) and I6 (acknowledged commits are
// there with their payloads), and every retained entry is what the model
// holds.
func FuzzSchedule(f *testing.F) {
	for _, seed := range scheduleSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, program []byte) {
		newSchedule(t, nil).run(program)
	})
}

// The operation codes: the first byte of each operation, modulo opCount.
const (
	opLease = iota
	opLeaseHandle
	opCommitOrdered
	opCommit
	opCommitBatch
	opRelease
	opExtend
	opAdvance
	opResolveExpired
	opResolveBatch
	opRecover
	opFill
	opTrim
	opRead
	opCount
)

var (
	ttls  = []time.Duration{time.Microsecond, time.Millisecond, 10 * time.Millisecond, time.Second, time.Minute}
	steps = []time.Duration{time.Microsecond, 500 * time.Microsecond, time.Millisecond, 5 * time.Millisecond,
		10 * time.Millisecond, time.Second, time.Minute}
)

// scheduleSeeds are hand-written schedules. Each operation is three bytes:
// the code, the flags (bit 0: stream "b", bit 1: a foreign token, bit 2:
// through the Leaser's handle) and an argument.
func scheduleSeeds() [][]byte {
	op := func(code, flags, arg byte) []byte { return []byte{code, flags, arg} }
	cat := func(ops ...[]byte) []byte { return slices.Concat(ops...) }
	const b, foreign, handle = 1, 2, 4
	return [][]byte{
		{},
		// I4 and I7 on "a": lease 2 (1 min), commit 2 (not ready), 1, 2, 2 again.
		cat(op(opLease, 0, 13), op(opCommitOrdered, 0, 1), op(opCommitOrdered, 0, 0), op(opCommitOrdered, 0, 1),
			op(opCommitOrdered, 0, 1), op(opRead, 0, 0)),
		// I3 on "b": lease 1 µs, step 1 µs, commit at the expiry, resolve, commit, release.
		cat(op(opLease, b, 0), op(opAdvance, 0, 0), op(opCommit, b, 0), op(opResolveExpired, b, 0),
			op(opCommit, b, 0), op(opRelease, b, 0), op(opRead, b, 0)),
		// A foreign token on every call that takes one.
		cat(op(opLease, 0, 14), op(opCommitOrdered, foreign, 0), op(opRelease, foreign, 0), op(opExtend, foreign, 0),
			op(opCommitBatch, foreign, 64), op(opRead, 0, 0)),
		// Handles: lease 3 (1 s) through the Leaser; complete 1, release 2,
		// extend 3 (1 min), read, complete 3, complete 1 again.
		cat(op(opLeaseHandle, b, 11), op(opCommit, b|handle, 0), op(opRelease, b|handle, 1), op(opExtend, b|handle, 2+16*4),
			op(opRead, b, 0), op(opCommit, b|handle, 2), op(opCommit, b|handle, 0), op(opRead, b, 0)),
		// Expiry and its aftermath on "a": lease 3 (1 s), step 1 s, recover 1,
		// resolve 2..4 in a batch, read, fill 2, trim, read, lease 2 more,
		// commit 6 (not ready), 5, 6, read.
		cat(op(opLease, 0, 11), op(opAdvance, 0, 5), op(opRecover, 0, 0), op(opResolveBatch, 0, 1), op(opRead, 0, 0),
			op(opFill, 0, 1), op(opTrim, 0, 9), op(opRead, 0, 0), op(opLease, 0, 13), op(opCommitOrdered, 0, 5),
			op(opCommitOrdered, 0, 4), op(opCommitOrdered, 0, 5), op(opRead, 0, 0), op(opFill, 0, 0)),
		// Batches: lease 3, commit them in one batch; lease 3 more, batch
		// with the middle one foreign.
		cat(op(opLease, 0, 14), op(opCommitBatch, 0, 64), op(opLease, 0, 14), op(opCommitBatch, foreign, 3+64),
			op(opRead, 0, 0)),
		// On "b": lease 2 (10 ms), extend 1 to 1 ms, step 5 ms, extend 1
		// (expired), release 1 after its expiry, again, commit 1 (released),
		// commit 2, resolve 2 (committed).
		cat(op(opLease, b, 7), op(opExtend, b, 16), op(opAdvance, 0, 3), op(opExtend, b, 0), op(opRelease, b, 0),
			op(opRelease, b, 0), op(opCommit, b, 0), op(opCommit, b, 1), op(opResolveExpired, b, 1), op(opRead, b, 0)),
	}
}

// schedClock is the store's clock, moved by the schedule.
type schedClock struct{ ns atomic.Int64 }

func (c *schedClock) now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// modelEntry is what the model knows of one number.
type modelEntry struct {
	number      int64
	token       store.Token
	state       store.State
	leasedAt    time.Time
	expires     time.Time
	resolvedAt  time.Time
	payload     []byte
	reason      string
	recoveredAs int64
	recovered   int64 // RecoveredFrom
	filled      bool
	handle      *sequence.Lease
	// byHandle is what the handle itself resolved ("committed",
	// "released"): its repeats answer locally.
	byHandle string
	// deadline is the handle's local deadline (sequence.Lease: its start
	// plus the TTL less the default margin); from then on the handle is
	// over, and an Extend through it is refused without asking the store.
	deadline time.Time
}

// handleDeadline is the local deadline of a handle granted ttl at now.
func handleDeadline(now time.Time, ttl time.Duration) time.Time {
	return now.Add(ttl - min(sequence.DefaultMaxMargin, ttl/10))
}

// refusal is the error a resolved entry gives an operation that needs it
// leased, as the contract says.
func (e *modelEntry) refusal() error {
	if e.state == store.Committed && !e.filled {
		return store.ErrCommitted
	}
	return gapErr(e.reason)
}

func gapErr(reason string) error {
	switch reason {
	case store.ReasonReleased:
		return store.ErrReleased
	case store.ReasonExpired:
		return store.ErrExpired
	}
	return store.ErrGap
}

type modelStream struct {
	name     string
	ordered  bool
	entries  []*modelEntry // number n at n-1, trimmed ones included
	low      int64
	read     int64 // the reader's checkpoint
	observed []int64
	acked    map[int64][]byte
	lastW    int64
}

func (m *modelStream) watermark() int64 {
	for _, e := range m.entries {
		if e.state == store.Leased {
			return e.number - 1
		}
	}
	return int64(len(m.entries))
}

func (m *modelStream) unresolved() int64 {
	var n int64
	for _, e := range m.entries {
		if e.state == store.Leased {
			n++
		}
	}
	return n
}

// resolvedSource is the store as the barrier sees it, telling when the
// barrier's watch is registered.
type resolvedSource struct {
	barrier.Source
	listening chan struct{}
}

func (s resolvedSource) Watch(ctx context.Context, sink store.Sink) error {
	return s.Source.Watch(ctx, resetSignal{sink, s.listening})
}

type resetSignal struct {
	store.Sink
	listening chan struct{}
}

func (r resetSignal) Reset() {
	r.Sink.Reset()
	select {
	case <-r.listening:
	default:
		close(r.listening)
	}
}

// scheduleStore is what the schedule drives: a *memory.Store, or a wrapper
// that breaks a rule on purpose (TestScheduleDetectsFaults).
type scheduleStore interface {
	sequence.Store
	barrier.Source
	audit.Source
	gap.Store
	CommitBatch(ctx context.Context, stream string, items []store.CommitItem, p *store.CommitBatchParams) ([]store.CommitResult, error)
	ResolveExpired(ctx context.Context, stream string, number int64, p *store.ResolveExpiredParams) error
	ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error)
	RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error)
	Trim(ctx context.Context, stream string, below int64) (int64, error)
}

type schedule struct {
	t     *testing.T
	ctx   context.Context
	clock *schedClock
	s     scheduleStore
	// failed, if set, receives the first failure instead of t, and the
	// schedule stops (TestScheduleDetectsFaults).
	failed  func(msg string)
	b       *barrier.Barrier
	leaser  *sequence.Leaser
	gaps    *gap.Gaps
	streams [2]*modelStream
	prog    []byte
	pos     int
	step    int
}

// newSchedule returns a schedule on a fresh memory store, passed through
// wrap if it is not nil.
func newSchedule(t *testing.T, wrap func(*memory.Store) scheduleStore) *schedule {
	clock := &schedClock{}
	clock.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	var s scheduleStore = memory.New(&memory.Config{Now: clock.now})
	if wrap != nil {
		s = wrap(s.(*memory.Store))
	}
	src := resolvedSource{Source: s, listening: make(chan struct{})}
	b, err := barrier.New(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	<-src.listening
	leaser, err := sequence.New(s, &sequence.Config{Barrier: b, MaxTTL: store.MaxTTL, MaxLeaseBatch: 1, Now: clock.now, Owner: "fuzz"})
	if err != nil {
		t.Fatal(err)
	}
	gaps, err := gap.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &schedule{
		t: t, ctx: ctx, clock: clock, s: s, b: b, leaser: leaser, gaps: gaps,
		streams: [2]*modelStream{
			{name: "a", ordered: true, low: 1, acked: map[int64][]byte{}},
			{name: "b", low: 1, acked: map[int64][]byte{}},
		},
	}
}

func (sc *schedule) next() byte {
	if sc.pos >= len(sc.prog) {
		return 0
	}
	c := sc.prog[sc.pos]
	sc.pos++
	return c
}

// errFailed unwinds a schedule whose failure went to schedule.failed.
var errFailed = errors.New("schedule failed")

func (sc *schedule) fatalf(format string, args ...any) {
	sc.t.Helper()
	msg := fmt.Sprintf("step %d: "+format, append([]any{sc.step}, args...)...)
	if sc.failed != nil {
		sc.failed(msg)
		panic(errFailed)
	}
	sc.t.Fatal(msg)
}

// expect checks an outcome against the model's: nil, or an error matching
// want.
func (sc *schedule) expect(op string, got, want error) {
	sc.t.Helper()
	switch {
	case want == nil && got != nil:
		sc.fatalf("%s: %v, want success", op, got)
	case want != nil && !errors.Is(got, want):
		sc.fatalf("%s: %v, want %v", op, got, want)
	}
}

const maxOps = 300

func (sc *schedule) run(prog []byte) {
	sc.prog = prog
	for sc.step = 0; sc.pos < len(prog) && sc.step < maxOps; sc.step++ {
		op := sc.next() % opCount
		flags := sc.next()
		arg := sc.next()
		m := sc.streams[flags&1]
		foreign := flags&2 != 0
		viaHandle := flags&4 != 0
		sc.apply(op, m, foreign, viaHandle, arg)
		sc.checkStream(m)
	}
	for _, m := range sc.streams {
		sc.checkStream(m)
		sc.audit(m)
	}
}

// pick returns the entry arg points at, nil if the stream has none.
func pick(m *modelStream, arg byte) *modelEntry {
	if len(m.entries) == 0 {
		return nil
	}
	return m.entries[int(arg)%len(m.entries)]
}

func (sc *schedule) token(e *modelEntry, foreign bool) store.Token {
	if foreign {
		return store.NewToken()
	}
	return e.token
}

func (sc *schedule) apply(op byte, m *modelStream, foreign, viaHandle bool, arg byte) {
	now := sc.clock.now()
	payload := []byte(fmt.Sprintf("p%d", sc.step))
	switch op {
	case opLease, opLeaseHandle:
		k := int(arg)%3 + 1
		ttl := ttls[int(arg/3)%len(ttls)]
		var got []store.Entry
		var handles []*sequence.Lease
		if op == opLeaseHandle {
			ls, err := sc.leaser.LeaseN(sc.ctx, m.name, k, &sequence.LeaseOpts{TTL: ttl, Kind: "k"})
			sc.expect("LeaseN", err, nil)
			for _, l := range ls {
				handles = append(handles, l)
				got = append(got, store.Entry{Number: l.Number(), Token: l.Token(), LeasedAt: l.LeasedAt(), ExpiresAt: l.ExpiresAt()})
			}
		} else {
			reqs := make([]store.LeaseRequest, k)
			for i := range reqs {
				reqs[i] = store.LeaseRequest{TTL: ttl, OperationID: fmt.Sprint("op", sc.step, i), Kind: "k"}
			}
			var err error
			got, err = sc.s.Lease(sc.ctx, m.name, reqs, &store.LeaseParams{Owner: "fuzz"})
			sc.expect("Lease", err, nil)
			handles = make([]*sequence.Lease, k)
		}
		for i, e := range got {
			want := int64(len(m.entries)) + 1
			if e.Number != want || !e.LeasedAt.Equal(now) || !e.ExpiresAt.Equal(now.Add(ttl)) {
				sc.fatalf("Lease %d: got number %d leased %v expiring %v, want %d at %v until %v (I1)",
					i, e.Number, e.LeasedAt, e.ExpiresAt, want, now, now.Add(ttl))
			}
			m.entries = append(m.entries, &modelEntry{number: e.Number, token: e.Token, state: store.Leased,
				leasedAt: now, expires: e.ExpiresAt, handle: handles[i], deadline: handleDeadline(now, ttl)})
		}

	case opCommitOrdered, opCommit:
		e := pick(m, arg)
		if e == nil {
			return
		}
		ordered := op == opCommitOrdered || m.ordered
		payload := sc.commitPayload(e)
		wantAt, want := sc.commitOutcome(m, e, foreign, ordered, payload, now)
		var got error
		var at time.Time
		if e.handle != nil && viaHandle && !ordered && !foreign {
			switch e.byHandle {
			case "committed":
				want = nil // a repeat, answered by the handle
				if !bytes.Equal(e.payload, payload) {
					want = store.ErrPayloadMismatch
				}
			case "released":
				want = store.ErrReleased
			}
			got = e.handle.Complete(sc.ctx, payload)
			at = wantAt
			// The handle answers repeats itself once it knows it committed;
			// a handle whose local deadline had passed first stays expired
			// and asks the store again.
			if got == nil && errors.Is(e.handle.Err(), sequence.ErrCommitted) {
				e.byHandle = "committed"
			}
		} else {
			at, got = sc.s.Commit(sc.ctx, m.name, e.number, sc.token(e, foreign), &store.CommitParams{Payload: payload, Ordered: ordered})
		}
		sc.expect(fmt.Sprintf("Commit %s/%d (ordered %v, foreign %v, expires %v, now %v)", m.name, e.number, ordered, foreign, e.expires, now), got, want)
		if got == nil {
			if !at.Equal(wantAt) {
				sc.fatalf("Commit %s/%d resolved at %v, want %v (I7: a retry returns the first time)", m.name, e.number, at, wantAt)
			}
			sc.committed(m, e, payload, now)
		}

	case opCommitBatch:
		if len(m.entries) == 0 {
			return
		}
		start := int(arg) % len(m.entries)
		end := min(start+int(arg>>5)%3+1, len(m.entries))
		items := make([]store.CommitItem, 0, end-start)
		wants := make([]error, 0, end-start)
		wantAt := make([]time.Time, 0, end-start)
		// The items are judged in order, each seeing the ones before it.
		undo := sc.snapshotStates(m)
		for i, e := range m.entries[start:end] {
			f := foreign && i == 1
			payload := sc.commitPayload(e)
			items = append(items, store.CommitItem{Number: e.number, Token: sc.token(e, f), Payload: payload})
			at, w := sc.commitOutcome(m, e, f, true, payload, now)
			wants, wantAt = append(wants, w), append(wantAt, at)
			if w == nil && e.state == store.Leased {
				e.state = store.Committed // provisionally, for the next items
			}
		}
		undo()
		res, err := sc.s.CommitBatch(sc.ctx, m.name, items, &store.CommitBatchParams{Ordered: true})
		sc.expect("CommitBatch", err, nil)
		for i, r := range res {
			e := m.entries[start+i]
			sc.expect(fmt.Sprintf("CommitBatch item %s/%d", m.name, e.number), r.Err, wants[i])
			if r.Err == nil {
				if !r.ResolvedAt.Equal(wantAt[i]) {
					sc.fatalf("CommitBatch %s/%d resolved at %v, want %v", m.name, e.number, r.ResolvedAt, wantAt[i])
				}
				sc.committed(m, e, items[i].Payload, now)
			}
		}

	case opRelease:
		e := pick(m, arg)
		if e == nil {
			return
		}
		var want error
		switch {
		case e.number < m.low:
			want = store.ErrTrimmed
		case foreign:
			want = store.ErrTokenMismatch
		case e.reason == store.ReasonReleased:
		case e.state != store.Leased:
			want = e.refusal()
		}
		var got error
		if e.handle != nil && viaHandle && !foreign {
			if e.byHandle == "released" {
				want = nil // a repeat, answered by the handle
			}
			got = e.handle.Release(sc.ctx)
			if got == nil && errors.Is(e.handle.Err(), sequence.ErrReleased) {
				e.byHandle = "released"
			}
		} else {
			got = sc.s.Release(sc.ctx, m.name, e.number, sc.token(e, foreign), nil)
		}
		sc.expect(fmt.Sprintf("Release %s/%d", m.name, e.number), got, want)
		if got == nil && e.state == store.Leased {
			e.state, e.reason, e.resolvedAt = store.Gap, store.ReasonReleased, now
		}

	case opExtend:
		e := pick(m, arg)
		if e == nil {
			return
		}
		ttl := ttls[int(arg>>4)%len(ttls)]
		var want error
		switch {
		case e.number < m.low:
			want = store.ErrTrimmed
		case foreign:
			want = store.ErrTokenMismatch
		case e.state != store.Leased:
			want = e.refusal()
		case !now.Before(e.expires):
			want = store.ErrExpired
		}
		var got error
		var expires time.Time
		if e.handle != nil && viaHandle && !foreign {
			// The handle answers first from what it knows: what it
			// resolved itself, or that it is over by its local deadline
			// (the first of the two to happen stays its answer).
			switch {
			case e.byHandle == "committed":
				want = store.ErrCommitted
			case e.byHandle == "released":
				want = store.ErrReleased
			case !now.Before(e.deadline):
				want = store.ErrExpired
			}
			got = e.handle.Extend(sc.ctx, ttl)
			expires = e.handle.ExpiresAt()
			if got == nil {
				e.deadline = handleDeadline(now, ttl)
			}
		} else {
			_, expires, got = sc.s.Extend(sc.ctx, m.name, e.number, sc.token(e, foreign), &store.ExtendParams{TTL: ttl})
		}
		sc.expect(fmt.Sprintf("Extend %s/%d", m.name, e.number), got, want)
		if got == nil {
			if !expires.Equal(now.Add(ttl)) {
				sc.fatalf("Extend %s/%d: expires %v, want %v", m.name, e.number, expires, now.Add(ttl))
			}
			e.expires = expires
		}

	case opAdvance:
		sc.clock.ns.Add(int64(steps[int(arg)%len(steps)]))

	case opResolveExpired:
		e := pick(m, arg)
		if e == nil {
			return
		}
		reason := []string{"", "abandoned"}[int(arg>>7)]
		want := sc.expiryOutcome(m, e, now)
		got := sc.s.ResolveExpired(sc.ctx, m.name, e.number, &store.ResolveExpiredParams{Reason: reason})
		sc.expect(fmt.Sprintf("ResolveExpired %s/%d", m.name, e.number), got, want)
		if got == nil {
			e.state, e.reason, e.resolvedAt = store.Gap, cmpOr(reason, store.ReasonExpired), now
		}

	case opResolveBatch:
		if len(m.entries) == 0 {
			return
		}
		var numbers, want []int64
		for i := int(arg) % len(m.entries); i < len(m.entries); i += int(arg>>4) + 1 {
			e := m.entries[i]
			numbers = append(numbers, e.number)
			if e.number >= m.low && e.state == store.Leased && !now.Before(e.expires) {
				want = append(want, e.number)
			}
		}
		got, err := sc.s.ResolveExpiredBatch(sc.ctx, m.name, numbers, nil)
		sc.expect("ResolveExpiredBatch", err, nil)
		if !slices.Equal(got, want) {
			sc.fatalf("ResolveExpiredBatch %s %v resolved %v, want %v", m.name, numbers, got, want)
		}
		for _, n := range got {
			e := m.entries[n-1]
			e.state, e.reason, e.resolvedAt = store.Gap, store.ReasonExpired, now
		}

	case opRecover:
		e := pick(m, arg)
		if e == nil {
			return
		}
		want := sc.expiryOutcome(m, e, now)
		moved, got := sc.s.RecoverExpired(sc.ctx, m.name, e.number, &store.RecoverParams{Payload: payload, RecoveryType: "retry", Owner: "fuzz"})
		sc.expect(fmt.Sprintf("RecoverExpired %s/%d", m.name, e.number), got, want)
		if got == nil {
			if moved != int64(len(m.entries))+1 {
				sc.fatalf("RecoverExpired %s/%d moved to %d, want %d", m.name, e.number, moved, len(m.entries)+1)
			}
			e.state, e.reason, e.resolvedAt, e.recoveredAs = store.Gap, store.ReasonRecovered, now, moved
			es, err := sc.s.Read(sc.ctx, m.name, moved-1, 1)
			if err != nil || len(es) != 1 {
				sc.fatalf("Read %s/%d: %v, %v", m.name, moved, es, err)
			}
			m.entries = append(m.entries, &modelEntry{number: moved, token: es[0].Token, state: store.Committed,
				leasedAt: now, expires: now, resolvedAt: now, payload: payload, recovered: e.number})
		}

	case opFill:
		e := pick(m, arg)
		if e == nil {
			return
		}
		var want error
		switch {
		case e.number < m.low:
			want = store.ErrTrimmed
		case e.state != store.Gap:
			want = store.ErrNotGap // leased, committed or filled
		case e.recoveredAs != 0:
			want = gap.ErrRecovered // its work is committed elsewhere
		}
		always := gap.FillPolicyFunc(func(context.Context, gap.Gap) (bool, error) { return true, nil })
		got := sc.gaps.Fill(sc.ctx, m.name, e.number, payload, &gap.FillOpts{FilledBy: "fuzz", Policy: always})
		sc.expect(fmt.Sprintf("Fill %s/%d", m.name, e.number), got, want)
		if got == nil {
			e.state, e.filled, e.payload = store.Committed, true, payload
		}

	case opTrim:
		if len(m.entries) == 0 {
			return
		}
		// Retention never passes the reader (I6: trims are explicit and
		// below what every reader consumed).
		below := min(int64(arg)+1, m.read+1)
		low, err := sc.s.Trim(sc.ctx, m.name, below)
		sc.expect("Trim", err, nil)
		want := max(m.low, min(below, m.watermark()+1))
		if low != want {
			sc.fatalf("Trim %s below %d: low point %d, want %d", m.name, below, low, want)
		}
		m.low = low

	case opRead:
		sc.catchUp(m)
	}
}

// commitOutcome is what Commit of e must return: the resolution time, or
// the error.
func (sc *schedule) commitOutcome(m *modelStream, e *modelEntry, foreign, ordered bool, payload []byte, now time.Time) (time.Time, error) {
	switch {
	case e.number < m.low:
		return time.Time{}, store.ErrTrimmed
	case foreign:
		return time.Time{}, store.ErrTokenMismatch
	case e.state == store.Committed && !e.filled && !bytes.Equal(e.payload, payload):
		return time.Time{}, store.ErrPayloadMismatch // not a retry
	case e.state == store.Committed && !e.filled:
		return e.resolvedAt, nil // I7: the holder's retry
	case e.state != store.Leased:
		return time.Time{}, e.refusal()
	case !now.Before(e.expires):
		return time.Time{}, store.ErrExpired // I3
	case ordered && slices.ContainsFunc(m.entries[:e.number-1], func(x *modelEntry) bool { return x.state == store.Leased }):
		return time.Time{}, store.ErrNotReady // I4
	}
	return now, nil
}

// expiryOutcome is what ResolveExpired or RecoverExpired of e must return.
func (sc *schedule) expiryOutcome(m *modelStream, e *modelEntry, now time.Time) error {
	switch {
	case e.number < m.low:
		return store.ErrTrimmed
	case e.state != store.Leased:
		return e.refusal()
	case now.Before(e.expires):
		return store.ErrNotExpired
	}
	return nil
}

// commitPayload is the payload of a commit of e: on even steps e's own,
// which a retry repeats (I7), on odd steps the step's, which differs from
// any committed before (ErrPayloadMismatch).
func (sc *schedule) commitPayload(e *modelEntry) []byte {
	if sc.step%2 == 0 {
		return fmt.Appendf(nil, "e%d", e.number)
	}
	return fmt.Appendf(nil, "p%d", sc.step)
}

func (sc *schedule) committed(m *modelStream, e *modelEntry, payload []byte, now time.Time) {
	if e.state == store.Committed {
		return // a retry: nothing changed
	}
	e.state, e.resolvedAt, e.payload = store.Committed, now, payload
	m.acked[e.number] = payload
}

// snapshotStates returns a function that restores the states of m's
// entries.
func (sc *schedule) snapshotStates(m *modelStream) func() {
	states := make([]store.State, len(m.entries))
	for i, e := range m.entries {
		states[i] = e.state
	}
	return func() {
		for i, e := range m.entries {
			e.state = states[i]
		}
	}
}

// catchUp has the reader read what resolved since its checkpoint, through
// the barrier: consecutive numbers (gaps included), never past the
// watermark (I5).
func (sc *schedule) catchUp(m *modelStream) {
	w := m.watermark()
	for e, err := range sc.b.Entries(sc.ctx, m.name, &barrier.ReadOpts{After: m.read, IncludeGaps: true}) {
		if err != nil {
			sc.fatalf("reader of %s after %d: %v", m.name, m.read, err)
		}
		if e.Number != m.read+1 || e.Number > w {
			sc.fatalf("reader of %s read %d after %d, watermark %d (I5)", m.name, e.Number, m.read, w)
		}
		m.read = e.Number
		m.observed = append(m.observed, e.Number)
	}
	if m.read != w && len(m.entries) > 0 {
		sc.fatalf("reader of %s stopped at %d, watermark %d", m.name, m.read, w)
	}
}

// checkStream compares the store's Stats and the barrier's watermark with
// the model.
func (sc *schedule) checkStream(m *modelStream) {
	st, err := sc.s.Stats(sc.ctx, m.name)
	if len(m.entries) == 0 {
		if !errors.Is(err, store.ErrStreamNotFound) {
			sc.fatalf("Stats of the unused stream %s: %+v, %v", m.name, st, err)
		}
		return
	}
	if err != nil {
		sc.fatalf("Stats %s: %v", m.name, err)
	}
	w := m.watermark()
	want := store.StreamStats{Stream: m.name, NextNumber: int64(len(m.entries)) + 1, Watermark: w,
		Unresolved: m.unresolved(), LowPoint: m.low}
	if want.Unresolved > 0 {
		want.OldestUnresolved = w + 1
		want.OldestUnresolvedAt = m.entries[w].leasedAt
	}
	if st != want {
		sc.fatalf("Stats %s: %+v, want %+v", m.name, st, want)
	}
	bw, err := sc.b.Watermark(sc.ctx, m.name)
	if err != nil || bw != w {
		sc.fatalf("barrier watermark of %s: %d, %v; the store's is %d", m.name, bw, err, w)
	}
	if w < m.lastW {
		sc.fatalf("watermark of %s went back from %d to %d (I5)", m.name, m.lastW, w)
	}
	m.lastW = w
}

// audit runs the audit package over the stream and compares every retained
// entry with the model.
func (sc *schedule) audit(m *modelStream) {
	if len(m.entries) == 0 {
		return
	}
	acked := map[int64][]byte{}
	for n, p := range m.acked {
		if n >= m.low && !m.entries[n-1].filled {
			acked[n] = p
		}
	}
	observed := append([]int64{}, m.observed...)
	for i, n := range observed { // what was read before a trim is below the low point
		if n >= m.low {
			observed = observed[i:]
			break
		}
		if i == len(observed)-1 {
			observed = observed[:0]
		}
	}
	r, err := audit.Stream(sc.ctx, sc.s, m.name, &audit.Options{Ordered: m.ordered, Observed: observed,
		ObservedGaps: true, Acknowledged: acked})
	if err != nil {
		sc.fatalf("audit: %v", err)
	}
	if !r.OK() {
		sc.fatalf("%v", r.Err())
	}
	es, err := sc.s.Read(sc.ctx, m.name, m.low-1, store.MaxListLimit)
	if err != nil {
		sc.fatalf("Read: %v", err)
	}
	if len(es) != len(m.entries)-int(m.low-1) {
		sc.fatalf("%s: read %d entries from %d, the model has %d", m.name, len(es), m.low, len(m.entries))
	}
	for _, e := range es {
		x := m.entries[e.Number-1]
		if e.State != x.state || e.Token != x.token || !e.ExpiresAt.Equal(x.expires) ||
			!e.ResolvedAt.Equal(x.resolvedAt) || !bytes.Equal(e.Payload, x.payload) ||
			e.GapReason != x.reason || e.RecoveredAs != x.recoveredAs || e.RecoveredFrom != x.recovered ||
			e.FilledAt.IsZero() == x.filled {
			sc.fatalf("%s/%d: the store has %+v, the model %+v", m.name, e.Number, e, *x)
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// lateCommits lets commits through after the expiry: a Commit at or after
// the entry's expiry is made at an instant pinned just before it (breaks
// I3).
type lateCommits struct{ *memory.Store }

func (s lateCommits) Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error) {
	es, err := s.Store.Read(ctx, stream, number-1, 1)
	now, _ := s.Store.Now(ctx)
	if err == nil && len(es) == 1 && !now.Before(es[0].ExpiresAt) {
		before := es[0].ExpiresAt.Add(-time.Microsecond)
		p.Now = &before
	}
	return s.Store.Commit(ctx, stream, number, token, p)
}

// unorderedCommits drops the Ordered flag of Commit (breaks I4).
type unorderedCommits struct{ *memory.Store }

func (s unorderedCommits) Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error) {
	p.Ordered = false
	return s.Store.Commit(ctx, stream, number, token, p)
}

// TestScheduleDetectsFaults runs the seed schedules against stores that
// break one rule each, and expects the schedule to fail: FuzzSchedule can
// fail.
func TestScheduleDetectsFaults(t *testing.T) {
	t.Parallel()
	for name, wrap := range map[string]func(*memory.Store) scheduleStore{
		"commit after expiry (I3)":         func(s *memory.Store) scheduleStore { return lateCommits{s} },
		"ordered commit out of order (I4)": func(s *memory.Store) scheduleStore { return unorderedCommits{s} },
	} {
		t.Run(name, func(t *testing.T) {
			var failures []string
			for _, seed := range scheduleSeeds() {
				func() {
					sc := newSchedule(t, wrap)
					sc.failed = func(msg string) { failures = append(failures, msg) }
					defer func() {
						if r := recover(); r != nil && r != errFailed {
							panic(r)
						}
					}()
					sc.run(seed)
				}()
			}
			if len(failures) == 0 {
				t.Fatal("no seed schedule noticed the fault")
			}
			t.Logf("%d of %d seeds noticed it, e.g. %s", len(failures), len(scheduleSeeds()), failures[0])
		})
	}
}
