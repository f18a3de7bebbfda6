package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// namedLeases holds the named leases of a Store. Each name has a row with a
// mutex of its own, so operations on different names do not wait for one
// another; the live-holding indexes (by name, by owner) and the history have
// short critical sections of their own, taken while a row's mutex is held
// (row, then index or history; never two rows at once). Operations across
// names (ForceReleaseLeases, CleanupExpiredLeases, ListLeases) take a
// snapshot of the index, then visit the rows one at a time. Sinks are
// called after every mutex is released.
type namedLeases struct {
	rows sync.Map // name -> *nameRow: every name ever acquired

	idxMu   sync.Mutex
	live    map[string]struct{}            // names whose holding has not ended
	byOwner map[string]map[string]struct{} // owner -> its names not ended

	histMu  sync.Mutex
	history []*histEvent // the retained events in ID order; trimmed ones are gone
	byAt    []*histEvent // the retained events in (At, ID) order: the trim order
	nextID  int64

	sinkMu sync.Mutex
	sinks  []store.LeaseSink // copy on write under sinkMu

	waitMu  sync.Mutex
	waiters map[waiterKey]waiterRow // the announced waiters (ListLeaseWaiters)
}

// waiterKey names an announced waiter: the name and the waiting owner.
type waiterKey struct{ name, waiter string }

// waiterRow is an announced waiter and when its announcement runs out.
type waiterRow struct {
	w     store.LeaseWaiter
	until time.Time
}

// nameRow is the current or last holding of a name.
type nameRow struct {
	mu sync.Mutex
	l  *store.NamedLease // nil until the first acquire succeeds; AsOf unused
	// wantedUntil is when the last mark of a waiting acquire runs out: a
	// release before it tells the watchers (AcquireLeaseParams.Wait).
	wantedUntil time.Time
}

// histEvent is a retained event of the history.
type histEvent struct {
	store.LeaseEvent
	gone bool // trimmed; cut off once the events before it are
}

// row returns the row of name, created if need be.
func (n *namedLeases) row(name string) *nameRow {
	if r, ok := n.rows.Load(name); ok {
		return r.(*nameRow)
	}
	r, _ := n.rows.LoadOrStore(name, &nameRow{})
	return r.(*nameRow)
}

// lookup returns the holding of name with its row locked, or nil (and no
// lock) if the name was never acquired. The caller unlocks r.
func (n *namedLeases) lookup(name string) (r *nameRow, l *store.NamedLease) {
	v, ok := n.rows.Load(name)
	if !ok {
		return nil, nil
	}
	r = v.(*nameRow)
	r.mu.Lock()
	if r.l == nil {
		r.mu.Unlock()
		return nil, nil
	}
	return r, r.l
}

// record appends an event to the history, with the reason of its kind. The
// row's mutex must be held, so that the events of a holding are recorded in
// the order they happened.
func (n *namedLeases) record(l *store.NamedLease, kind store.LeaseEventKind, at time.Time) {
	n.recordWhy(store.LeaseEvent{Kind: kind, At: at, Reason: store.DefaultLeaseReason(kind)}, l)
}

// recordWhy appends e (its kind, time, reason, actor and comment) as an
// event of the holding l. The row's mutex must be held.
func (n *namedLeases) recordWhy(e0 store.LeaseEvent, l *store.NamedLease) {
	at := e0.At
	n.histMu.Lock()
	defer n.histMu.Unlock()
	n.nextID++
	e := &histEvent{LeaseEvent: store.LeaseEvent{
		ID: n.nextID, Name: l.Name, Owner: l.Owner, Fence: l.Fence, Kind: e0.Kind, At: at, ExpiresAt: l.ExpiresAt,
		Reason: e0.Reason, Actor: e0.Actor, Comment: e0.Comment,
	}}
	n.history = append(n.history, e)
	// Events mostly come in time order, so this is mostly an append; an
	// expiry is recorded at its expiry instant, a little in the past.
	i := sort.Search(len(n.byAt), func(j int) bool { return n.byAt[j].At.After(at) })
	n.byAt = slices.Insert(n.byAt, i, e)
}

