package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Config configures a Store. A nil *Config means the defaults.
type Config struct {
	// Now is the store's clock, standing in for the database clock.
	// Default: time.Now.
	Now func() time.Time
}

// Store is the in-memory backend. The zero value is not usable; call New.
type Store struct {
	now     func() time.Time
	streams sync.Map // string -> *stream

	watchMu sync.Mutex                   // serialises changes to sinks
	sinks   atomic.Pointer[[]store.Sink] // copy on write; read without a lock

	named namedLeases // named leases: namedlease.go
}

// New returns an empty Store.
func New(cfg *Config) *Store {
	s := &Store{now: time.Now}
	if cfg != nil && cfg.Now != nil {
		s.now = cfg.Now
	}
	return s
}

type stream struct {
	name string
	mu   sync.Mutex
	ledger
	// firstUnresolved is the smallest number that may be unresolved: every
	// entry below it is resolved. The watermark is firstUnresolved-1.
	firstUnresolved int64
	unresolved      int64
	gaps            int64 // open gaps among the retained entries
}

func newStream(name string) *stream {
	return &stream{name: name, ledger: newLedger(), firstUnresolved: 1}
}

// Local reports that the store answers in process, without a round trip,
// and tells its watchers of every resolution before the call that made it
// returns: the sequence Leaser then neither coalesces leases nor groups
// commits (they only save round trips), nor reports its own resolutions to
// the barrier a second time.
func (s *Store) Local() bool { return true }

func (s *Store) clock(pinned *time.Time) time.Time {
	if pinned != nil {
		return store.Micro(*pinned)
	}
	return store.Micro(s.now())
}

func (s *Store) stream(name string) (*stream, error) {
	v, ok := s.streams.Load(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", store.ErrStreamNotFound, name)
	}
	return v.(*stream), nil
}

// entry returns the entry of number, a *store.TrimmedError if retention
// removed it, or ErrNotFound. st.mu must be held.
func (st *stream) entry(number int64) (*store.Entry, error) {
	if number < st.low {
		return nil, &store.TrimmedError{Stream: st.name, LowPoint: st.low}
	}
	if number > st.last {
		return nil, fmt.Errorf("%w: number %d", store.ErrNotFound, number)
	}
	return st.at(number), nil
}

// resolve marks e resolved at t, advances the watermark cursor and tells
// the watchers. st.mu must be held, so watchers hear of one stream's
// resolutions in the order they happened.
func (s *Store) resolve(name string, st *stream, e *store.Entry, state store.State, t time.Time) {
	e.State = state
	e.ResolvedAt = t
	st.unresolved--
	if state == store.Gap {
		st.gaps++
	}
	for st.firstUnresolved <= st.last && st.at(st.firstUnresolved).State.Resolved() {
		st.firstUnresolved++
	}
	s.notify(name, e.Number)
}

// Lease implements the storage contract's Lease.
func (s *Store) Lease(ctx context.Context, name string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error) {
	if err := store.ValidateLease(name, reqs, p); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	var owner string
	var pinned *time.Time
	if p != nil {
		owner, pinned = p.Owner, p.Now
	}
	v, ok := s.streams.Load(name)
	if !ok {
		v, _ = s.streams.LoadOrStore(name, newStream(name))
	}
	st := v.(*stream)

	out := make([]store.Entry, len(reqs))
	for i := range out {
		out[i].Token = store.NewToken() // outside the lock: it reads randomness
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.clock(pinned)
	for i, r := range reqs {
		out[i] = store.Entry{
			Stream:      name,
			Number:      st.last + 1,
			State:       store.Leased,
			Token:       out[i].Token,
			Owner:       owner,
			OperationID: r.OperationID,
			Kind:        r.Kind,
			LeasedAt:    now,
			ExpiresAt:   now.Add(r.TTL.Truncate(time.Microsecond)), // microseconds, like PostgreSQL
		}
		st.add(out[i])
	}
	st.unresolved += int64(len(out))
	return out, nil
}

// holding validates a (stream, number, token) call and returns the locked
// stream and the entry. On success the caller must unlock st.mu.
func (s *Store) holding(ctx context.Context, name string, number int64, token store.Token) (*stream, *store.Entry, error) {
	if err := store.ValidateHolding(name, number, token); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: number %d", store.ErrNotFound, number)
	}
	st.mu.Lock()
	e, err := st.entry(number)
	if err != nil {
		st.mu.Unlock()
		return nil, nil, err
	}
	if e.Token != token {
		st.mu.Unlock()
		return nil, nil, store.ErrTokenMismatch
	}
	return st, e, nil
}

