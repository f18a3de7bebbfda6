package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// testNamedStatus checks the status and time remaining of holdings, as
// GetLease and ListLeases report them by the backend's clock.
func testNamedStatus(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("active, then expired before maintenance marks it, then marked", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		b.acquire(n, "alice", 0, 10*time.Second)
		g := b.get(n, 4*time.Second)
		require.Equal(t, store.LeaseStatusActive, g.Status())
		require.Equal(t, 6*time.Second, g.Remaining())

		g = b.get(n, 10*time.Second) // not marked: reads expired, not held
		require.True(t, g.EndedAt.IsZero())
		require.Equal(t, store.LeaseStatusExpired, g.Status())
		require.Zero(t, g.Remaining())

		ls, err := b.s.ListLeases(b.ctx, &store.ListLeasesParams{Now: b.at(10 * time.Second)})
		require.NoError(t, err)
		require.Empty(t, ls, "an expired holding is not listed as held")
		ls, err = b.s.ListLeases(b.ctx, &store.ListLeasesParams{Expired: true, Now: b.at(10 * time.Second)})
		require.NoError(t, err)
		require.Len(t, ls, 1, "Expired lists the unmarked expired holding")
		require.Equal(t, store.LeaseStatusExpired, ls[0].Status())
		ls, err = b.s.ListLeases(b.ctx, &store.ListLeasesParams{Owner: "alice", Expired: true, Now: b.at(10 * time.Second)})
		require.NoError(t, err)
		require.Len(t, ls, 1, "Expired lists the unmarked expired holding of an owner")

		_, err = b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: b.at(11 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, store.LeaseStatusExpired, b.get(n, 11*time.Second).Status())
		ls, err = b.s.ListLeases(b.ctx, &store.ListLeasesParams{Expired: true, Now: b.at(11 * time.Second)})
		require.NoError(t, err)
		require.Empty(t, ls, "a marked holding has ended")
	})

	t.Run("released and force-released", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n, m := b.name("r"), b.name("f")
		l := b.acquire(n, "alice", 0, time.Minute)
		b.acquire(m, "bob", 0, time.Minute)
		b.release(l, time.Second)
		_, err := b.s.ForceReleaseLeases(b.ctx, "bob", &store.LeaseOpParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		for name, want := range map[string]store.LeaseStatus{n: store.LeaseStatusReleased, m: store.LeaseStatusForceReleased} {
			g := b.get(name, 2*time.Second)
			require.Equal(t, want, g.Status(), name)
			require.Zero(t, g.Remaining(), name)
		}
	})
}

// testNamedReasons checks that each history record says why, and who
// force-released a holding and why.
func testNamedReasons(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("renewed, released, expired, lost, max renewals", func(t *testing.T) {
		b := nlSetup(t, newStore)
		rel, exp, lost, maxed := b.name("rel"), b.name("exp"), b.name("lost"), b.name("max")
		l := b.acquire(rel, "alice", 0, time.Minute)
		l = b.renew(l, time.Second, time.Minute)
		b.release(l, 2*time.Second)
		b.acquire(exp, "alice", 0, time.Second)
		b.acquire(lost, "alice", 0, time.Second)
		mx := b.acquireP(maxed, "alice", 0, &store.AcquireLeaseParams{TTL: time.Second, MaxRenewals: 1})
		b.renew(mx, 500*time.Millisecond, time.Second)
		b.acquire(lost, "bob", 2*time.Second, time.Minute) // takes over before any cleanup
		_, err := b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: b.at(3 * time.Second)})
		require.NoError(t, err)

		require.Equal(t, []why{{store.LeaseAcquired, "", "", ""}, {store.LeaseRenewed, store.LeaseReasonRenewed, "", ""},
			{store.LeaseReleased, store.LeaseReasonReleased, "", ""}}, b.whyOf(rel))
		require.Equal(t, []why{{store.LeaseAcquired, "", "", ""}, {store.LeaseExpired, store.LeaseReasonExpired, "", ""}}, b.whyOf(exp))
		require.Equal(t, []why{{store.LeaseAcquired, "", "", ""}, {store.LeaseExpired, store.LeaseReasonLost, "", ""},
			{store.LeaseAcquired, "", "", ""}}, b.whyOf(lost))
		require.Equal(t, []why{{store.LeaseAcquired, "", "", ""}, {store.LeaseRenewed, store.LeaseReasonRenewed, "", ""},
			{store.LeaseExpired, store.LeaseReasonMaxRenewals, "", ""}}, b.whyOf(maxed))
	})

	t.Run("a maxed-out holding taken over is max-renewals, not lost", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		mx := b.acquireP(n, "alice", 0, &store.AcquireLeaseParams{TTL: time.Second, MaxRenewals: 1})
		b.renew(mx, 500*time.Millisecond, time.Second)
		b.acquire(n, "bob", 2*time.Second, time.Minute)
		require.Equal(t, store.LeaseReasonMaxRenewals, b.whyOf(n)[2].Reason)
	})

	t.Run("force-release records its actor and reason", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n, m := b.name("a"), b.name("b")
		b.acquire(n, "crashed", 0, time.Minute)
		b.acquire(m, "other", 0, time.Minute)
		got, err := b.s.ForceReleaseLeases(b.ctx, "crashed", &store.LeaseOpParams{Actor: "ops-jane", Reason: "host lost, ticket 42 (é)", Now: b.at(time.Second)})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, []why{{store.LeaseAcquired, "", "", ""},
			{store.LeaseForceReleased, store.LeaseReasonForceReleased, "ops-jane", "host lost, ticket 42 (é)"}}, b.whyOf(n))
		_, err = b.s.ForceReleaseLeases(b.ctx, "other", &store.LeaseOpParams{Now: b.at(time.Second)}) // no actor: none recorded
		require.NoError(t, err)
		require.Equal(t, why{store.LeaseForceReleased, store.LeaseReasonForceReleased, "", ""}, b.whyOf(m)[1])
	})

	t.Run("bad actor or reason: typed error naming the field, nothing changed", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, time.Minute)
		for _, c := range []struct {
			name, field string
			p           store.LeaseOpParams
		}{
			{"reason with a control character", "Reason", store.LeaseOpParams{Actor: "ops", Reason: "line\nbreak"}},
			{"reason with NUL", "Reason", store.LeaseOpParams{Actor: "ops", Reason: "a\x00"}},
			{"over-long reason", "Reason", store.LeaseOpParams{Actor: "ops", Reason: strings.Repeat("r", store.MaxTextLen+1)}},
			{"reason not UTF-8", "Reason", store.LeaseOpParams{Actor: "ops", Reason: "\xff"}},
			{"actor with a control character", "Actor", store.LeaseOpParams{Actor: "ops\t1", Reason: "r"}},
			{"over-long actor", "Actor", store.LeaseOpParams{Actor: strings.Repeat("a", store.MaxNameLen+1)}},
			{"reason without an actor", "Actor", store.LeaseOpParams{Reason: "why"}},
		} {
			p := c.p
			p.Now = b.at(time.Second)
			_, err := b.s.ForceReleaseLeases(b.ctx, "alice", &p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, c.name)
			require.ErrorIs(t, err, store.ErrInvalidText, c.name)
			require.Contains(t, err.Error(), c.field, c.name)
		}
		b.requireHeld(l, 2*time.Second)
		require.Len(t, b.history(n), 1, "nothing recorded")
	})
}

