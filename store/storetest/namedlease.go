package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// NamedLeaseStore is the storage contract of named leases (package lease),
// as the conformance suite exercises it. Its method comments are the
// specification; the state diagram is in package store (doc.go).
//
// Every method validates its input first: bad input returns an error
// matching store.ErrInvalidArgument and its specific sentinel, and changes
// nothing. Every time a method reads or writes comes from the backend's
// clock, pinned by the Now field of its parameters when set.
type NamedLeaseStore interface {
	// Now returns the backend's clock.
	Now(ctx context.Context) (time.Time, error)

	// AcquireLease starts a new holding of name for owner when the name is
	// free (never acquired, or its last holding ended, or now >= its
	// ExpiresAt): Fence is the previous fence + 1 (1 for a new name),
	// AcquiredAt = RenewedAt = AsOf = now, ExpiresAt = now + p.TTL
	// (truncated to microseconds), Renewals 0, MaxRenewals p.MaxRenewals.
	// A taken-over expired holding is recorded as expired (at its expiry)
	// before the new one is recorded as acquired. When another holding is
	// live it fails with a *store.HeldError (matching store.ErrHeld) that
	// tells the holder, whoever asks (its own owner too), and changes
	// nothing; on PostgreSQL it does not even write. With p.Wait > 0 it
	// marks the held name wanted instead, until at least now + p.Wait and
	// at most now + 2×p.Wait, writing only when the mark would run out
	// before now + p.Wait. A mark is never lost to a concurrent release:
	// either the release sees it (and notifies), or the acquire sees the
	// release (and takes the name).
	AcquireLease(ctx context.Context, name, owner string, p *store.AcquireLeaseParams) (store.NamedLease, error)

	// AcquireLeases runs several acquires, each with the outcome
	// AcquireLease would have (in the order of reqs for a name asked for
	// twice), sharing statements: one result per request, in order. Bad
	// input fails its own request only.
	AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult

	// RenewLease sets ExpiresAt = now + p.TTL of the holding (name, owner,
	// fence) and counts a renewal; the fence stays. Refusals change
	// nothing: store.ErrNotHolder (unknown name, which also matches
	// store.ErrLeaseNotFound; another owner; a fence superseded or never
	// issued), store.ErrReleased, store.ErrForceReleased, store.ErrExpired
	// (now >= ExpiresAt, marked expired or not), store.ErrMaxRenewals.
	RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error)

	// ReleaseLease ends the holding (name, owner, fence) at now with reason
	// released, even after its expiry as long as nothing else ended it, and
	// notifies the watchers if the name is wanted at now (see
	// AcquireLease); else it sends no notice. A holding that ended otherwise (marked
	// expired, force-released) or was superseded is left alone and nil is
	// returned: a release is safe after expiry and never touches a newer
	// holding. Refusals change nothing: store.ErrReleased (released
	// already), store.ErrNotHolder (unknown name, another owner, a fence
	// never issued).
	ReleaseLease(ctx context.Context, name, owner string, fence int64, p *store.LeaseOpParams) error

	// ReleaseLeases runs several releases, each with the outcome
	// ReleaseLease would have (in the order of reqs for a holding named
	// twice), sharing statements: one error per request, in order. Bad
	// input fails its own request only.
	ReleaseLeases(ctx context.Context, reqs []store.LeaseHolding, p *store.LeaseBatchParams) []error

	// ForceReleaseLeases ends every live holding of owner (not ended,
	// now < ExpiresAt) with reason force-released and returns them by name,
	// as they are after the call, recording p.Actor and p.Reason in their
	// history (Actor, Comment). Expired holdings are left to
	// CleanupExpiredLeases. With p.Name (and p.Fence) it ends only that
	// holding of owner. A bad Actor or Reason (control characters,
	// over-long, a Reason without an Actor) matches store.ErrInvalidText;
	// a bad Name, a negative Fence or a Fence without a Name,
	// store.ErrInvalidArgument.
	ForceReleaseLeases(ctx context.Context, owner string, p *store.LeaseOpParams) ([]store.NamedLease, error)

	// CleanupExpiredLeases ends up to p.Limit expired, not ended holdings
	// (oldest acquisition first) at now with reason expired, recording them
	// as expired at their expiry, notifies the watchers, and returns how
	// many it ended. The rows stay: their fences survive.
	CleanupExpiredLeases(ctx context.Context, p *store.CleanupLeasesParams) (int, error)

	// GetLease returns the current or last holding of name, with AsOf =
	// now; store.ErrLeaseNotFound if it was never acquired.
	GetLease(ctx context.Context, name string, p *store.LeaseOpParams) (store.NamedLease, error)

	// CheckLeaseFence returns nil if fence is the live holding of name at
	// now, else a *store.FenceError (matching store.ErrStaleFence) whose
	// Reason says why: "superseded", "never issued", "released",
	// "force-released", "expired" or "not found".
	CheckLeaseFence(ctx context.Context, name string, fence int64, p *store.LeaseOpParams) error

	// ListLeases returns the live holdings (not ended, now < ExpiresAt;
	// with p.Expired, also those past ExpiresAt not yet marked expired)
	// that p selects (p.Owner's; acquired at or before now - p.HeldFor;
	// names after p.AfterName), ordered by name, at most p.Limit.
	ListLeases(ctx context.Context, p *store.ListLeasesParams) ([]store.NamedLease, error)

	// LeaseHistory returns the audit events of name (every name if empty)
	// with ID > p.AfterID, in ID order, at most p.Limit. The events of a
	// holding are recorded in the order they happened; calls with
	// NoHistory record nothing.
	LeaseHistory(ctx context.Context, name string, p *store.LeaseHistoryParams) ([]store.LeaseEvent, error)

	// TrimLeaseHistory deletes up to limit events with At < before, oldest
	// first, and returns how many it deleted.
	TrimLeaseHistory(ctx context.Context, before time.Time, limit int) (int64, error)

	// WatchLeases reports to sink, until ctx ends, every end of a holding
	// made by ForceReleaseLeases and CleanupExpiredLeases, and by
	// ReleaseLease of a wanted name (Freed), and every AnnounceLeaseWaiter
	// (Wanted); acquisitions, renewals and releases nobody waits for are
	// not reported. It calls sink.Reset when it starts
	// listening and whenever it may have missed notices. It returns ctx's
	// error.
	WatchLeases(ctx context.Context, sink store.LeaseSink) error

	// AnnounceLeaseWaiter reports w to every watcher (Wanted), with Since
	// truncated to microseconds; a zero Since (a withdrawal) stays zero. It
	// changes nothing else.
	// It keeps w for ListLeaseWaiters for store.LeaseWaiterTTL; a
	// withdrawal forgets its owner's announcement for the name.
	AnnounceLeaseWaiter(ctx context.Context, w store.LeaseWaiter) error

	// ListLeaseWaiters returns the announced waiters (of p.Name, or every
	// name) whose announcement has not run out at now nor been withdrawn,
	// leaving out those holding the name with a larger fence than they
	// announced, ordered by name, then Since, then Waiter; at most p.Limit.
	ListLeaseWaiters(ctx context.Context, p *store.ListLeaseWaitersParams) ([]store.LeaseWaiter, error)
}

