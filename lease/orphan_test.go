package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
)

// errLostReply is the failure of an acquire whose answer was lost: the
// connection dropped after the statement was sent.
var errLostReply = errors.New("acquire lease: read tcp 127.0.0.1:5432: connection reset by peer")

// lostReplyStore loses the answer of the next acquires of name: it applies
// the first lost of them in the backend (the grant commits), then answers
// errLostReply, as a connection that drops after the commit; it drops the
// next dropped ones before they reach the backend, but answers the same
// (the caller cannot tell the two apart). With stall, a lost acquire
// answers only once its caller gave up (its context's error), as a
// statement that commits while its caller's context ends.
type lostReplyStore struct {
	lease.Store
	name          atomic.Pointer[string]
	lost, dropped atomic.Int32
	stall         atomic.Bool
}

// is reports whether name is the one whose answers are lost.
func (s *lostReplyStore) is(name string) bool {
	n := s.name.Load()
	return n != nil && *n == name
}

func (s *lostReplyStore) AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult {
	var send []store.AcquireLeaseRequest
	var drop []bool
	for _, r := range reqs {
		d := s.is(r.Name) && s.lost.Load() <= 0 && s.dropped.Add(-1) >= 0
		drop = append(drop, d)
		if !d {
			send = append(send, r)
		}
	}
	got := s.Store.AcquireLeases(context.WithoutCancel(ctx), send, p)
	out := make([]store.AcquireLeaseResult, 0, len(reqs))
	for i, r := range reqs {
		if drop[i] {
			out = append(out, store.AcquireLeaseResult{Err: errLostReply})
			continue
		}
		res := got[0]
		got = got[1:]
		if s.is(r.Name) && s.lost.Add(-1) >= 0 {
			res = store.AcquireLeaseResult{Err: errLostReply}
			if s.stall.Load() {
				<-ctx.Done()
				res.Err = fmt.Errorf("acquire lease: %w", ctx.Err())
			}
		}
		out = append(out, res)
	}
	return out
}

// TestAnAcquireWhoseReplyWasLostFreesTheName: an acquire granted in the
// backend whose answer was lost leaves a holding nobody has a handle on.
// The Manager releases it, fenced by its token: a TryAcquire's at once,
// so another process gets the name without waiting for its TTL; and a
// blocking Acquire (alone or in AcquireAll) that then finds the name held
// by its own Manager does not wait for itself.
func TestAnAcquireWhoseReplyWasLostFreesTheName(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := &lostReplyStore{Store: b.open(t)}
		alice := newListeningManager(t, s, &lease.Config{Owner: "alice", PollInterval: 20 * time.Millisecond})
		bob := newListeningManager(t, b.open(t), &lease.Config{Owner: "bob", PollInterval: 20 * time.Millisecond})
		wait := &lease.AcquireOpts{TTL: time.Hour, Timeout: 5 * time.Second}

		t.Run("TryAcquire", func(t *testing.T) {
			name := t.Name()
			s.name.Store(&name)
			s.lost.Store(1)
			_, err := alice.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
			require.ErrorIs(t, err, errLostReply)
			require.NotErrorIs(t, err, lease.ErrHeld)
			l, berr := acquireWithin(t, "bob's Acquire", func() (*lease.Lease, error) { return bob.Acquire(ctx, name, wait) })
			require.NoError(t, berr, "the lost grant was released: bob need not wait an hour")
			require.Equal(t, int64(2), l.Fence(), "after alice's lost grant")
			requireReleased(t, alice, name, "alice", 1)
			require.NoError(t, l.Close(ctx))
			require.ErrorIs(t, err, lease.ErrOutcomeUnknown, "TryAcquire says the grant may have been made")
		})
		t.Run("Acquire", func(t *testing.T) {
			name := t.Name()
			s.name.Store(&name)
			s.lost.Store(1)
			l, err := acquireWithin(t, "alice's Acquire", func() (*lease.Lease, error) { return alice.Acquire(ctx, name, wait) })
			require.NoError(t, err, "the blocking Acquire does not wait for its own lost grant")
			require.Equal(t, int64(2), l.Fence(), "the next grant after the lost one")
			requireReleased(t, alice, name, "alice", 1)
			require.NoError(t, l.Close(ctx))
		})
		t.Run("AcquireAll", func(t *testing.T) {
			name := t.Name() + "/b"
			s.name.Store(&name)
			s.lost.Store(1)
			names := []string{t.Name() + "/c", t.Name() + "/a", name}
			ls, err := within(t, "AcquireAll", func() result2 {
				ls, err := alice.AcquireAll(ctx, names, wait)
				return result2{ls, err}
			}).unpack()
			require.NoError(t, err, "AcquireAll does not wait for its own lost grant")
			require.Equal(t, int64(2), ls[1].Fence(), "the next grant of b after the lost one")
			requireReleased(t, alice, name, "alice", 1)
			for _, l := range ls {
				require.NoError(t, l.Close(ctx))
			}
		})
		t.Run("AcquireAll gives up", func(t *testing.T) {
			// b's acquire commits while AcquireAll's Timeout passes: all
			// or nothing, b's grant included, when AcquireAll returns.
			name := t.Name() + "/b"
			s.name.Store(&name)
			s.stall.Store(true)
			defer s.stall.Store(false)
			s.lost.Store(1)
			names := []string{t.Name() + "/a", name}
			_, err := within(t, "AcquireAll", func() result2 {
				ls, err := alice.AcquireAll(ctx, names, &lease.AcquireOpts{TTL: time.Hour, Timeout: 100 * time.Millisecond})
				return result2{ls, err}
			}).unpack()
			require.ErrorIs(t, err, lease.ErrTimeout)
			require.ErrorIs(t, err, lease.ErrOutcomeUnknown)
			for _, n := range names {
				held, err := alice.IsHeld(ctx, n)
				require.NoError(t, err)
				require.False(t, held, "%s was rolled back", n)
			}
		})
	})
}

