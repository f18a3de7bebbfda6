package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

var _ store.HookQueue = (*Store)(nil)

// pendingHooks are the records of hooks still to deliver (store.HookQueue),
// written under the lock of the stream whose resolution they belong to, so
// that a record and its resolution are seen together. They live as long as
// the Store: nothing of the memory backend survives its process.
type pendingHooks struct {
	mu   sync.Mutex // taken after a stream's lock, never before
	recs map[hookKey]*hookRec
}

type hookKey struct {
	stream string
	number int64
}

type hookRec struct {
	h   store.PendingHook
	due time.Time
}

// hookEntry keeps the fields of e that a hook record holds: e as it was
// when it was found expired.
func hookEntry(e store.Entry) store.Entry {
	return store.Entry{
		Stream: e.Stream, Number: e.Number, State: store.Leased, Token: e.Token, Owner: e.Owner,
		OperationID: e.OperationID, Kind: e.Kind, LeasedAt: e.LeasedAt, ExpiresAt: e.ExpiresAt, Renewals: e.Renewals,
	}
}

// add records the hook of e, resolved at now, unless it has one; true if
// it recorded it. The lock of e's stream is held.
func (p *pendingHooks) add(e store.Entry, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := hookKey{e.Stream, e.Number}
	if _, ok := p.recs[k]; ok {
		return false
	}
	if p.recs == nil {
		p.recs = map[hookKey]*hookRec{}
	}
	p.recs[k] = &hookRec{h: store.PendingHook{Entry: hookEntry(e), CreatedAt: now}, due: now}
	return true
}

// ClaimHooks implements store.HookQueue.
func (s *Store) ClaimHooks(ctx context.Context, p *store.ClaimHooksParams) ([]store.PendingHook, error) {
	limit, err := store.ValidateClaimHooks(p)
	if err != nil {
		return nil, fmt.Errorf("claim hooks: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("claim hooks: %w", store.NotSent(err))
	}
	now := s.clock(p.Now)
	q := &s.hooks
	q.mu.Lock()
	defer q.mu.Unlock()
	var due []*hookRec
	for _, r := range q.recs {
		if !now.Before(r.due) {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b *hookRec) int {
		return cmp.Or(a.due.Compare(b.due), cmp.Compare(a.h.Entry.Stream, b.h.Entry.Stream), cmp.Compare(a.h.Entry.Number, b.h.Entry.Number))
	})
	due = due[:min(len(due), limit)]
	out := make([]store.PendingHook, 0, len(due))
	for _, r := range due {
		r.h.Attempts++
		r.due = now.Add(p.For.Truncate(time.Microsecond))
		out = append(out, r.h)
	}
	slices.SortFunc(out, func(a, b store.PendingHook) int {
		return cmp.Or(cmp.Compare(a.Entry.Stream, b.Entry.Stream), cmp.Compare(a.Entry.Number, b.Entry.Number))
	})
	return out, nil
}

// AckHook implements store.HookQueue.
func (s *Store) AckHook(ctx context.Context, stream string, number int64, attempts int) (bool, error) {
	if err := store.ValidateHookRef(stream, number, attempts); err != nil {
		return false, fmt.Errorf("ack hook: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("ack hook: %w", store.NotSent(err))
	}
	q := &s.hooks
	q.mu.Lock()
	defer q.mu.Unlock()
	k := hookKey{stream, number}
	if r, ok := q.recs[k]; !ok || r.h.Attempts != attempts {
		return false, nil
	}
	delete(q.recs, k)
	return true, nil
}

// RetryHook implements store.HookQueue.
func (s *Store) RetryHook(ctx context.Context, stream string, number int64, attempts int, delay time.Duration, msg string) (bool, error) {
	msg, err := store.ValidateRetryHook(stream, number, attempts, delay, msg)
	if err != nil {
		return false, fmt.Errorf("retry hook: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("retry hook: %w", store.NotSent(err))
	}
	now := s.clock(nil)
	q := &s.hooks
	q.mu.Lock()
	defer q.mu.Unlock()
	r, ok := q.recs[hookKey{stream, number}]
	if !ok || r.h.Attempts != attempts {
		return false, nil
	}
	r.due = now.Add(delay.Truncate(time.Microsecond))
	r.h.LastError = msg
	return true, nil
}

// AddHooks implements store.HookQueue.
func (s *Store) AddHooks(ctx context.Context, name string, numbers []int64) ([]int64, error) {
	if err := store.ValidateAddHooks(name, numbers); err != nil {
		return nil, fmt.Errorf("add hooks: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("add hooks: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.clock(nil)
	var added []int64
	for _, n := range slices.Compact(slices.Sorted(slices.Values(numbers))) {
		e, err := st.entry(n)
		if err != nil || e.slot.state == stateLeased {
			continue
		}
		if s.hooks.add(e.entry(name, n), now) {
			added = append(added, n)
		}
	}
	return added, nil
}

// HookStats implements store.HookQueue.
func (s *Store) HookStats(ctx context.Context) (store.HookStats, error) {
	if err := ctx.Err(); err != nil {
		return store.HookStats{}, fmt.Errorf("hook stats: %w", store.NotSent(err))
	}
	q := &s.hooks
	q.mu.Lock()
	defer q.mu.Unlock()
	var st store.HookStats
	for _, r := range q.recs {
		st.Pending++
		if r.h.LastError != "" {
			st.Failing++
		}
		if st.OldestAt.IsZero() || r.h.CreatedAt.Before(st.OldestAt) {
			st.OldestAt = r.h.CreatedAt
		}
	}
	return st, nil
}
