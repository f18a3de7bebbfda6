package memory

import (
	"bytes"
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
	streams sync.Map               // string -> *stream; never removed
	recent  atomic.Pointer[stream] // the stream looked up last: most callers use one stream

	watchMu sync.Mutex                   // serialises changes to sinks
	sinks   atomic.Pointer[[]store.Sink] // copy on write; read without a lock

	named  namedLeases   // named leases: namedlease.go
	hooks  pendingHooks  // pending hooks: hooks.go
	inbox  inbox         // inbox records: inbox.go
	ckpt   checkpoints   // reader checkpoints: checkpoint.go
	conf   settings      // the settings table: settings.go
	rstats recoveryStats // the recovery_stats table: recoverystats.go
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
	// records holds the recovery records of leased entries (parked.go):
	// few, so kept apart from the ledger's slots; nil until the first.
	records map[int64]record
}

func newStream(name string) *stream {
	return &stream{name: name, ledger: newLedger(), firstUnresolved: 1}
}

// The capabilities of the memory backend (store.InProcess and the others
// in store/capability.go).
var (
	_ store.InProcess      = (*Store)(nil)
	_ store.OneByOne       = (*Store)(nil)
	_ store.MultiLeaser    = (*Store)(nil)
	_ store.MultiCommitter = (*Store)(nil)
)

// InProcess reports true: the store answers in process, without a round
// trip, and tells its watchers of every resolution before the call that
// made it returns. The sequence Leaser and the lease Manager then send its
// calls alone (batching only saves round trips), and the Leaser does not
// report its own resolutions to the barrier a second time.
func (s *Store) InProcess() bool { return true }

func (s *Store) clock(pinned *time.Time) time.Time {
	if pinned != nil {
		return store.Micro(*pinned)
	}
	return store.Micro(s.now())
}

func (s *Store) stream(name string) (*stream, error) {
	if st := s.lookup(name); st != nil {
		return st, nil
	}
	return nil, fmt.Errorf("%w: %s", store.ErrStreamNotFound, store.QuoteInput(name))
}

// lookup returns the stream name, nil if it has none. The stream looked up
// last is remembered, which spares the map lookup on the hot path; streams
// are never removed, so it cannot go stale.
func (s *Store) lookup(name string) *stream {
	if st := s.recent.Load(); st != nil && st.name == name {
		return st
	}
	v, ok := s.streams.Load(name)
	if !ok {
		return nil
	}
	st := v.(*stream)
	s.recent.Store(st)
	return st
}

// entry returns the entry of number, a *store.TrimmedError if retention
// removed it, or ErrNotFound. st.mu must be held.
func (st *stream) entry(number int64) (rec, error) {
	if number < st.low {
		return rec{}, &store.TrimmedError{Stream: st.name, LowPoint: st.low}
	}
	if number > st.last {
		return rec{}, fmt.Errorf("%w: number %d", store.ErrNotFound, number)
	}
	return st.at(number), nil
}

// resolve marks e, number n, resolved at t, advances the watermark cursor
// and tells the watchers. st.mu must be held, so watchers hear of one
// stream's resolutions in the order they happened.
func (s *Store) resolve(name string, st *stream, e rec, n int64, to state, t time.Time) {
	e.slot.state = to
	e.setTime(tResolved, t)
	delete(st.records, n) // a resolution ends the recovery record
	st.unresolved--
	if to == stateGap {
		st.gaps++
	}
	for st.firstUnresolved <= st.last && st.at(st.firstUnresolved).slot.state.resolved() {
		st.firstUnresolved++
	}
	s.notify(name, n)
}

// Lease implements the storage contract's Lease.
func (s *Store) Lease(ctx context.Context, name string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error) {
	if err := store.ValidateLease(name, reqs, p); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lease: %w", store.NotSent(err))
	}
	var owner string
	var pinned *time.Time
	if p != nil {
		owner, pinned = p.Owner, p.Now
	}
	st := s.streamFor(name)
	out := make([]store.Entry, len(reqs))
	for i := range out {
		out[i].Token = store.NewToken() // outside the lock: it reads randomness
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.clock(pinned)
	for i, r := range reqs {
		out[i] = st.lease(name, out[i].Token, owner, r, now)
	}
	return out, nil
}

