package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// watch runs WatchLeases on a sink of its own until the test ends, and
// returns the sink once the watch listens.
func (b *nlBundle) watch() *leaseNotices {
	b.t.Helper()
	sink := newLeaseNotices()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- b.s.WatchLeases(ctx, sink) }()
	b.t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Equal(b.t, "reset", sink.next(b.t))
	return sink
}

// noticesSoFar returns, in order, the notices sink got before a sentinel
// announcement made now: every notice of a call that returned before.
func (b *nlBundle) noticesSoFar(sink *leaseNotices) []string {
	b.t.Helper()
	n := b.name("-sentinel")
	require.NoError(b.t, b.s.AnnounceLeaseWaiter(b.ctx, store.LeaseWaiter{Name: n, Waiter: "sentinel"}))
	var out []string
	for {
		msg := sink.next(b.t)
		if strings.HasPrefix(msg, "wanted "+n+" ") {
			return out
		}
		out = append(out, msg)
	}
}

// requireHeldBy checks that err is the *store.HeldError of l seen at now.
func requireHeldBy(t *testing.T, l store.NamedLease, now time.Time, err error) {
	t.Helper()
	var he *store.HeldError
	require.ErrorAs(t, err, &he)
	require.Equal(t, store.HeldError{Name: l.Name, Owner: l.Owner, Fence: l.Fence, ExpiresAt: l.ExpiresAt, AsOf: now},
		store.HeldError{Name: he.Name, Owner: he.Owner, Fence: he.Fence, ExpiresAt: normTime(he.ExpiresAt), AsOf: normTime(he.AsOf)})
}

func testNamedWanted(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("a waiting acquire marks the name: a release within Wait is reported, later ones not", func(t *testing.T) {
		b := nlSetup(t, newStore)
		sink := b.watch()
		const wait = 10 * time.Second
		held := func(suffix string) store.NamedLease { return b.acquire(b.name(suffix), "alice", 0, time.Hour) }
		ask := func(l store.NamedLease, at, wait time.Duration) {
			t.Helper()
			_, err := b.s.AcquireLease(b.ctx, l.Name, "bob", &store.AcquireLeaseParams{TTL: time.Minute, Wait: wait, Now: b.at(at)})
			requireHeldBy(t, l, b.time(at), err)
		}
		within := held("-within") // marked until +20s at least +10s
		ask(within, 0, wait)
		b.release(within, 9*time.Second)
		late := held("-late") // marked until +20s: never longer than 2×Wait
		ask(late, 0, wait)
		b.release(late, 21*time.Second)
		renewed := held("-renewed") // the mark would run out within Wait of +15s: renewed
		ask(renewed, 0, wait)
		ask(renewed, 15*time.Second, wait)
		b.release(renewed, 30*time.Second)
		kept := held("-kept") // the mark lasts past +5s + Wait: kept as it was (until +20s)
		ask(kept, 0, wait)
		ask(kept, 5*time.Second, wait)
		b.release(kept, 21*time.Second)
		tried := held("-tried") // a try-acquire marks nothing
		ask(tried, 0, 0)
		b.release(tried, time.Second)
		require.Equal(t, []string{"freed " + within.Name, "freed " + renewed.Name}, b.noticesSoFar(sink))

		for _, l := range []store.NamedLease{within, late, renewed, kept, tried} {
			require.Equal(t, []store.LeaseEvent{
				event(l, store.LeaseAcquired, b.time(0), l.ExpiresAt),
				event(l, store.LeaseReleased, b.get(l.Name, time.Minute).EndedAt, l.ExpiresAt),
			}, b.history(l.Name), "%s: marks are not events", l.Name)
		}
	})

	t.Run("the mark is the name's: it outlives the holding it was made on", func(t *testing.T) {
		b := nlSetup(t, newStore)
		sink := b.watch()
		n := b.name("")
		l := b.acquire(n, "alice", 0, time.Hour)
		_, err := b.s.AcquireLease(b.ctx, n, "bob", &store.AcquireLeaseParams{TTL: time.Minute, Wait: 10 * time.Second, Now: b.at(0)})
		require.ErrorIs(t, err, store.ErrHeld)
		b.release(l, time.Second)
		m := b.acquire(n, "carol", 2*time.Second, time.Hour)
		b.release(m, 3*time.Second)
		require.Equal(t, []string{"freed " + n, "freed " + n}, b.noticesSoFar(sink))
	})

	t.Run("a waiter marking as the holder releases gets the name or hears of the release", func(t *testing.T) {
		// The lost wake-up race: the waiter finds the name held, the
		// holder releases, then the waiter's mark would land on a name
		// nobody holds, and the waiter would sleep. Many pairs race on
		// the backend's own clock until both outcomes were seen.
		b := nlSetup(t, newStore)
		sink := b.watch()
		const pairs = 32
		var gotIt, heard int
		for round := 0; round < 50 && (gotIt == 0 || heard == 0); round++ {
			ls := make([]store.NamedLease, pairs)
			for i := range ls {
				var err error
				ls[i], err = b.s.AcquireLease(b.ctx, b.name(fmt.Sprint("-", i)), "holder", &store.AcquireLeaseParams{TTL: time.Hour})
				require.NoError(t, err)
			}
			released := make([]error, pairs)
			waited := make([]error, pairs)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, l := range ls {
				wg.Go(func() {
					<-start
					released[i] = b.s.ReleaseLease(b.ctx, l.Name, l.Owner, l.Fence, nil)
				})
				wg.Go(func() {
					<-start
					_, waited[i] = b.s.AcquireLease(b.ctx, l.Name, "waiter", &store.AcquireLeaseParams{TTL: time.Hour, Wait: time.Minute})
				})
			}
			close(start)
			wg.Wait()
			freed := map[string]bool{}
			for _, msg := range b.noticesSoFar(sink) {
				freed[strings.TrimPrefix(msg, "freed ")] = true
			}
			for i, l := range ls {
				require.NoError(t, released[i])
				if waited[i] == nil {
					gotIt++
					continue
				}
				var he *store.HeldError
				require.ErrorAs(t, waited[i], &he)
				require.Equal(t, []any{"holder", l.Fence}, []any{he.Owner, he.Fence})
				require.True(t, freed[l.Name], "%s: the waiter found it held, and its release was not reported: a lost wake-up", l.Name)
				heard++
			}
		}
		t.Logf("%d waiters got the name, %d heard of its release", gotIt, heard)
		require.Positive(t, gotIt)
		require.Positive(t, heard)
	})
}

