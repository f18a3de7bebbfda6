package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testNamedAcquire(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("first acquire gets fence 1 and the backend's times", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, 10*time.Second)
		require.Equal(t, int64(1), l.Fence)
		b.requireHeld(l, 10*time.Second-time.Microsecond)
	})

	t.Run("held until exactly ExpiresAt, then another owner takes over", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, 10*time.Second)
		for _, owner := range []string{"bob", "alice"} {
			for _, at := range []time.Duration{0, time.Second, 10*time.Second - time.Microsecond} {
				_, err := b.s.AcquireLease(b.ctx, n, owner, &store.AcquireLeaseParams{TTL: time.Minute, Now: b.at(at)})
				require.ErrorIs(t, err, store.ErrHeld, "%s at +%v", owner, at)
				var held *store.HeldError
				require.ErrorAs(t, err, &held)
				require.Equal(t, store.HeldError{Name: n, Owner: "alice", Fence: 1, ExpiresAt: l.ExpiresAt, AsOf: b.time(at)},
					store.HeldError{Name: held.Name, Owner: held.Owner, Fence: held.Fence, ExpiresAt: normTime(held.ExpiresAt), AsOf: normTime(held.AsOf)})
				require.Equal(t, l.ExpiresAt.Sub(b.time(at)), held.Remaining())
				b.requireHeld(l, at)
			}
		}
		m := b.acquire(n, "bob", 10*time.Second, time.Minute)
		require.Equal(t, int64(2), m.Fence)
		b.requireHeld(m, 10*time.Second)
		require.Equal(t, []store.LeaseEvent{
			event(l, store.LeaseAcquired, b.time(0), l.ExpiresAt),
			event(l, store.LeaseExpired, l.ExpiresAt, l.ExpiresAt),
			event(m, store.LeaseAcquired, m.AcquiredAt, m.ExpiresAt),
		}, b.history(n))
	})

	t.Run("re-acquire by the same owner after release is a new holding", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, time.Minute)
		b.release(l, time.Second)
		m := b.acquire(n, "alice", time.Second, time.Minute)
		require.Equal(t, int64(2), m.Fence)
		b.requireHeld(m, 2*time.Second)
	})

	t.Run("TTL keeps microseconds, MaxRenewals is recorded", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquireP(n, "alice", 0, &store.AcquireLeaseParams{TTL: time.Second + 1500*time.Nanosecond, MaxRenewals: 3})
		require.Equal(t, b.time(time.Second+time.Microsecond), l.ExpiresAt)
		require.Equal(t, 3, l.MaxRenewals)
		b.requireHeld(l, 0)
	})

	t.Run("names are independent", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n1, n2 := b.name("-1"), b.name("-2")
		l1 := b.acquire(n1, "alice", 0, time.Minute)
		l2 := b.acquire(n2, "bob", 0, time.Minute)
		require.Equal(t, int64(1), l2.Fence)
		b.requireHeld(l1, 0)
		b.requireHeld(l2, 0)
	})

	t.Run("unknown name is ErrLeaseNotFound for GetLease", func(t *testing.T) {
		b := nlSetup(t, newStore)
		_, err := b.s.GetLease(b.ctx, b.name(""), nil)
		require.ErrorIs(t, err, store.ErrLeaseNotFound)
	})

	t.Run("nil Now uses the backend clock", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l, err := b.s.AcquireLease(b.ctx, n, "alice", &store.AcquireLeaseParams{TTL: time.Hour})
		require.NoError(t, err)
		require.False(t, l.AcquiredAt.Before(b.base), "AcquiredAt %v before the base %v", l.AcquiredAt, b.base)
		require.Equal(t, l.AcquiredAt.Add(time.Hour), l.ExpiresAt)
		require.Equal(t, l.AcquiredAt, l.AsOf)
		got, err := b.s.GetLease(b.ctx, n, nil)
		require.NoError(t, err)
		require.True(t, got.Held())
		require.False(t, got.AsOf.Before(l.AcquiredAt))
		r, err := b.s.RenewLease(b.ctx, n, "alice", l.Fence, &store.RenewLeaseParams{TTL: time.Hour})
		require.NoError(t, err)
		require.Equal(t, r.RenewedAt.Add(time.Hour), r.ExpiresAt)
		require.False(t, r.RenewedAt.Before(l.AcquiredAt))
	})
}

