package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// InProcess is implemented by a backend that answers in process, without a
// round trip (store/memory), and that reports every resolution to its
// watchers (Watch) before the call that made it returns. Its consumers
// send its calls alone, at once: batching saves round trips, and there
// are none to save.
type InProcess interface {
	// InProcess reports whether the backend answers in process. A wrapper
	// that adds a round trip, or reports resolutions later, returns false.
	InProcess() bool
}

// OneByOne is implemented by a backend whose lease and commit of one number
// allocate nothing for the call (store/memory): no request or result
// slice, no parameter struct.
type OneByOne interface {
	// LeaseOne does what Lease with the one request req does, and returns
	// the entry by value.
	LeaseOne(ctx context.Context, stream string, req LeaseRequest, p *LeaseParams) (Entry, error)
	// CommitOne does what Commit with CommitParams{Payload: payload,
	// Ordered: ordered} does.
	CommitOne(ctx context.Context, stream string, number int64, token Token, payload []byte, ordered bool) (time.Time, error)
}

// ListenHealth is what the self-checks of a backend's watches (Watch,
// WatchLeases) found: whether each hears the other processes.
type ListenHealth struct {
	// Deaf is how many watches cannot hear the other processes now (a
	// LISTEN through a transaction-mode pooler): each polls its sink
	// instead (Poller) until a later self-check hears.
	Deaf int
	// DeafChecks counts the self-checks that heard nothing since the
	// backend was made.
	DeafChecks int64
	// Watches is how many watches run now, and Hearing how many of them
	// heard their last self-check on the connection they still hold.
	// The others connect, check, are deaf, or reconnect after a lost
	// connection.
	Watches, Hearing int
	// NotHearingSince is the earliest instant since which a running watch
	// has not heard (the process's clock); zero when every watch hears.
	NotHearingSince time.Time
	// LastHeard is when a self-check last heard (the process's clock);
	// zero if none ever did.
	LastHeard time.Time
}

// ListenChecker is implemented by a backend whose watches prove that they
// hear the other processes (store/postgres: a self-check notice each time
// a watch starts listening).
type ListenChecker interface {
	// ListenHealth reports what the self-checks found so far.
	ListenHealth() ListenHealth
}

// StreamLeases asks for consecutive numbers of one stream, one for each of
// its Requests: one item of LeaseMulti.
type StreamLeases struct {
	Stream   string
	Requests []LeaseRequest
}

// LeaseResult is the outcome of one StreamLeases: the entries Lease would
// return for it, or its error.
type LeaseResult struct {
	Entries []Entry
	Err     error
}

// MultiLeaser is implemented by a backend that leases numbers of several
// streams at once (on PostgreSQL, one statement and one commit).
type MultiLeaser interface {
	// LeaseMulti leases for each item, as Lease would, consecutive numbers
	// of its stream; items of one stream get consecutive blocks in item
	// order. Result i is item i's. An item with bad input gets its
	// validation error and changes nothing; the others proceed. A failure
	// of the backend call fails every item sent with the same error, and
	// leases none of them (numbers stay dense).
	LeaseMulti(ctx context.Context, items []StreamLeases, p *LeaseParams) []LeaseResult
}

// StreamCommit is one commit of CommitMulti.
type StreamCommit struct {
	Stream  string
	Number  int64
	Token   Token
	Payload []byte
	// Ordered makes the commit conditional on every earlier number of the
	// stream being resolved (I4), counting the earlier items of the call
	// exactly when they succeeded; otherwise it fails with ErrNotReady.
	Ordered bool
}

// CommitMultiParams are the options of CommitMulti and CommitTx. A nil
// pointer means the defaults.
type CommitMultiParams struct {
	Now *time.Time // pins the backend's clock; nil uses its now
}

// MultiCommitter is implemented by a backend that commits numbers of
// several streams at once (on PostgreSQL, one transaction).
type MultiCommitter interface {
	// CommitMulti commits items in order, each exactly as Commit would
	// with its Ordered flag; an ordered item counts the earlier items of
	// its stream in this call as resolved exactly when they succeeded.
	// Result i is item i's: a refusal (ErrTokenMismatch,
	// ErrExpired, ErrNotReady...) changes nothing for that item and does
	// not fail the others. An item with bad input (see
	// ValidateCommitMulti) gets its validation error and is not sent. A
	// non-nil error means every item's outcome is unknown: retry each
	// with its token to learn it (I7).
	CommitMulti(ctx context.Context, items []StreamCommit, p *CommitMultiParams) ([]CommitResult, error)
}