// resolvedErr explains why a resolved entry refuses an operation.
func resolvedErr(e *store.Entry) error {
	if e.State == store.Committed && e.FilledAt.IsZero() {
		return store.ErrCommitted
	}
	return store.GapError(e.GapReason) // a gap, or a gap since filled
}

// Commit implements the storage contract's Commit.
func (s *Store) Commit(ctx context.Context, name string, number int64, token store.Token, p *store.CommitParams) (time.Time, error) {
	if p == nil {
		p = &store.CommitParams{}
	}
	st, e, err := s.holding(ctx, name, number, token)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit: %w", err)
	}
	defer st.mu.Unlock()
	t, err := s.commitLocked(name, st, e, p.Payload, s.clock(p.Now), p.Ordered)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit: %w", err)
	}
	return t, nil
}

// commitLocked commits e, held by the caller's token, at now. st.mu must be
// held.
func (s *Store) commitLocked(name string, st *stream, e *store.Entry, payload []byte, now time.Time, ordered bool) (time.Time, error) {
	switch {
	case e.State == store.Committed && e.FilledAt.IsZero():
		return e.ResolvedAt, nil // the holder's retry: same outcome, no second write
	case e.State != store.Leased:
		return time.Time{}, resolvedErr(e)
	case !now.Before(e.ExpiresAt):
		return time.Time{}, store.ErrExpired
	case ordered && st.firstUnresolved < e.Number:
		return time.Time{}, fmt.Errorf("%w: %d is unresolved", store.ErrNotReady, st.firstUnresolved)
	}
	if payload != nil {
		e.Payload = slices.Clone(payload)
	}
	s.resolve(name, st, e, store.Committed, now)
	return now, nil
}

// Release implements the storage contract's Release.
func (s *Store) Release(ctx context.Context, name string, number int64, token store.Token, p *store.ReleaseParams) error {
	var pinned *time.Time
	if p != nil {
		pinned = p.Now
	}
	st, e, err := s.holding(ctx, name, number, token)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer st.mu.Unlock()
	switch {
	case e.GapReason == store.ReasonReleased:
		return nil // repeated release (the gap may have been filled since)
	case e.State != store.Leased:
		return fmt.Errorf("release: %w", resolvedErr(e))
	}
	e.GapReason = store.ReasonReleased
	s.resolve(name, st, e, store.Gap, s.clock(pinned))
	return nil
}

// Extend implements the storage contract's Extend.
func (s *Store) Extend(ctx context.Context, name string, number int64, token store.Token, p *store.ExtendParams) (time.Time, time.Time, error) {
	if p == nil {
		p = &store.ExtendParams{}
	}
	if err := store.ValidateTTL(p.TTL, 0); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", err)
	}
	st, e, err := s.holding(ctx, name, number, token)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", err)
	}
	defer st.mu.Unlock()
	if e.State != store.Leased {
		return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", resolvedErr(e))
	}
	now := s.clock(p.Now)
	if !now.Before(e.ExpiresAt) {
		return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", store.ErrExpired)
	}
	e.ExpiresAt = now.Add(p.TTL.Truncate(time.Microsecond))
	e.Renewals++
	return now, e.ExpiresAt, nil
}

// ResolveExpired implements the storage contract's ResolveExpired.
func (s *Store) ResolveExpired(ctx context.Context, name string, number int64, p *store.ResolveExpiredParams) error {
	if p == nil {
		p = &store.ResolveExpiredParams{}
	}
	reason, err := store.ExpiryReason(name, number, p)
	if err != nil {
		return fmt.Errorf("resolve expired: %w", err)
	}
	st, e, now, err := s.expired(ctx, name, number, p.Now)
	if err != nil {
		return fmt.Errorf("resolve expired: %w", err)
	}
	defer st.mu.Unlock()
	e.GapReason = reason
	e.RecoveredAs = p.RecoveredAs
	s.resolve(name, st, e, store.Gap, now)
	return nil
}