// RunNamedLeases runs the conformance suite of named leases. newStore must
// return a fresh, isolated store each time it is called (an empty schema on
// PostgreSQL); it is called from parallel subtests, once per leaf subtest
// (once for the whole bad-input table).
func RunNamedLeases(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Helper()
	groups := []group[NamedLeaseStore]{
		{"Acquire", testNamedAcquire},
		{"Renew", testNamedRenew},
		{"Release", testNamedRelease},
		{"ForceRelease", testNamedForceRelease},
		{"CleanupExpired", testNamedCleanup},
		{"List", testNamedList},
		{"Fencing", testNamedFencing},
		{"History", testNamedHistory},
		{"Watch", testNamedWatch},
		{"Wanted", testNamedWanted},
		{"Batch", testNamedBatch},
		{"Concurrency", testNamedConcurrency},
		{"BadInput", testNamedBadInput},
		{"Status", testNamedStatus},
		{"Reasons", testNamedReasons},
		{"Waiters", testNamedWaiters},
	}
	if _, ok := newStore(t).(store.Settings); ok {
		groups = append(groups, group[NamedLeaseStore]{"Settings", testSettings})
	}
	runGroups(t, newStore, groups)
}

// nlBundle is what a subtest of RunNamedLeases works with.
type nlBundle struct{ harness[NamedLeaseStore] }

// nlSetup marks t parallel and returns its bundle.
func nlSetup(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) *nlBundle {
	t.Helper()
	t.Parallel()
	return nlNewBundle(t, newStore)
}

// nlNewBundle returns the bundle of t, for a t that shares its store with
// sequential subtests.
func nlNewBundle(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) *nlBundle {
	t.Helper()
	return &nlBundle{newHarness(t, newStore)}
}

// acquire acquires name for owner at base+at with ttl and checks the result.
func (b *nlBundle) acquire(name, owner string, at, ttl time.Duration) store.NamedLease {
	b.t.Helper()
	return b.acquireP(name, owner, at, &store.AcquireLeaseParams{TTL: ttl})
}

func (b *nlBundle) acquireP(name, owner string, at time.Duration, p *store.AcquireLeaseParams) store.NamedLease {
	b.t.Helper()
	p.Now = b.at(at)
	l, err := b.s.AcquireLease(b.ctx, name, owner, p)
	require.NoError(b.t, err, "AcquireLease %s by %s at +%v", name, owner, at)
	now := b.time(at)
	require.Equal(b.t, nlNorm(store.NamedLease{
		Name: name, Owner: owner, Fence: l.Fence, AcquiredAt: now, RenewedAt: now,
		ExpiresAt: now.Add(p.TTL.Truncate(time.Microsecond)), MaxRenewals: p.MaxRenewals, AsOf: now,
	}), nlNorm(l), "AcquireLease %s", name)
	return nlNorm(l)
}

