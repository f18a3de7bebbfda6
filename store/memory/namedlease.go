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

// namedLeases holds the named leases of a Store. One mutex guards them all:
// every operation is a few map operations, and ForceReleaseLeases,
// CleanupExpiredLeases and the history need a view across names. Sinks are
// called after the mutex is released.
type namedLeases struct {
	mu      sync.Mutex
	rows    map[string]*store.NamedLease   // every name ever acquired; AsOf unused
	live    map[string]struct{}            // names whose holding has not ended
	byOwner map[string]map[string]struct{} // owner -> its names not ended
	history []store.LeaseEvent             // in ID order
	nextID  int64

	sinkMu sync.Mutex
	sinks  []store.LeaseSink // copy on write under sinkMu
}

// init makes the maps. n.mu must be held.
func (n *namedLeases) init() {
	if n.rows == nil {
		n.rows = map[string]*store.NamedLease{}
		n.live = map[string]struct{}{}
		n.byOwner = map[string]map[string]struct{}{}
	}
}

// record appends an event to the history. n.mu must be held.
func (n *namedLeases) record(l *store.NamedLease, kind store.LeaseEventKind, at time.Time) {
	n.nextID++
	n.history = append(n.history, store.LeaseEvent{
		ID: n.nextID, Name: l.Name, Owner: l.Owner, Fence: l.Fence, Kind: kind, At: at, ExpiresAt: l.ExpiresAt,
	})
}

// begin makes l a live holding. n.mu must be held.
func (n *namedLeases) begin(l *store.NamedLease) {
	n.rows[l.Name] = l
	n.live[l.Name] = struct{}{}
	names := n.byOwner[l.Owner]
	if names == nil {
		names = map[string]struct{}{}
		n.byOwner[l.Owner] = names
	}
	names[l.Name] = struct{}{}
}

// end ends the live holding l at t for reason. n.mu must be held.
func (n *namedLeases) end(l *store.NamedLease, reason store.LeaseEventKind, t time.Time) {
	l.EndedAt, l.EndReason = t, reason
	delete(n.live, l.Name)
	if names := n.byOwner[l.Owner]; names != nil {
		delete(names, l.Name)
		if len(names) == 0 {
			delete(n.byOwner, l.Owner)
		}
	}
}

func (n *namedLeases) loadSinks() []store.LeaseSink {
	n.sinkMu.Lock()
	defer n.sinkMu.Unlock()
	return n.sinks
}