// LeaseOne leases one number of stream, exactly as Lease with the one
// request req does, and returns its entry by value, without allocating
// for the call (Lease allocates the slice it returns): with it, a lease and
// an ordered commit through the sequence Leaser allocate only the Lease
// handle (store.OneByOne).
func (s *Store) LeaseOne(ctx context.Context, name string, req store.LeaseRequest, p *store.LeaseParams) (store.Entry, error) {
	if err := store.ValidateLease(name, []store.LeaseRequest{req}, p); err != nil {
		return store.Entry{}, fmt.Errorf("lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.Entry{}, fmt.Errorf("lease: %w", store.NotSent(err))
	}
	var owner string
	var pinned *time.Time
	if p != nil {
		owner, pinned = p.Owner, p.Now
	}
	st := s.streamFor(name)
	token := store.NewToken() // outside the lock: it reads randomness
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.lease(name, token, owner, req, s.clock(pinned)), nil
}

// streamFor returns the stream name, made on first use.
func (s *Store) streamFor(name string) *stream {
	if st := s.lookup(name); st != nil {
		return st
	}
	v, _ := s.streams.LoadOrStore(name, newStream(name))
	return v.(*stream)
}

// lease appends a leased entry for r at now and returns it. st.mu must be
// held.
func (st *stream) lease(name string, token store.Token, owner string, r store.LeaseRequest, now time.Time) store.Entry {
	e := store.Entry{
		Stream:      name,
		Number:      st.last + 1,
		State:       store.Leased,
		Token:       token,
		Owner:       owner,
		OperationID: r.OperationID,
		Kind:        r.Kind,
		LeasedAt:    now,
		ExpiresAt:   now.Add(r.TTL.Truncate(time.Microsecond)), // microseconds, like PostgreSQL
	}
	st.add(token, owner, r.OperationID, r.Kind, e.LeasedAt, e.ExpiresAt)
	st.unresolved++
	return e
}

// holding validates a (stream, number, token) call and returns the locked
// stream and the entry. On success the caller must unlock st.mu.
func (s *Store) holding(ctx context.Context, name string, number int64, token store.Token) (*stream, rec, error) {
	if err := store.ValidateHolding(name, number, token); err != nil {
		return nil, rec{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, rec{}, store.NotSent(err)
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, rec{}, fmt.Errorf("%w: number %d", store.ErrNotFound, number)
	}
	st.mu.Lock()
	e, err := st.entry(number)
	if err != nil {
		st.mu.Unlock()
		return nil, rec{}, err
	}
	if e.token != token {
		st.mu.Unlock()
		return nil, rec{}, store.ErrTokenMismatch
	}
	return st, e, nil
}

// resolvedErr explains why a resolved entry refuses an operation.
func resolvedErr(e rec) error {
	if e.slot.state == stateCommitted && !e.filled() {
		return store.ErrCommitted
	}
	return store.GapError(e.text(xReason)) // a gap, or a gap since filled
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
	t, err := s.commitLocked(name, st, e, number, p.Payload, s.clock(p.Now), p.Ordered)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit: %w", err)
	}
	return t, nil
}

// CommitOne commits number with payload (nil for none), exactly as Commit
// with CommitParams{Payload: payload, Ordered: ordered} does, without
// allocating for the call (Commit's parameters escape) (store.OneByOne).
func (s *Store) CommitOne(ctx context.Context, name string, number int64, token store.Token, payload []byte, ordered bool) (time.Time, error) {
	st, e, err := s.holding(ctx, name, number, token)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit: %w", err)
	}
	defer st.mu.Unlock()
	t, err := s.commitLocked(name, st, e, number, payload, s.clock(nil), ordered)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit: %w", err)
	}
	return t, nil
}

// commitLocked commits e, number n, held by the caller's token, at now.
// st.mu must be held.
func (s *Store) commitLocked(name string, st *stream, e rec, n int64, payload []byte, now time.Time, ordered bool) (time.Time, error) {
	switch {
	case e.slot.state == stateCommitted && !e.filled():
		if !bytes.Equal(e.payload(), payload) {
			return time.Time{}, store.ErrPayloadMismatch // not a retry: the holder's bug
		}
		return e.time(tResolved), nil // the holder's retry: same outcome, no second write
	case e.slot.state != stateLeased:
		return time.Time{}, resolvedErr(e)
	case now.UnixMicro() >= e.at[tExpires]: // !now.Before(ExpiresAt); both are microseconds
		return time.Time{}, store.ErrExpired
	case ordered && st.firstUnresolved < n:
		return time.Time{}, fmt.Errorf("%w: %d is unresolved", store.ErrNotReady, st.firstUnresolved)
	}
	if payload != nil {
		e.setPayload(payload)
	}
	s.resolve(name, st, e, n, stateCommitted, now)
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
	case e.text(xReason) == store.ReasonReleased:
		return nil // repeated release (the gap may have been filled since)
	case e.slot.state != stateLeased:
		return fmt.Errorf("release: %w", resolvedErr(e))
	}
	e.setText(xReason, store.ReasonReleased)
	s.resolve(name, st, e, number, stateGap, s.clock(pinned))
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
	if e.slot.state != stateLeased {
		return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", resolvedErr(e))
	}
	now := s.clock(p.Now)
	if !now.Before(e.time(tExpires)) {
		return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", store.ErrExpired)
	}
	expiresAt := now.Add(p.TTL.Truncate(time.Microsecond))
	e.setTime(tExpires, expiresAt)
	e.renewals++
	return now, expiresAt, nil
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
	if p.Hook {
		s.hooks.add(e.entry(name, number), now)
	}
	e.setText(xReason, reason)
	e.recoveredAs = p.RecoveredAs
	s.resolve(name, st, e, number, stateGap, now)
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
		return nil, fmt.Errorf("resolve expired batch: %w", store.NotSent(err))
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
		if err != nil || e.slot.state != stateLeased || now.Before(e.time(tExpires)) {
			continue
		}
		if p.Hook {
			s.hooks.add(e.entry(name, n), now)
		}
		e.setText(xReason, reason)
		s.resolve(name, st, e, n, stateGap, now)
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
	st, _, now, err := s.expired(ctx, name, number, p.Now)
	if err != nil {
		return 0, fmt.Errorf("recover expired: %w", err)
	}
	defer st.mu.Unlock()
	return s.moveLocked(name, st, number, now, p), nil
}

