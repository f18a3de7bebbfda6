package lease_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
)

// holding is one holding of a name as the backend's history records it, on
// the backend's clock: from start until end (its release, or its last
// expiry, whichever came first).
type holding struct {
	name       string
	fence      int64
	owner      string
	start, end time.Time
	ended      store.LeaseEventKind
	events     []string // for the failure message
}

// holdings rebuilds every holding from the audit history.
func holdings(t *testing.T, s lease.Store) map[string][]*holding {
	t.Helper()
	byKey := map[string]*holding{}
	out := map[string][]*holding{}
	var after int64
	for {
		es, err := s.LeaseHistory(t.Context(), "", &store.LeaseHistoryParams{AfterID: after, Limit: store.MaxListLimit})
		require.NoError(t, err)
		for _, e := range es {
			after = e.ID
			key := fmt.Sprint(e.Name, "#", e.Fence)
			h := byKey[key]
			line := fmt.Sprintf("#%d %s %s at %s expires %s", e.ID, e.Owner, e.Kind,
				e.At.UTC().Format("15:04:05.000000"), e.ExpiresAt.UTC().Format("15:04:05.000000"))
			if h != nil {
				h.events = append(h.events, line)
			}
			if e.Kind == store.LeaseAcquired {
				require.Nil(t, h, "%s acquired twice", key)
				h = &holding{name: e.Name, fence: e.Fence, owner: e.Owner, start: e.At, end: e.ExpiresAt, events: []string{line}}
				byKey[key] = h
				out[e.Name] = append(out[e.Name], h)
				continue
			}
			require.NotNil(t, h, "%s: %s before acquired", key, e.Kind)
			require.Empty(t, h.ended, "%s: %s after %s", key, e.Kind, h.ended)
			switch e.Kind {
			case store.LeaseRenewed:
				require.False(t, e.At.Before(h.start))
				require.True(t, e.At.Before(h.end), "%s renewed at %v, after its expiry %v", key, e.At, h.end)
				h.end = e.ExpiresAt
			case store.LeaseReleased, store.LeaseForceReleased:
				h.ended = e.Kind
				if e.At.Before(h.end) {
					h.end = e.At
				}
			case store.LeaseExpired:
				h.ended = e.Kind
				require.True(t, e.At.Equal(h.end), "%s recorded expired at %v, its expiry was %v", key, e.At, h.end)
			}
		}
		if len(es) < store.MaxListLimit {
			return out
		}
	}
}