func testNamedRenew(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("renew just before ExpiresAt moves the expiry, keeps the fence", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, 10*time.Second)
		r := b.renew(l, 10*time.Second-time.Microsecond, 10*time.Second)
		require.Equal(t, l.Fence, r.Fence)
		require.Equal(t, l.AcquiredAt, r.AcquiredAt)
		r = b.renew(r, 15*time.Second, time.Second) // may shorten
		require.Equal(t, b.time(16*time.Second), r.ExpiresAt)
		b.requireHeld(r, 16*time.Second-time.Microsecond)
	})

	t.Run("renew at exactly ExpiresAt is ErrExpired and changes nothing", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, 10*time.Second)
		for _, at := range []time.Duration{10 * time.Second, time.Hour} {
			_, err := b.s.RenewLease(b.ctx, n, "alice", l.Fence, &store.RenewLeaseParams{TTL: time.Minute, Now: b.at(at)})
			require.ErrorIs(t, err, store.ErrExpired, "at +%v", at)
		}
		require.Equal(t, func() store.NamedLease { x := l; x.AsOf = b.time(time.Hour); return x }(), b.get(n, time.Hour))
	})

	t.Run("renew by a non-holder is ErrNotHolder", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		old := b.acquire(n, "alice", 0, time.Second)
		l := b.acquire(n, "alice", time.Second, time.Minute) // fence 2, after expiry
		cases := []struct {
			desc  string
			name  string
			owner string
			fence int64
		}{
			{"another owner", n, "mallory", l.Fence},
			{"a superseded fence, same owner", n, "alice", old.Fence},
			{"a fence never issued", n, "alice", l.Fence + 1},
			{"an unknown name", b.name("-unknown"), "alice", 1},
		}
		for _, c := range cases {
			_, err := b.s.RenewLease(b.ctx, c.name, c.owner, c.fence, &store.RenewLeaseParams{TTL: time.Hour, Now: b.at(2 * time.Second)})
			require.ErrorIs(t, err, store.ErrNotHolder, c.desc)
		}
		_, err := b.s.RenewLease(b.ctx, b.name("-unknown"), "alice", 1, &store.RenewLeaseParams{TTL: time.Hour})
		require.ErrorIs(t, err, store.ErrLeaseNotFound)
		b.requireHeld(l, 2*time.Second)
	})

	t.Run("renew of an ended holding says how it ended", func(t *testing.T) {
		b := nlSetup(t, newStore)
		rel, force, clean := b.name("-r"), b.name("-f"), b.name("-c")
		lr := b.acquire(rel, "alice", 0, time.Minute)
		lf := b.acquire(force, "alice", 0, time.Minute)
		lc := b.acquire(clean, "bob", 0, time.Second)
		b.release(lr, time.Second)
		_, err := b.s.ForceReleaseLeases(b.ctx, "alice", &store.LeaseOpParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		cleaned, err := b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		require.Equal(t, 1, cleaned)
		for _, c := range []struct {
			l    store.NamedLease
			want error
		}{{lr, store.ErrReleased}, {lf, store.ErrForceReleased}, {lc, store.ErrExpired}} {
			_, err := b.s.RenewLease(b.ctx, c.l.Name, c.l.Owner, c.l.Fence, &store.RenewLeaseParams{TTL: time.Minute, Now: b.at(2 * time.Second)})
			require.ErrorIs(t, err, c.want, c.l.Name)
		}
	})

	t.Run("MaxRenewals: renewals up to it, then ErrMaxRenewals and nothing changes", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquireP(n, "alice", 0, &store.AcquireLeaseParams{TTL: 10 * time.Second, MaxRenewals: 2})
		l = b.renew(l, time.Second, 10*time.Second)
		l = b.renew(l, 2*time.Second, 10*time.Second)
		require.Equal(t, 2, l.Renewals)
		_, err := b.s.RenewLease(b.ctx, n, "alice", l.Fence, &store.RenewLeaseParams{TTL: 10 * time.Second, Now: b.at(3 * time.Second)})
		require.ErrorIs(t, err, store.ErrMaxRenewals)
		b.requireHeld(l, 3*time.Second) // still held until its expiry
		m := b.acquire(n, "bob", 12*time.Second, time.Minute)
		require.Equal(t, 0, m.Renewals, "a new holding starts counting afresh")
		require.Equal(t, 0, m.MaxRenewals)
		b.renew(m, 13*time.Second, time.Minute)
	})
}

