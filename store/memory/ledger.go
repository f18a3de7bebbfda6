package memory

import (
	"slices"
	"time"

	"github.com/seqlease/seqlease/store"
)

// chunkBits sets the ledger's chunk size: 256 entries, 32 KiB of slots.
const (
	chunkBits = 8
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// ledger holds the retained entries of one stream, low..last, in fixed-size
// chunks: leasing appends without ever copying the entries already there
// (a growing slice would copy the whole ledger under the stream's lock),
// and Trim drops whole chunks. Entry number n lives in slot n-base.
//
// A slot holds no pointer: its texts, locations and payload live in side
// tables of its chunk, and its times are microseconds. The garbage collector
// therefore never scans the slots, however long the ledger grows (it scans
// only the side tables: a few distinct texts per chunk, and the payload
// blocks, which hold no pointers either), and a new chunk needs no
// pointer bitmap.
type ledger struct {
	chunks []*chunk
	base   int64 // the number of chunks[0].slots[0]
	low    int64 // the first retained number; Trim raises it
	last   int64 // the highest number handed out (N)
}

func newLedger() ledger { return ledger{base: 1, low: 1} }

// chunk is chunkSize consecutive entries and what their slots refer to.
type chunk struct {
	slots *[chunkSize]slot // pointer-free: never scanned
	texts []string         // the texts of the entries; slot.text indexes it
	last  [nTexts]uint32   // per text field, the index+1 of its last text
	zones []*time.Location // the distinct locations of the entries' times; slot.zone indexes it
	small []byte           // payloads of up to smallPayload bytes, back to back
	large [][]byte         // larger payloads, one each
}

// smallPayload is the largest payload kept in a chunk's shared byte
// arena; larger ones get a block of their own, so the arena never copies a
// large payload when it grows.
const smallPayload = 4 << 10

// The times of an entry, indexes of slot.at and slot.zone.
const (
	tLeased = iota
	tExpires
	tResolved
	tFilled
	nTimes
)

// The texts of an entry, indexes of slot.text.
const (
	xOwner = iota
	xOperation
	xKind
	xReason
	xFilledBy
	xRecoveryType
	nTexts
)

// slot is an entry without the pointers: see ledger.
type slot struct {
	token         store.Token
	at            [nTimes]int64  // microseconds since the Unix epoch
	renewals      int64          //
	recoveredAs   int64          //
	recoveredFrom int64          //
	text          [nTexts]uint32 // index+1 in chunk.texts; 0: ""
	payload       ref            //
	zone          [nTimes]uint32 // index+1 in chunk.zones; 0: the zero Time
	state         state          //
}

// ref locates a payload in a chunk: n-1 bytes at off in small when large
// is 0, else all of large[large-1]. The zero ref is a nil payload.
type ref struct{ large, off, n uint32 }

// state is an entry's store.State in a byte.
type state uint8

const (
	stateNone state = iota // a trimmed (cleared) slot
	stateLeased
	stateCommitted
	stateGap
)

func (s state) String() store.State {
	switch s {
	case stateLeased:
		return store.Leased
	case stateCommitted:
		return store.Committed
	case stateGap:
		return store.Gap
	}
	return ""
}

func (s state) resolved() bool { return s == stateCommitted || s == stateGap }

// rec is an entry of the ledger in place: its slot and the chunk that holds
// what the slot refers to. It is valid while the stream's lock is held and
// no Trim runs.
type rec struct {
	*slot
	c *chunk
}

// at returns the entry of number n, low <= n <= last.
func (l *ledger) at(n int64) rec {
	i := n - l.base
	c := l.chunks[i>>chunkBits]
	return rec{&c.slots[i&chunkMask], c}
}

// add appends a leased entry as number last+1 and returns it.
func (l *ledger) add(token store.Token, owner, operationID, kind string, leasedAt, expiresAt time.Time) rec {
	n := l.last + 1
	if int((n-l.base)>>chunkBits) == len(l.chunks) {
		l.chunks = append(l.chunks, &chunk{slots: new([chunkSize]slot)})
	}
	r := l.at(n)
	*r.slot = slot{token: token, state: stateLeased}
	r.setText(xOwner, owner)
	r.setText(xOperation, operationID)
	r.setText(xKind, kind)
	r.setTime(tLeased, leasedAt)
	r.setTime(tExpires, expiresAt)
	l.last = n
	return r
}

func (r rec) state() store.State { return r.slot.state.String() }

// time returns the entry's time i.
func (r rec) time(i int) time.Time {
	z := r.zone[i]
	if z == 0 {
		return time.Time{}
	}
	return time.UnixMicro(r.at[i]).In(r.c.zones[z-1])
}

// setTime sets the entry's time i to t, which has microsecond precision and
// no monotonic reading (store.Micro). Its location is kept, so the time
// reads back equal to t by == as well as by Equal.
func (r rec) setTime(i int, t time.Time) {
	if t == (time.Time{}) {
		r.at[i], r.zone[i] = 0, 0
		return
	}
	r.at[i], r.zone[i] = t.UnixMicro(), r.c.zoneOf(t.Location())
}

// zoneOf returns the index+1 of loc in c.zones, adding it if it is new. A
// chunk's times nearly always share one or two locations (the store's
// clock's, and that of the times the caller pins), found at once.
func (c *chunk) zoneOf(loc *time.Location) uint32 {
	for i := len(c.zones) - 1; i >= 0; i-- {
		if c.zones[i] == loc {
			return uint32(i + 1)
		}
	}
	c.zones = append(c.zones, loc)
	return uint32(len(c.zones))
}

func (r rec) text(i int) string {
	if x := r.slot.text[i]; x != 0 {
		return r.c.texts[x-1]
	}
	return ""
}

// setText sets the entry's text i to s. Consecutive entries usually repeat
// their owner, kind and reason: a text equal to the field's previous one in
// the chunk is stored once. (The string itself is shared with the caller,
// not copied: strings are immutable.)
func (r rec) setText(i int, s string) {
	c := r.c
	switch last := c.last[i]; {
	case s == "":
		r.slot.text[i] = 0
	case last != 0 && c.texts[last-1] == s:
		r.slot.text[i] = last
	default:
		c.texts = append(c.texts, s)
		c.last[i] = uint32(len(c.texts))
		r.slot.text[i] = c.last[i]
	}
}

// payload returns the entry's payload, which aliases the chunk: copy it
// before the stream's lock is released.
func (r rec) payload() []byte {
	p := r.slot.payload
	switch {
	case p.large != 0:
		return r.c.large[p.large-1]
	case p.n == 1:
		return []byte{} // empty, not none: what PostgreSQL gives back too
	case p.n != 0:
		return r.c.small[p.off : p.off+p.n-1 : p.off+p.n-1]
	}
	return nil
}

// setPayload copies b (nil for none) into the chunk as the entry's payload.
// A payload that is replaced (a gap filled) stays in the chunk until the
// chunk is trimmed.
func (r rec) setPayload(b []byte) {
	c := r.c
	switch {
	case b == nil:
		r.slot.payload = ref{}
	case len(b) > smallPayload:
		c.large = append(c.large, slices.Clone(b))
		r.slot.payload = ref{large: uint32(len(c.large))}
	default:
		r.slot.payload = ref{off: uint32(len(c.small)), n: uint32(len(b)) + 1}
		c.small = append(c.small, b...)
	}
}

// entry returns a copy of the entry, number n of stream name, for a caller
// outside the stream's lock (its payload is a copy too).
func (r rec) entry(name string, n int64) store.Entry {
	return store.Entry{
		Stream:        name,
		Number:        n,
		State:         r.state(),
		Token:         r.token,
		Owner:         r.text(xOwner),
		OperationID:   r.text(xOperation),
		Kind:          r.text(xKind),
		LeasedAt:      r.time(tLeased),
		ExpiresAt:     r.time(tExpires),
		Renewals:      int(r.renewals),
		ResolvedAt:    r.time(tResolved),
		Payload:       slices.Clone(r.payload()),
		GapReason:     r.text(xReason),
		RecoveredAs:   r.recoveredAs,
		FilledAt:      r.time(tFilled),
		FilledBy:      r.text(xFilledBy),
		RecoveredFrom: r.recoveredFrom,
		RecoveryType:  r.text(xRecoveryType),
	}
}

// filled reports whether the entry is a gap since filled.
func (r rec) filled() bool { return !r.time(tFilled).IsZero() }

// clone returns copies of the entries from..to-1 of stream name, for a
// caller outside the stream's lock.
func (l *ledger) clone(name string, from, to int64) []store.Entry {
	if to <= from {
		return nil
	}
	out := make([]store.Entry, 0, to-from)
	for n := from; n < to; n++ {
		out = append(out, l.at(n).entry(name, n))
	}
	return out
}

// trim forgets the entries below bound (low < bound <= last+1) and returns
// how many of them were open gaps. The chunks wholly below bound go, with
// their texts and payloads, so their memory can be collected; the slots of
// the rest of the trimmed entries are cleared, and what they referred to
// goes when their chunk does.
func (l *ledger) trim(bound int64) (gaps int64) {
	for n := l.low; n < bound; n++ {
		r := l.at(n)
		if r.slot.state == stateGap {
			gaps++
		}
		*r.slot = slot{}
	}
	l.low = bound
	if k := int((bound - l.base) >> chunkBits); k > 0 {
		clear(l.chunks[:k])
		if k > len(l.chunks)/2 { // re-slice into a fresh array, so the old one goes too
			l.chunks = append([]*chunk(nil), l.chunks[k:]...)
		} else {
			l.chunks = l.chunks[k:]
		}
		l.base += int64(k) << chunkBits
	}
	return gaps
}