// TxCommit is one commit of TxCommitter.CommitTx: a StreamCommit and the
// caller's function for the committing transaction (nil for none).
type TxCommit[T any] struct {
	StreamCommit
	Func func(ctx context.Context, tx T) error
}

// TxCommitter is implemented by a backend whose commits can run the
// caller's function inside the committing transaction, so that the
// caller's writes and the commit are atomic; T is the backend's
// transaction type (pgx.Tx for store/postgres).
type TxCommitter[T any] interface {
	// CommitTx is CommitMulti in one transaction in which each item's
	// Func runs after the item's conditional write, if that succeeded: if
	// Func fails, the item's commit is rolled back (and only it) and the
	// item fails with Func's error. A repeat of a commit that already took
	// effect succeeds without running Func again.
	CommitTx(ctx context.Context, items []TxCommit[T], p *CommitMultiParams) ([]CommitResult, error)
}

// EarlyAcquirer is implemented by a backend that can tell when it has
// decided a batch of acquires, before the outcomes are durable (a
// PostgreSQL commit waits for its WAL flush), so that a caller sending one
// batch at a time may send its next one meanwhile.
type EarlyAcquirer interface {
	// AcquireLeasesEarly is AcquireLeases that calls decided at most once,
	// when the backend has decided the items of its first statement but
	// before it confirmed their commit. The outcomes are final only when it
	// returns, and may still turn into errors (a failed commit). decided
	// must not block.
	AcquireLeasesEarly(ctx context.Context, reqs []AcquireLeaseRequest, p *LeaseBatchParams, decided func()) []AcquireLeaseResult
}

// ValidateLeaseMulti checks a LeaseMulti call: 1..MaxBatch items asking
// for at most MaxBatch numbers in all, and valid params (an error for the
// whole call); then each item as Lease would (errs[i] is item i's error,
// nil if it is valid).
func ValidateLeaseMulti(items []StreamLeases, p *LeaseParams) (errs []error, err error) {
	if len(items) == 0 || len(items) > MaxBatch {
		return nil, fmt.Errorf("%w: %d items, must be 1..%d", ErrInvalidCount, len(items), MaxBatch)
	}
	total := 0
	for _, it := range items {
		total += len(it.Requests)
	}
	if total > MaxBatch {
		return nil, fmt.Errorf("%w: %d numbers in all, at most %d", ErrInvalidCount, total, MaxBatch)
	}
	if p != nil {
		if err := ValidateText("owner", p.Owner); err != nil {
			return nil, err
		}
	}
	errs = make([]error, len(items))
	for i, it := range items {
		errs[i] = ValidateLease(it.Stream, it.Requests, nil)
	}
	return errs, nil
}

// ValidateCommitMulti checks a CommitMulti call: 1..MaxBatch items (an
// error for the whole call); then each item: a valid stream, number and
// token, and a number above that of the item before it of its stream
// (errs[i] is item i's error, nil if it is valid).
func ValidateCommitMulti(items []StreamCommit) (errs []error, err error) {
	if len(items) == 0 || len(items) > MaxBatch {
		return nil, fmt.Errorf("%w: %d items, must be 1..%d", ErrInvalidCount, len(items), MaxBatch)
	}
	errs = make([]error, len(items))
	last := make(map[string]int64, 1)
	for i, it := range items {
		if errs[i] = ValidateHolding(it.Stream, it.Number, it.Token); errs[i] != nil {
			continue
		}
		if prev, ok := last[it.Stream]; ok && it.Number <= prev {
			errs[i] = fmt.Errorf("%w: numbers of a stream must ascend, %d after %d", ErrInvalidNumber, it.Number, prev)
		}
		last[it.Stream] = max(last[it.Stream], it.Number)
	}
	return errs, nil
}

// AppendRequest is one entry of Appender.Append: it is born committed with
// Payload, under the operation id and kind given.
type AppendRequest struct {
	OperationID string
	Kind        string
	Payload     []byte
}

