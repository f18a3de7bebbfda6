package store

import (
	"errors"
	"fmt"
)

// Sentinel errors shared by every backend. Check them with errors.Is; backends
// wrap them with the operation that failed.
var (
	// ErrInvalidArgument is wrapped by every error about bad input (names,
	// durations, batch sizes, payloads, tokens). Such a call changes nothing.
	ErrInvalidArgument = errors.New("seqlease: invalid argument")

	// ErrInvalidStream reports an empty, over-long or malformed stream name.
	ErrInvalidStream = newInvalid("invalid stream name")
	// ErrInvalidTTL reports a lease duration that is not positive or above
	// the limit.
	ErrInvalidTTL = newInvalid("invalid lease duration")
	// ErrInvalidCount reports a batch size that is not positive or above
	// MaxBatch.
	ErrInvalidCount = newInvalid("invalid lease count")
	// ErrInvalidToken reports a zero or unparsable token.
	ErrInvalidToken = newInvalid("invalid token")
	// ErrInvalidNumber reports a sequence number below 1.
	ErrInvalidNumber = newInvalid("invalid sequence number")
	// ErrInvalidText reports an owner, operation id, kind or reason that is
	// over-long or not valid UTF-8 text.
	ErrInvalidText = newInvalid("invalid text field")
	// ErrPayloadTooLarge reports a payload above the configured maximum.
	ErrPayloadTooLarge = newInvalid("payload too large")

	// ErrStreamNotFound reports a stream that has never had a number leased.
	ErrStreamNotFound = errors.New("seqlease: stream not found")
	// ErrNotFound reports a number that was never handed out.
	ErrNotFound = errors.New("seqlease: entry not found")
	// ErrTokenMismatch reports a token that does not hold the entry.
	ErrTokenMismatch = errors.New("seqlease: token does not hold the lease")
	// ErrExpired reports a lease whose expiry has passed by the backend's
	// clock, or that was turned into a gap because it expired.
	ErrExpired = errors.New("seqlease: lease expired")
	// ErrReleased reports a lease its holder already released.
	ErrReleased = errors.New("seqlease: lease released")
	// ErrCommitted reports an operation on an entry that is already
	// committed (for example Release or Extend after Commit).
	ErrCommitted = errors.New("seqlease: entry already committed")
	// ErrPayloadMismatch reports a commit retried by the lease's holder
	// (the same token) with another payload than the one committed: the
	// entry keeps the first. A retry with the same payload reports the
	// first commit's success (I7); one with another is a caller's bug, not
	// a retry, and changes nothing. Payloads compare as bytes.Equal does:
	// nil and empty are the same.
	ErrPayloadMismatch = errors.New("seqlease: entry committed with another payload")
	// ErrGap reports an entry that was resolved as a gap for a reason other
	// than release or expiry.
	ErrGap = errors.New("seqlease: entry is a gap")
	// ErrNotExpired reports a ResolveExpired on a lease that is still live.
	ErrNotExpired = errors.New("seqlease: lease not expired")

	// ErrUnsupported reports an operation the store cannot do: running a
	// PostgreSQL transaction function on the memory backend (which is no
	// TxCommitter), watching from a Store bound to the caller's
	// transaction, appending on a store that is no Appender. It changes
	// nothing; the same call on a store that can do it may succeed.
	ErrUnsupported = errors.New("seqlease: not supported by this store")

	// ErrReadOnly reports a write that cannot be made because the store
	// or the server is read-only. From a read-only view of a hot standby
	// (store/postgres's Standby) with nowhere to send the write, it changes
	// nothing and sends nothing, and retrying cannot help: the same call on
	// the primary's store may succeed. From a server that refuses writes
	// (a hot standby or a read-only session reached by a Store's pool, as
	// during a failover, and store/postgres's Ping) the server changed
	// nothing; a retry may pass once the pool reaches the primary.
	ErrReadOnly = errors.New("seqlease: read-only: writes refused")
)

// ErrNotSent is matched by the error of a call that failed before anything
// of it reached the backend: its context had ended before the call, or no
// connection could be had from the pool (store/postgres). It certainly
// changed nothing, so a caller that must tell "failed" from "maybe
// applied" (a renewal, a commit) can count it as failed. Such an error
// still matches its cause (context.Canceled, a pool's error); a failure
// that does not match ErrNotSent may or may not have been applied. A call
// on a caller's own transaction takes no connection, and its failures
// never match it.
var ErrNotSent = errors.New("seqlease: not sent")

// NotSent returns err marked as matching ErrNotSent, its text unchanged;
// nil for nil. Backends mark with it the failures they know came before
// sending.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSentError{err}
}

// notSentError is an error NotSent marked.
type notSentError struct{ err error }

func (e *notSentError) Error() string        { return e.err.Error() }
func (e *notSentError) Unwrap() error        { return e.err }
func (e *notSentError) Is(target error) bool { return target == ErrNotSent }

// invalidError is an input error: it matches its own sentinel and
// ErrInvalidArgument.
type invalidError struct{ msg string }

func newInvalid(msg string) error { return &invalidError{msg: "seqlease: " + msg} }

func (e *invalidError) Error() string { return e.msg }

// Is makes every input error match ErrInvalidArgument.
func (e *invalidError) Is(target error) bool { return target == ErrInvalidArgument }

// IsInvalid reports whether err is about bad input: retrying the same call
// can never succeed.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// GapError returns the error for an operation refused because the entry is a
// gap with the given reason: ErrReleased, ErrExpired, or ErrGap.
func GapError(reason string) error {
	switch reason {
	case ReasonReleased:
		return ErrReleased
	case ReasonExpired:
		return ErrExpired
	}
	return fmt.Errorf("%w (%s)", ErrGap, reason)
}

// ErrNotGap reports a FillGap (or a gap lookup) on an entry that is not an
// open gap: still leased, committed, or a gap that was already filled.
var ErrNotGap = errors.New("seqlease: entry is not a gap")

// ErrTrimmed reports a read of entries below a stream's low point: Trim
// removed them. The error is a *TrimmedError, which carries the low point.
var ErrTrimmed = errors.New("seqlease: entries trimmed")

// TrimmedError reports a request for entries that Trim removed: every number
// below LowPoint is gone. It matches ErrTrimmed. A reader that gets it has
// fallen behind the retention point; it can only resume from LowPoint-1.
type TrimmedError struct {
	Stream   string
	LowPoint int64 // the lowest number still kept
}

// Error implements error.
func (e *TrimmedError) Error() string {
	return fmt.Sprintf("%v: stream %s keeps numbers from %d on", ErrTrimmed, QuoteInput(e.Stream), e.LowPoint)
}

// Is makes a *TrimmedError match ErrTrimmed.
func (e *TrimmedError) Is(target error) bool { return target == ErrTrimmed }