// renew renews l at base+at with ttl and checks the result.
func (b *nlBundle) renew(l store.NamedLease, at, ttl time.Duration) store.NamedLease {
	b.t.Helper()
	got, err := b.s.RenewLease(b.ctx, l.Name, l.Owner, l.Fence, &store.RenewLeaseParams{TTL: ttl, Now: b.at(at)})
	require.NoError(b.t, err, "RenewLease %s fence %d at +%v", l.Name, l.Fence, at)
	now := b.time(at)
	want := l
	want.RenewedAt, want.ExpiresAt, want.AsOf = now, now.Add(ttl), now
	want.Renewals++
	require.Equal(b.t, nlNorm(want), nlNorm(got), "RenewLease %s", l.Name)
	return nlNorm(got)
}

func (b *nlBundle) release(l store.NamedLease, at time.Duration) {
	b.t.Helper()
	err := b.s.ReleaseLease(b.ctx, l.Name, l.Owner, l.Fence, &store.LeaseOpParams{Now: b.at(at)})
	require.NoError(b.t, err, "ReleaseLease %s fence %d", l.Name, l.Fence)
}

// get returns the holding of name as seen at base+at.
func (b *nlBundle) get(name string, at time.Duration) store.NamedLease {
	b.t.Helper()
	l, err := b.s.GetLease(b.ctx, name, &store.LeaseOpParams{Now: b.at(at)})
	require.NoError(b.t, err, "GetLease %s", name)
	require.Equal(b.t, name, l.Name)
	return nlNorm(l)
}

// requireHeld checks that l is the live holding of its name at base+at.
func (b *nlBundle) requireHeld(l store.NamedLease, at time.Duration) {
	b.t.Helper()
	want := l
	want.AsOf = b.time(at)
	got := b.get(l.Name, at)
	require.Equal(b.t, nlNorm(want), got)
	require.True(b.t, got.Held(), "%s not held at +%v", l.Name, at)
}

// history returns every event of name (every name if empty), checking that
// IDs increase; the IDs are zeroed so that events compare by content.
func (b *nlBundle) history(name string) []store.LeaseEvent {
	b.t.Helper()
	var out []store.LeaseEvent
	var after int64
	for {
		es, err := b.s.LeaseHistory(b.ctx, name, &store.LeaseHistoryParams{AfterID: after, Limit: 100})
		require.NoError(b.t, err, "LeaseHistory %s", name)
		for _, e := range es {
			require.Greater(b.t, e.ID, after, "history IDs must increase")
			after = e.ID
			e.ID = 0
			e.At, e.ExpiresAt = normTime(e.At), normTime(e.ExpiresAt)
			// why is checked by whyOf (the Reasons group)
			e.Reason, e.Actor, e.Comment = "", "", ""
			out = append(out, e)
		}
		if len(es) < 100 {
			return out
		}
	}
}

// why is the reason, actor and comment of a history event.
type why struct {
	Kind    store.LeaseEventKind
	Reason  store.LeaseReason
	Actor   string
	Comment string
}

// whyOf returns why each event of name happened, in order.
func (b *nlBundle) whyOf(name string) []why {
	b.t.Helper()
	es, err := b.s.LeaseHistory(b.ctx, name, &store.LeaseHistoryParams{Limit: store.MaxListLimit})
	require.NoError(b.t, err, "LeaseHistory %s", name)
	out := make([]why, len(es))
	for i, e := range es {
		out[i] = why{e.Kind, e.Reason, e.Actor, e.Comment}
	}
	return out
}

// event is a history record with its ID zeroed.
func event(l store.NamedLease, kind store.LeaseEventKind, at, expiresAt time.Time) store.LeaseEvent {
	return store.LeaseEvent{Name: l.Name, Owner: l.Owner, Fence: l.Fence, Kind: kind, At: normTime(at), ExpiresAt: normTime(expiresAt)}
}

// nlNorm makes holdings comparable: times in UTC without monotonic readings.
func nlNorm(l store.NamedLease) store.NamedLease {
	l.AcquiredAt = normTime(l.AcquiredAt)
	l.RenewedAt = normTime(l.RenewedAt)
	l.ExpiresAt = normTime(l.ExpiresAt)
	l.EndedAt = normTime(l.EndedAt)
	l.AsOf = normTime(l.AsOf)
	return l
}

func nlNormAll(ls []store.NamedLease) []store.NamedLease {
	if len(ls) == 0 {
		return nil
	}
	out := make([]store.NamedLease, len(ls))
	for i, l := range ls {
		out[i] = nlNorm(l)
	}
	return out
}

// ended returns l as it should look after it ended at t for reason, seen at
// asOf.
func ended(l store.NamedLease, reason store.LeaseEventKind, t, asOf time.Time) store.NamedLease {
	l.EndedAt, l.EndReason, l.AsOf = t, reason, asOf
	return nlNorm(l)
}