// ResolveExpiredBatch implements the storage contract's ResolveExpiredBatch.
func (s *Store) ResolveExpiredBatch(ctx context.Context, name string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error) {
	if p == nil {
		p = &store.ResolveExpiredParams{}
	}
	reason, err := store.ValidateExpiredBatch(name, numbers, p)
	if err != nil {
		return nil, fmt.Errorf("resolve expired batch: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("resolve expired batch: %w", err)
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.clock(p.Now)
	var resolved []int64
	for _, n := range slices.Sorted(slices.Values(numbers)) {
		e, err := st.entry(n)
		if err != nil || e.State != store.Leased || now.Before(e.ExpiresAt) {
			continue
		}
		e.GapReason = reason
		s.resolve(name, st, e, store.Gap, now)
		resolved = append(resolved, n)
	}
	return resolved, nil
}

// RecoverExpired implements the storage contract's RecoverExpired: under the
// stream's lock, a new committed entry carrying the work and the old entry's
// gap pointing at it.
func (s *Store) RecoverExpired(ctx context.Context, name string, number int64, p *store.RecoverParams) (int64, error) {
	if err := store.ValidateRecover(name, number, p); err != nil {
		return 0, fmt.Errorf("recover expired: %w", err)
	}
	st, old, now, err := s.expired(ctx, name, number, p.Now)
	if err != nil {
		return 0, fmt.Errorf("recover expired: %w", err)
	}
	defer st.mu.Unlock()
	return s.moveLocked(name, st, old.Number, now, p), nil
}

// moveLocked appends a committed entry carrying p.Payload and turns the
// leased, expired entry number into a gap pointing at it. It returns the new
// number. st.mu must be held.
func (s *Store) moveLocked(name string, st *stream, number int64, now time.Time, p *store.RecoverParams) int64 {
	old := st.at(number)
	moved := st.last + 1
	st.add(store.Entry{
		Stream:        name,
		Number:        moved,
		State:         store.Leased, // resolved just below
		Token:         store.NewToken(),
		Owner:         p.Owner,
		OperationID:   old.OperationID,
		Kind:          old.Kind,
		LeasedAt:      now,
		ExpiresAt:     now,
		Payload:       slices.Clone(p.Payload),
		RecoveredFrom: number,
		RecoveryType:  p.RecoveryType,
	})
	st.unresolved++
	old.GapReason = cmp.Or(p.Reason, store.ReasonRecovered)
	old.RecoveredAs = moved
	s.resolve(name, st, old, store.Gap, now)
	s.resolve(name, st, st.at(moved), store.Committed, now)
	return moved
}

// RecoverExpiredBatch implements the storage contract's RecoverExpiredBatch:
// under the stream's lock, each item's expired entry moves to the next
// number, in item order.
func (s *Store) RecoverExpiredBatch(ctx context.Context, name string, items []store.RecoverItem, p *store.RecoverBatchParams) ([]store.RecoverResult, error) {
	if p == nil {
		p = &store.RecoverBatchParams{}
	}
	if err := store.ValidateRecoverBatch(name, items, p); err != nil {
		return nil, fmt.Errorf("recover expired batch: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("recover expired batch: %w", err)
	}
	out := make([]store.RecoverResult, len(items))
	st, err := s.stream(name)
	if err != nil {
		for i, it := range items {
			out[i].Err = fmt.Errorf("%w: number %d", store.ErrNotFound, it.Number)
		}
		return out, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.clock(p.Now)
	for i, it := range items {
		e, err := st.entry(it.Number)
		switch {
		case err != nil:
		case e.State != store.Leased:
			err = resolvedErr(e)
		case now.Before(e.ExpiresAt):
			err = store.ErrNotExpired
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Moved = s.moveLocked(name, st, it.Number, now, &store.RecoverParams{
			Payload: it.Payload, RecoveryType: it.RecoveryType, Reason: p.Reason, Owner: p.Owner})
	}
	return out, nil
}

// expired returns the locked stream and the leased, expired entry number
// (or why not). On success the caller must unlock st.mu.
func (s *Store) expired(ctx context.Context, name string, number int64, pinned *time.Time) (*stream, *store.Entry, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, time.Time{}, err
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("%w: number %d", store.ErrNotFound, number)
	}
	st.mu.Lock()
	e, err := st.entry(number)
	now := s.clock(pinned)
	switch {
	case err != nil:
	case e.State != store.Leased:
		err = resolvedErr(e)
	case now.Before(e.ExpiresAt):
		err = store.ErrNotExpired
	}
	if err != nil {
		st.mu.Unlock()
		return nil, nil, time.Time{}, err
	}
	return st, e, now, nil
}

// ListExpired implements the storage contract's ListExpired.
func (s *Store) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	if p == nil {
		p = &store.ListExpiredParams{}
	}
	limit, err := store.ValidateListExpired(p)
	if err != nil {
		return nil, fmt.Errorf("list expired: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list expired: %w", err)
	}
	now := s.clock(p.Now)
	var names []string
	if p.Stream != "" {
		names = []string{p.Stream}
	} else {
		s.streams.Range(func(k, _ any) bool {
			names = append(names, k.(string))
			return true
		})
		slices.Sort(names)
	}
	var out []store.Entry
	for _, name := range names {
		if name < p.AfterStream {
			continue
		}
		v, ok := s.streams.Load(name)
		if !ok {
			continue
		}
		after := int64(0)
		if name == p.AfterStream {
			after = p.AfterNumber
		}
		out = v.(*stream).expired(out, name, after, now, limit)
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}

// expired appends the stream's expired leases with numbers > after to out,
// until out holds limit entries.
func (st *stream) expired(out []store.Entry, name string, after int64, now time.Time, limit int) []store.Entry {
	st.mu.Lock()
	defer st.mu.Unlock()
	for n := max(after+1, st.firstUnresolved); n <= st.last && len(out) < limit; n++ {
		e := st.at(n)
		if e.State == store.Leased && !now.Before(e.ExpiresAt) {
			out = append(out, *e)
		}
	}
	return out
}

// Read implements the storage contract's Read.
func (s *Store) Read(ctx context.Context, name string, after int64, limit int) ([]store.Entry, error) {
	limit, err := store.ValidateRead(name, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if after+1 < st.low {
		return nil, fmt.Errorf("read: %w", &store.TrimmedError{Stream: name, LowPoint: st.low})
	}
	from := min(after+1, st.last+1)
	to := min(from+int64(limit), st.last+1)
	return st.clone(from, to), nil
}

// Stats implements the storage contract's Stats.
func (s *Store) Stats(ctx context.Context, name string) (store.StreamStats, error) {
	if err := store.ValidateStream(name); err != nil {
		return store.StreamStats{}, fmt.Errorf("stats: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.StreamStats{}, fmt.Errorf("stats: %w", err)
	}
	st, err := s.stream(name)
	if err != nil {
		return store.StreamStats{}, fmt.Errorf("stats: %w", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	stats := store.StreamStats{
		Stream:     name,
		NextNumber: st.last + 1,
		Watermark:  st.firstUnresolved - 1,
		Unresolved: st.unresolved,
		LowPoint:   st.low,
	}
	if st.unresolved > 0 {
		oldest := st.at(st.firstUnresolved)
		stats.OldestUnresolved = oldest.Number
		stats.OldestUnresolvedAt = oldest.LeasedAt
	}
	return stats, nil
}

// Streams implements the storage contract's Streams.
func (s *Store) Streams(ctx context.Context, after string, limit int) ([]string, error) {
	limit, err := store.ListLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	var names []string
	s.streams.Range(func(k, _ any) bool {
		if name := k.(string); name > after {
			names = append(names, name)
		}
		return true
	})
	slices.Sort(names)
	return names[:min(len(names), limit)], nil
}

// Now returns the store's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return s.clock(nil), nil
}
