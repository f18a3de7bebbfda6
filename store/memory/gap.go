package memory

import (
	"context"
	"fmt"

	"github.com/seqlease/seqlease/store"
)

// ListGaps implements the storage contract's ListGaps. It scans the retained
// entries above p.After: gaps are rare and the memory backend keeps no index
// of them, so the cost follows the retained length of the stream.
func (s *Store) ListGaps(ctx context.Context, name string, p *store.ListGapsParams) ([]store.Entry, error) {
	if p == nil {
		p = &store.ListGapsParams{}
	}
	limit, err := store.ValidateListGaps(name, p)
	if err != nil {
		return nil, fmt.Errorf("list gaps: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list gaps: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, fmt.Errorf("list gaps: %w", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []store.Entry
	for n := max(p.After+1, st.low); n <= st.last && len(out) < limit; n++ {
		e := st.at(n)
		open := e.slot.state == stateGap
		filled := p.IncludeFilled && e.filled()
		if (!open && !filled) || (p.Reason != "" && e.text(xReason) != p.Reason) {
			continue
		}
		out = append(out, e.entry(name, n))
	}
	return out, nil
}

// CountGaps implements the storage contract's CountGaps from the stream's
// count of open gaps, kept as gaps are made, filled and trimmed.
func (s *Store) CountGaps(ctx context.Context, name string) (int64, error) {
	if err := store.ValidateStream(name); err != nil {
		return 0, fmt.Errorf("count gaps: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("count gaps: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return 0, fmt.Errorf("count gaps: %w", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.gaps, nil
}

// FillGap implements the storage contract's FillGap: under the stream's
// lock, an open gap becomes committed with the filler's payload.
func (s *Store) FillGap(ctx context.Context, name string, number int64, p *store.FillParams) error {
	if err := store.ValidateFill(name, number, p); err != nil {
		return fmt.Errorf("fill gap: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fill gap: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return fmt.Errorf("fill gap: %w: number %d", store.ErrNotFound, number)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if number < st.low {
		return fmt.Errorf("fill gap: %w", &store.TrimmedError{Stream: name, LowPoint: st.low})
	}
	e, err := st.entry(number)
	if err != nil {
		return fmt.Errorf("fill gap: %w", err)
	}
	if err := notGap(e.state(), e.filled()); err != nil {
		return fmt.Errorf("fill gap: %w", err)
	}
	if e.recoveredAs != 0 {
		return fmt.Errorf("fill gap: %w: its work moved to %d; filling it would make a second copy", store.ErrNotGap, e.recoveredAs)
	}
	e.slot.state = stateCommitted
	st.gaps--
	e.setPayload(p.Payload)
	e.setTime(tFilled, s.clock(p.Now))
	e.setText(xFilledBy, p.FilledBy)
	return nil
}

// notGap explains why an entry in state with filled cannot be filled, or
// returns nil for an open gap.
func notGap(state store.State, filled bool) error {
	switch {
	case state == store.Gap:
		return nil
	case filled:
		return fmt.Errorf("%w: already filled", store.ErrNotGap)
	}
	return fmt.Errorf("%w: %s", store.ErrNotGap, state)
}

var _ store.CommitFinder = (*Store)(nil)

// FindCommitted implements store.CommitFinder: a scan of the range.
func (s *Store) FindCommitted(ctx context.Context, name string, p *store.FindCommittedParams) ([]store.Entry, error) {
	if err := store.ValidateFindCommitted(name, p); err != nil {
		return nil, fmt.Errorf("find committed: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("find committed: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, fmt.Errorf("find committed: %w", err)
	}
	ops := make(map[string]bool, len(p.Operations))
	for _, op := range p.Operations {
		ops[op] = true
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []store.Entry
	for n := max(p.After+1, st.low); n <= min(p.Through, st.last); n++ {
		e := st.at(n)
		if e.slot.state == stateCommitted && ops[e.text(xOperation)] {
			x := e.entry(name, n)
			x.Payload = nil
			out = append(out, x)
		}
	}
	return out, nil
}