// moveLocked appends a committed entry carrying p.Payload and turns the
// leased, expired entry number into a gap pointing at it. It returns the new
// number. st.mu must be held.
func (s *Store) moveLocked(name string, st *stream, number int64, now time.Time, p *store.RecoverParams) int64 {
	old := st.at(number)
	if p.Hook {
		s.hooks.add(old.entry(name, number), now)
	}
	e := st.add(store.NewToken(), p.Owner, old.text(xOperation), old.text(xKind), now, now) // leased; resolved just below
	moved := st.last
	e.setPayload(p.Payload)
	e.recoveredFrom = number
	e.setText(xRecoveryType, p.RecoveryType)
	st.unresolved++
	old.setText(xReason, cmp.Or(p.Reason, store.ReasonRecovered))
	old.recoveredAs = moved
	s.resolve(name, st, old, number, stateGap, now)
	s.resolve(name, st, e, moved, stateCommitted, now)
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
		return nil, fmt.Errorf("recover expired batch: %w", store.NotSent(err))
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
		case e.slot.state != stateLeased:
			err = resolvedErr(e)
		case now.Before(e.time(tExpires)):
			err = store.ErrNotExpired
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Moved = s.moveLocked(name, st, it.Number, now, &store.RecoverParams{
			Payload: it.Payload, RecoveryType: it.RecoveryType, Reason: p.Reason, Owner: p.Owner, Hook: p.Hook})
	}
	return out, nil
}

// expired returns the locked stream and the leased, expired entry number
// (or why not). On success the caller must unlock st.mu.
func (s *Store) expired(ctx context.Context, name string, number int64, pinned *time.Time) (*stream, rec, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, rec{}, time.Time{}, store.NotSent(err)
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, rec{}, time.Time{}, fmt.Errorf("%w: number %d", store.ErrNotFound, number)
	}
	st.mu.Lock()
	e, err := st.entry(number)
	now := s.clock(pinned)
	switch {
	case err != nil:
	case e.slot.state != stateLeased:
		err = resolvedErr(e)
	case now.Before(e.time(tExpires)):
		err = store.ErrNotExpired
	}
	if err != nil {
		st.mu.Unlock()
		return nil, rec{}, time.Time{}, err
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
		return nil, fmt.Errorf("list expired: %w", store.NotSent(err))
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
		if e.slot.state == stateLeased && !now.Before(e.time(tExpires)) {
			out = append(out, st.withRecord(e.entry(name, n)))
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
		return nil, fmt.Errorf("read: %w", store.NotSent(err))
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
	out := st.clone(name, from, to)
	if len(st.records) > 0 {
		for i := range out {
			out[i] = st.withRecord(out[i])
		}
	}
	return out, nil
}

// Stats implements the storage contract's Stats.
func (s *Store) Stats(ctx context.Context, name string) (store.StreamStats, error) {
	if err := store.ValidateStream(name); err != nil {
		return store.StreamStats{}, fmt.Errorf("stats: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.StreamStats{}, fmt.Errorf("stats: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return store.StreamStats{}, fmt.Errorf("stats: %w", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.stats(), nil
}

// stats returns the stream's Stats. st.mu must be held.
func (st *stream) stats() store.StreamStats {
	stats := store.StreamStats{
		Stream:     st.name,
		NextNumber: st.last + 1,
		Watermark:  st.firstUnresolved - 1,
		Unresolved: st.unresolved,
		LowPoint:   st.low,
	}
	if st.unresolved > 0 {
		stats.OldestUnresolved = st.firstUnresolved
		stats.OldestUnresolvedAt = st.at(st.firstUnresolved).time(tLeased)
	}
	return stats
}

// Streams implements the storage contract's Streams.
func (s *Store) Streams(ctx context.Context, after string, limit int) ([]string, error) {
	limit, err := store.ListLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("streams: %w", store.NotSent(err))
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
		return time.Time{}, store.NotSent(err)
	}
	return s.clock(nil), nil
}

// Ping reports whether the store takes writes: an in-memory store always
// does, so Ping fails only with the error of a context that ended.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ping: %w", store.NotSent(err))
	}
	return nil
}
