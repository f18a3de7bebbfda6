package store

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotReady reports an ordered commit of n while some number below n is
// still unresolved. It changes nothing; the caller waits at the barrier and
// tries again.
var ErrNotReady = errors.New("seqlease: earlier numbers are unresolved")

// CommitItem is one commit of a batch.
type CommitItem struct {
	Number  int64
	Token   Token
	Payload []byte
}

// CommitResult is the outcome of one CommitItem.
type CommitResult struct {
	ResolvedAt time.Time // when committed
	Err        error     // why not; ErrNotReady for items after a failed one
}

// CommitBatchParams are the options of a batch commit.
type CommitBatchParams struct {
	// Ordered makes each item conditional on every earlier number being
	// resolved, counting the batch's earlier items that succeeded.
	Ordered bool
	Now     *time.Time
}

// ValidateBatch checks a CommitBatch call: a valid stream, 1..MaxBatch items
// with numbers ascending and distinct, and non-zero tokens.
func ValidateBatch(stream string, items []CommitItem) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	if len(items) == 0 || len(items) > MaxBatch {
		return fmt.Errorf("%w: %d items, must be 1..%d", ErrInvalidCount, len(items), MaxBatch)
	}
	for i, it := range items {
		if err := ValidateHolding(stream, it.Number, it.Token); err != nil {
			return err
		}
		if i > 0 && it.Number <= items[i-1].Number {
			return fmt.Errorf("%w: numbers must ascend, %d after %d", ErrInvalidNumber, it.Number, items[i-1].Number)
		}
	}
	return nil
}

// ReasonRecovered is the gap reason of an entry whose work RecoverExpired
// moved to a new number.
const ReasonRecovered = "recovered"

// RecoverParams are the options of RecoverExpired.
type RecoverParams struct {
	// Payload is the recovered work, committed under the new number.
	Payload []byte
	// RecoveryType says how the work was recovered ("partial-work",
	// "retry"); required.
	RecoveryType string
	// Reason is the old entry's gap reason. Default: ReasonRecovered.
	Reason string
	// Owner is recorded on the new entry (the recovering process).
	Owner string
	// Hook records a pending hook for the old entry, in the same
	// transaction (HookQueue). Only a backend that is a HookQueue
	// honours it.
	Hook bool
	Now  *time.Time
}

// ValidateRecover checks a RecoverExpired call.
func ValidateRecover(stream string, number int64, p *RecoverParams) error {
	if p == nil {
		return fmt.Errorf("%w: nil RecoverParams", ErrInvalidText)
	}
	if _, err := ExpiryReason(stream, number, &ResolveExpiredParams{Reason: p.Reason}); err != nil {
		return err
	}
	if p.RecoveryType == "" {
		return fmt.Errorf("%w: empty recovery type", ErrInvalidText)
	}
	if err := ValidateText("recovery type", p.RecoveryType); err != nil {
		return err
	}
	return ValidateText("owner", p.Owner)
}

// ValidateExpiredBatch checks a ResolveExpiredBatch call and returns the gap
// reason to record.
func ValidateExpiredBatch(stream string, numbers []int64, p *ResolveExpiredParams) (string, error) {
	if len(numbers) == 0 || len(numbers) > MaxBatch {
		return "", fmt.Errorf("%w: %d numbers, must be 1..%d", ErrInvalidCount, len(numbers), MaxBatch)
	}
	if p.RecoveredAs != 0 {
		return "", fmt.Errorf("%w: a batch of gaps cannot be recovered as one number", ErrInvalidNumber)
	}
	for _, n := range numbers {
		if n < 1 {
			return "", fmt.Errorf("%w: %d", ErrInvalidNumber, n)
		}
	}
	return ExpiryReason(stream, 1, p)
}

// RecoverItem is one move of RecoverExpiredBatch: the work of the expired
// entry Number goes to a new number.
type RecoverItem struct {
	Number  int64
	Payload []byte
	// RecoveryType says how the work was recovered ("partial-work",
	// "retry"); required.
	RecoveryType string
}

// RecoverBatchParams are the options of RecoverExpiredBatch. A nil pointer
// means the defaults.
type RecoverBatchParams struct {
	// Reason is the old entries' gap reason. Default: ReasonRecovered.
	Reason string
	// Owner is recorded on the new entries (the recovering process).
	Owner string
	// Hook records a pending hook for every old entry that moved, in the
	// same transaction (HookQueue). Only a backend that is a HookQueue
	// honours it.
	Hook bool
	Now  *time.Time
}

// RecoverResult is the outcome of one RecoverItem.
type RecoverResult struct {
	// Moved is the number the work moved to; 0 if it did not move.
	Moved int64
	// Err says why not, as RecoverExpired would: ErrNotExpired,
	// ErrCommitted, ErrReleased, ErrExpired, ErrGap, ErrNotFound.
	Err error
}

// ValidateRecoverBatch checks a RecoverExpiredBatch call: a valid stream,
// 1..MaxBatch items with numbers ascending and distinct, a recovery type on
// each, and valid params (nil means the defaults).
func ValidateRecoverBatch(stream string, items []RecoverItem, p *RecoverBatchParams) error {
	if p == nil {
		p = &RecoverBatchParams{}
	}
	if len(items) == 0 || len(items) > MaxBatch {
		return fmt.Errorf("%w: %d items, must be 1..%d", ErrInvalidCount, len(items), MaxBatch)
	}
	for i, it := range items {
		if err := ValidateRecover(stream, it.Number, &RecoverParams{RecoveryType: it.RecoveryType, Reason: p.Reason, Owner: p.Owner}); err != nil {
			return err
		}
		if i > 0 && it.Number <= items[i-1].Number {
			return fmt.Errorf("%w: numbers must ascend, %d after %d", ErrInvalidNumber, it.Number, items[i-1].Number)
		}
	}
	return nil
}