func testNamedRelease(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("release ends the holding; the name is free at once", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, time.Minute)
		b.release(l, time.Second)
		got := b.get(n, 2*time.Second)
		require.Equal(t, ended(l, store.LeaseReleased, b.time(time.Second), b.time(2*time.Second)), got)
		require.False(t, got.Held())
		m := b.acquire(n, "bob", time.Second, time.Minute)
		require.Equal(t, int64(2), m.Fence)
	})

	t.Run("release twice is ErrReleased and changes nothing", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, time.Minute)
		b.release(l, time.Second)
		before := b.history(n)
		err := b.s.ReleaseLease(b.ctx, n, "alice", l.Fence, &store.LeaseOpParams{Now: b.at(2 * time.Second)})
		require.ErrorIs(t, err, store.ErrReleased)
		require.Equal(t, ended(l, store.LeaseReleased, b.time(time.Second), b.time(3*time.Second)), b.get(n, 3*time.Second))
		require.Equal(t, before, b.history(n))
	})

	t.Run("release after expiry is accepted", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, time.Second)
		b.release(l, time.Minute)
		require.Equal(t, ended(l, store.LeaseReleased, b.time(time.Minute), b.time(time.Minute)), b.get(n, time.Minute))
	})

	t.Run("release after a takeover, a force release or a cleanup is a no-op", func(t *testing.T) {
		b := nlSetup(t, newStore)
		taken, forced, cleaned := b.name("-t"), b.name("-f"), b.name("-c")
		lt := b.acquire(taken, "alice", 0, time.Second)
		newer := b.acquire(taken, "bob", time.Second, time.Minute)
		lf := b.acquire(forced, "carol", 0, time.Minute)
		_, err := b.s.ForceReleaseLeases(b.ctx, "carol", &store.LeaseOpParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		lc := b.acquire(cleaned, "alice", 0, time.Second)
		_, err = b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		histories := map[string][]store.LeaseEvent{}
		for _, n := range []string{taken, forced, cleaned} {
			histories[n] = b.history(n)
		}
		for _, l := range []store.NamedLease{lt, lf, lc} {
			b.release(l, 2*time.Second)
			require.Equal(t, histories[l.Name], b.history(l.Name), "%s: nothing recorded", l.Name)
		}
		b.requireHeld(newer, 2*time.Second)
		require.Equal(t, store.LeaseForceReleased, b.get(forced, 2*time.Second).EndReason)
		require.Equal(t, store.LeaseExpired, b.get(cleaned, 2*time.Second).EndReason)
	})

	t.Run("release by a non-holder is ErrNotHolder", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, time.Minute)
		for _, c := range []struct {
			desc, name, owner string
			fence             int64
		}{
			{"another owner", n, "mallory", l.Fence},
			{"a fence never issued", n, "alice", l.Fence + 1},
			{"an unknown name", b.name("-unknown"), "alice", 1},
		} {
			err := b.s.ReleaseLease(b.ctx, c.name, c.owner, c.fence, &store.LeaseOpParams{Now: b.at(time.Second)})
			require.ErrorIs(t, err, store.ErrNotHolder, c.desc)
		}
		b.requireHeld(l, time.Second)
	})
}

