package store

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// State is the state of an entry.
type State string

// The states of an entry. Leased is the only unresolved state.
const (
	Leased    State = "leased"
	Committed State = "committed"
	Gap       State = "gap"
)

// Resolved reports whether s is final (committed or gap).
func (s State) Resolved() bool { return s == Committed || s == Gap }

// Gap reasons recorded by the operations of this package. Later layers (the
// cleanup loop) add their own.
const (
	ReasonReleased = "released"
	ReasonExpired  = "expired"
)

// Token is the random 128-bit secret that proves who holds a lease. The zero
// Token is never handed out and is rejected as invalid.
type Token [16]byte

// NewToken returns a fresh random token.
func NewToken() Token {
	var t Token
	// crypto/rand.Read never returns an error (Go 1.24+).
	_, _ = rand.Read(t[:])
	t[6] = t[6]&0x0f | 0x40 // RFC 9562 version 4, so PostgreSQL shows a well-formed uuid
	t[8] = t[8]&0x3f | 0x80
	return t
}

// ParseToken parses the textual form produced by Token.String (a UUID with or
// without hyphens).
func ParseToken(s string) (Token, error) {
	var t Token
	clean := make([]byte, 0, 32)
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			continue
		}
		clean = append(clean, s[i])
	}
	if len(clean) != 32 {
		return Token{}, fmt.Errorf("%w: %s", ErrInvalidToken, QuoteInput(s))
	}
	if _, err := hex.Decode(t[:], clean); err != nil {
		return Token{}, fmt.Errorf("%w: %s", ErrInvalidToken, QuoteInput(s))
	}
	if t.IsZero() {
		return Token{}, fmt.Errorf("%w: zero token", ErrInvalidToken)
	}
	return t, nil
}

// IsZero reports whether t is the zero token.
func (t Token) IsZero() bool { return t == Token{} }

// String returns the token in UUID form.
func (t Token) String() string {
	var b [36]byte
	hex.Encode(b[0:8], t[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], t[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], t[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], t[8:10])
	b[23] = '-'
	hex.Encode(b[24:], t[10:])
	return string(b[:])
}

// Entry is one numbered entry of a stream.
type Entry struct {
	Stream      string
	Number      int64
	State       State
	Token       Token
	Owner       string // who leased it (process or worker identity)
	OperationID string // the caller's id for the work done under the lease
	Kind        string // the caller's kind of work, e.g. the projection type
	LeasedAt    time.Time
	ExpiresAt   time.Time // the lease's expiry; for a gap, the original expiry
	Renewals    int       // how many times Extend moved ExpiresAt
	ResolvedAt  time.Time // zero while leased
	Payload     []byte    // what Commit stored; nil if none

	// GapReason says why the entry is (or, if filled, was) a gap; empty
	// for entries that were never gaps.
	GapReason   string
	RecoveredAs int64 // for a gap whose work moved, the number it moved to; else 0

	// FilledAt is when a gap was filled through the fill policy; zero if it
	// never was. A filled entry is Committed, with the filler's payload.
	FilledAt time.Time
	FilledBy string // who filled it

	// RecoveredFrom is, for an entry that carries work recovered from an
	// expired lease, the number the work came from; 0 otherwise. Its
	// OperationID is the original operation's, ResolvedAt the recovery time.
	RecoveredFrom int64
	RecoveryType  string // how it was recovered, e.g. "partial-work", "retry"

	// The recovery record of a leased, expired entry (Parker): how many
	// recoveries of it failed (since it expired, or since it was last
	// unparked), why the last one did, and when the entry was parked (zero
	// unless it is). Zero for a resolved entry: a resolution ends the
	// record.
	RecoveryAttempts  int
	LastRecoveryError string
	ParkedAt          time.Time
}

// Parked reports whether e is parked: leased, and left alone by the cleanup
// loop until an operator chooses what becomes of it (Parker).
func (e Entry) Parked() bool { return e.State == Leased && !e.ParkedAt.IsZero() }

// LeaseRequest describes one number to lease.
type LeaseRequest struct {
	OperationID string
	Kind        string
	TTL         time.Duration
}

// LeaseParams are the per-call options of a lease. A nil *LeaseParams means
// the defaults.
type LeaseParams struct {
	Owner string     // recorded on every leased entry
	Now   *time.Time // pins the backend's clock; nil uses the backend's now
}

// CommitParams are the per-call options of Commit.
type CommitParams struct {
	Payload []byte
	// Ordered makes the commit conditional on every earlier number of the
	// stream being resolved (I4); otherwise it fails with ErrNotReady.
	Ordered bool
	Now     *time.Time
}

// ReleaseParams are the per-call options of Release.
type ReleaseParams struct {
	Now *time.Time
}

// ExtendParams are the per-call options of Extend.
type ExtendParams struct {
	TTL time.Duration // the new expiry is the backend's now plus TTL
	Now *time.Time
}

// ResolveExpiredParams are the per-call options of ResolveExpired.
type ResolveExpiredParams struct {
	Reason      string // gap reason; empty means ReasonExpired
	RecoveredAs int64  // the number the work moved to, if it did
	// Hook records a pending hook for every entry the call resolves, in
	// the same transaction (HookQueue, store/capability.go). Only a
	// backend that is a HookQueue honours it; the cleanup loop sets it
	// only on one.
	Hook bool
	Now  *time.Time
}

// ListExpiredParams select expired leases. Results come in (stream, number)
// order, starting after the cursor (AfterStream, AfterNumber).
type ListExpiredParams struct {
	Stream      string // only this stream; empty means every stream
	AfterStream string
	AfterNumber int64
	Limit       int // at most this many; zero means DefaultListLimit
	Now         *time.Time
}

// StreamStats describes a stream at one instant.
type StreamStats struct {
	Stream string
	// NextNumber is the number the next lease will get (N+1).
	NextNumber int64
	// Watermark is the largest w such that every entry 1..w is resolved.
	Watermark int64
	// Unresolved counts the leased entries.
	Unresolved int64
	// OldestUnresolved is the smallest leased number, 0 if none.
	OldestUnresolved int64
	// OldestUnresolvedAt is when that entry was leased; zero if none.
	OldestUnresolvedAt time.Time
	// LowPoint is the lowest number still kept: Trim removed the entries
	// below it, and reading them fails with ErrTrimmed. 1 until a Trim.
	LowPoint int64
}

// ListGapsParams select the gaps ListGaps returns: numbers above After in
// increasing order, at most Limit of them. A nil *ListGapsParams means the
// defaults.
type ListGapsParams struct {
	After int64 // only numbers > After; 0 means from the start
	Limit int   // at most this many; zero means DefaultListLimit
	// Reason keeps only gaps with this reason; empty means any reason.
	Reason string
	// IncludeFilled adds the gaps that were filled since (committed entries
	// with FilledAt set); by default only open gaps are listed.
	IncludeFilled bool
}

// FillParams are the per-call options of FillGap. FilledBy is required.
type FillParams struct {
	Payload  []byte     // what the filled entry holds; nil for none
	FilledBy string     // who filled it (an operator, a tool); not empty
	Now      *time.Time // pins the backend's clock (FilledAt)
}