// AppendParams are the options of Append. A nil pointer means the
// defaults.
type AppendParams struct {
	Owner string     // recorded on every appended entry
	Now   *time.Time // pins the backend's clock; nil uses its now
}

// Appender is implemented by a backend that appends committed entries to
// a stream in one atomic step (on PostgreSQL, one statement): an outbox
// write, with no lease window. It is not an ordered commit: numbers below
// the appended ones may still be leased by others, and readers still read
// only up to the watermark.
type Appender interface {
	// Append takes the next len(reqs) consecutive numbers of stream
	// (creating the stream on first use) and commits them with the
	// requests' payloads, all at once: entry i has number base+i+1 for
	// reqs[i], state committed, a fresh token, and LeasedAt, ExpiresAt and
	// ResolvedAt all the backend's now. A failed call appends nothing:
	// numbers stay dense (I1). Bad input (see ValidateAppend) changes
	// nothing.
	Append(ctx context.Context, stream string, reqs []AppendRequest, p *AppendParams) ([]Entry, error)
}

// ValidateAppend checks an Append call: a valid stream, 1..MaxBatch
// requests with valid operation ids and kinds, and a valid owner. Payload
// sizes are the caller's limit to enforce (sequence's Config.MaxPayload).
func ValidateAppend(stream string, reqs []AppendRequest, p *AppendParams) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	if len(reqs) == 0 || len(reqs) > MaxBatch {
		return fmt.Errorf("%w: %d entries, must be 1..%d", ErrInvalidCount, len(reqs), MaxBatch)
	}
	if p != nil {
		if err := ValidateText("owner", p.Owner); err != nil {
			return err
		}
	}
	for i := range reqs {
		if err := ValidateText("operation id", reqs[i].OperationID); err != nil {
			return err
		}
		if err := ValidateText("kind", reqs[i].Kind); err != nil {
			return err
		}
	}
	return nil
}

// TxRecoverer is implemented by a backend whose moves of expired work can
// run the caller's function inside the moving transaction, so that the
// writes the holder would have made with its commit (sequence.CommitTx)
// and the move are atomic; T is the backend's transaction type (pgx.Tx for
// store/postgres).
type TxRecoverer[T any] interface {
	// RecoverExpiredTx is RecoverExpiredBatch in one transaction in which
	// fn runs after the moves, with moved[i] the new number of items[i]
	// (0: not moved; the results say why). fn is not called when nothing
	// moved. If fn fails, the transaction rolls back, nothing moves, and
	// RecoverExpiredTx returns an error wrapping fn's. Any other error
	// leaves the outcome unknown, as for RecoverExpiredBatch: read the
	// entries back.
	RecoverExpiredTx(ctx context.Context, stream string, items []RecoverItem, p *RecoverBatchParams,
		fn func(ctx context.Context, tx T, moved []int64) error) ([]RecoverResult, error)
}

// PendingHook is the record of a hook still to deliver for an expired
// entry that was resolved (HookQueue).
type PendingHook struct {
	// Entry is the entry as it was found expired: state Leased, with its
	// token, owner, operation id, kind, lease times and renewals. (It is
	// resolved by now; the record keeps these fields even if retention
	// trims the entry.)
	Entry Entry
	// Attempts counts the claims of the record, this one included; it
	// fences AckHook and RetryHook.
	Attempts int
	// CreatedAt is when the resolution recorded it, on the backend's clock.
	CreatedAt time.Time
	// LastError is why the last delivery failed; empty if none did.
	LastError string
}

// ClaimHooksParams are the options of ClaimHooks.
type ClaimHooksParams struct {
	// Limit is the most records claimed; 0 means DefaultListLimit, at most
	// MaxListLimit.
	Limit int
	// For is how long the claim keeps other deliverers off the records
	// (a visibility timeout): a record neither acknowledged nor retried
	// by then is due again. Required, in (0, MaxHookClaim].
	For time.Duration
	Now *time.Time
}

// MaxHookClaim bounds ClaimHooksParams.For.
const MaxHookClaim = 24 * time.Hour

// MaxHookError bounds the message RetryHook keeps, in bytes.
const MaxHookError = 1024