// begin makes l the live holding of r. r's mutex must be held.
func (n *namedLeases) begin(r *nameRow, l *store.NamedLease) {
	r.l = l
	n.idxMu.Lock()
	defer n.idxMu.Unlock()
	if n.live == nil {
		n.live = map[string]struct{}{}
		n.byOwner = map[string]map[string]struct{}{}
	}
	n.live[l.Name] = struct{}{}
	names := n.byOwner[l.Owner]
	if names == nil {
		names = map[string]struct{}{}
		n.byOwner[l.Owner] = names
	}
	names[l.Name] = struct{}{}
}

// end ends the live holding l at t for reason. Its row's mutex must be held.
func (n *namedLeases) end(l *store.NamedLease, reason store.LeaseEventKind, t time.Time) {
	l.EndedAt, l.EndReason = t, reason
	n.idxMu.Lock()
	defer n.idxMu.Unlock()
	delete(n.live, l.Name)
	if names := n.byOwner[l.Owner]; names != nil {
		delete(names, l.Name)
		if len(names) == 0 {
			delete(n.byOwner, l.Owner)
		}
	}
}

// snapshotNames returns the names of live holdings (of owner, if not
// empty), sorted.
func (n *namedLeases) snapshotNames(owner string) []string {
	n.idxMu.Lock()
	names := n.live
	if owner != "" {
		names = n.byOwner[owner]
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	n.idxMu.Unlock()
	slices.Sort(keys)
	return keys
}

func (n *namedLeases) loadSinks() []store.LeaseSink {
	n.sinkMu.Lock()
	defer n.sinkMu.Unlock()
	return n.sinks
}

// freed tells the watchers that the holdings of names ended. No mutex of n
// may be held.
func (n *namedLeases) freed(names ...string) {
	sinks := n.loadSinks()
	for _, name := range names {
		for _, sink := range sinks {
			sink.Freed(name)
		}
	}
}

func snapshotLease(l *store.NamedLease, now time.Time) store.NamedLease {
	c := *l
	c.AsOf = now
	return c
}

// AcquireLease starts a new holding of name for owner if the name is free:
// never acquired, or its last holding ended or expired. Otherwise it fails
// with a *store.HeldError and changes nothing but the wanted mark
// (p.Wait).
func (s *Store) AcquireLease(ctx context.Context, name, owner string, p *store.AcquireLeaseParams) (store.NamedLease, error) {
	if err := store.ValidateAcquireLease(name, owner, p); err != nil {
		return store.NamedLease{}, fmt.Errorf("acquire lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.NamedLease{}, fmt.Errorf("acquire lease: %w", store.NotSent(err))
	}
	n := &s.named
	r := n.row(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	now := s.clock(p.Now)
	prev := r.l
	fence := int64(1)
	if prev != nil {
		if prev.EndedAt.IsZero() && now.Before(prev.ExpiresAt) {
			if p.Wait > 0 && r.wantedUntil.Before(now.Add(p.Wait)) {
				r.wantedUntil = now.Add(2 * p.Wait.Truncate(time.Microsecond))
			}
			return store.NamedLease{}, fmt.Errorf("acquire lease: %w", &store.HeldError{
				Name: name, Owner: prev.Owner, Fence: prev.Fence, ExpiresAt: prev.ExpiresAt, AsOf: now})
		}
		if prev.EndedAt.IsZero() { // expired, not yet marked: its history ends here
			if !p.NoHistory {
				n.recordWhy(store.LeaseEvent{Kind: store.LeaseExpired, At: prev.ExpiresAt,
					Reason: store.LeaseExpiryReason(prev.Renewals, prev.MaxRenewals, true)}, prev)
			}
			n.end(prev, store.LeaseExpired, now)
		}
		fence = prev.Fence + 1
	}
	l := &store.NamedLease{
		Name: name, Owner: owner, Fence: fence, AcquiredAt: now, RenewedAt: now,
		ExpiresAt: now.Add(p.TTL.Truncate(time.Microsecond)), MaxRenewals: p.MaxRenewals,
	}
	n.begin(r, l)
	if !p.NoHistory {
		n.record(l, store.LeaseAcquired, now)
	}
	return snapshotLease(l, now), nil
}

// AcquireLeases runs the acquires of reqs, in order, each as AcquireLease
// would, and returns their outcomes.
func (s *Store) AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult {
	if p == nil {
		p = &store.LeaseBatchParams{}
	}
	out := make([]store.AcquireLeaseResult, len(reqs))
	for i, r := range reqs {
		ap := &store.AcquireLeaseParams{TTL: r.TTL, MaxRenewals: r.MaxRenewals, Wait: r.Wait, NoHistory: p.NoHistory, Now: p.Now}
		out[i].Lease, out[i].Err = s.AcquireLease(ctx, r.Name, r.Owner, ap)
	}
	return out
}

// holding returns the holding (name, owner, fence) with its row locked, or
// why it is not the caller's (and no lock). superseded reports a fence
// below the current one: the caller's holding ended and a newer one began.
// The caller unlocks r.
func (n *namedLeases) holding(name, owner string, fence int64) (r *nameRow, l *store.NamedLease, superseded bool, err error) {
	r, l = n.lookup(name)
	switch {
	case l == nil:
		return nil, nil, false, fmt.Errorf("%w: %w: %s", store.ErrNotHolder, store.ErrLeaseNotFound, store.QuoteInput(name))
	case fence < l.Fence:
		err = fmt.Errorf("%w: fence %d was superseded by %d", store.ErrNotHolder, fence, l.Fence)
		superseded = true
	case fence > l.Fence:
		err = fmt.Errorf("%w: fence %d was never issued", store.ErrNotHolder, fence)
	case owner != l.Owner:
		err = fmt.Errorf("%w: held by another owner", store.ErrNotHolder)
	}
	if err != nil {
		r.mu.Unlock()
		return nil, nil, superseded, err
	}
	return r, l, false, nil
}

// RenewLease moves the expiry of a live holding to now + p.TTL and counts a
// renewal.
func (s *Store) RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error) {
	if err := store.ValidateRenewLease(name, owner, fence, p); err != nil {
		return store.NamedLease{}, fmt.Errorf("renew lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.NamedLease{}, fmt.Errorf("renew lease: %w", store.NotSent(err))
	}
	n := &s.named
	r, l, _, err := n.holding(name, owner, fence)
	if err != nil {
		return store.NamedLease{}, fmt.Errorf("renew lease: %w", err)
	}
	defer r.mu.Unlock()
	now := s.clock(p.Now)
	switch {
	case !l.EndedAt.IsZero():
		err = store.EndError(l.EndReason)
	case !now.Before(l.ExpiresAt):
		err = store.ErrExpired
	case l.MaxRenewals > 0 && l.Renewals >= l.MaxRenewals:
		err = fmt.Errorf("%w: %d of %d", store.ErrMaxRenewals, l.Renewals, l.MaxRenewals)
	}
	if err != nil {
		return store.NamedLease{}, fmt.Errorf("renew lease: %w", err)
	}
	l.RenewedAt = now
	l.ExpiresAt = now.Add(p.TTL.Truncate(time.Microsecond))
	l.Renewals++
	if !p.NoHistory {
		n.record(l, store.LeaseRenewed, now)
	}
	return snapshotLease(l, now), nil
}

// ReleaseLease ends the holding (name, owner, fence), and tells the
// watchers if the name is wanted. A holding that already ended by expiry or
// force-release, or was superseded, is left alone and nil returned; one its
// holder released already gets store.ErrReleased.
func (s *Store) ReleaseLease(ctx context.Context, name, owner string, fence int64, p *store.LeaseOpParams) error {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateHoldingOf(name, owner, fence); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("release lease: %w", store.NotSent(err))
	}
	wanted, err := s.release(name, owner, fence, p)
	if wanted {
		s.named.freed(name)
	}
	return err
}

// ReleaseLeases runs the releases of reqs, in order, each as ReleaseLease
// would, and returns their errors.
func (s *Store) ReleaseLeases(ctx context.Context, reqs []store.LeaseHolding, p *store.LeaseBatchParams) []error {
	if p == nil {
		p = &store.LeaseBatchParams{}
	}
	out := make([]error, len(reqs))
	for i, r := range reqs {
		out[i] = s.ReleaseLease(ctx, r.Name, r.Owner, r.Fence, &store.LeaseOpParams{NoHistory: p.NoHistory, Now: p.Now})
	}
	return out
}

// release is ReleaseLease after validation; wanted reports a release the
// watchers must hear of.
func (s *Store) release(name, owner string, fence int64, p *store.LeaseOpParams) (wanted bool, err error) {
	n := &s.named
	r, l, superseded, err := n.holding(name, owner, fence)
	switch {
	case superseded:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("release lease: %w", err)
	}
	defer r.mu.Unlock()
	now := s.clock(p.Now)
	switch {
	case l.EndReason == store.LeaseReleased:
		return false, fmt.Errorf("release lease: %w", store.ErrReleased)
	case !l.EndedAt.IsZero():
		return false, nil
	}
	n.end(l, store.LeaseReleased, now)
	if !p.NoHistory {
		n.record(l, store.LeaseReleased, now)
	}
	return now.Before(r.wantedUntil), nil
}

// ForceReleaseLeases ends every live holding of owner and returns them, by
// name.
func (s *Store) ForceReleaseLeases(ctx context.Context, owner string, p *store.LeaseOpParams) ([]store.NamedLease, error) {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateForceRelease(owner, p); err != nil {
		return nil, fmt.Errorf("force release leases: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("force release leases: %w", store.NotSent(err))
	}
	n := &s.named
	var out []store.NamedLease
	var names []string
	for _, name := range n.snapshotNames(owner) {
		r, l := n.lookup(name)
		if l == nil {
			continue
		}
		now := s.clock(p.Now) // after the row's lock: the holding may be newer than the snapshot
		// Still owner's, not ended, and unexpired (an expired holding is
		// left to CleanupExpiredLeases or the next acquire).
		if l.Owner == owner && l.EndedAt.IsZero() && now.Before(l.ExpiresAt) &&
			(p.Name == "" || name == p.Name) && (p.Fence == 0 || l.Fence == p.Fence) {
			n.end(l, store.LeaseForceReleased, now)
			if !p.NoHistory {
				n.recordWhy(store.LeaseEvent{Kind: store.LeaseForceReleased, At: now, Reason: store.LeaseReasonForceReleased,
					Actor: p.Actor, Comment: p.Reason}, l)
			}
			out = append(out, snapshotLease(l, now))
			names = append(names, name)
		}
		r.mu.Unlock()
	}
	n.freed(names...)
	return out, nil
}

// CleanupExpiredLeases marks up to p.Limit expired holdings ended (reason
// expired), oldest first, and returns how many it marked.
func (s *Store) CleanupExpiredLeases(ctx context.Context, p *store.CleanupLeasesParams) (int, error) {
	if p == nil {
		p = &store.CleanupLeasesParams{}
	}
	limit, err := store.ListLimit(p.Limit)
	if err != nil {
		return 0, fmt.Errorf("cleanup expired leases: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("cleanup expired leases: %w", store.NotSent(err))
	}
	n := &s.named
	now := s.clock(p.Now)
	type candidate struct {
		name     string
		fence    int64
		acquired time.Time
	}
	var expired []candidate
	for _, name := range n.snapshotNames("") {
		r, l := n.lookup(name)
		if l == nil {
			continue
		}
		if l.EndedAt.IsZero() && !now.Before(l.ExpiresAt) {
			expired = append(expired, candidate{name, l.Fence, l.AcquiredAt})
		}
		r.mu.Unlock()
	}
	slices.SortFunc(expired, func(a, b candidate) int {
		return cmp.Or(a.acquired.Compare(b.acquired), cmp.Compare(a.name, b.name))
	})
	names := make([]string, 0, min(len(expired), limit))
	for _, c := range expired[:min(len(expired), limit)] {
		r, l := n.lookup(c.name)
		if l == nil {
			continue
		}
		if l.Fence == c.fence && l.EndedAt.IsZero() && !now.Before(l.ExpiresAt) { // unchanged meanwhile
			if !p.NoHistory {
				n.recordWhy(store.LeaseEvent{Kind: store.LeaseExpired, At: l.ExpiresAt,
					Reason: store.LeaseExpiryReason(l.Renewals, l.MaxRenewals, false)}, l)
			}
			n.end(l, store.LeaseExpired, now)
			names = append(names, c.name)
		}
		r.mu.Unlock()
	}
	n.freed(names...)
	n.dropDeadWaiters(now)
	return len(names), nil
}

// GetLease returns the current or last holding of name; store.ErrLeaseNotFound
// if it was never acquired.
func (s *Store) GetLease(ctx context.Context, name string, p *store.LeaseOpParams) (store.NamedLease, error) {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateLeaseName(name); err != nil {
		return store.NamedLease{}, fmt.Errorf("get lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.NamedLease{}, fmt.Errorf("get lease: %w", store.NotSent(err))
	}
	r, l := s.named.lookup(name)
	if l == nil {
		return store.NamedLease{}, fmt.Errorf("get lease: %w: %s", store.ErrLeaseNotFound, store.QuoteInput(name))
	}
	defer r.mu.Unlock()
	return snapshotLease(l, s.clock(p.Now)), nil
}

// CheckLeaseFence reports whether fence is the live holding of name: nil, or
// a *store.FenceError saying why not.
func (s *Store) CheckLeaseFence(ctx context.Context, name string, fence int64, p *store.LeaseOpParams) error {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateLeaseName(name); err != nil {
		return fmt.Errorf("check fence: %w", err)
	}
	if fence < 1 {
		return fmt.Errorf("check fence: %w: %d", store.ErrInvalidFence, fence)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("check fence: %w", store.NotSent(err))
	}
	r, l := s.named.lookup(name)
	if l == nil {
		return &store.FenceError{Name: name, Fence: fence, Reason: "not found"}
	}
	defer r.mu.Unlock()
	return store.FenceVerdict(name, fence, l.Fence, l.EndReason, s.clock(p.Now).Before(l.ExpiresAt))
}

// ListLeases returns the live holdings (not ended, unexpired at now) that p
// selects, by name.
func (s *Store) ListLeases(ctx context.Context, p *store.ListLeasesParams) ([]store.NamedLease, error) {
	if p == nil {
		p = &store.ListLeasesParams{}
	}
	limit, err := store.ValidateListLeases(p)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list leases: %w", store.NotSent(err))
	}
	n := &s.named
	now := s.clock(p.Now)
	names := n.snapshotNames(p.Owner)
	i, _ := slices.BinarySearch(names, p.AfterName)
	var out []store.NamedLease
	for _, name := range names[i:] {
		if name <= p.AfterName {
			continue
		}
		r, l := n.lookup(name)
		if l == nil {
			continue
		}
		if l.EndedAt.IsZero() && (p.Expired || now.Before(l.ExpiresAt)) && (p.Owner == "" || l.Owner == p.Owner) &&
			(p.HeldFor <= 0 || !l.AcquiredAt.After(now.Add(-p.HeldFor))) {
			out = append(out, snapshotLease(l, now))
		}
		r.mu.Unlock()
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// LeaseHistory returns events of the audit history in ID order: of name, or
// of every name if name is empty.
func (s *Store) LeaseHistory(ctx context.Context, name string, p *store.LeaseHistoryParams) ([]store.LeaseEvent, error) {
	if p == nil {
		p = &store.LeaseHistoryParams{}
	}
	if name != "" {
		if err := store.ValidateLeaseName(name); err != nil {
			return nil, fmt.Errorf("lease history: %w", err)
		}
	}
	limit, err := store.ListLimit(p.Limit)
	if err != nil {
		return nil, fmt.Errorf("lease history: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lease history: %w", store.NotSent(err))
	}
	after, before, err := store.HistoryBounds(p)
	if err != nil {
		return nil, fmt.Errorf("lease history: %w", err)
	}
	n := &s.named
	n.histMu.Lock()
	defer n.histMu.Unlock()
	byID := func(e *histEvent, id int64) int { return cmp.Compare(e.ID, id) }
	lo, _ := slices.BinarySearchFunc(n.history, after+1, byID)
	hi, _ := slices.BinarySearchFunc(n.history, before, byID)
	var out []store.LeaseEvent
	for i := range max(hi-lo, 0) {
		e := n.history[lo+i]
		if p.Newest {
			e = n.history[hi-1-i]
		}
		if !e.gone && (name == "" || e.Name == name) {
			out = append(out, e.LeaseEvent)
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// TrimLeaseHistory deletes up to limit events (0: store.DefaultListLimit)
// that happened before before, oldest first, and returns how many. It costs
// what it deletes, not what is kept: the oldest events are a prefix of the
// time-ordered index.
func (s *Store) TrimLeaseHistory(ctx context.Context, before time.Time, limit int) (int64, error) {
	limit, err := store.ListLimit(limit)
	if err != nil {
		return 0, fmt.Errorf("trim lease history: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("trim lease history: %w", store.NotSent(err))
	}
	n := &s.named
	n.histMu.Lock()
	defer n.histMu.Unlock()
	k := 0
	for k < len(n.byAt) && k < limit && n.byAt[k].At.Before(before) {
		n.byAt[k].gone = true
		n.byAt[k] = nil
		k++
	}
	n.byAt = n.byAt[k:]
	j := 0
	for j < len(n.history) && n.history[j].gone {
		n.history[j] = nil
		j++
	}
	n.history = n.history[j:]
	return int64(k), nil
}

// WatchLeases reports the ends of holdings and the waiters' announcements to
// sink until ctx ends, synchronously from the calls that make them. It calls
// sink.Reset once, after registering.
func (s *Store) WatchLeases(ctx context.Context, sink store.LeaseSink) error {
	n := &s.named
	n.sinkMu.Lock()
	n.sinks = append(slices.Clone(n.sinks), sink)
	n.sinkMu.Unlock()
	sink.Reset()

	<-ctx.Done()

	n.sinkMu.Lock()
	sinks := slices.Clone(n.sinks)
	if i := slices.Index(sinks, sink); i >= 0 {
		sinks = slices.Delete(sinks, i, i+1)
	}
	n.sinks = sinks
	n.sinkMu.Unlock()
	return ctx.Err()
}

// AnnounceLeaseWaiter tells every watcher that w.Waiter waits for w.Name
// (or withdraws, when w.Since is zero).
func (s *Store) AnnounceLeaseWaiter(ctx context.Context, w store.LeaseWaiter) error {
	if err := store.ValidateLeaseWaiter(w); err != nil {
		return fmt.Errorf("announce lease waiter: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("announce lease waiter: %w", store.NotSent(err))
	}
	w.Since = store.Micro(w.Since)
	s.named.keepWaiter(w, s.clock(nil))
	for _, sink := range s.named.loadSinks() {
		sink.Wanted(w)
	}
	return nil
}

// keepWaiter records the announcement w, made at now, for ListLeaseWaiters,
// or forgets its owner's (a withdrawal).
func (n *namedLeases) keepWaiter(w store.LeaseWaiter, now time.Time) {
	n.waitMu.Lock()
	defer n.waitMu.Unlock()
	k := waiterKey{w.Name, w.Waiter}
	if w.Withdrawn() {
		delete(n.waiters, k)
		return
	}
	if n.waiters == nil {
		n.waiters = map[waiterKey]waiterRow{}
	}
	n.waiters[k] = waiterRow{w: w, until: now.Add(store.LeaseWaiterTTL)}
}

// dropDeadWaiters forgets the announcements that ran out by now.
func (n *namedLeases) dropDeadWaiters(now time.Time) {
	n.waitMu.Lock()
	defer n.waitMu.Unlock()
	for k, r := range n.waiters {
		if !now.Before(r.until) {
			delete(n.waiters, k)
		}
	}
}

// ListLeaseWaiters returns the waiters announced within
// store.LeaseWaiterTTL before now and not withdrawn (of p.Name, or of every
// name), by name, then by the time they asked; a waiter that holds the name
// with a larger fence than it announced got its turn and is left out.
func (s *Store) ListLeaseWaiters(ctx context.Context, p *store.ListLeaseWaitersParams) ([]store.LeaseWaiter, error) {
	if p == nil {
		p = &store.ListLeaseWaitersParams{}
	}
	limit, err := store.ValidateListLeaseWaiters(p)
	if err != nil {
		return nil, fmt.Errorf("list lease waiters: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list lease waiters: %w", store.NotSent(err))
	}
	n := &s.named
	now := s.clock(p.Now)
	n.waitMu.Lock()
	var out []store.LeaseWaiter
	for _, r := range n.waiters {
		if now.Before(r.until) && (p.Name == "" || r.w.Name == p.Name) {
			out = append(out, r.w)
		}
	}
	n.waitMu.Unlock()
	out = slices.DeleteFunc(out, func(w store.LeaseWaiter) bool {
		r, l := n.lookup(w.Name)
		if l == nil {
			return false
		}
		defer r.mu.Unlock()
		return l.Owner == w.Waiter && l.Fence > w.Fence
	})
	slices.SortFunc(out, func(a, b store.LeaseWaiter) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), a.Since.Compare(b.Since), cmp.Compare(a.Waiter, b.Waiter))
	})
	return out[:min(len(out), limit)], nil
}
