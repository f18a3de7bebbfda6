package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrParked reports a RecordRecoveryFailure on an entry that is parked
// already: the cleanup loop does not try it, so nothing is counted.
var ErrParked = errors.New("seqlease: entry is parked")

// ErrNotParked reports an UnparkEntry on an entry that is leased but not
// parked.
var ErrNotParked = errors.New("seqlease: entry is not parked")

// MaxRecoveryError bounds the message RecordRecoveryFailure keeps, in bytes.
const MaxRecoveryError = 1024

// RecoveryFailureParams are the options of RecordRecoveryFailure. A nil
// *RecoveryFailureParams means the defaults.
type RecoveryFailureParams struct {
	// Error is why the attempt failed, kept as the entry's
	// LastRecoveryError: valid UTF-8 without NUL bytes (others are
	// replaced), cut to MaxRecoveryError bytes.
	Error string
	// ParkAfter parks the entry when its attempts reach it: 0 never parks.
	// Not negative.
	ParkAfter int
	Now       *time.Time
}

// ListParkedParams select the parked entries ListParked returns, in
// (stream, number) order, after the cursor (AfterStream, AfterNumber).
// A nil *ListParkedParams means the defaults.
type ListParkedParams struct {
	Stream      string // only this stream; empty means every stream
	AfterStream string
	AfterNumber int64
	Limit       int // at most this many; zero means DefaultListLimit
}

// Parker is implemented by a backend that keeps the failed recovery
// attempts of expired entries, durably on PostgreSQL (columns of the
// entry's row), and parks an entry whose recovery keeps failing: it stays
// leased, so its stream waits behind it, and the cleanup loop no longer
// tries it, until an operator chooses what becomes of it. The choices are
// UnparkEntry (try again from zero attempts), the storage contract's
// RecoverExpired (commit the operator's work under a new number) and
// ResolveExpired (give it up as a gap). The record shows on the entry
// (Entry.RecoveryAttempts, LastRecoveryError, ParkedAt) while it is
// unresolved; a resolution ends it.
type Parker interface {
	// RecordRecoveryFailure counts one failed recovery of the leased,
	// expired entry number of stream: RecoveryAttempts grows by one,
	// LastRecoveryError becomes p.Error, and the entry is parked (ParkedAt
	// is the backend's now) when its attempts reach p.ParkAfter. It
	// returns the entry as it is after. Refusals change nothing: those of
	// ResolveExpired (ErrNotFound, ErrNotExpired, resolved), and ErrParked.
	RecordRecoveryFailure(ctx context.Context, stream string, number int64, p *RecoveryFailureParams) (Entry, error)
	// ListParked lists parked entries (leased, ParkedAt set).
	ListParked(ctx context.Context, p *ListParkedParams) ([]Entry, error)
	// CountParked counts the parked entries of every stream.
	CountParked(ctx context.Context) (int64, error)
	// UnparkEntry makes a parked entry one the cleanup loop tries again,
	// from zero attempts (its LastRecoveryError is kept). Refusals change
	// nothing: ErrNotFound, ErrNotParked, and the resolved entry's
	// (ErrCommitted, ErrReleased, ErrExpired, ErrGap).
	UnparkEntry(ctx context.Context, stream string, number int64) error
}

// ValidateRecoveryFailure checks a RecordRecoveryFailure call and returns
// the message as kept.
func ValidateRecoveryFailure(stream string, number int64, p *RecoveryFailureParams) (string, error) {
	if err := ValidateEntryRef(stream, number); err != nil {
		return "", err
	}
	if p == nil {
		return "", nil
	}
	if p.ParkAfter < 0 {
		return "", fmt.Errorf("%w: park after %d attempts, must not be negative", ErrInvalidArgument, p.ParkAfter)
	}
	return CutRecoveryError(p.Error), nil
}

// CutRecoveryError returns msg as RecordRecoveryFailure keeps it: valid
// UTF-8 without NUL bytes, at most MaxRecoveryError bytes.
func CutRecoveryError(msg string) string {
	msg = strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "")
	if len(msg) > MaxRecoveryError {
		msg = strings.ToValidUTF8(msg[:MaxRecoveryError], "")
	}
	return msg
}

// ValidateEntryRef checks a stream name and a number of at least 1.
func ValidateEntryRef(stream string, number int64) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	if number < 1 {
		return fmt.Errorf("%w: %d", ErrInvalidNumber, number)
	}
	return nil
}

// ValidateListParked checks a ListParked call and returns its effective
// limit.
func ValidateListParked(p *ListParkedParams) (int, error) {
	if p == nil {
		return DefaultListLimit, nil
	}
	for _, name := range []string{p.Stream, p.AfterStream} {
		if name == "" {
			continue
		}
		if err := ValidateStream(name); err != nil {
			return 0, err
		}
	}
	if p.AfterNumber < 0 {
		return 0, fmt.Errorf("%w: after %d", ErrInvalidNumber, p.AfterNumber)
	}
	return ListLimit(p.Limit)
}