// HookStats describes the pending hooks at one instant.
type HookStats struct {
	Pending int64 // records not yet acknowledged
	Failing int64 // of which a delivery failed at least once
	// OldestAt is the creation time of the oldest record; zero if none.
	OldestAt time.Time
}

// HookQueue is implemented by a backend that keeps the records of hooks
// still to deliver: the resolving calls write them when asked (the Hook
// field of ResolveExpiredParams, RecoverParams and RecoverBatchParams), in
// the resolution's transaction, so a crash cannot separate a resolution
// from its record; a deliverer claims due records, runs the hook and
// acknowledges it, so each hook is delivered at least once. On PostgreSQL
// the records survive any crash; in memory they live as long as the Store.
type HookQueue interface {
	// ClaimHooks claims the due records (up to p.Limit, the longest due
	// first) for p.For: each one's Attempts grows by one and it is not due
	// again before the claim ends. Concurrent claimers never get the same
	// record while its claim lasts.
	ClaimHooks(ctx context.Context, p *ClaimHooksParams) ([]PendingHook, error)
	// AckHook deletes the record of a delivered hook, if its Attempts is
	// still attempts (no later claim took it); true if it deleted it.
	AckHook(ctx context.Context, stream string, number int64, attempts int) (bool, error)
	// RetryHook makes a record whose delivery failed due again after
	// delay, keeping msg (cut to MaxHookError bytes) as its LastError, if
	// its Attempts is still attempts; true if it changed it.
	RetryHook(ctx context.Context, stream string, number int64, attempts int, delay time.Duration, msg string) (bool, error)
	// AddHooks records pending hooks for entries of stream already
	// resolved, unless they have one: for resolutions made without Hook
	// (a custom recovery step's). Numbers that are not resolved entries
	// are skipped. It returns the numbers it recorded.
	AddHooks(ctx context.Context, stream string, numbers []int64) ([]int64, error)
	// HookStats counts the records.
	HookStats(ctx context.Context) (HookStats, error)
}

// ValidateClaimHooks checks a ClaimHooks call and returns its limit.
func ValidateClaimHooks(p *ClaimHooksParams) (int, error) {
	if p == nil {
		return 0, fmt.Errorf("%w: nil ClaimHooksParams", ErrInvalidArgument)
	}
	if p.For <= 0 || p.For > MaxHookClaim {
		return 0, fmt.Errorf("%w: claim for %v, must be in (0, %v]", ErrInvalidArgument, p.For, MaxHookClaim)
	}
	return ListLimit(p.Limit)
}

// ValidateHookRef checks the record a call of AckHook or RetryHook names.
func ValidateHookRef(stream string, number int64, attempts int) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	if number < 1 {
		return fmt.Errorf("%w: %d", ErrInvalidNumber, number)
	}
	if attempts < 1 {
		return fmt.Errorf("%w: attempts %d, must be at least 1", ErrInvalidArgument, attempts)
	}
	return nil
}

// ValidateRetryHook checks a RetryHook call and returns msg as kept: valid
// UTF-8 without NUL bytes, at most MaxHookError bytes.
func ValidateRetryHook(stream string, number int64, attempts int, delay time.Duration, msg string) (string, error) {
	if err := ValidateHookRef(stream, number, attempts); err != nil {
		return "", err
	}
	if delay < 0 || delay > MaxHookClaim {
		return "", fmt.Errorf("%w: delay %v, must be in [0, %v]", ErrInvalidArgument, delay, MaxHookClaim)
	}
	msg = strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "")
	if len(msg) > MaxHookError {
		msg = strings.ToValidUTF8(msg[:MaxHookError], "")
	}
	return msg, nil
}

// ValidateAddHooks checks an AddHooks call: a valid stream and 1..MaxBatch
// numbers, each at least 1.
func ValidateAddHooks(stream string, numbers []int64) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	if len(numbers) == 0 || len(numbers) > MaxBatch {
		return fmt.Errorf("%w: %d numbers, must be 1..%d", ErrInvalidCount, len(numbers), MaxBatch)
	}
	for _, n := range numbers {
		if n < 1 {
			return fmt.Errorf("%w: %d", ErrInvalidNumber, n)
		}
	}
	return nil
}
