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
// independent pools: two processes as far as the database can tell) with
// several goroutines each fight for a few names for three seconds: blocking
// and non-blocking acquires, renewals, kept-alive leases, releases, leases
// abandoned to expire, force-releases. Then, from the audit history on the
// backend's clock, every holding's interval is rebuilt: holdings of a name
// never overlap, and fences increase by one in time order (I8).
func TestMutualExclusionUnderContention(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		managers := []*lease.Manager{
			newManager(t, s, &lease.Config{Owner: "p1", PollInterval: 20 * time.Millisecond, CleanupInterval: 100 * time.Millisecond}),
			newManager(t, b.open(t), &lease.Config{Owner: "p2", PollInterval: 20 * time.Millisecond, CleanupInterval: 100 * time.Millisecond}),
		}
		names := []string{"a", "b", "c"}
		const perManager = 6
		deadline := time.Now().Add(3 * time.Second)
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
						ttl := []time.Duration{30 * time.Millisecond, 100 * time.Millisecond, time.Second}[r.IntN(3)]
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
						case err != nil:
							t.Error(err)
							return
						}
						count("acquired")
						if r.IntN(2) == 0 {
							if err := l.Renew(ctx); err == nil {
								count("renewed")
							}
						}
						switch r.IntN(10) {
						case 0: // abandon it: it expires (or Stop releases it)
							if !opts.KeepAlive {
								count("abandoned")
								continue
							}
							_ = l.Close(ctx)
						case 1:
							if _, err := managers[1-mi].ForceRelease(ctx, m.Owner()); err != nil {
								t.Error(err)
							}
							count("force-released")
							_ = l.Close(ctx)
						default:
							if err := l.Release(ctx); err != nil {
								t.Error(err)
							}
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
			}
			total += len(hs)
		}
		t.Logf("%d holdings checked; operations: %v", total, ops)
		require.Greater(t, total, 50)
	})
}
