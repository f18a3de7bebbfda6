package store

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits every backend enforces. Higher layers may enforce tighter ones (the
// sequence package's Config.MaxTTL and Config.MaxPayload).
const (
	// MaxNameLen is the longest stream name, in bytes.
	MaxNameLen = 200
	// MaxTextLen is the longest owner, operation id, kind or reason, in bytes.
	MaxTextLen = 1024
	// MaxBatch is the most numbers one Lease call hands out.
	MaxBatch = 10_000
	// MaxTTL is the longest lease any backend accepts.
	MaxTTL = 7 * 24 * time.Hour
	// MaxListLimit is the most entries one listing returns.
	MaxListLimit = 10_000
	// DefaultListLimit is the listing size when none is given.
	DefaultListLimit = 1000
)

// ValidateStream checks a stream name: 1 to MaxNameLen bytes of valid UTF-8
// with no control characters.
func ValidateStream(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidStream)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidStream, len(name), MaxNameLen)
	}
	if err := checkText(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidStream, err)
	}
	return nil
}

// ValidateText checks an optional free-text field (owner, operation id, kind,
// reason): at most MaxTextLen bytes of valid UTF-8 with no control characters.
func ValidateText(field, s string) error {
	if len(s) > MaxTextLen {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalidText, field, len(s), MaxTextLen)
	}
	if err := checkText(s); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidText, field, err)
	}
	return nil
}

func checkText(s string) error {
	if printableASCII(s) {
		return nil // the usual case, decided without decoding runes
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U", r)
		}
	}
	return nil
}

// printableASCII reports whether s is all ASCII without control
// characters (the ASCII controls are U+0000-U+001F and U+007F).
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// ValidateTTL checks a lease duration: positive, at least a microsecond (the
// backends' precision) and at most max (MaxTTL when max is zero).
func ValidateTTL(ttl, max time.Duration) error {
	if max <= 0 || max > MaxTTL {
		max = MaxTTL
	}
	if ttl < time.Microsecond {
		return fmt.Errorf("%w: %v is not positive", ErrInvalidTTL, ttl)
	}
	if ttl > max {
		return fmt.Errorf("%w: %v exceeds the maximum %v", ErrInvalidTTL, ttl, max)
	}
	return nil
}

// ValidateLease checks a whole lease call.
func ValidateLease(stream string, reqs []LeaseRequest, p *LeaseParams) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	if len(reqs) == 0 || len(reqs) > MaxBatch {
		return fmt.Errorf("%w: %d, must be 1..%d", ErrInvalidCount, len(reqs), MaxBatch)
	}
	if p != nil {
		if err := ValidateText("owner", p.Owner); err != nil {
			return err
		}
	}
	for i := range reqs {
		if err := ValidateTTL(reqs[i].TTL, 0); err != nil {
			return err
		}
		if err := ValidateText("operation id", reqs[i].OperationID); err != nil {
			return err
		}
		if err := ValidateText("kind", reqs[i].Kind); err != nil {
			return err
		}
	}
	return nil
}

// ValidateHolding checks the (stream, number, token) triple that names a held
// lease.
func ValidateHolding(stream string, number int64, token Token) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	if number < 1 {
		return fmt.Errorf("%w: %d", ErrInvalidNumber, number)
	}
	if token.IsZero() {
		return fmt.Errorf("%w: zero token", ErrInvalidToken)
	}
	return nil
}

// ListLimit returns the effective limit of a listing, or an error for a
// negative or too large one.
func ListLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultListLimit, nil
	case limit < 0 || limit > MaxListLimit:
		return 0, fmt.Errorf("%w: limit %d, must be 0..%d", ErrInvalidCount, limit, MaxListLimit)
	}
	return limit, nil
}

// Micro truncates t to microseconds, the precision both backends keep.
func Micro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// ExpiryReason validates a ResolveExpired call and returns the gap reason to
// record.
func ExpiryReason(stream string, number int64, p *ResolveExpiredParams) (string, error) {
	if err := ValidateStream(stream); err != nil {
		return "", err
	}
	if number < 1 {
		return "", fmt.Errorf("%w: %d", ErrInvalidNumber, number)
	}
	if p.RecoveredAs < 0 {
		return "", fmt.Errorf("%w: recovered as %d", ErrInvalidNumber, p.RecoveredAs)
	}
	switch p.Reason {
	case "":
		return ReasonExpired, nil
	case ReasonReleased:
		return "", fmt.Errorf("%w: reason %s is reserved for the holder's Release", ErrInvalidText, QuoteInput(p.Reason))
	}
	if err := ValidateText("reason", p.Reason); err != nil {
		return "", err
	}
	return p.Reason, nil
}

// ValidateListExpired checks a ListExpired call and returns its effective
// limit: valid stream names (the filter and the cursor, when set), a
// non-negative cursor number and a limit in range. A nil p means the defaults.
func ValidateListExpired(p *ListExpiredParams) (int, error) {
	if p == nil {
		p = &ListExpiredParams{}
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

// ValidateRead checks a Read call and returns its effective limit.
func ValidateRead(stream string, after int64, limit int) (int, error) {
	if err := ValidateStream(stream); err != nil {
		return 0, err
	}
	if after < 0 {
		return 0, fmt.Errorf("%w: after %d", ErrInvalidNumber, after)
	}
	return ListLimit(limit)
}

// ValidateListGaps checks a ListGaps call and returns its effective limit.
func ValidateListGaps(stream string, p *ListGapsParams) (int, error) {
	if err := ValidateStream(stream); err != nil {
		return 0, err
	}
	if p == nil {
		p = &ListGapsParams{}
	}
	if p.After < 0 {
		return 0, fmt.Errorf("%w: after %d", ErrInvalidNumber, p.After)
	}
	if err := ValidateText("reason", p.Reason); err != nil {
		return 0, err
	}
	return ListLimit(p.Limit)
}

// ValidateFill checks a FillGap call: a valid stream, a number of at least 1
// and a non-empty, valid FilledBy. A nil p has no FilledBy.
func ValidateFill(stream string, number int64, p *FillParams) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	if number < 1 {
		return fmt.Errorf("%w: %d", ErrInvalidNumber, number)
	}
	if p == nil || p.FilledBy == "" {
		return fmt.Errorf("%w: filled by is required", ErrInvalidText)
	}
	return ValidateText("filled by", p.FilledBy)
}

// ValidateTrim checks a Trim call: a valid stream and below >= 1.
func ValidateTrim(stream string, below int64) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	if below < 1 {
		return fmt.Errorf("%w: below %d", ErrInvalidNumber, below)
	}
	return nil
}
