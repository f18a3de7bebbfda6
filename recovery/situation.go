package recovery

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Situation is what a SituationSelector sees when it picks the steps for
// one expired entry: more than the load and the kind.
type Situation struct {
	Level Level
	// Entry is the expired entry; its Kind is the kind of work.
	Entry store.Entry
	// Now is the database clock as the cleanup loop reads it; zero when
	// it could not be read.
	Now time.Time
	// SinceExpiry is how long the entry has been expired, by the database
	// clock (Now minus Entry.ExpiresAt); zero when Now is unknown.
	SinceExpiry time.Duration
	// History is the recovery record of the entry's kind, by step name:
	// kept in the database (store.RecoveryHistory), so a restart does not
	// forget it. The caller's copy.
	History History
}

// History is the recovery record of one kind of work, by step name.
type History map[string]store.RecoveryStat

// SituationSelector is a Selector that sees the Situation of each entry.
// The Pipeline calls SelectSituation instead of Select when its Selector
// has it (a RateFilter passes it on). Its method must not block.
type SituationSelector interface {
	Selector
	SelectSituation(s Situation) Steps
}

// SituationFunc adapts a function to a SituationSelector. Its Select
// passes a Situation that has only the level and the kind.
type SituationFunc func(s Situation) Steps

// Select implements Selector.
func (f SituationFunc) Select(level Level, kind string) Steps {
	return f(Situation{Level: level, Entry: store.Entry{Kind: kind}})
}

// SelectSituation calls f.
func (f SituationFunc) SelectSituation(s Situation) Steps { return f(s) }

// selectFor asks sel for the steps of s.
func selectFor(sel Selector, s Situation) Steps {
	if ss, ok := sel.(SituationSelector); ok {
		return ss.SelectSituation(s)
	}
	return sel.Select(s.Level, s.Entry.Kind)
}

// historyKey is a record's kind and method.
type historyKey struct{ kind, method string }

// history is the Pipeline's view of the recovery record: what it read from
// the store (base), plus the tallies not yet written (pending) or being
// written (inflight). Without a store.RecoveryHistory it is the record of
// this process only.
type history struct {
	store store.RecoveryHistory // nil: kept in this process

	sync sync.Mutex // one SyncHistory at a time

	mu       sync.Mutex
	base     map[historyKey]store.RecoveryStat
	inflight map[historyKey]store.RecoveryTally
	pending  map[historyKey]store.RecoveryTally
	now      func() time.Time
}

// add notes one attempt of method on kind.
func (h *history) add(kind, method string, r Result, err error) {
	k := historyKey{kind, method}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending == nil {
		h.pending = map[historyKey]store.RecoveryTally{}
	}
	t := h.pending[k]
	t.Kind, t.Method = kind, method
	switch {
	case err != nil:
		t.Failed++
	case r.Recovered:
		t.Recovered++
	default:
		t.Declined++
	}
	h.pending[k] = t
	if h.store == nil { // the process's own record: folded in at once
		h.fold(h.pending, h.now())
		h.pending = nil
	}
}

// fold adds tallies to base, at now. h.mu must be held.
func (h *history) fold(ts map[historyKey]store.RecoveryTally, now time.Time) {
	if h.base == nil {
		h.base = map[historyKey]store.RecoveryStat{}
	}
	for k, t := range ts {
		h.base[k] = plus(h.base[k], t, now)
	}
}

// plus returns s with t added at now.
func plus(s store.RecoveryStat, t store.RecoveryTally, now time.Time) store.RecoveryStat {
	s.Kind, s.Method = t.Kind, t.Method
	s.Recovered += t.Recovered
	s.Declined += t.Declined
	s.Failed += t.Failed
	if t.Recovered > 0 {
		s.LastRecoveredAt = now
	}
	if t.Failed > 0 {
		s.LastFailedAt = now
	}
	s.UpdatedAt = now
	return s
}

// of returns the record of kind: base plus what is not written yet.
func (h *history) of(kind string) History {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := History{}
	for k, s := range h.base {
		if k.kind == kind {
			out[k.method] = s
		}
	}
	now := h.now()
	for _, ts := range []map[historyKey]store.RecoveryTally{h.inflight, h.pending} {
		for k, t := range ts {
			if k.kind == kind {
				out[k.method] = plus(out[k.method], t, now)
			}
		}
	}
	return out
}

// maxHistoryRows bounds the records SyncHistory reads back.
const maxHistoryRows = store.MaxListLimit

// syncStore writes the pending tallies in one call and reads the record
// back. On a failed write the tallies stay pending for the next sync.
func (h *history) syncStore(ctx context.Context) error {
	if h.store == nil {
		return nil
	}
	h.sync.Lock()
	defer h.sync.Unlock()
	h.mu.Lock()
	h.inflight, h.pending = h.pending, nil
	ts := make([]store.RecoveryTally, 0, len(h.inflight))
	for _, t := range h.inflight {
		ts = append(ts, t)
	}
	h.mu.Unlock()
	if len(ts) > 0 {
		if err := h.store.AddRecoveryStats(ctx, ts, nil); err != nil {
			h.mu.Lock()
			for k, t := range h.inflight { // back to pending, merged
				p := h.pending[k]
				p.Kind, p.Method = t.Kind, t.Method
				p.Recovered, p.Declined, p.Failed = p.Recovered+t.Recovered, p.Declined+t.Declined, p.Failed+t.Failed
				if h.pending == nil {
					h.pending = map[historyKey]store.RecoveryTally{}
				}
				h.pending[k] = p
			}
			h.inflight = nil
			h.mu.Unlock()
			return fmt.Errorf("recovery: writing the recovery history: %w", err)
		}
	}
	rows, err := h.store.ListRecoveryStats(ctx, &store.ListRecoveryStatsParams{Limit: maxHistoryRows})
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.fold(h.inflight, h.now()) // written: keep them in the view
		h.inflight = nil
		return fmt.Errorf("recovery: reading the recovery history: %w", err)
	}
	base := make(map[historyKey]store.RecoveryStat, len(rows))
	for _, s := range rows {
		base[historyKey{s.Kind, s.Method}] = s
	}
	h.base, h.inflight = base, nil
	return nil
}