// result2 carries AcquireAll's results through within.
type result2 struct {
	ls  []*lease.Lease
	err error
}

func (r result2) unpack() ([]*lease.Lease, error) { return r.ls, r.err }

// requireReleased checks in the history of name that the holding of owner
// with fence was released.
func requireReleased(t *testing.T, m *lease.Manager, name, owner string, fence int64) {
	t.Helper()
	evs, err := m.History(t.Context(), name, 0, 0)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(evs, func(e lease.HistoryEvent) bool {
		return e.Owner == owner && e.Fence == fence && e.Kind == store.LeaseReleased
	}), "%s's holding %d of %s released: %+v", owner, fence, name, evs)
}

// holdStore holds, once each when armed: the first GetLease of name until
// getOpen closes (getEntered closes when it arrives), and the first acquire
// of name, once the backend applied it, until acqOpen closes (acqApplied
// closes then).
type holdStore struct {
	lease.Store
	name                 string
	getEntered, getOpen  chan struct{}
	acqApplied, acqOpen  chan struct{}
	getOnce, acqOnce     sync.Once
	holdGet, holdAcquire atomic.Bool
}

func newHoldStore(s lease.Store, name string) *holdStore {
	return &holdStore{Store: s, name: name, getEntered: make(chan struct{}), getOpen: make(chan struct{}),
		acqApplied: make(chan struct{}), acqOpen: make(chan struct{})}
}

// open lets what it holds go, and what comes after.
func (s *holdStore) open(gate chan struct{}) {
	select {
	case <-gate:
	default:
		close(gate)
	}
}

func (s *holdStore) GetLease(ctx context.Context, name string, p *store.LeaseOpParams) (store.NamedLease, error) {
	if name == s.name && s.holdGet.CompareAndSwap(true, false) {
		s.getOnce.Do(func() { close(s.getEntered) })
		<-s.getOpen
	}
	return s.Store.GetLease(ctx, name, p)
}

func (s *holdStore) AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult {
	res := s.Store.AcquireLeases(ctx, reqs, p)
	if slices.ContainsFunc(reqs, func(r store.AcquireLeaseRequest) bool { return r.Name == s.name }) && s.holdAcquire.CompareAndSwap(true, false) {
		s.acqOnce.Do(func() { close(s.acqApplied) })
		<-s.acqOpen
	}
	return res
}

// orphanVerdicts returns a channel of m's verdicts on the live holdings of
// its Owner it finds while it looks for lost grants.
func orphanVerdicts(m *lease.Manager) <-chan bool {
	ch := make(chan bool, 16)
	lease.OnOrphan(m, func(_ string, _ int64, ok bool) { ch <- ok })
	return ch
}

// nextVerdict returns the next verdict, failing t after 10 s.
func nextVerdict(t *testing.T, ch <-chan bool, what string) bool {
	t.Helper()
	select {
	case ok := <-ch:
		return ok
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no verdict within 10s", what)
		return false
	}
}

