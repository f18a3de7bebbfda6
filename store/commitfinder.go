package store

import (
	"context"
	"fmt"
)

// MaxFindSpan is the most numbers one FindCommitted call searches.
const MaxFindSpan = MaxListLimit

// FindCommittedParams select what FindCommitted searches: the numbers in
// (After, Through] of a stream, for committed entries whose operation id
// is one of Operations.
type FindCommittedParams struct {
	// Operations are the operation ids looked for: at least one, at most
	// MaxListLimit, none empty, each a valid text (ValidateText).
	Operations []string
	// After and Through bound the numbers searched: 0 <= After <= Through,
	// and Through-After at most MaxFindSpan.
	After, Through int64
}

// CommitFinder is implemented by a backend that finds a stream's
// committed entries by operation id in a bounded range of numbers: where
// the work of a gap went when the application delivered its operation
// again under a new number, rather than recovery moving it (which the gap
// records as Entry.RecoveredAs). No index serves the search: it reads the
// range through the primary key, so the range is bounded (MaxFindSpan).
// Both built-in backends implement it; the web interface's gaps page uses
// it.
type CommitFinder interface {
	// FindCommitted returns the committed entries of stream in the range
	// whose operation id is one of p.Operations, in number order, without
	// their payloads. A filled gap counts as committed. Numbers trimmed or
	// not handed out are not searched. An unknown stream is
	// ErrStreamNotFound; bad params change nothing (ErrInvalidArgument).
	FindCommitted(ctx context.Context, stream string, p *FindCommittedParams) ([]Entry, error)
}

// ValidateFindCommitted checks a FindCommitted call.
func ValidateFindCommitted(stream string, p *FindCommittedParams) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	switch {
	case p == nil || len(p.Operations) == 0:
		return fmt.Errorf("%w: no operation id to find", ErrInvalidArgument)
	case len(p.Operations) > MaxListLimit:
		return fmt.Errorf("%w: %d operation ids, limit %d", ErrInvalidCount, len(p.Operations), MaxListLimit)
	case p.After < 0 || p.Through < p.After:
		return fmt.Errorf("%w: range (%d, %d]", ErrInvalidNumber, p.After, p.Through)
	case p.Through-p.After > MaxFindSpan:
		return fmt.Errorf("%w: range (%d, %d] spans more than %d numbers", ErrInvalidCount, p.After, p.Through, MaxFindSpan)
	}
	for _, op := range p.Operations {
		if op == "" {
			return fmt.Errorf("%w: an empty operation id", ErrInvalidText)
		}
		if err := ValidateText("operation id", op); err != nil {
			return err
		}
	}
	return nil
}