// testNamedWaiters checks that announced waiters are visible to operators
// (ListLeaseWaiters) until they withdraw, get their turn, or run out.
func testNamedWaiters(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("announced, listed, withdrawn, run out", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n, m := b.name("a"), b.name("b")
		now, err := b.s.Now(b.ctx)
		require.NoError(t, err)
		since := store.Micro(now.Add(-time.Second))
		for _, w := range []store.LeaseWaiter{
			{Name: n, Waiter: "carol", Since: since.Add(time.Millisecond), Fence: 1},
			{Name: n, Waiter: "bob", Since: since, Fence: 1},
			{Name: m, Waiter: "bob", Since: since, Fence: 0},
		} {
			require.NoError(t, b.s.AnnounceLeaseWaiter(b.ctx, w))
		}
		list := func(p *store.ListLeaseWaitersParams) []store.LeaseWaiter {
			ws, err := b.s.ListLeaseWaiters(b.ctx, p)
			require.NoError(t, err)
			for i := range ws {
				require.Equal(t, store.LeaseStatusPending, ws[i].Status(), "a listed waiter is pending")
				ws[i].Since = normTime(ws[i].Since)
			}
			return ws
		}
		s := normTime(since)
		require.Equal(t, []store.LeaseWaiter{
			{Name: n, Waiter: "bob", Since: s, Fence: 1},
			{Name: n, Waiter: "carol", Since: s.Add(time.Millisecond), Fence: 1},
			{Name: m, Waiter: "bob", Since: s, Fence: 0},
		}, list(nil))
		require.Equal(t, []store.LeaseWaiter{{Name: n, Waiter: "bob", Since: s, Fence: 1}}, list(&store.ListLeaseWaitersParams{Name: n, Limit: 1}))

		// bob takes n with a larger fence than it saw: its turn came
		b.acquire(n, "alice", 0, time.Microsecond)
		_, err = b.s.AcquireLease(b.ctx, n, "bob", &store.AcquireLeaseParams{TTL: time.Hour})
		require.NoError(t, err)
		require.Equal(t, []store.LeaseWaiter{{Name: n, Waiter: "carol", Since: s.Add(time.Millisecond), Fence: 1}},
			list(&store.ListLeaseWaitersParams{Name: n}))

		require.NoError(t, b.s.AnnounceLeaseWaiter(b.ctx, store.LeaseWaiter{Name: n, Waiter: "carol"})) // withdraws
		require.Empty(t, list(&store.ListLeaseWaitersParams{Name: n}))

		later := time.Now().Add(store.LeaseWaiterTTL + time.Minute)
		require.Empty(t, list(&store.ListLeaseWaitersParams{Now: &later}), "announcements run out")
		_, err = b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: &later})
		require.NoError(t, err)
		require.Empty(t, list(nil), "cleanup deleted the run-out announcements")
	})

	t.Run("bad input", func(t *testing.T) {
		b := nlSetup(t, newStore)
		for _, p := range []*store.ListLeaseWaitersParams{{Name: "a\x00"}, {Limit: -1}, {Limit: store.MaxListLimit + 1}} {
			_, err := b.s.ListLeaseWaiters(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", p)
		}
	})
}
