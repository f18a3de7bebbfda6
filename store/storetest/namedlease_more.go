package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// leaseNotices is a store.LeaseSink that records what it hears.
type leaseNotices struct {
	mu     sync.Mutex
	msgs   []string
	read   int
	signal chan struct{} // capacity 1: something was added
}

func newLeaseNotices() *leaseNotices { return &leaseNotices{signal: make(chan struct{}, 1)} }

func (r *leaseNotices) add(msg string) {
	r.mu.Lock()
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *leaseNotices) Freed(name string) { r.add("freed " + name) }
func (r *leaseNotices) Reset()            { r.add("reset") }
func (r *leaseNotices) Wanted(w store.LeaseWaiter) {
	since := "withdrawn"
	if !w.Since.IsZero() {
		since = w.Since.UTC().Format(time.RFC3339Nano)
	}
	r.add(fmt.Sprintf("wanted %s by %s since %s after fence %d", w.Name, w.Waiter, since, w.Fence))
}

// next returns the next notice, failing t if none comes within 10 s.
func (r *leaseNotices) next(t *testing.T) string {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		if r.read < len(r.msgs) {
			msg := r.msgs[r.read]
			r.read++
			r.mu.Unlock()
			return msg
		}
		r.mu.Unlock()
		select {
		case <-r.signal:
		case <-timeout.C:
			t.Fatal("no notice within 10s")
		}
	}
}