// freed tells the watchers that the holdings of names ended. n.mu must not
// be held.
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
// with a *store.HeldError and changes nothing.
func (s *Store) AcquireLease(ctx context.Context, name, owner string, p *store.AcquireLeaseParams) (store.NamedLease, error) {
	if err := store.ValidateAcquireLease(name, owner, p); err != nil {
		return store.NamedLease{}, fmt.Errorf("acquire lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.NamedLease{}, fmt.Errorf("acquire lease: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	now := s.clock(p.Now)
	prev := n.rows[name]
	fence := int64(1)
	if prev != nil {
		if prev.EndedAt.IsZero() && now.Before(prev.ExpiresAt) {
			return store.NamedLease{}, fmt.Errorf("acquire lease: %w", &store.HeldError{
				Name: name, Owner: prev.Owner, Fence: prev.Fence, ExpiresAt: prev.ExpiresAt, AsOf: now})
		}
		if prev.EndedAt.IsZero() { // expired, not yet marked: its history ends here
			if !p.NoHistory {
				n.record(prev, store.LeaseExpired, prev.ExpiresAt)
			}
			n.end(prev, store.LeaseExpired, now)
		}
		fence = prev.Fence + 1
	}
	l := &store.NamedLease{
		Name: name, Owner: owner, Fence: fence, AcquiredAt: now, RenewedAt: now,
		ExpiresAt: now.Add(p.TTL.Truncate(time.Microsecond)), MaxRenewals: p.MaxRenewals,
	}
	n.begin(l)
	if !p.NoHistory {
		n.record(l, store.LeaseAcquired, now)
	}
	return snapshotLease(l, now), nil
}

// holding returns the row of (name, owner, fence) or why it is not the
// caller's. n.mu must be held. superseded reports a fence below the
// current one: the caller's holding ended and a newer one began.
func (n *namedLeases) holding(name, owner string, fence int64) (l *store.NamedLease, superseded bool, err error) {
	l = n.rows[name]
	switch {
	case l == nil:
		return nil, false, fmt.Errorf("%w: %w: %q", store.ErrNotHolder, store.ErrLeaseNotFound, name)
	case fence < l.Fence:
		return nil, true, fmt.Errorf("%w: fence %d was superseded by %d", store.ErrNotHolder, fence, l.Fence)
	case fence > l.Fence:
		return nil, false, fmt.Errorf("%w: fence %d was never issued", store.ErrNotHolder, fence)
	case owner != l.Owner:
		return nil, false, fmt.Errorf("%w: held by another owner", store.ErrNotHolder)
	}
	return l, false, nil
}

// RenewLease moves the expiry of a live holding to now + p.TTL and counts a
// renewal.
func (s *Store) RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error) {
	if err := store.ValidateRenewLease(name, owner, fence, p); err != nil {
		return store.NamedLease{}, fmt.Errorf("renew lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.NamedLease{}, fmt.Errorf("renew lease: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	defer n.mu.Unlock()
	n.init()
	now := s.clock(p.Now)
	l, _, err := n.holding(name, owner, fence)
	switch {
	case err != nil:
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

// ReleaseLease ends the holding (name, owner, fence). A holding that already
// ended by expiry or force-release, or was superseded, is left alone and
// nil returned; one its holder released already gets store.ErrReleased.
func (s *Store) ReleaseLease(ctx context.Context, name, owner string, fence int64, p *store.LeaseOpParams) error {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateHoldingOf(name, owner, fence); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	n.init()
	now := s.clock(p.Now)
	l, superseded, err := n.holding(name, owner, fence)
	switch {
	case superseded:
		n.mu.Unlock()
		return nil
	case err != nil:
		n.mu.Unlock()
		return fmt.Errorf("release lease: %w", err)
	case l.EndReason == store.LeaseReleased:
		n.mu.Unlock()
		return fmt.Errorf("release lease: %w", store.ErrReleased)
	case !l.EndedAt.IsZero():
		n.mu.Unlock()
		return nil
	}
	n.end(l, store.LeaseReleased, now)
	if !p.NoHistory {
		n.record(l, store.LeaseReleased, now)
	}
	n.mu.Unlock()
	n.freed(name)
	return nil
}

// ForceReleaseLeases ends every live holding of owner and returns them, by
// name.
func (s *Store) ForceReleaseLeases(ctx context.Context, owner string, p *store.LeaseOpParams) ([]store.NamedLease, error) {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateLeaseOwner(owner); err != nil {
		return nil, fmt.Errorf("force release leases: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("force release leases: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	n.init()
	now := s.clock(p.Now)
	var out []store.NamedLease
	var names []string
	for _, name := range sortedKeys(n.byOwner[owner]) {
		l := n.rows[name]
		if !now.Before(l.ExpiresAt) {
			continue // expired: CleanupExpiredLeases or the next acquire marks it
		}
		n.end(l, store.LeaseForceReleased, now)
		if !p.NoHistory {
			n.record(l, store.LeaseForceReleased, now)
		}
		out = append(out, snapshotLease(l, now))
		names = append(names, name)
	}
	n.mu.Unlock()
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
		return 0, fmt.Errorf("cleanup expired leases: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	n.init()
	now := s.clock(p.Now)
	var expired []*store.NamedLease
	for name := range n.live {
		if l := n.rows[name]; !now.Before(l.ExpiresAt) {
			expired = append(expired, l)
		}
	}
	slices.SortFunc(expired, func(a, b *store.NamedLease) int {
		return cmp.Or(a.AcquiredAt.Compare(b.AcquiredAt), cmp.Compare(a.Name, b.Name))
	})
	expired = expired[:min(len(expired), limit)]
	names := make([]string, len(expired))
	for i, l := range expired {
		if !p.NoHistory {
			n.record(l, store.LeaseExpired, l.ExpiresAt)
		}
		n.end(l, store.LeaseExpired, now)
		names[i] = l.Name
	}
	n.mu.Unlock()
	n.freed(names...)
	return len(expired), nil
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
		return store.NamedLease{}, fmt.Errorf("get lease: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	defer n.mu.Unlock()
	now := s.clock(p.Now)
	l := n.rows[name]
	if l == nil {
		return store.NamedLease{}, fmt.Errorf("get lease: %w: %q", store.ErrLeaseNotFound, name)
	}
	return snapshotLease(l, now), nil
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
		return fmt.Errorf("check fence: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	defer n.mu.Unlock()
	now := s.clock(p.Now)
	l := n.rows[name]
	if l == nil {
		return &store.FenceError{Name: name, Fence: fence, Reason: "not found"}
	}
	return store.FenceVerdict(name, fence, l.Fence, l.EndReason, now.Before(l.ExpiresAt))
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
		return nil, fmt.Errorf("list leases: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	defer n.mu.Unlock()
	now := s.clock(p.Now)
	names := n.live
	if p.Owner != "" {
		names = n.byOwner[p.Owner]
	}
	var out []store.NamedLease
	for _, name := range sortedKeys(names) {
		l := n.rows[name]
		if name <= p.AfterName || !now.Before(l.ExpiresAt) ||
			(p.HeldFor > 0 && l.AcquiredAt.After(now.Add(-p.HeldFor))) {
			continue
		}
		out = append(out, snapshotLease(l, now))
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
		return nil, fmt.Errorf("lease history: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	defer n.mu.Unlock()
	i, _ := slices.BinarySearchFunc(n.history, p.AfterID+1, func(e store.LeaseEvent, id int64) int { return cmp.Compare(e.ID, id) })
	var out []store.LeaseEvent
	for _, e := range n.history[i:] {
		if name == "" || e.Name == name {
			out = append(out, e)
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// TrimLeaseHistory deletes up to limit events (0: store.DefaultListLimit)
// that happened before before, oldest first, and returns how many.
func (s *Store) TrimLeaseHistory(ctx context.Context, before time.Time, limit int) (int64, error) {
	limit, err := store.ListLimit(limit)
	if err != nil {
		return 0, fmt.Errorf("trim lease history: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("trim lease history: %w", err)
	}
	n := &s.named
	n.mu.Lock()
	defer n.mu.Unlock()
	var old []store.LeaseEvent
	for _, e := range n.history {
		if e.At.Before(before) {
			old = append(old, e)
		}
	}
	// Oldest first, as PostgreSQL's batches go.
	slices.SortStableFunc(old, func(a, b store.LeaseEvent) int { return a.At.Compare(b.At) })
	old = old[:min(len(old), limit)]
	drop := make(map[int64]struct{}, len(old))
	for _, e := range old {
		drop[e.ID] = struct{}{}
	}
	n.history = slices.DeleteFunc(n.history, func(e store.LeaseEvent) bool {
		_, ok := drop[e.ID]
		return ok
	})
	return int64(len(old)), nil
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

// AnnounceLeaseWaiter tells every watcher that waiter waits for name.
func (s *Store) AnnounceLeaseWaiter(ctx context.Context, name, waiter string) error {
	if err := store.ValidateLeaseName(name); err != nil {
		return fmt.Errorf("announce lease waiter: %w", err)
	}
	if err := store.ValidateLeaseOwner(waiter); err != nil {
		return fmt.Errorf("announce lease waiter: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("announce lease waiter: %w", err)
	}
	for _, sink := range s.named.loadSinks() {
		sink.Wanted(name, waiter)
	}
	return nil
}

func sortedKeys(m map[string]struct{}) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