func testNamedBatch(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("acquires: each as AcquireLease would, a name twice in order, bad input alone", func(t *testing.T) {
		b := nlSetup(t, newStore)
		free, held, expired, released, twice := b.name("-free"), b.name("-held"), b.name("-expired"), b.name("-released"), b.name("-twice")
		lh := b.acquire(held, "alice", 0, time.Hour)
		le := b.acquire(expired, "alice", 0, time.Second)
		lr := b.acquire(released, "alice", 0, time.Hour)
		b.release(lr, time.Second)
		at := 10 * time.Second
		now := b.time(at)
		res := b.s.AcquireLeases(b.ctx, []store.AcquireLeaseRequest{
			{Name: free, Owner: "bob", TTL: time.Minute, MaxRenewals: 2},
			{Name: held, Owner: "bob", TTL: time.Minute},
			{Name: "", Owner: "bob", TTL: time.Minute},
			{Name: expired, Owner: "bob", TTL: 2 * time.Minute},
			{Name: twice, Owner: "bob", TTL: time.Minute},
			{Name: released, Owner: "bob", TTL: time.Minute},
			{Name: twice, Owner: "carol", TTL: time.Minute},
			{Name: b.name("-bad-ttl"), Owner: "bob"},
		}, &store.LeaseBatchParams{Now: b.at(at)})
		require.Len(t, res, 8)
		grant := func(name, owner string, fence int64, ttl time.Duration, maxRenewals int) store.NamedLease {
			return store.NamedLease{Name: name, Owner: owner, Fence: fence, AcquiredAt: now, RenewedAt: now,
				ExpiresAt: now.Add(ttl), MaxRenewals: maxRenewals, AsOf: now}
		}
		for i, want := range map[int]store.NamedLease{
			0: grant(free, "bob", 1, time.Minute, 2),
			3: grant(expired, "bob", 2, 2*time.Minute, 0),
			4: grant(twice, "bob", 1, time.Minute, 0),
			5: grant(released, "bob", 2, time.Minute, 0),
		} {
			require.NoError(t, res[i].Err, "item %d", i)
			require.Equal(t, want, nlNorm(res[i].Lease), "item %d", i)
			b.requireHeld(want, at)
		}
		requireHeldBy(t, lh, now, res[1].Err)
		require.ErrorIs(t, res[2].Err, store.ErrInvalidLeaseName)
		require.True(t, store.IsInvalid(res[2].Err))
		requireHeldBy(t, nlNorm(res[4].Lease), now, res[6].Err)
		require.ErrorIs(t, res[7].Err, store.ErrInvalidTTL)
		_, err := b.s.GetLease(b.ctx, b.name("-bad-ttl"), nil)
		require.ErrorIs(t, err, store.ErrLeaseNotFound)

		b.requireHeld(lh, at)
		require.Equal(t, []store.LeaseEvent{
			event(le, store.LeaseAcquired, b.time(0), le.ExpiresAt),
			event(le, store.LeaseExpired, le.ExpiresAt, le.ExpiresAt),
			event(res[3].Lease, store.LeaseAcquired, now, res[3].Lease.ExpiresAt),
		}, b.history(expired))
		require.Equal(t, []store.LeaseEvent{event(res[4].Lease, store.LeaseAcquired, now, res[4].Lease.ExpiresAt)}, b.history(twice))
	})

	t.Run("releases: each as ReleaseLease would, a holding twice in order, bad input alone", func(t *testing.T) {
		b := nlSetup(t, newStore)
		sink := b.watch()
		l1 := b.acquire(b.name("-1"), "alice", 0, time.Hour)
		l2 := b.acquire(b.name("-2"), "alice", 0, time.Hour)
		done := b.acquire(b.name("-done"), "alice", 0, time.Hour)
		b.release(done, time.Second)
		old := b.acquire(b.name("-old"), "alice", 0, time.Second)
		newer := b.acquire(old.Name, "bob", time.Second, time.Hour)
		wanted := b.acquire(b.name("-wanted"), "alice", 0, time.Hour)
		_, err := b.s.AcquireLease(b.ctx, wanted.Name, "bob", &store.AcquireLeaseParams{TTL: time.Minute, Wait: time.Minute, Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrHeld)
		before := map[string][]store.LeaseEvent{}
		for _, n := range []string{done.Name, old.Name} {
			before[n] = b.history(n)
		}

		at := 2 * time.Second
		errs := b.s.ReleaseLeases(b.ctx, []store.LeaseHolding{
			{Name: l1.Name, Owner: "alice", Fence: l1.Fence},
			{Name: l2.Name, Owner: "mallory", Fence: l2.Fence},
			{Name: done.Name, Owner: "alice", Fence: done.Fence},
			{Name: old.Name, Owner: "alice", Fence: old.Fence},
			{Name: l1.Name, Owner: "alice", Fence: l1.Fence},
			{Name: b.name("-unknown"), Owner: "alice", Fence: 1},
			{Name: l2.Name, Owner: "alice", Fence: 0},
			{Name: wanted.Name, Owner: "alice", Fence: wanted.Fence},
			{Name: l2.Name, Owner: "alice", Fence: l2.Fence},
		}, &store.LeaseBatchParams{Now: b.at(at)})
		require.Len(t, errs, 9)
		for _, i := range []int{0, 3, 7, 8} {
			require.NoError(t, errs[i], "item %d", i)
		}
		require.ErrorIs(t, errs[1], store.ErrNotHolder)
		require.ErrorIs(t, errs[2], store.ErrReleased)
		require.ErrorIs(t, errs[4], store.ErrReleased)
		require.ErrorIs(t, errs[5], store.ErrNotHolder)
		require.ErrorIs(t, errs[6], store.ErrInvalidFence)
		require.True(t, store.IsInvalid(errs[6]))

		end := b.time(at)
		for _, l := range []store.NamedLease{l1, l2, wanted} {
			require.Equal(t, ended(l, store.LeaseReleased, end, end), b.get(l.Name, at))
			require.Equal(t, []store.LeaseEvent{
				event(l, store.LeaseAcquired, b.time(0), l.ExpiresAt),
				event(l, store.LeaseReleased, end, l.ExpiresAt),
			}, b.history(l.Name))
		}
		b.requireHeld(newer, at)
		for n, h := range before {
			require.Equal(t, h, b.history(n), "%s: nothing recorded", n)
		}
		require.Equal(t, []string{"freed " + wanted.Name}, b.noticesSoFar(sink), "only the wanted name is reported")
	})

	t.Run("many items take several statements", func(t *testing.T) {
		b := nlSetup(t, newStore)
		const n = 250
		reqs := make([]store.AcquireLeaseRequest, n)
		for i := range reqs {
			reqs[i] = store.AcquireLeaseRequest{Name: b.name(fmt.Sprint("-", i)), Owner: "alice", TTL: time.Hour}
		}
		res := b.s.AcquireLeases(b.ctx, reqs, &store.LeaseBatchParams{Now: b.at(0)})
		holdings := make([]store.LeaseHolding, n)
		for i, r := range res {
			require.NoError(t, r.Err)
			require.Equal(t, reqs[i].Name, r.Lease.Name)
			require.Equal(t, int64(1), r.Lease.Fence)
			holdings[i] = store.LeaseHolding{Name: r.Lease.Name, Owner: "alice", Fence: 1}
		}
		for _, err := range b.s.ReleaseLeases(b.ctx, holdings, &store.LeaseBatchParams{Now: b.at(time.Second)}) {
			require.NoError(t, err)
		}
		live, err := b.s.ListLeases(b.ctx, &store.ListLeasesParams{Owner: "alice", Now: b.at(time.Second)})
		require.NoError(t, err)
		require.Empty(t, live)
		require.Len(t, b.history(""), 2*n)
	})

	t.Run("names of any text travel intact", func(t *testing.T) {
		b := nlSetup(t, newStore)
		base := b.name("")
		var reqs []store.AcquireLeaseRequest
		for _, n := range []string{`a"b`, `c\d`, `{e,f}`, `g'h`, "NULL", " spaced ", "ünïcødé 🔒", `\"}{,`} {
			reqs = append(reqs, store.AcquireLeaseRequest{Name: base + n, Owner: `own"er\{,}` + n, TTL: time.Hour})
		}
		res := b.s.AcquireLeases(b.ctx, reqs, &store.LeaseBatchParams{Now: b.at(0)})
		holdings := make([]store.LeaseHolding, len(reqs))
		for i, r := range res {
			require.NoError(t, r.Err, reqs[i].Name)
			require.Equal(t, []string{reqs[i].Name, reqs[i].Owner}, []string{r.Lease.Name, r.Lease.Owner})
			b.requireHeld(nlNorm(r.Lease), 0)
			holdings[i] = store.LeaseHolding{Name: reqs[i].Name, Owner: reqs[i].Owner, Fence: r.Lease.Fence}
		}
		for i, err := range b.s.ReleaseLeases(b.ctx, holdings, &store.LeaseBatchParams{Now: b.at(time.Second)}) {
			require.NoError(t, err, reqs[i].Name)
			require.Equal(t, store.LeaseReleased, b.get(reqs[i].Name, time.Second).EndReason)
		}
	})

	t.Run("NoHistory records nothing; an empty batch does nothing", func(t *testing.T) {
		b := nlSetup(t, newStore)
		n := b.name("")
		res := b.s.AcquireLeases(b.ctx, []store.AcquireLeaseRequest{{Name: n, Owner: "alice", TTL: time.Hour}},
			&store.LeaseBatchParams{NoHistory: true, Now: b.at(0)})
		require.NoError(t, res[0].Err)
		errs := b.s.ReleaseLeases(b.ctx, []store.LeaseHolding{{Name: n, Owner: "alice", Fence: 1}},
			&store.LeaseBatchParams{NoHistory: true, Now: b.at(time.Second)})
		require.NoError(t, errs[0])
		require.Equal(t, store.LeaseReleased, b.get(n, time.Second).EndReason)
		require.Empty(t, b.history(n))
		require.Empty(t, b.s.AcquireLeases(b.ctx, nil, nil))
		require.Empty(t, b.s.ReleaseLeases(b.ctx, nil, nil))
	})

	t.Run("a cancelled context fails every item and changes nothing", func(t *testing.T) {
		b := nlSetup(t, newStore)
		l := b.acquire(b.name("-held"), "alice", 0, time.Hour)
		fresh := b.name("-fresh")
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		for _, r := range b.s.AcquireLeases(ctx, []store.AcquireLeaseRequest{
			{Name: fresh, Owner: "bob", TTL: time.Minute}, {Name: l.Name, Owner: "bob", TTL: time.Minute, Wait: time.Minute},
		}, nil) {
			require.ErrorIs(t, r.Err, context.Canceled)
		}
		for _, err := range b.s.ReleaseLeases(ctx, []store.LeaseHolding{{Name: l.Name, Owner: "alice", Fence: l.Fence}}, nil) {
			require.ErrorIs(t, err, context.Canceled)
		}
		_, err := b.s.GetLease(b.ctx, fresh, nil)
		require.ErrorIs(t, err, store.ErrLeaseNotFound)
		b.requireHeld(l, 0)
	})
}
