package store

import (
	"fmt"
	"time"
)

// Limits of inbox records.
const (
	// MaxConsumerLen is the longest consumer name, in bytes.
	MaxConsumerLen = MaxNameLen
	// MaxMessageIDLen is the longest message id, in bytes.
	MaxMessageIDLen = 512
	// DefaultPurgeLimit is how many records one PurgeReceived deletes at
	// most when PurgeReceivedParams.Limit is 0.
	DefaultPurgeLimit = 1000
	// MaxPurgeLimit is the largest PurgeReceivedParams.Limit.
	MaxPurgeLimit = MaxListLimit
)

// Sentinels of bad inbox input; each matches ErrInvalidArgument too.
var (
	// ErrInvalidConsumer reports an empty, over-long or malformed consumer
	// name.
	ErrInvalidConsumer = newInvalid("invalid inbox consumer")
	// ErrInvalidMessageID reports an empty, over-long or malformed message
	// id.
	ErrInvalidMessageID = newInvalid("invalid inbox message id")
	// ErrInvalidCutoff reports a PurgeReceived cutoff that is negative or
	// given twice (both Before and OlderThan).
	ErrInvalidCutoff = newInvalid("invalid purge cutoff")
)

// ReceiveParams are the options of MarkReceived. A nil pointer means the
// defaults.
type ReceiveParams struct {
	// Now pins the backend's clock, the record's receive time; nil uses
	// its now (on PostgreSQL, clock_timestamp() at the statement).
	Now *time.Time
}

// PurgeReceivedParams are the options of PurgeReceived. A nil pointer means
// the defaults: every record received before the backend's now, of every
// consumer, at most DefaultPurgeLimit of them.
type PurgeReceivedParams struct {
	// Consumer limits the purge to one consumer's records. Default (""):
	// every consumer's.
	Consumer string
	// Before is the cutoff: records received strictly before it go.
	// Default (zero): the backend's now minus OlderThan.
	Before time.Time
	// OlderThan, when Before is zero, puts the cutoff at the backend's now
	// minus OlderThan, so the database clock decides the age of a record,
	// not the caller's. At least 0; it must be 0 when Before is set.
	// Default: 0.
	OlderThan time.Duration
	// Limit bounds the records one call deletes, the oldest first: call
	// again until it returns fewer than Limit. Default (0):
	// DefaultPurgeLimit; at most MaxPurgeLimit.
	Limit int
	// Now pins the backend's clock for OlderThan; nil uses its now.
	Now *time.Time
}

// ValidateReceive checks the (consumer, message id) pair of an inbox
// record: each 1 to its limit (MaxConsumerLen, MaxMessageIDLen) bytes of
// valid UTF-8 with no control characters.
func ValidateReceive(consumer, messageID string) error {
	if err := ValidateConsumer(consumer); err != nil {
		return err
	}
	switch {
	case messageID == "":
		return fmt.Errorf("%w: empty", ErrInvalidMessageID)
	case len(messageID) > MaxMessageIDLen:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidMessageID, len(messageID), MaxMessageIDLen)
	}
	if err := checkText(messageID); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidMessageID, err)
	}
	return nil
}

// ValidateConsumer checks a consumer name: 1 to MaxConsumerLen bytes of
// valid UTF-8 with no control characters.
func ValidateConsumer(consumer string) error {
	switch {
	case consumer == "":
		return fmt.Errorf("%w: empty", ErrInvalidConsumer)
	case len(consumer) > MaxConsumerLen:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidConsumer, len(consumer), MaxConsumerLen)
	}
	if err := checkText(consumer); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConsumer, err)
	}
	return nil
}

// ValidatePurgeReceived checks a PurgeReceived call and returns its
// effective limit. A nil p means the defaults.
func ValidatePurgeReceived(p *PurgeReceivedParams) (int, error) {
	if p == nil {
		return DefaultPurgeLimit, nil
	}
	if p.Consumer != "" {
		if err := ValidateConsumer(p.Consumer); err != nil {
			return 0, err
		}
	}
	switch {
	case p.OlderThan < 0:
		return 0, fmt.Errorf("%w: OlderThan %v is negative", ErrInvalidCutoff, p.OlderThan)
	case p.OlderThan > 0 && !p.Before.IsZero():
		return 0, fmt.Errorf("%w: both Before and OlderThan are set", ErrInvalidCutoff)
	case p.Limit < 0 || p.Limit > MaxPurgeLimit:
		return 0, fmt.Errorf("%w: limit %d, must be 0..%d", ErrInvalidCount, p.Limit, MaxPurgeLimit)
	case p.Limit == 0:
		return DefaultPurgeLimit, nil
	}
	return p.Limit, nil
}

// PurgeCutoff returns the cutoff of a validated PurgeReceived call whose
// backend's now is now: p.Before if set, else now - p.OlderThan, in
// microseconds.
func PurgeCutoff(p *PurgeReceivedParams, now time.Time) time.Time {
	if p == nil {
		return Micro(now)
	}
	if !p.Before.IsZero() {
		return Micro(p.Before)
	}
	return Micro(now).Add(-p.OlderThan.Truncate(time.Microsecond))
}
