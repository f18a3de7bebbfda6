package model

import (
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"time"

	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
)

// This file is the reference model: a stream ledger and named leases as
// plain maps and slices, changed one operation at a time with the
// semantics of DESIGN.md and of the storage contract (the method comments
// of storetest.Store and storetest.NamedLeaseStore), and of the handles of
// package sequence on top. Each method checks an outcome the real system
// returned against what the model allows in its current state and, when it
// is allowed, applies it; it returns a description of the discrepancy
// otherwise.
//
// Time is a window: the model does not know when, on the backend's clock,
// an operation of a round took effect, only that it was between two readings
// of that clock taken before and after the round. On the memory backend the
// clock stands still during a round and the window is one instant; on
// PostgreSQL it spans the round. An outcome that depends on expiry is
// allowed when some instant of the window allows it; an operation that
// returns the backend's time is held to that time exactly.

// window is the span of the backend's clock a round ran in.
type window struct{ lo, hi time.Time }

// live reports whether a lease expiring at exp was live at some instant of w.
func (w window) live(exp time.Time) bool { return w.lo.Before(exp) }

// expired reports whether a lease expiring at exp was expired at some
// instant of w (expiry is at exp itself, I3).
func (w window) expired(exp time.Time) bool { return !w.hi.Before(exp) }

// has reports whether t is in w.
func (w window) has(t time.Time) bool { return !t.Before(w.lo) && !t.After(w.hi) }