func testNamedForceRelease(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("ends every live holding of the owner, and only those", func(t *testing.T) {
		b := nlSetup(t, newStore)
		x, y, z, w := b.name("-x"), b.name("-y"), b.name("-z"), b.name("-w")
		lx := b.acquire(x, "crashed", 0, time.Minute)
		ly := b.acquire(y, "crashed", 0, time.Minute)
		lz := b.acquire(z, "healthy", 0, time.Minute)
		lw := b.acquire(w, "crashed", 0, time.Second) // expired by +10s
		got, err := b.s.ForceReleaseLeases(b.ctx, "crashed", &store.LeaseOpParams{Now: b.at(10 * time.Second)})
		require.NoError(t, err)
		at := b.time(10 * time.Second)
		require.Equal(t, []store.NamedLease{
			ended(lx, store.LeaseForceReleased, at, at), ended(ly, store.LeaseForceReleased, at, at),
		}, nlNormAll(got))
		b.requireHeld(lz, 10*time.Second)
		require.Equal(t, func() store.NamedLease { l := lw; l.AsOf = at; return l }(), b.get(w, 10*time.Second), "expired holdings are left to cleanup")
		require.Equal(t, []store.LeaseEvent{
			event(lx, store.LeaseAcquired, b.time(0), lx.ExpiresAt),
			event(lx, store.LeaseForceReleased, at, lx.ExpiresAt),
		}, b.history(x))

		again, err := b.s.ForceReleaseLeases(b.ctx, "crashed", &store.LeaseOpParams{Now: b.at(11 * time.Second)})
		require.NoError(t, err)
		require.Empty(t, again)
		m := b.acquire(x, "healthy", 11*time.Second, time.Minute)
		require.Equal(t, int64(2), m.Fence)
	})

	t.Run("with a Name and a Fence, only that holding", func(t *testing.T) {
		b := nlSetup(t, newStore)
		x, y := b.name("-x"), b.name("-y")
		lx := b.acquire(x, "stuck", 0, time.Minute)
		ly := b.acquire(y, "stuck", 0, time.Minute)
		at := b.time(time.Second)
		for _, p := range []*store.LeaseOpParams{
			{Name: x, Fence: lx.Fence + 1, Now: &at}, // a later holding: not this one
			{Name: x + "-other", Now: &at},           // not the owner's
		} {
			got, err := b.s.ForceReleaseLeases(b.ctx, "stuck", p)
			require.NoError(t, err)
			require.Empty(t, got, "%+v", p)
		}
		got, err := b.s.ForceReleaseLeases(b.ctx, "stuck", &store.LeaseOpParams{Name: x, Fence: lx.Fence, Now: &at,
			Actor: "monitor", Reason: "held too long"})
		require.NoError(t, err)
		require.Equal(t, []store.NamedLease{ended(lx, store.LeaseForceReleased, at, at)}, nlNormAll(got))
		b.requireHeld(ly, time.Second)
		require.Equal(t, why{store.LeaseForceReleased, store.LeaseReasonForceReleased, "monitor", "held too long"}, b.whyOf(x)[1])
		got, err = b.s.ForceReleaseLeases(b.ctx, "stuck", &store.LeaseOpParams{Name: y, Now: &at})
		require.NoError(t, err)
		require.Equal(t, []store.NamedLease{ended(ly, store.LeaseForceReleased, at, at)}, nlNormAll(got), "a Name alone: any fence")
	})

	t.Run("an owner with nothing gets nothing", func(t *testing.T) {
		b := nlSetup(t, newStore)
		got, err := b.s.ForceReleaseLeases(b.ctx, "nobody", nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})
}

func testNamedCleanup(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("marks expired holdings, oldest first, in bounded batches", func(t *testing.T) {
		b := nlSetup(t, newStore)
		var expired []store.NamedLease
		for i := range 3 {
			expired = append(expired, b.acquire(b.name(""), "alice", time.Duration(i)*time.Second, time.Second))
		}
		live := b.acquire(b.name("-live"), "alice", 0, time.Hour)
		edge := b.acquire(b.name("-edge"), "bob", 0, 10*time.Second) // expires at exactly +10s
		rel := b.acquire(b.name("-released"), "bob", 0, time.Second)
		b.release(rel, time.Second)

		n, err := b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Limit: 2, Now: b.at(10*time.Second - time.Microsecond)})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		at := b.time(10*time.Second - time.Microsecond)
		require.Equal(t, ended(expired[0], store.LeaseExpired, at, at), b.get(expired[0].Name, 10*time.Second-time.Microsecond))
		require.Equal(t, ended(expired[1], store.LeaseExpired, at, at), b.get(expired[1].Name, 10*time.Second-time.Microsecond))
		require.True(t, b.get(expired[2].Name, 10*time.Second-time.Microsecond).EndedAt.IsZero(), "beyond the limit")
		require.True(t, b.get(edge.Name, 10*time.Second-time.Microsecond).Held())

		n, err = b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: b.at(10 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, 2, n, "the third and the edge")
		require.Equal(t, store.LeaseExpired, b.get(edge.Name, 10*time.Second).EndReason)
		b.requireHeld(live, 10*time.Second)
		require.Equal(t, store.LeaseReleased, b.get(rel.Name, 10*time.Second).EndReason)
		require.Equal(t, []store.LeaseEvent{
			event(expired[0], store.LeaseAcquired, expired[0].AcquiredAt, expired[0].ExpiresAt),
			event(expired[0], store.LeaseExpired, expired[0].ExpiresAt, expired[0].ExpiresAt),
		}, b.history(expired[0].Name), "recorded as expired at its expiry")

		n, err = b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: b.at(time.Minute)})
		require.NoError(t, err)
		require.Zero(t, n)

		// The rows stay: the fence goes on.
		m := b.acquire(expired[0].Name, "carol", time.Minute, time.Minute)
		require.Equal(t, int64(2), m.Fence)
		require.Equal(t, []store.LeaseEvent{
			event(expired[0], store.LeaseAcquired, expired[0].AcquiredAt, expired[0].ExpiresAt),
			event(expired[0], store.LeaseExpired, expired[0].ExpiresAt, expired[0].ExpiresAt),
			event(m, store.LeaseAcquired, m.AcquiredAt, m.ExpiresAt),
		}, b.history(expired[0].Name), "no second expired record after the takeover")
	})
}