// TestALostGrantIsNeverTakenForAHoldingOfTheManagers: looking for the grant
// of an acquire of unknown outcome, the Manager leaves alone the holding of
// its Owner that another attempt of the same name has in flight (granted,
// its answer not yet back), and then the lease that attempt returned.
func TestALostGrantIsNeverTakenForAHoldingOfTheManagers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		name := t.Name()
		hs := newHoldStore(b.open(t), name)
		s := &lostReplyStore{Store: hs}
		s.name.Store(&name)
		m, err := lease.New(s, &lease.Config{Owner: "alice", PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(m.Stop)
		t.Cleanup(func() { hs.open(hs.getOpen); hs.open(hs.acqOpen) }) // before Stop, should the test fail
		verdicts := orphanVerdicts(m)

		hs.holdGet.Store(true)
		s.dropped.Store(1) // never reaches the backend, but its caller cannot tell
		_, err = m.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
		require.ErrorIs(t, err, lease.ErrOutcomeUnknown)
		wait(t, hs.getEntered, "the Manager looks for the lost grant")

		hs.holdAcquire.Store(true)
		got := make(chan result2, 1)
		go func() {
			l, err := m.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
			got <- result2{[]*lease.Lease{l}, err}
		}()
		wait(t, hs.acqApplied, "a second TryAcquire is granted, its answer not yet back")
		hs.open(hs.getOpen)
		require.False(t, nextVerdict(t, verdicts, "the look while the grant is in flight"), "an attempt in flight may be about to return it")
		hs.open(hs.acqOpen)
		ls, err := within(t, "the second TryAcquire", func() result2 { return <-got }).unpack()
		require.NoError(t, err)
		l := ls[0]
		require.False(t, nextVerdict(t, verdicts, "the next look"), "the holding of a lease of the Manager")
		require.NoError(t, l.Check(ctx), "still held in the backend")
		require.NoError(t, l.Close(ctx))
	})
}

// TestALostGrantIsNeverTakenForAnotherManagersHolding: two Managers
// configured with one Owner string look like one holder to the backend.
// Looking for the grant of an acquire of unknown outcome, one leaves alone
// the other's holding of the name acquired before that acquire was sent
// (here a minute before, by the backend's clock: the check's estimate of
// the send is only good to within its own round trip), and one that was
// renewed: neither can be that grant.
func TestALostGrantIsNeverTakenForAnotherManagersHolding(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		other := b.open(t)
		a2 := newManager(t, other, &lease.Config{Owner: "alice"})
		for _, renewed := range []bool{false, true} {
			name := fmt.Sprintf("%s/renewed=%v", t.Name(), renewed)
			hs := newHoldStore(b.open(t), name)
			s := &lostReplyStore{Store: hs}
			s.name.Store(&name)
			a1, err := lease.New(s, &lease.Config{Owner: "alice", PollInterval: time.Hour})
			require.NoError(t, err)
			t.Cleanup(a1.Stop)
			t.Cleanup(func() { hs.open(hs.getOpen) })
			verdicts := orphanVerdicts(a1)

			var l *lease.Lease
			if !renewed { // the other's holding, a minute old when a1's acquire is sent
				now, err := other.Now(ctx)
				require.NoError(t, err)
				past := now.Add(-time.Minute)
				res := other.AcquireLeases(ctx, []store.AcquireLeaseRequest{{Name: name, Owner: "alice", TTL: time.Hour}},
					&store.LeaseBatchParams{Now: &past})
				require.NoError(t, res[0].Err)
			}
			hs.holdGet.Store(true)
			s.dropped.Store(1)
			_, err = a1.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
			require.ErrorIs(t, err, lease.ErrOutcomeUnknown)
			wait(t, hs.getEntered, "a1 looks for its lost grant")
			if renewed { // taken after a1's acquire was sent, and renewed
				l, err = a2.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Hour})
				require.NoError(t, err)
				require.NoError(t, l.Renew(ctx))
			}
			hs.open(hs.getOpen)
			require.False(t, nextVerdict(t, verdicts, name), "the other Manager's holding")
			info, err := other.GetLease(ctx, name, nil)
			require.NoError(t, err)
			require.True(t, info.Held(), "still held in the backend: %+v", info)
			require.Empty(t, info.EndReason)
			if l != nil {
				require.NoError(t, l.Close(ctx))
			}
		}
	})
}