func (w window) String() string {
	if w.lo.Equal(w.hi) {
		return "at " + stamp(w.lo)
	}
	return fmt.Sprintf("in [%s, %s]", stamp(w.lo), stamp(w.hi))
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

// The gap reasons the fill policy of the model test accepts.
var fillable = []string{store.ReasonReleased, "recovery-failed"}

// filledBy is who fills gaps in the model test.
const filledBy = "model"

// mentry is an entry of the model's ledger.
type mentry struct {
	State         store.State
	Token         store.Token // zero for an entry the cleanup appended
	OpID          string
	LeasedAt      time.Time
	ExpiresAt     time.Time
	Payload       string
	GapReason     string
	RecoveredAs   int64
	RecoveredFrom int64
	RecoveryType  string
	FilledBy      string
}

// resolvedErr is why a resolved entry refuses a holder's operation.
func (e *mentry) resolvedErr() error {
	switch {
	case e.State == store.Committed && e.FilledBy == "":
		return store.ErrCommitted
	case e.GapReason == store.ReasonReleased:
		return store.ErrReleased
	case e.GapReason == store.ReasonExpired:
		return store.ErrExpired
	}
	return store.ErrGap // another reason; a filled gap keeps its reason
}

// mstream is a stream: entry n is Entries[n-1]; those below Low were
// trimmed (they stay here, the backend no longer has them).
type mstream struct {
	Low     int64
	Entries []mentry
}

func (s *mstream) last() int64         { return int64(len(s.Entries)) }
func (s *mstream) at(n int64) *mentry  { return &s.Entries[n-1] }
func (s *mstream) leased(n int64) bool { return s.Entries[n-1].State == store.Leased }
func (s *mstream) unresolvedBelow(n int64) bool {
	for m := int64(1); m < n; m++ {
		if s.leased(m) {
			return true
		}
	}
	return false
}

// watermark is the largest w with 1..w resolved.
func (s *mstream) watermark() int64 {
	for n := int64(1); n <= s.last(); n++ {
		if s.leased(n) {
			return n - 1
		}
	}
	return s.last()
}

// local is what a sequence.Lease handle knows of its own resolution.
type local uint8

const (
	localNone local = iota
	localCommitted
	localReleased
)

// mhandle is a sequence.Lease handle.
type mhandle struct {
	Stream string
	Number int64
	Token  store.Token
	Local  local
	// Deadline is the earliest instant, on the backend's clock, at which
	// the handle's local deadline may pass: an ordered commit waiting for
	// earlier numbers then gives up with ErrExpired.
	Deadline time.Time
	// Latest is the latest instant at which it may pass: from then on the
	// handle is surely over locally. The request that set the deadline
	// started somewhere in its round's window, so the two are that
	// window's width apart.
	Latest time.Time
}

// mholding is the current or last holding of a named lease.
type mholding struct {
	Owner     string
	Fence     int64
	ExpiresAt time.Time
	End       store.LeaseEventKind // empty while not ended
}

// mhold is what an acquire step got, for the steps that renew or release it.
type mhold struct {
	Name, Owner string
	Fence       int64
}

// ledger is the whole model.
type ledger struct {
	streams map[string]*mstream
	handles map[ref]mhandle
	names   map[string]mholding
	holds   map[int]mhold
}

func newLedger() *ledger {
	return &ledger{streams: map[string]*mstream{}, handles: map[ref]mhandle{}, names: map[string]mholding{},
		holds: map[int]mhold{}}
}

func (l *ledger) clone() *ledger {
	c := &ledger{streams: make(map[string]*mstream, len(l.streams)), handles: make(map[ref]mhandle, len(l.handles)),
		names: make(map[string]mholding, len(l.names)), holds: make(map[int]mhold, len(l.holds))}
	for k, s := range l.streams {
		c.streams[k] = &mstream{Low: s.Low, Entries: append([]mentry(nil), s.Entries...)}
	}
	for k, v := range l.handles {
		c.handles[k] = v
	}
	for k, v := range l.names {
		c.names[k] = v
	}
	for k, v := range l.holds {
		c.holds[k] = v
	}
	return c
}

// fingerprint hashes the whole state: equal states hash equal.
func (l *ledger) fingerprint() uint64 {
	var h uint64
	mix := func(v uint64) { h = h*1099511628211 ^ v }
	for _, name := range streams {
		if s := l.streams[name]; s != nil {
			mix(uint64(s.Low))
			for _, e := range s.Entries {
				mix(maphash.Comparable(seed, e))
			}
		}
	}
	var sum uint64 // maps: a sum does not depend on the order of iteration
	for k, v := range l.handles {
		sum += maphash.Comparable(seed, struct {
			K ref
			V mhandle
		}{k, v})
	}
	for k, v := range l.names {
		sum += maphash.Comparable(seed, struct {
			K string
			V mholding
		}{k, v})
	}
	for k, v := range l.holds {
		sum += maphash.Comparable(seed, struct {
			K int
			V mhold
		}{k, v})
	}
	mix(sum)
	return h
}

var seed = maphash.MakeSeed()

// allow checks got against what the model allows: success when ok, or an
// error matching one of errs.
func allow(got error, ok bool, errs ...error) error {
	if got == nil && ok {
		return nil
	}
	for _, e := range errs {
		if got != nil && errors.Is(got, e) {
			return nil
		}
	}
	var want []string
	if ok {
		want = append(want, "success")
	}
	for _, e := range errs {
		want = append(want, fmt.Sprintf("%q", e))
	}
	if len(want) == 0 {
		want = append(want, "nothing (no outcome fits)")
	}
	gotS := "success"
	if got != nil {
		gotS = fmt.Sprintf("%q", got)
	}
	return fmt.Errorf("got %s, the model allows %s", gotS, strings.Join(want, " or "))
}

// entry finds number n of stream for a holder's call: the error the
// backend gives before looking at the entry's state, if any. A nil token
// skips the token check.
func (l *ledger) entry(stream string, n int64, token *store.Token) (*mentry, error) {
	s, ok := l.streams[stream]
	switch {
	case !ok:
		return nil, store.ErrNotFound
	case n < s.Low:
		return nil, store.ErrTrimmed
	case n > s.last():
		return nil, store.ErrNotFound
	}
	e := s.at(n)
	if token != nil && e.Token != *token {
		return nil, store.ErrTokenMismatch
	}
	return e, nil
}

// localDeadline is the backend instant at which a handle granted ttl at a
// request sent at lo ends locally (sequence.Config Margin left at its
// default): the earliest for lo the start of the request's window, the
// latest for lo its end.
func localDeadline(lo time.Time, ttl time.Duration) time.Time {
	return lo.Add(ttl - min(sequence.DefaultMaxMargin, ttl/10))
}

// lease applies a Lease of len(got) numbers with ttl, made by step id. got
// are the handles' views: number, token, operation id, LeasedAt, ExpiresAt.
func (l *ledger) lease(w window, id int, stream string, ttl time.Duration, got []store.Entry) error {
	s, ok := l.streams[stream]
	if !ok {
		s = &mstream{Low: 1}
		l.streams[stream] = s
	}
	for i, e := range got {
		n := s.last() + 1
		switch {
		case e.Number != n:
			return fmt.Errorf("lease %d of %d got number %d, the model's next is %d", i+1, len(got), e.Number, n)
		case e.OperationID != opID(id):
			return fmt.Errorf("number %d has operation id %q, want %q", n, e.OperationID, opID(id))
		case !w.has(e.LeasedAt):
			return fmt.Errorf("number %d leased at %s, not %s", n, stamp(e.LeasedAt), w)
		case !e.ExpiresAt.Equal(e.LeasedAt.Add(ttl)):
			return fmt.Errorf("number %d expires at %s, want LeasedAt + %v", n, stamp(e.ExpiresAt), ttl)
		}
		s.Entries = append(s.Entries, mentry{State: store.Leased, Token: e.Token, OpID: e.OperationID,
			LeasedAt: e.LeasedAt, ExpiresAt: e.ExpiresAt})
		l.handles[ref{id, i}] = mhandle{Stream: stream, Number: n, Token: e.Token,
			Deadline: localDeadline(w.lo, ttl), Latest: localDeadline(w.hi, ttl)}
	}
	return nil
}

// commit applies Lease.Complete (ordered false) or Lease.Commit (ordered
// true) of handle h with payload.
func (l *ledger) commit(w window, h ref, payload string, ordered bool, got error) error {
	hd := l.handles[h]
	s := l.streams[hd.Stream]
	// A handle answers a repeat itself, except when its local deadline had
	// passed before it resolved the number: then it asks the backend,
	// which may have trimmed the number since.
	trimmed := []error{}
	if hd.Number < s.Low {
		trimmed = append(trimmed, store.ErrTrimmed)
	}
	switch hd.Local {
	case localCommitted:
		return allow(got, true, trimmed...)
	case localReleased:
		return allow(got, false, append(trimmed, store.ErrReleased)...)
	}
	e, err := l.entry(hd.Stream, hd.Number, &hd.Token)
	if err != nil {
		return allow(got, false, err)
	}
	ok := false
	var errs []error
	switch {
	case e.State == store.Committed && e.FilledBy == "":
		ok = true // the holder's repeat (I7)
	case e.State.Resolved():
		errs = append(errs, e.resolvedErr())
	default:
		earlier := ordered && s.unresolvedBelow(hd.Number)
		if w.expired(e.ExpiresAt) {
			errs = append(errs, store.ErrExpired)
		}
		if w.live(e.ExpiresAt) && !earlier {
			ok = true
		}
		if earlier && !w.hi.Before(hd.Deadline) {
			errs = append(errs, store.ErrExpired) // gave up waiting at its local deadline
		}
	}
	if err := allow(got, ok, errs...); err != nil {
		return err
	}
	if got == nil {
		if e.State == store.Leased {
			e.State, e.Payload = store.Committed, payload
		}
		hd.Local = localCommitted
		l.handles[h] = hd
	}
	return nil
}

// release applies Lease.Release of handle h.
func (l *ledger) release(h ref, got error) error {
	hd := l.handles[h]
	s := l.streams[hd.Stream]
	if hd.Local == localReleased {
		if hd.Number < s.Low {
			return allow(got, true, store.ErrTrimmed)
		}
		return allow(got, true)
	}
	e, err := l.entry(hd.Stream, hd.Number, &hd.Token)
	if err != nil {
		return allow(got, false, err)
	}
	switch {
	case e.GapReason == store.ReasonReleased:
		if err := allow(got, true); err != nil { // a repeat, the gap filled since or not
			return err
		}
	case e.State.Resolved():
		return allow(got, false, e.resolvedErr())
	default:
		if err := allow(got, true); err != nil { // after its expiry too, while unresolved
			return err
		}
		e.State, e.GapReason = store.Gap, store.ReasonReleased
	}
	hd.Local = localReleased
	l.handles[h] = hd
	return nil
}

// extend applies Lease.Extend of handle h by ttl; exp is the handle's
// ExpiresAt after a success.
func (l *ledger) extend(w window, h ref, ttl time.Duration, got error, exp time.Time) error {
	hd := l.handles[h]
	// The handle answers first from what it knows (Err): resolved by it,
	// or over by its local estimate, whose first cause it keeps. It then
	// refuses without asking the backend, so that it never renews a lease
	// its holder was told to give up.
	var local []error
	if !w.hi.Before(hd.Deadline) {
		local = append(local, store.ErrExpired)
	}
	switch hd.Local {
	case localCommitted:
		return allow(got, false, append(local, store.ErrCommitted)...)
	case localReleased:
		return allow(got, false, append(local, store.ErrReleased)...)
	}
	if !w.lo.Before(hd.Latest) {
		return allow(got, false, store.ErrExpired) // surely over locally
	}
	e, err := l.entry(hd.Stream, hd.Number, &hd.Token)
	if err != nil {
		return allow(got, false, append(local, err)...)
	}
	if e.State.Resolved() {
		return allow(got, false, append(local, e.resolvedErr())...)
	}
	errs := local
	if w.expired(e.ExpiresAt) {
		errs = append(errs, store.ErrExpired)
	}
	if err := allow(got, w.live(e.ExpiresAt), errs...); err != nil || got != nil {
		return err
	}
	at := exp.Add(-ttl) // the backend's now of the extension
	switch {
	case !w.has(at):
		return fmt.Errorf("extended at %s (new expiry %s - %v), not %s", stamp(at), stamp(exp), ttl, w)
	case !at.Before(e.ExpiresAt):
		return fmt.Errorf("extended at %s, at or after the expiry %s (I3)", stamp(at), stamp(e.ExpiresAt))
	}
	e.ExpiresAt = exp
	// A handle extends only while it is not over locally: the local
	// deadline moves with every success.
	hd.Deadline, hd.Latest = localDeadline(w.lo, ttl), localDeadline(w.hi, ttl)
	l.handles[h] = hd
	return nil
}

// foreign applies a store Commit of handle h's number with a token that
// never held it.
func (l *ledger) foreign(h ref, got error) error {
	hd := l.handles[h]
	if _, err := l.entry(hd.Stream, hd.Number, nil); err != nil {
		return allow(got, false, err)
	}
	return allow(got, false, store.ErrTokenMismatch)
}

// fill applies gap.Gaps.Fill of number n of stream with payload, under the
// policy gap.FillReasons(fillable...).
func (l *ledger) fill(stream string, n int64, payload string, got error) error {
	if _, ok := l.streams[stream]; !ok {
		// A read racing the stream's first lease may find the stream
		// but not yet its entries: the number was never handed out
		// either way.
		return allow(got, false, store.ErrStreamNotFound, store.ErrNotFound)
	}
	e, err := l.entry(stream, n, nil)
	if err != nil {
		return allow(got, false, err)
	}
	switch {
	case e.State != store.Gap:
		return allow(got, false, gap.ErrNotGap)
	case e.RecoveredAs != 0:
		return allow(got, false, gap.ErrRecovered)
	case !contains(fillable, e.GapReason):
		return allow(got, false, gap.ErrFillRefused)
	}
	if err := allow(got, true); err != nil {
		return err
	}
	e.State, e.Payload, e.FilledBy = store.Committed, payload, filledBy
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// trim applies Trim(stream, below), which returned low.
func (l *ledger) trim(stream string, below, low int64, got error) error {
	s, ok := l.streams[stream]
	if !ok {
		return allow(got, false, store.ErrStreamNotFound)
	}
	if err := allow(got, true); err != nil {
		return err
	}
	want := max(s.Low, min(below, s.watermark()+1))
	if low != want {
		return fmt.Errorf("trim below %d returned low point %d; the model's is %d (watermark %d, low point %d)",
			below, low, want, s.watermark(), s.Low)
	}
	s.Low = want
	return nil
}

// read applies a reader's catch-up after position after: got must be
// every resolved entry after it up to the watermark, gaps included (I5).
func (l *ledger) read(stream string, after int64, got []store.Entry, gotErr error) error {
	if gotErr != nil {
		return fmt.Errorf("read failed: %w", gotErr)
	}
	s, ok := l.streams[stream]
	if !ok {
		if len(got) > 0 {
			return fmt.Errorf("read %d entries of a stream the model never leased on", len(got))
		}
		return nil
	}
	want := max(0, s.watermark()-after)
	if int64(len(got)) != want {
		return fmt.Errorf("the reader after %d got %d entries, the model's watermark %d makes it %d",
			after, len(got), s.watermark(), want)
	}
	for i, re := range got {
		n := after + 1 + int64(i)
		if re.Number != n {
			return fmt.Errorf("the reader got number %d where %d was due", re.Number, n)
		}
		if err := sameEntry(s.at(n), re); err != nil {
			return fmt.Errorf("the reader got %d: %w", n, err)
		}
	}
	return nil
}

// acquire applies AcquireLease of name by owner for ttl, made by step id.
func (l *ledger) acquire(w window, id int, name, owner string, ttl time.Duration, got store.NamedLease, gotErr error) error {
	h, held := l.names[name]
	if held && h.End == "" {
		// held: live at some instant of w
		var he *store.HeldError
		if errors.As(gotErr, &he) {
			switch {
			case he.Owner != h.Owner || he.Fence != h.Fence || !he.ExpiresAt.Equal(h.ExpiresAt):
				return fmt.Errorf("held by %s fence %d until %s, the model's holder is %s fence %d until %s",
					he.Owner, he.Fence, stamp(he.ExpiresAt), h.Owner, h.Fence, stamp(h.ExpiresAt))
			case !w.has(he.AsOf):
				return fmt.Errorf("held as of %s, not %s", stamp(he.AsOf), w)
			case !he.AsOf.Before(h.ExpiresAt):
				return fmt.Errorf("reported held at %s, at or after its expiry %s", stamp(he.AsOf), stamp(h.ExpiresAt))
			}
			return nil
		}
	}
	if gotErr != nil {
		if held && h.End == "" {
			return fmt.Errorf("got %q, want a *store.HeldError or a grant", gotErr)
		}
		return allow(gotErr, true)
	}
	t := got.AcquiredAt
	fence := h.Fence + 1
	switch {
	case !w.has(t):
		return fmt.Errorf("acquired at %s, not %s", stamp(t), w)
	case held && h.End == "" && t.Before(h.ExpiresAt):
		return fmt.Errorf("granted to %s at %s while %s fence %d holds it until %s (I8)",
			owner, stamp(t), h.Owner, h.Fence, stamp(h.ExpiresAt))
	case got.Owner != owner || got.Fence != fence:
		return fmt.Errorf("granted %s fence %d, the model's grant is %s fence %d (I8)", got.Owner, got.Fence, owner, fence)
	case !got.ExpiresAt.Equal(t.Add(ttl)) || !got.RenewedAt.Equal(t):
		return fmt.Errorf("granted at %s until %s (renewed %s), want AcquiredAt + %v", stamp(t),
			stamp(got.ExpiresAt), stamp(got.RenewedAt), ttl)
	}
	l.names[name] = mholding{Owner: owner, Fence: fence, ExpiresAt: got.ExpiresAt}
	l.holds[id] = mhold{Name: name, Owner: owner, Fence: fence}
	return nil
}

// renew applies RenewLease of the holding acquire step of got by ttl.
func (l *ledger) renew(w window, of int, ttl time.Duration, got store.NamedLease, gotErr error) error {
	hold := l.holds[of]
	h := l.names[hold.Name]
	ok := false
	var errs []error
	switch {
	case h.Fence != hold.Fence:
		errs = append(errs, store.ErrNotHolder)
	case h.End == store.LeaseReleased:
		errs = append(errs, store.ErrReleased)
	case h.End == store.LeaseForceReleased:
		errs = append(errs, store.ErrForceReleased)
	case h.End != "":
		errs = append(errs, store.ErrExpired)
	default:
		if w.expired(h.ExpiresAt) {
			errs = append(errs, store.ErrExpired)
		}
		ok = w.live(h.ExpiresAt)
	}
	if err := allow(gotErr, ok, errs...); err != nil || gotErr != nil {
		return err
	}
	t := got.RenewedAt
	switch {
	case !w.has(t):
		return fmt.Errorf("renewed at %s, not %s", stamp(t), w)
	case !t.Before(h.ExpiresAt):
		return fmt.Errorf("renewed at %s, at or after the expiry %s (I8)", stamp(t), stamp(h.ExpiresAt))
	case got.Fence != hold.Fence || got.Owner != hold.Owner || !got.ExpiresAt.Equal(t.Add(ttl)):
		return fmt.Errorf("renewal gave %s fence %d until %s, want %s fence %d until RenewedAt + %v",
			got.Owner, got.Fence, stamp(got.ExpiresAt), hold.Owner, hold.Fence, ttl)
	}
	h.ExpiresAt = got.ExpiresAt
	l.names[hold.Name] = h
	return nil
}

// releaseName applies ReleaseLease of the holding acquire step of got.
func (l *ledger) releaseName(of int, got error) error {
	hold := l.holds[of]
	h := l.names[hold.Name]
	switch {
	case h.Fence != hold.Fence:
		return allow(got, true) // superseded: left alone
	case h.End == store.LeaseReleased:
		return allow(got, false, store.ErrReleased)
	case h.End != "":
		return allow(got, true) // ended otherwise: left alone
	}
	if err := allow(got, true); err != nil {
		return err
	}
	h.End = store.LeaseReleased // even after its expiry, as long as nothing else ended it
	l.names[hold.Name] = h
	return nil
}

// resolveExpired applies a resolution the cleanup loop wrote: number n of
// stream became a gap with reason, or (to != 0) its work moved to the new
// committed entry to with payload and recovery type typ. The entry must be
// leased and expired, and so must every earlier unresolved number at the
// same instant: the loop walks a stream in number order and stops at a
// live lease, so it never resolves past one.
func (l *ledger) resolveExpired(w window, stream string, n int64, reason string, to int64, payload, typ string) error {
	e, err := l.entry(stream, n, nil)
	if err != nil {
		return fmt.Errorf("the cleanup resolved %d: %w", n, err)
	}
	if e.State != store.Leased {
		return fmt.Errorf("the cleanup resolved %d, which the model has %s", n, describe(e))
	}
	s := l.streams[stream]
	at, blocker := e.ExpiresAt, n
	for m := int64(1); m < n; m++ {
		if s.leased(m) && s.at(m).ExpiresAt.After(at) {
			at, blocker = s.at(m).ExpiresAt, m
		}
	}
	if !w.expired(at) {
		if blocker == n {
			return fmt.Errorf("the cleanup resolved %d, which expires at %s, %s (I3)", n, stamp(at), w)
		}
		return fmt.Errorf("the cleanup resolved %d while %d was leased and live until %s, %s (order)", n,
			blocker, stamp(at), w)
	}
	e.State = store.Gap
	if to == 0 {
		e.GapReason = reason
		return nil
	}
	if to != s.last()+1 {
		return fmt.Errorf("the cleanup moved the work of %d to %d; the model's next number is %d", n, to, s.last()+1)
	}
	e.GapReason, e.RecoveredAs = store.ReasonRecovered, to
	s.Entries = append(s.Entries, mentry{State: store.Committed, OpID: e.OpID, Payload: payload,
		RecoveredFrom: n, RecoveryType: typ})
	return nil
}

// refusedExpired applies a cleanup write that left n of stream alone: it
// must have been resolved already or live (got, if not nil, says which).
func (l *ledger) refusedExpired(w window, stream string, n int64, got error) error {
	e, err := l.entry(stream, n, nil)
	switch {
	case err != nil:
		return allow(got, false, err, store.ErrNotFound)
	case e.State.Resolved():
		if got == nil {
			return nil
		}
		return allow(got, false, e.resolvedErr())
	case !w.live(e.ExpiresAt):
		return fmt.Errorf("the store refused to resolve %d (%v), expired at %s, %s", n, got, stamp(e.ExpiresAt), w)
	case got != nil:
		return allow(got, false, store.ErrNotExpired)
	}
	return nil
}

func describe(e *mentry) string {
	switch {
	case e.FilledBy != "":
		return "a filled gap"
	case e.State == store.Gap:
		return "a gap (" + e.GapReason + ")"
	}
	return string(e.State)
}

// sameEntry compares an entry of the model with the backend's.
func sameEntry(e *mentry, re store.Entry) error {
	var diffs []string
	add := func(field string, m, r any) { diffs = append(diffs, fmt.Sprintf("%s %v (model %v)", field, r, m)) }
	if re.State != e.State {
		add("state", e.State, re.State)
	}
	if re.OperationID != e.OpID {
		add("operation id", e.OpID, re.OperationID)
	}
	if !e.Token.IsZero() && re.Token != e.Token {
		add("token", e.Token, re.Token)
	}
	if e.RecoveredFrom == 0 && !re.ExpiresAt.Equal(e.ExpiresAt) {
		add("expiry", stamp(e.ExpiresAt), stamp(re.ExpiresAt))
	}
	if string(re.Payload) != e.Payload {
		add("payload", fmt.Sprintf("%q", e.Payload), fmt.Sprintf("%q", re.Payload))
	}
	if re.GapReason != e.GapReason {
		add("gap reason", e.GapReason, re.GapReason)
	}
	if re.RecoveredAs != e.RecoveredAs || re.RecoveredFrom != e.RecoveredFrom || re.RecoveryType != e.RecoveryType {
		add("recovery", fmt.Sprintf("as %d from %d %q", e.RecoveredAs, e.RecoveredFrom, e.RecoveryType),
			fmt.Sprintf("as %d from %d %q", re.RecoveredAs, re.RecoveredFrom, re.RecoveryType))
	}
	if re.FilledBy != e.FilledBy || re.FilledAt.IsZero() != (e.FilledBy == "") {
		add("filled by", e.FilledBy, re.FilledBy)
	}
	if len(diffs) > 0 {
		return errors.New(strings.Join(diffs, ", "))
	}
	return nil
}

// opID is the operation id of the numbers lease step id leases.
func opID(id int) string { return fmt.Sprintf("op%d", id) }