// TestMutualExclusionUnderContention has two Managers (on PostgreSQL, on two
// independent pools: two processes as far as the database can tell; it
// runs alone, one backend after the other) with
// eight goroutines each fight for three names for five seconds: blocking and
// non-blocking acquires, renewals, kept-alive leases, releases, leases
// abandoned to expire, force-releases. Two checks follow.
//
// The backend's: from the audit history on the backend's clock, every
// holding's interval is rebuilt; holdings of a name never overlap, and
// fences increase by one in time order (I8).
//
// The clients': each holder records, on the local monotonic clock (one
// process: both Managers' clocks are the same), the interval from its
// acquire returning until its lease's Context ended (before Release
// returned, or at the local deadline, or when the keep-alive gave up).
// These intervals never overlap on a name either, except those of holdings
// that were force-released (an operator's act, which deposes a holder
// without asking it).
func TestMutualExclusionUnderContention(t *testing.T) {
	inTurn(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t) // for the history; each Manager gets a pool of its own
		cfg := func(owner string) *lease.Config {
			return &lease.Config{Owner: owner, PollInterval: 20 * time.Millisecond, CleanupInterval: 100 * time.Millisecond,
				// A margin over the timers' lateness on a busy machine: 50 ms
				// was exceeded under make test (every package at once, -race).
				SafetyMargin: 120 * time.Millisecond}
		}
		managers := []*lease.Manager{newManager(t, b.open(t), cfg("p1")), newManager(t, b.open(t), cfg("p2"))}
		type interval struct {
			start, end time.Time
			owner      string
		}
		var imu sync.Mutex
		intervals := map[string]*interval{} // name#fence
		key := func(name string, fence int64) string { return fmt.Sprint(name, "#", fence) }
		for _, m := range managers {
			lease.OnEnded(m, func(name string, fence int64, _ error) {
				now := time.Now()
				imu.Lock()
				defer imu.Unlock()
				if iv := intervals[key(name, fence)]; iv != nil {
					iv.end = now
				} else {
					intervals[key(name, fence)] = &interval{end: now} // ended before its acquire returned (Stop)
				}
			})
		}
		names := []string{"a", "b", "c"}
		const perManager = 8
		deadline := time.Now().Add(5 * time.Second)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ops := map[string]int{}
		count := func(op string) { mu.Lock(); ops[op]++; mu.Unlock() }
		for mi, m := range managers {
			for g := range perManager {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(mi), uint64(g)))
					for time.Now().Before(deadline) {
						name := names[r.IntN(len(names))]
						ttl := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}[r.IntN(3)]
						opts := &lease.AcquireOpts{TTL: ttl, Timeout: 500 * time.Millisecond, KeepAlive: r.IntN(4) == 0}
						var l *lease.Lease
						var err error
						if r.IntN(3) == 0 {
							l, err = m.TryAcquire(ctx, name, opts)
						} else {
							l, err = m.Acquire(ctx, name, opts)
						}
						switch {
						case errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrTimeout):
							count("held")
							continue
						case errors.Is(err, lease.ErrExpired): // a TryAcquire slower than its TTL less the margin
							count("late")
							continue
						case err != nil:
							t.Error(err)
							return
						}
						started := time.Now()
						imu.Lock()
						if iv := intervals[key(name, l.Fence())]; iv != nil {
							iv.start, iv.owner = started, m.Owner() // it ended at once
						} else {
							intervals[key(name, l.Fence())] = &interval{start: started, owner: m.Owner()}
						}
						imu.Unlock()
						count("acquired")
						if r.IntN(2) == 0 {
							if err := l.Renew(ctx); err == nil {
								count("renewed")
							}
						}
						switch r.IntN(25) {
						case 0, 1, 2: // abandon it: it expires (or Stop releases it)
							if !opts.KeepAlive {
								count("abandoned")
								continue
							}
							_ = l.Close(ctx)
						case 3:
							if _, err := managers[1-mi].ForceRelease(ctx, m.Owner(), nil); err != nil {
								t.Error(err)
							}
							count("force-released")
							_ = l.Close(ctx)
						default:
							if err := l.Release(ctx); err != nil {
								t.Error(err)
							}
						}
						if l.Context().Err() == nil {
							t.Errorf("%s#%d: Context not ended when Release returned", name, l.Fence())
						}
					}
				})
			}
		}
		wg.Wait()
		for _, m := range managers {
			m.Stop()
		}

		total := 0
		forced := map[string]bool{}
		for name, hs := range holdings(t, s) {
			slices.SortFunc(hs, func(x, y *holding) int { return x.start.Compare(y.start) })
			for i, h := range hs {
				require.Equal(t, int64(i+1), h.fence, "%s: fences increase by one in time order", name)
				require.False(t, h.end.Before(h.start), "%s#%d: ends before it starts", name, h.fence)
				if i > 0 {
					prev := hs[i-1]
					require.False(t, h.start.Before(prev.end), "%s: holding #%d (%s) from %v overlaps #%d (%s) until %v\n%s\n%s",
						name, h.fence, h.owner, h.start, prev.fence, prev.owner, prev.end,
						strings.Join(prev.events, "\n"), strings.Join(h.events, "\n"))
				}
				if h.ended == store.LeaseForceReleased {
					forced[key(name, h.fence)] = true
				}
			}
			total += len(hs)
			require.GreaterOrEqual(t, len(hs), 15, "%s: holdings (about 100 each on a quiet machine)", name)
		}
		t.Logf("%d holdings checked on the backend's clock; operations: %v", total, ops)

		imu.Lock() // every lease ended before Stop returned; the lock is for form
		defer imu.Unlock()
		byName := map[string][]string{}
		empty := 0
		for k, iv := range intervals {
			require.False(t, iv.end.IsZero(), "%s never ended", k)
			if iv.start.IsZero() || iv.end.Before(iv.start) {
				// Over (its local deadline passed during a slow acquire,
				// and it was released) before its holder had it, or over
				// before it looked.
				empty++
				continue
			}
			if !forced[k] {
				name, _, _ := strings.Cut(k, "#")
				byName[name] = append(byName[name], k)
			}
		}
		checked := 0
		for name, keys := range byName {
			slices.SortFunc(keys, func(x, y string) int { return intervals[x].start.Compare(intervals[y].start) })
			for i := 1; i < len(keys); i++ {
				prev, cur := intervals[keys[i-1]], intervals[keys[i]]
				require.False(t, cur.start.Before(prev.end), "%s: the holder of %s (%s) started %v before the holder of %s (%s) ended",
					name, keys[i], cur.owner, prev.end.Sub(cur.start), keys[i-1], prev.owner)
			}
			checked += len(keys)
		}
		t.Logf("%d holdings checked on the clients' clock (%d force-released left out, %d over before their holder had them)",
			checked, len(forced), empty)
	})
}
