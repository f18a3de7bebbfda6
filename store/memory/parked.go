package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seqlease/seqlease/store"
)

var _ store.Parker = (*Store)(nil)

// record is the recovery record of a leased entry (store.Parker): kept by
// its stream, under its lock, and dropped when the entry resolves.
type record struct {
	attempts int
	lastErr  string
	parkedAt time.Time // zero: not parked
}

// withRecord returns e with its recovery record, if it has one. st.mu must
// be held.
func (st *stream) withRecord(e store.Entry) store.Entry {
	if r, ok := st.records[e.Number]; ok && e.State == store.Leased {
		e.RecoveryAttempts, e.LastRecoveryError, e.ParkedAt = r.attempts, r.lastErr, r.parkedAt
	}
	return e
}

// RecordRecoveryFailure implements store.Parker.
func (s *Store) RecordRecoveryFailure(ctx context.Context, name string, number int64, p *store.RecoveryFailureParams) (store.Entry, error) {
	msg, err := store.ValidateRecoveryFailure(name, number, p)
	if err != nil {
		return store.Entry{}, fmt.Errorf("record recovery failure: %w", err)
	}
	if p == nil {
		p = &store.RecoveryFailureParams{}
	}
	st, e, now, err := s.expired(ctx, name, number, p.Now)
	if err != nil {
		return store.Entry{}, fmt.Errorf("record recovery failure: %w", err)
	}
	defer st.mu.Unlock()
	r := st.records[number]
	if !r.parkedAt.IsZero() {
		return store.Entry{}, fmt.Errorf("record recovery failure: %w", store.ErrParked)
	}
	r.attempts++
	r.lastErr = msg
	if p.ParkAfter > 0 && r.attempts >= p.ParkAfter {
		r.parkedAt = now
	}
	if st.records == nil {
		st.records = map[int64]record{}
	}
	st.records[number] = r
	return st.withRecord(e.entry(name, number)), nil
}

// ListParked implements store.Parker. It visits the streams in name order
// and, in each, its few recovery records.
func (s *Store) ListParked(ctx context.Context, p *store.ListParkedParams) ([]store.Entry, error) {
	limit, err := store.ValidateListParked(p)
	if err != nil {
		return nil, fmt.Errorf("list parked: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list parked: %w", store.NotSent(err))
	}
	if p == nil {
		p = &store.ListParkedParams{}
	}
	var out []store.Entry
	for _, name := range s.names(p.Stream) {
		if name < p.AfterStream {
			continue
		}
		after := int64(0)
		if name == p.AfterStream {
			after = p.AfterNumber
		}
		st := s.lookup(name)
		st.mu.Lock()
		for _, n := range slices.Sorted(maps.Keys(st.records)) {
			if n <= after || st.records[n].parkedAt.IsZero() {
				continue
			}
			if len(out) == limit {
				break
			}
			out = append(out, st.withRecord(st.at(n).entry(name, n)))
		}
		st.mu.Unlock()
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// names returns only, if it is a stream, or every stream, in name order.
func (s *Store) names(only string) []string {
	if only != "" {
		if s.lookup(only) == nil {
			return nil
		}
		return []string{only}
	}
	var names []string
	s.streams.Range(func(k, _ any) bool {
		names = append(names, k.(string))
		return true
	})
	slices.Sort(names)
	return names
}

// CountParked implements store.Parker.
func (s *Store) CountParked(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("count parked: %w", store.NotSent(err))
	}
	var n int64
	s.streams.Range(func(_, v any) bool {
		st := v.(*stream)
		st.mu.Lock()
		for _, r := range st.records {
			if !r.parkedAt.IsZero() {
				n++
			}
		}
		st.mu.Unlock()
		return true
	})
	return n, nil
}

// UnparkEntry implements store.Parker.
func (s *Store) UnparkEntry(ctx context.Context, name string, number int64) error {
	if err := store.ValidateEntryRef(name, number); err != nil {
		return fmt.Errorf("unpark: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("unpark: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return fmt.Errorf("unpark: %w: number %d", store.ErrNotFound, number)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	e, err := st.entry(number)
	switch {
	case err != nil:
		return fmt.Errorf("unpark: %w", err)
	case e.slot.state != stateLeased:
		return fmt.Errorf("unpark: %w", resolvedErr(e))
	}
	r := st.records[number]
	if r.parkedAt.IsZero() {
		return fmt.Errorf("unpark: %w", store.ErrNotParked)
	}
	r.parkedAt, r.attempts = time.Time{}, 0
	st.records[number] = r
	return nil
}