func testNamedList(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("by owner, live only, by name, with cursor and limit", func(t *testing.T) {
		b := nlSetup(t, newStore)
		prefix := b.name("")
		a1 := b.acquire(prefix+"/a1", "alice", 0, time.Hour)
		a2 := b.acquire(prefix+"/a2", "alice", time.Second, time.Hour)
		a3 := b.acquire(prefix+"/a3", "alice", 2*time.Second, time.Hour)
		b.acquire(prefix+"/a4-expired", "alice", 0, time.Second)
		rel := b.acquire(prefix+"/a5-released", "alice", 0, time.Hour)
		b.release(rel, time.Second)
		bob := b.acquire(prefix+"/b1", "bob", 0, time.Hour)
		list := func(p store.ListLeasesParams) []store.NamedLease {
			t.Helper()
			p.Now = b.at(time.Minute)
			got, err := b.s.ListLeases(b.ctx, &p)
			require.NoError(t, err)
			return nlNormAll(got)
		}
		asOf := func(ls ...store.NamedLease) []store.NamedLease {
			for i := range ls {
				ls[i].AsOf = b.time(time.Minute)
			}
			return ls
		}
		require.Equal(t, asOf(a1, a2, a3), list(store.ListLeasesParams{Owner: "alice"}))
		require.Equal(t, asOf(a1, a2, a3, bob), list(store.ListLeasesParams{}))
		require.Equal(t, asOf(a2), list(store.ListLeasesParams{Owner: "alice", AfterName: a1.Name, Limit: 1}))
		require.Equal(t, asOf(bob), list(store.ListLeasesParams{AfterName: a3.Name}))
		require.Empty(t, list(store.ListLeasesParams{Owner: "nobody"}))
	})

	t.Run("long-held: acquired at least HeldFor ago, renewals do not count", func(t *testing.T) {
		b := nlSetup(t, newStore)
		prefix := b.name("")
		old := b.acquire(prefix+"/old", "alice", 0, time.Hour)
		old = b.renew(old, 50*time.Minute, time.Hour)
		edge := b.acquire(prefix+"/edge", "bob", 10*time.Minute, time.Hour)
		b.acquire(prefix+"/young", "alice", 10*time.Minute+time.Microsecond, time.Hour)
		got, err := b.s.ListLeases(b.ctx, &store.ListLeasesParams{HeldFor: 50 * time.Minute, Now: b.at(time.Hour)})
		require.NoError(t, err)
		old.AsOf, edge.AsOf = b.time(time.Hour), b.time(time.Hour)
		require.Equal(t, []store.NamedLease{edge, old}, nlNormAll(got))
	})
}