func testNamedWatch(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("ends of holdings and waiters are reported; acquisitions, renewals and unwanted releases not", func(t *testing.T) {
		b := nlSetup(t, newStore)
		sink := newLeaseNotices()
		ctx, cancel := context.WithCancel(b.ctx)
		done := make(chan error, 1)
		go func() { done <- b.s.WatchLeases(ctx, sink) }()
		defer func() {
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
		}()
		require.Equal(t, "reset", sink.next(t))

		// Nobody waits for n1: its release sends no notice (the next one
		// is the announcement below).
		n1 := b.name("-1")
		l := b.acquire(n1, "alice", 0, time.Minute)
		l = b.renew(l, time.Second, time.Minute)
		b.release(l, 2*time.Second)

		since := b.time(1500 * time.Millisecond)
		require.NoError(t, b.s.AnnounceLeaseWaiter(b.ctx, store.LeaseWaiter{Name: n1, Waiter: "bob", Since: since, Fence: 1}))
		require.Equal(t, "wanted "+n1+" by bob since "+since.UTC().Format(time.RFC3339Nano)+" after fence 1", sink.next(t))
		require.NoError(t, b.s.AnnounceLeaseWaiter(b.ctx, store.LeaseWaiter{Name: n1, Waiter: "bob"}))
		require.Equal(t, "wanted "+n1+" by bob since withdrawn after fence 0", sink.next(t))

		// A waiter marks n2 wanted: its release is reported.
		n2 := b.name("-2")
		l = b.acquire(n2, "alice", 0, time.Minute)
		_, err := b.s.AcquireLease(b.ctx, n2, "bob", &store.AcquireLeaseParams{TTL: time.Minute, Wait: time.Minute, Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrHeld)
		b.release(l, 2*time.Second)
		require.Equal(t, "freed "+n2, sink.next(t))

		n3, n4 := b.name("-3"), b.name("-4")
		b.acquire(n3, "carol", 0, time.Minute)
		b.acquire(n4, "carol", 0, time.Minute)
		_, err = b.s.ForceReleaseLeases(b.ctx, "carol", &store.LeaseOpParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		got := []string{sink.next(t), sink.next(t)}
		slices.Sort(got)
		require.Equal(t, []string{"freed " + n3, "freed " + n4}, got)

		n5 := b.name("-5")
		b.acquire(n5, "dave", 0, time.Second)
		cleaned, err := b.s.CleanupExpiredLeases(b.ctx, &store.CleanupLeasesParams{Now: b.at(time.Minute)})
		require.NoError(t, err)
		require.Equal(t, 1, cleaned)
		require.Equal(t, "freed "+n5, sink.next(t))
	})
}

func testNamedConcurrency(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("racing acquirers: one holder at a time, fences dense per name", func(t *testing.T) {
		// I8 at the store: 16 goroutines race for 3 names at one pinned
		// instant. Each winner marks the name as its own in process memory
		// (which must be free), renews, unmarks and releases.
		b := nlSetup(t, newStore)
		names := []string{b.name("-a"), b.name("-b"), b.name("-c")}
		const workers, rounds = 16, 40
		var mu sync.Mutex
		holder := map[string]int{}
		fences := map[string][]int64{}
		held := 0
		errs := make([]error, workers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range workers {
			owner := fmt.Sprintf("w%d", w)
			wg.Go(func() {
				<-start
				errs[w] = func() error {
					for r := range rounds {
						name := names[(w+r)%len(names)]
						l, err := b.s.AcquireLease(b.ctx, name, owner, &store.AcquireLeaseParams{TTL: time.Hour, Now: b.at(0)})
						if errors.Is(err, store.ErrHeld) {
							mu.Lock()
							held++
							mu.Unlock()
							continue
						}
						if err != nil {
							return fmt.Errorf("%s: acquire %s: %w", owner, name, err)
						}
						mu.Lock()
						if other, busy := holder[name]; busy {
							mu.Unlock()
							return fmt.Errorf("%s: acquired %s (fence %d) while worker %d held it", owner, name, l.Fence, other)
						}
						holder[name] = w
						fences[name] = append(fences[name], l.Fence)
						mu.Unlock()
						if _, err := b.s.RenewLease(b.ctx, name, owner, l.Fence, &store.RenewLeaseParams{TTL: time.Hour, Now: b.at(0)}); err != nil {
							return fmt.Errorf("%s: renew %s: %w", owner, name, err)
						}
						mu.Lock()
						delete(holder, name)
						mu.Unlock()
						if err := b.s.ReleaseLease(b.ctx, name, owner, l.Fence, &store.LeaseOpParams{Now: b.at(0)}); err != nil {
							return fmt.Errorf("%s: release %s: %w", owner, name, err)
						}
					}
					return nil
				}()
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		total := 0
		for _, name := range names {
			fs := fences[name]
			slices.Sort(fs)
			require.Equal(t, span(1, int64(len(fs))), fs, "%s: every fence once, none skipped", name)
			total += len(fs)
			if len(fs) > 0 {
				require.Equal(t, int64(len(fs)), b.get(name, 0).Fence)
			}
		}
		require.Positive(t, total)
		t.Logf("%d holdings, %d refusals (held)", total, held)
	})

	t.Run("a renewal and a takeover racing at the expiry: exactly one wins", func(t *testing.T) {
		b := nlSetup(t, newStore)
		const pairs = 20
		var wg sync.WaitGroup
		renewed := make([]error, pairs)
		taken := make([]error, pairs)
		ls := make([]store.NamedLease, pairs)
		for i := range ls {
			ls[i] = b.acquire(b.name(fmt.Sprint("-", i)), "holder", 0, 10*time.Second)
		}
		start := make(chan struct{})
		for i, l := range ls {
			wg.Go(func() {
				<-start
				_, renewed[i] = b.s.RenewLease(b.ctx, l.Name, l.Owner, l.Fence, &store.RenewLeaseParams{TTL: 10 * time.Second, Now: b.at(10*time.Second - time.Microsecond)})
			})
			wg.Go(func() {
				<-start
				_, taken[i] = b.s.AcquireLease(b.ctx, l.Name, "taker", &store.AcquireLeaseParams{TTL: 10 * time.Second, Now: b.at(10 * time.Second)})
			})
		}
		close(start)
		wg.Wait()
		for i := range ls {
			if renewed[i] == nil {
				require.ErrorIs(t, taken[i], store.ErrHeld, "pair %d", i)
				require.Equal(t, "holder", b.get(ls[i].Name, 10*time.Second).Owner)
			} else {
				require.ErrorIs(t, renewed[i], store.ErrNotHolder, "pair %d", i)
				require.NoError(t, taken[i], "pair %d", i)
				require.Equal(t, int64(2), b.get(ls[i].Name, 10*time.Second).Fence)
			}
		}
	})
}

// nlFixture is the state every bad-input case runs against: each call would
// succeed but for its one bad argument, or is one of the refusals.
type nlFixture struct {
	live     store.NamedLease // alice, fence 1, an hour
	maxed    store.NamedLease // alice, renewed up to its MaxRenewals
	released store.NamedLease // alice's, released
	expired  store.NamedLease // alice's, expired at now, not marked
	fresh    string           // never acquired
	now      *time.Time
}

type nlCase struct {
	name string
	want error // the sentinel
	// invalid says the error must also match store.ErrInvalidArgument.
	invalid bool
	call    func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error
}

type nlSnapshot struct {
	leases  []store.NamedLease
	live    []store.NamedLease
	history []store.LeaseEvent
}

func (b *nlBundle) nlSnapshot(f *nlFixture) nlSnapshot {
	b.t.Helper()
	var snap nlSnapshot
	for _, l := range []store.NamedLease{f.live, f.maxed, f.released, f.expired} {
		got, err := b.s.GetLease(b.ctx, l.Name, &store.LeaseOpParams{Now: f.now})
		require.NoError(b.t, err)
		snap.leases = append(snap.leases, nlNorm(got))
	}
	live, err := b.s.ListLeases(b.ctx, &store.ListLeasesParams{Now: f.now})
	require.NoError(b.t, err)
	snap.live = nlNormAll(live)
	snap.history = b.history("")
	_, err = b.s.GetLease(b.ctx, f.fresh, nil)
	require.ErrorIs(b.t, err, store.ErrLeaseNotFound, "the fresh name was created")
	return snap
}

func testNamedBadInput(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	b := nlNewBundle(t, newStore)
	f := nlFixture{now: b.at(time.Minute), fresh: b.name("-fresh")}
	f.live = b.acquire(b.name("-live"), "alice", 0, time.Hour)
	f.maxed = b.acquireP(b.name("-maxed"), "alice", 0, &store.AcquireLeaseParams{TTL: time.Hour, MaxRenewals: 1})
	f.maxed = b.renew(f.maxed, time.Second, time.Hour)
	f.released = b.acquire(b.name("-released"), "alice", 0, time.Hour)
	b.release(f.released, time.Second)
	f.expired = b.acquire(b.name("-expired"), "alice", 0, time.Minute)

	for _, c := range nlCases() {
		t.Run(c.name, func(t *testing.T) {
			cb := *b
			cb.t, cb.ctx = t, t.Context()
			before := cb.nlSnapshot(&f)
			ctx := cb.ctx
			if c.want == context.Canceled {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			err := c.call(ctx, cb.s, &f)
			require.ErrorIs(t, err, c.want)
			require.Equal(t, c.invalid, store.IsInvalid(err), "matches ErrInvalidArgument: %v", err)
			if c.want == context.Canceled {
				require.ErrorIs(t, err, store.ErrNotSent, "a call whose context had ended is not sent")
			}
			require.Equal(t, before, cb.nlSnapshot(&f), "the refused call changed something")
		})
	}

	t.Run("control: the same calls with good arguments succeed", func(t *testing.T) {
		ctx, s := t.Context(), b.s
		_, err := s.AcquireLease(ctx, f.fresh, "bob", &store.AcquireLeaseParams{TTL: time.Minute, Now: f.now})
		require.NoError(t, err, "AcquireLease")
		_, err = s.AcquireLease(ctx, f.expired.Name, "bob", &store.AcquireLeaseParams{TTL: time.Minute, Now: f.now})
		require.NoError(t, err, "AcquireLease of the expired name")
		_, err = s.RenewLease(ctx, f.live.Name, "alice", 1, &store.RenewLeaseParams{TTL: time.Minute, Now: f.now})
		require.NoError(t, err, "RenewLease")
		require.NoError(t, s.CheckLeaseFence(ctx, f.live.Name, 1, &store.LeaseOpParams{Now: f.now}), "CheckLeaseFence")
		require.NoError(t, s.ReleaseLease(ctx, f.live.Name, "alice", 1, &store.LeaseOpParams{Now: f.now}), "ReleaseLease")
		_, err = s.ForceReleaseLeases(ctx, "alice", &store.LeaseOpParams{Now: f.now})
		require.NoError(t, err, "ForceReleaseLeases")
	})
}

// nlCases lists every bad-input and refusal case; the names are the record
// of what the suite checks.
func nlCases() []nlCase {
	var cases []nlCase
	bad := func(name string, want error, call func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error) {
		cases = append(cases, nlCase{name: name, want: want, invalid: true, call: call})
	}
	refused := func(name string, want error, call func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error) {
		cases = append(cases, nlCase{name: name, want: want, call: call})
	}
	ttl := func(f *nlFixture) *store.AcquireLeaseParams {
		return &store.AcquireLeaseParams{TTL: time.Minute, Now: f.now}
	}
	rttl := func(f *nlFixture) *store.RenewLeaseParams {
		return &store.RenewLeaseParams{TTL: time.Minute, Now: f.now}
	}
	op := func(f *nlFixture) *store.LeaseOpParams { return &store.LeaseOpParams{Now: f.now} }

	badTexts := []struct{ desc, text string }{
		{"empty", ""},
		{"of MaxNameLen+1 bytes", strings.Repeat("n", store.MaxNameLen+1)},
		{"of MaxNameLen+1 bytes but fewer runes", strings.Repeat("é", store.MaxNameLen/2) + "n"},
		{"of invalid UTF-8", "bad-\xff"},
		{"with a NUL byte", "nul-\x00"},
		{"with a newline", "nl-\n"},
		{"with a tab", "tab-\t"},
		{"with DEL", "del-\x7f"},
	}
	for _, x := range badTexts {
		text := x.text
		bad("AcquireLease: name "+x.desc, store.ErrInvalidLeaseName, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.AcquireLease(ctx, text, "bob", ttl(f))
			return err
		})
		bad("RenewLease: name "+x.desc, store.ErrInvalidLeaseName, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.RenewLease(ctx, text, "alice", 1, rttl(f))
			return err
		})
		bad("ReleaseLease: name "+x.desc, store.ErrInvalidLeaseName, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			return s.ReleaseLease(ctx, text, "alice", 1, op(f))
		})
		bad("GetLease: name "+x.desc, store.ErrInvalidLeaseName, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.GetLease(ctx, text, op(f))
			return err
		})
		bad("CheckLeaseFence: name "+x.desc, store.ErrInvalidLeaseName, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			return s.CheckLeaseFence(ctx, text, 1, op(f))
		})
		bad("AnnounceLeaseWaiter: name "+x.desc, store.ErrInvalidLeaseName, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			return s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: text, Waiter: "bob", Since: *f.now})
		})
		if text != "" { // empty means "every name" / "from the start"
			bad("LeaseHistory: name "+x.desc, store.ErrInvalidLeaseName, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
				_, err := s.LeaseHistory(ctx, text, nil)
				return err
			})
			bad("ListLeases: AfterName "+x.desc, store.ErrInvalidLeaseName, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
				_, err := s.ListLeases(ctx, &store.ListLeasesParams{AfterName: text, Now: f.now})
				return err
			})
		}

		bad("AcquireLease: owner "+x.desc, store.ErrInvalidOwner, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.AcquireLease(ctx, f.fresh, text, ttl(f))
			return err
		})
		bad("RenewLease: owner "+x.desc, store.ErrInvalidOwner, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.RenewLease(ctx, f.live.Name, text, 1, rttl(f))
			return err
		})
		bad("ReleaseLease: owner "+x.desc, store.ErrInvalidOwner, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			return s.ReleaseLease(ctx, f.live.Name, text, 1, op(f))
		})
		bad("ForceReleaseLeases: owner "+x.desc, store.ErrInvalidOwner, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.ForceReleaseLeases(ctx, text, op(f))
			return err
		})
		bad("AnnounceLeaseWaiter: waiter "+x.desc, store.ErrInvalidOwner, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			return s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: f.live.Name, Waiter: text, Since: *f.now})
		})
		if text != "" { // empty means every owner
			bad("ListLeases: owner "+x.desc, store.ErrInvalidOwner, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
				_, err := s.ListLeases(ctx, &store.ListLeasesParams{Owner: text, Now: f.now})
				return err
			})
		}
	}

	for _, d := range []struct {
		desc string
		ttl  time.Duration
	}{{"zero", 0}, {"negative", -time.Second}, {"below a microsecond", 500 * time.Nanosecond}, {"above MaxTTL", store.MaxTTL + time.Microsecond}} {
		bad("AcquireLease: TTL "+d.desc, store.ErrInvalidTTL, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.AcquireLease(ctx, f.fresh, "bob", &store.AcquireLeaseParams{TTL: d.ttl, Now: f.now})
			return err
		})
		bad("RenewLease: TTL "+d.desc, store.ErrInvalidTTL, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.RenewLease(ctx, f.live.Name, "alice", 1, &store.RenewLeaseParams{TTL: d.ttl, Now: f.now})
			return err
		})
	}
	bad("AcquireLease: nil params (no TTL)", store.ErrInvalidTTL, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.AcquireLease(ctx, f.fresh, "bob", nil)
		return err
	})
	bad("RenewLease: nil params (no TTL)", store.ErrInvalidTTL, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.RenewLease(ctx, f.live.Name, "alice", 1, nil)
		return err
	})
	bad("AcquireLease: negative MaxRenewals", store.ErrInvalidCount, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.AcquireLease(ctx, f.fresh, "bob", &store.AcquireLeaseParams{TTL: time.Minute, MaxRenewals: -1, Now: f.now})
		return err
	})
	bad("AcquireLease: MaxRenewals above 2^31-1", store.ErrInvalidCount, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.AcquireLease(ctx, f.fresh, "bob", &store.AcquireLeaseParams{TTL: time.Minute, MaxRenewals: math.MaxInt32 + 1, Now: f.now})
		return err
	})
	bad("AcquireLease: negative Wait", store.ErrInvalidTTL, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.AcquireLease(ctx, f.live.Name, "bob", &store.AcquireLeaseParams{TTL: time.Minute, Wait: -time.Second, Now: f.now})
		return err
	})
	bad("AcquireLease: Wait above MaxTTL", store.ErrInvalidTTL, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.AcquireLease(ctx, f.live.Name, "bob", &store.AcquireLeaseParams{TTL: time.Minute, Wait: store.MaxTTL + time.Microsecond, Now: f.now})
		return err
	})
	bad("AnnounceLeaseWaiter: fence -1", store.ErrInvalidFence, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		return s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: f.live.Name, Waiter: "bob", Since: *f.now, Fence: -1})
	})
	for _, fence := range []int64{0, -1} {
		bad(fmt.Sprintf("RenewLease: fence %d", fence), store.ErrInvalidFence, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.RenewLease(ctx, f.live.Name, "alice", fence, rttl(f))
			return err
		})
		bad(fmt.Sprintf("ReleaseLease: fence %d", fence), store.ErrInvalidFence, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			return s.ReleaseLease(ctx, f.live.Name, "alice", fence, op(f))
		})
		bad(fmt.Sprintf("CheckLeaseFence: fence %d", fence), store.ErrInvalidFence, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			return s.CheckLeaseFence(ctx, f.live.Name, fence, op(f))
		})
	}
	for _, limit := range []int{-1, store.MaxListLimit + 1} {
		bad(fmt.Sprintf("ListLeases: limit %d", limit), store.ErrInvalidCount, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.ListLeases(ctx, &store.ListLeasesParams{Limit: limit, Now: f.now})
			return err
		})
		bad(fmt.Sprintf("LeaseHistory: limit %d", limit), store.ErrInvalidCount, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.LeaseHistory(ctx, "", &store.LeaseHistoryParams{Limit: limit})
			return err
		})
		bad(fmt.Sprintf("TrimLeaseHistory: limit %d", limit), store.ErrInvalidCount, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.TrimLeaseHistory(ctx, f.now.Add(time.Hour), limit)
			return err
		})
		bad(fmt.Sprintf("CleanupExpiredLeases: limit %d", limit), store.ErrInvalidCount, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
			_, err := s.CleanupExpiredLeases(ctx, &store.CleanupLeasesParams{Limit: limit, Now: f.now})
			return err
		})
	}
	bad("ListLeases: negative HeldFor", store.ErrInvalidTTL, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.ListLeases(ctx, &store.ListLeasesParams{HeldFor: -time.Second, Now: f.now})
		return err
	})

	// Refusals: well-formed calls the state refuses, with typed errors.
	refused("AcquireLease: a name another holds", store.ErrHeld, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.AcquireLease(ctx, f.live.Name, "bob", ttl(f))
		return err
	})
	refused("AcquireLease: a name its own owner holds", store.ErrHeld, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.AcquireLease(ctx, f.live.Name, "alice", ttl(f))
		return err
	})
	refused("RenewLease: by a non-holder", store.ErrNotHolder, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.RenewLease(ctx, f.live.Name, "mallory", f.live.Fence, rttl(f))
		return err
	})
	refused("RenewLease: a fence never issued", store.ErrNotHolder, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.RenewLease(ctx, f.live.Name, "alice", 2, rttl(f))
		return err
	})
	refused("RenewLease: after expiry", store.ErrExpired, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.RenewLease(ctx, f.expired.Name, "alice", f.expired.Fence, rttl(f))
		return err
	})
	refused("RenewLease: after release", store.ErrReleased, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.RenewLease(ctx, f.released.Name, "alice", f.released.Fence, rttl(f))
		return err
	})
	refused("RenewLease: past MaxRenewals", store.ErrMaxRenewals, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.RenewLease(ctx, f.maxed.Name, "alice", f.maxed.Fence, rttl(f))
		return err
	})
	refused("RenewLease: a name never acquired", store.ErrLeaseNotFound, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.RenewLease(ctx, f.fresh, "alice", 1, rttl(f))
		return err
	})
	refused("ReleaseLease: twice", store.ErrReleased, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		return s.ReleaseLease(ctx, f.released.Name, "alice", f.released.Fence, op(f))
	})
	refused("ReleaseLease: by a non-holder", store.ErrNotHolder, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		return s.ReleaseLease(ctx, f.live.Name, "mallory", f.live.Fence, op(f))
	})
	refused("ReleaseLease: a name never acquired", store.ErrNotHolder, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		return s.ReleaseLease(ctx, f.fresh, "alice", 1, op(f))
	})
	refused("GetLease: a name never acquired", store.ErrLeaseNotFound, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.GetLease(ctx, f.fresh, op(f))
		return err
	})

	bad("ForceReleaseLeases: a bad Name", store.ErrInvalidArgument, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.ForceReleaseLeases(ctx, "alice", &store.LeaseOpParams{Name: "bad\x00name", Now: f.now})
		return err
	})
	bad("ForceReleaseLeases: a negative Fence", store.ErrInvalidArgument, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.ForceReleaseLeases(ctx, "alice", &store.LeaseOpParams{Name: f.live.Name, Fence: -1, Now: f.now})
		return err
	})
	bad("ForceReleaseLeases: a Fence without a Name", store.ErrInvalidArgument, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.ForceReleaseLeases(ctx, "alice", &store.LeaseOpParams{Fence: 1, Now: f.now})
		return err
	})

	// A cancelled context is not bad input.
	refused("AcquireLease: cancelled context", context.Canceled, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.AcquireLease(ctx, f.fresh, "bob", ttl(f))
		return err
	})
	refused("RenewLease: cancelled context", context.Canceled, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.RenewLease(ctx, f.live.Name, "alice", 1, rttl(f))
		return err
	})
	refused("ReleaseLease: cancelled context", context.Canceled, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		return s.ReleaseLease(ctx, f.live.Name, "alice", 1, op(f))
	})
	refused("ForceReleaseLeases: cancelled context", context.Canceled, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.ForceReleaseLeases(ctx, "alice", op(f))
		return err
	})
	refused("CleanupExpiredLeases: cancelled context", context.Canceled, func(ctx context.Context, s NamedLeaseStore, f *nlFixture) error {
		_, err := s.CleanupExpiredLeases(ctx, &store.CleanupLeasesParams{Now: f.now})
		return err
	})
	return cases
}