func testNamedFencing(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("fences increase by one on every change of holder, whatever ended the last", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		at := time.Duration(0)
		var fences []int64
		step := func(owner string, end func(l store.NamedLease)) {
			l := b.acquire(n, owner, at, time.Second)
			l = b.renew(l, at+time.Millisecond, time.Second)
			fences = append(fences, l.Fence)
			end(l)
		}
		release := func(l store.NamedLease) { b.release(l, at+2*time.Millisecond); at += time.Minute }
		expire := func(store.NamedLease) { at += time.Minute }
		force := func(l store.NamedLease) {
			_, err := b.s.ForceReleaseLeases(b.ctx, l.Owner, &store.LeaseOpParams{Now: b.at(at + 2*time.Millisecond)})
			require.NoError(t, err)
			at += time.Minute
		}
		cleanup := func(store.NamedLease) {
			at += time.Minute
			_, err := b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: b.at(at)})
			require.NoError(t, err)
		}
		step("alice", release)
		step("alice", expire)
		step("bob", force)
		step("alice", cleanup)
		step("bob", release)
		step("bob", expire)
		require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, fences)
	})

	t.Run("CheckLeaseFence says whether a fence still holds, and why not", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n, rel, forced := b.name(""), b.name("-r"), b.name("-f")
		check := func(name string, fence int64, at time.Duration) error {
			return b.s.CheckLeaseFence(b.ctx, name, fence, &store.LeaseOpParams{Now: b.at(at)})
		}
		requireStale := func(err error, name string, fence, current int64, reason string) {
			t.Helper()
			require.ErrorIs(t, err, store.ErrStaleFence)
			var fe *store.FenceError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, store.FenceError{Name: name, Fence: fence, Current: current, Reason: reason}, *fe)
		}
		l := b.acquire(n, "alice", 0, 10*time.Second)
		require.NoError(t, check(n, 1, 0))
		l = b.renew(l, 5*time.Second, 10*time.Second)
		require.NoError(t, check(n, 1, 15*time.Second-time.Microsecond), "renewals keep the fence")
		requireStale(check(n, 1, 15*time.Second), n, 1, 1, "expired")
		requireStale(check(n, 2, 0), n, 2, 1, "never issued")
		b.acquire(n, "bob", 15*time.Second, time.Minute)
		requireStale(check(n, 1, 16*time.Second), n, 1, 2, "superseded")
		require.NoError(t, check(n, 2, 16*time.Second))
		none := b.name("-none")
		requireStale(check(none, 1, 0), none, 1, 0, "not found")

		b.release(b.acquire(rel, "alice", 0, time.Minute), time.Second)
		requireStale(check(rel, 1, 2*time.Second), rel, 1, 1, "released")
		b.acquire(forced, "carol", 0, time.Minute)
		_, err := b.s.ForceReleaseLeases(b.ctx, "carol", &store.LeaseOpParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		requireStale(check(forced, 1, 2*time.Second), forced, 1, 1, "force-released")
		_ = l
	})
}

func testNamedHistory(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("records every event in order, with the backend's times", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n, other := b.name(""), b.name("-other")
		l := b.acquire(n, "alice", 0, 10*time.Second)
		r := b.renew(l, time.Second, 10*time.Second)
		b.release(r, 2*time.Second)
		m := b.acquire(n, "bob", 3*time.Second, time.Second)
		o := b.acquire(other, "bob", 3*time.Second, time.Minute)
		_, err := b.s.ForceReleaseLeases(b.ctx, "bob", &store.LeaseOpParams{Now: b.at(3*time.Second + time.Millisecond)})
		require.NoError(t, err)
		want := []store.LeaseEvent{
			event(l, store.LeaseAcquired, b.time(0), l.ExpiresAt),
			event(l, store.LeaseRenewed, b.time(time.Second), r.ExpiresAt),
			event(l, store.LeaseReleased, b.time(2*time.Second), r.ExpiresAt),
			event(m, store.LeaseAcquired, b.time(3*time.Second), m.ExpiresAt),
			event(m, store.LeaseForceReleased, b.time(3*time.Second+time.Millisecond), m.ExpiresAt),
		}
		require.Equal(t, want, b.history(n))
		all := b.history("")
		require.Len(t, all, 7)
		require.Equal(t, event(o, store.LeaseAcquired, b.time(3*time.Second), o.ExpiresAt), all[4])
	})

	t.Run("NoHistory records nothing", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l, err := b.s.AcquireLease(b.ctx, n, "alice", &store.AcquireLeaseParams{TTL: time.Second, NoHistory: true, Now: b.at(0)})
		require.NoError(t, err)
		_, err = b.s.RenewLease(b.ctx, n, "alice", l.Fence, &store.RenewLeaseParams{TTL: time.Second, NoHistory: true, Now: b.at(0)})
		require.NoError(t, err)
		require.NoError(t, b.s.ReleaseLease(b.ctx, n, "alice", l.Fence, &store.LeaseOpParams{NoHistory: true, Now: b.at(0)}))
		l, err = b.s.AcquireLease(b.ctx, n, "alice", &store.AcquireLeaseParams{TTL: time.Second, NoHistory: true, Now: b.at(0)})
		require.NoError(t, err)
		_, err = b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{NoHistory: true, Now: b.at(time.Minute)})
		require.NoError(t, err)
		require.Empty(t, b.history(""))
		require.Equal(t, int64(2), l.Fence)
	})

	t.Run("retention deletes events before a time, oldest first, in batches", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, time.Hour)
		for i := 1; i <= 4; i++ {
			l = b.renew(l, time.Duration(i)*time.Minute, time.Hour)
		}
		// Events at +0, +1m, +2m, +3m, +4m. Delete those before +3m, two at a time.
		deleted, err := b.s.TrimLeaseHistory(b.ctx, b.time(3*time.Minute), 2)
		require.NoError(t, err)
		require.Equal(t, int64(2), deleted)
		h := b.history(n)
		require.Len(t, h, 3)
		requireTime(t, b.time(2*time.Minute), h[0].At, "oldest first")
		deleted, err = b.s.TrimLeaseHistory(b.ctx, b.time(3*time.Minute), 0)
		require.NoError(t, err)
		require.Equal(t, int64(1), deleted)
		deleted, err = b.s.TrimLeaseHistory(b.ctx, b.time(3*time.Minute), 0)
		require.NoError(t, err)
		require.Zero(t, deleted)
		h = b.history(n)
		require.Len(t, h, 2)
		requireTime(t, b.time(3*time.Minute), h[0].At, "an event at exactly the bound stays")
	})

	t.Run("retention goes by the events' times, an expiry recorded late included", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n, other := b.name(""), b.name("-other")
		b.acquire(n, "alice", 0, time.Second)
		o := b.acquire(other, "bob", 10*time.Second, time.Hour)
		cleaned, err := b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: b.at(20 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, 1, cleaned)
		// Recorded in this order: n acquired (+0), other acquired (+10s), n
		// expired (at its expiry, +1s).
		deleted, err := b.s.TrimLeaseHistory(b.ctx, b.time(5*time.Second), 0)
		require.NoError(t, err)
		require.Equal(t, int64(2), deleted)
		require.Empty(t, b.history(n))
		require.Equal(t, []store.LeaseEvent{event(o, store.LeaseAcquired, b.time(10*time.Second), o.ExpiresAt)}, b.history(other))
	})

	t.Run("paging by ID", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		l := b.acquire(n, "alice", 0, time.Hour)
		for i := 1; i <= 4; i++ {
			l = b.renew(l, time.Duration(i)*time.Second, time.Hour)
		}
		first, err := b.s.LeaseHistory(b.ctx, n, &store.LeaseHistoryParams{Limit: 2})
		require.NoError(t, err)
		require.Len(t, first, 2)
		rest, err := b.s.LeaseHistory(b.ctx, n, &store.LeaseHistoryParams{AfterID: first[1].ID})
		require.NoError(t, err)
		require.Len(t, rest, 3)
		require.Equal(t, store.LeaseRenewed, rest[0].Kind)
		requireTime(t, b.time(2*time.Second), rest[0].At)
	})

	t.Run("newest first, paging backwards by ID", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n, other := b.name(""), b.name("-other")
		l := b.acquire(n, "alice", 0, time.Hour)
		b.acquire(other, "bob", 0, time.Hour)
		for i := 1; i <= 4; i++ {
			l = b.renew(l, time.Duration(i)*time.Second, time.Hour)
		}
		all, err := b.s.LeaseHistory(b.ctx, n, nil) // oldest first: acquired, renewed x4
		require.NoError(t, err)
		require.Len(t, all, 5)
		ids := func(es []store.LeaseEvent) []int64 {
			var out []int64
			for _, e := range es {
				out = append(out, e.ID)
			}
			return out
		}
		page, err := b.s.LeaseHistory(b.ctx, n, &store.LeaseHistoryParams{Newest: true, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []int64{all[4].ID, all[3].ID}, ids(page), "the latest events, newest first")
		page, err = b.s.LeaseHistory(b.ctx, n, &store.LeaseHistoryParams{Newest: true, BeforeID: all[3].ID, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []int64{all[2].ID, all[1].ID}, ids(page))
		page, err = b.s.LeaseHistory(b.ctx, n, &store.LeaseHistoryParams{Newest: true, BeforeID: all[1].ID, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []int64{all[0].ID}, ids(page), "the oldest, alone on the last page")
		page, err = b.s.LeaseHistory(b.ctx, n, &store.LeaseHistoryParams{Newest: true, BeforeID: all[0].ID})
		require.NoError(t, err)
		require.Empty(t, page)

		// Both bounds, either order; every name.
		page, err = b.s.LeaseHistory(b.ctx, n, &store.LeaseHistoryParams{AfterID: all[0].ID, BeforeID: all[3].ID})
		require.NoError(t, err)
		require.Equal(t, []int64{all[1].ID, all[2].ID}, ids(page))
		page, err = b.s.LeaseHistory(b.ctx, n, &store.LeaseHistoryParams{AfterID: all[0].ID, BeforeID: all[3].ID, Newest: true})
		require.NoError(t, err)
		require.Equal(t, []int64{all[2].ID, all[1].ID}, ids(page))
		every, err := b.s.LeaseHistory(b.ctx, "", &store.LeaseHistoryParams{Newest: true, Limit: store.MaxListLimit})
		require.NoError(t, err)
		require.Len(t, every, 6)
		require.Equal(t, all[4].ID, every[0].ID)
		for i := 1; i < len(every); i++ {
			require.Greater(t, every[i-1].ID, every[i].ID, "descending IDs")
		}

		_, err = b.s.LeaseHistory(b.ctx, n, &store.LeaseHistoryParams{BeforeID: -1})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
	})
}
