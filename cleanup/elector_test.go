package cleanup_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

func TestLeaseName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "seqlease/cleanup/orders", cleanup.LeaseName("orders"))
	fits := strings.Repeat("a", store.MaxNameLen-len(cleanup.LeasePrefix))
	require.Equal(t, cleanup.LeasePrefix+fits, cleanup.LeaseName(fits))

	long1 := strings.Repeat("a", store.MaxNameLen)
	long2 := strings.Repeat("a", store.MaxNameLen-1) + "b"
	n1, n2 := cleanup.LeaseName(long1), cleanup.LeaseName(long2)
	require.NotEqual(t, n1, n2, "long names that share a prefix stay apart")
	require.Equal(t, n1, cleanup.LeaseName(long1), "stable")
	require.True(t, strings.HasPrefix(n1, cleanup.LeasePrefix+"aaaa"))
	for _, stream := range []string{long1, long2, strings.Repeat("é", store.MaxNameLen/2), "x" + strings.Repeat("日", 66)} {
		require.NoError(t, store.ValidateStream(stream))
		name := cleanup.LeaseName(stream)
		require.LessOrEqual(t, len(name), store.MaxNameLen)
		require.True(t, utf8.ValidString(name), "cut on a character boundary: %q", name)
		require.NoError(t, store.ValidateLeaseName(name))
	}
}

// TestDefaultElectorHoldsStreamLease: by default the walk of a stream runs
// under the named lease seqlease/cleanup/<stream>, released after it.
func TestDefaultElectorHoldsStreamLease(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ls := s.(lease.Store)
			var held atomic.Int64
			work := recovery.WorkTrackerFunc(func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
				l, err := ls.GetLease(ctx, cleanup.LeaseName(e.Stream), nil)
				if err == nil && l.Held() {
					held.Add(1)
				}
				return nil, false, nil
			})
			sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: work})})
			require.NoError(t, err)
			defer sv.Stop()
			leaseExpired(t, s, "led", 3)
			_, err = sv.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, int64(3), held.Load(), "held during the walk")
			l, err := ls.GetLease(context.Background(), cleanup.LeaseName("led"), nil)
			require.NoError(t, err)
			require.False(t, l.Held(), "released after it")
		})
	}
}

// TestOneCleanerPerStream runs several Services on one store at once: by
// default they never walk the same stream at the same time, and every
// expired lease is resolved once.
func TestOneCleanerPerStream(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			walking := map[string]int{}
			overlaps, calls := 0, 0
			work := recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
				mu.Lock()
				walking[e.Stream]++
				calls++
				if walking[e.Stream] > 1 {
					overlaps++
				}
				mu.Unlock()
				defer func() {
					mu.Lock()
					walking[e.Stream]--
					mu.Unlock()
				}()
				time.Sleep(time.Millisecond) // widens the window a second walker would hit
				return []byte("w"), true, nil
			})
			const services, streams, each = 3, 4, 30
			svs := make([]*cleanup.Service, services)
			for i := range svs {
				sv, err := cleanup.New(s, &cleanup.Config{BatchSize: 1, Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: work})})
				require.NoError(t, err)
				defer sv.Stop()
				svs[i] = sv
			}
			for st := range streams {
				leaseExpired(t, s, fmt.Sprint("one-", st), each)
			}
			var notLeader atomic.Int64
			for round := 0; round < 5; round++ {
				var wg sync.WaitGroup
				for _, sv := range svs {
					wg.Go(func() {
						res, err := sv.RunOnce(context.Background())
						if err == nil {
							notLeader.Add(int64(res.NotLeader))
						}
					})
				}
				wg.Wait()
			}
			require.Zero(t, overlaps, "two cleaners walked one stream at once")
			require.Equal(t, streams*each, calls, "each expired lease handled once")
			for st := range streams {
				es := readAll(t, s, fmt.Sprint("one-", st))
				require.Len(t, es, 2*each)
				for i, e := range es[:each] {
					require.Equal(t, int64(each+i+1), e.RecoveredAs, "order")
				}
			}
			t.Logf("streams skipped because another cleaner led them: %d", notLeader.Load())
		})
	}
}

// lostElector leads every stream with a leadership its test cancels.
type lostElector struct {
	ctx context.Context
}

type lostLeadership struct{ ctx context.Context }

func (e lostElector) Lead(context.Context, string) (cleanup.Leadership, bool, error) {
	return lostLeadership(e), true, nil
}

func (l lostLeadership) Context() context.Context    { return l.ctx }
func (lostLeadership) Release(context.Context) error { return nil }

// TestLostLeadStopsTheWalk: when the leadership of a stream is lost mid-walk
// the walk stops at once; what is left waits for the next cycle and is not
// counted as failed.
func TestLostLeadStopsTheWalk(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	ctx, lose := context.WithCancel(context.Background())
	work := recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
		if e.Number == 2 {
			lose()
		}
		return []byte("w"), true, nil
	})
	sv, err := cleanup.New(s, &cleanup.Config{Elector: lostElector{ctx}, BatchSize: 1, Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: work})})
	require.NoError(t, err)
	defer sv.Stop()
	leaseExpired(t, s, "lost", 4)
	res, err := sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, res.NotLeader)
	require.Zero(t, res.Failed)
	require.Equal(t, map[string]int{"partial-work": 1}, res.Resolved)
	es := readAll(t, s, "lost")
	require.Equal(t, int64(5), es[0].RecoveredAs)
	for _, e := range es[1:4] {
		require.Equal(t, store.Leased, e.State, "%d", e.Number)
	}
}

// countingElector is a LocalElector that counts the leaderships held at
// once.
type countingElector struct {
	*cleanup.LocalElector
	mu         sync.Mutex
	held, most int
}

func (e *countingElector) Lead(ctx context.Context, stream string) (cleanup.Leadership, bool, error) {
	l, ok, err := e.LocalElector.Lead(ctx, stream)
	if ok {
		e.mu.Lock()
		e.held++
		e.most = max(e.most, e.held)
		e.mu.Unlock()
		l = &countedLeadership{Leadership: l, e: e}
	}
	return l, ok, err
}

type countedLeadership struct {
	cleanup.Leadership
	e *countingElector
}

func (l *countedLeadership) Release(ctx context.Context) error {
	l.e.mu.Lock()
	l.e.held--
	l.e.mu.Unlock()
	return l.Leadership.Release(ctx)
}

// TestStreamLeadReleasedWhenWalked: a stream's lead is released as soon as
// its walk is over, also when its entries end exactly with a listing
// window, so a cycle holds one stream lease at a time (and Stop has at most
// one to release).
func TestStreamLeadReleasedWhenWalked(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	el := &countingElector{LocalElector: cleanup.NewLocalElector()}
	sv, err := cleanup.New(s, &cleanup.Config{Elector: el, BatchSize: 2, ScanLimit: 2})
	require.NoError(t, err)
	defer sv.Stop()
	for _, stream := range []string{"a", "b", "c"} {
		leaseExpired(t, s, stream, 2) // each stream fills one window
	}
	res, err := sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 6, res.Resolved["gap"])
	el.mu.Lock()
	defer el.mu.Unlock()
	require.Equal(t, 1, el.most, "one stream lease at a time")
	require.Zero(t, el.held, "every lease released")
}

// downElector is a LocalElector whose releases hang until their context
// ends, as on a database that went away.
type downElector struct{ *cleanup.LocalElector }

func (e downElector) Lead(ctx context.Context, stream string) (cleanup.Leadership, bool, error) {
	l, ok, err := e.LocalElector.Lead(ctx, stream)
	if ok {
		l = hangingLeadership{l}
	}
	return l, ok, err
}

type hangingLeadership struct{ cleanup.Leadership }

func (l hangingLeadership) Release(ctx context.Context) error {
	<-ctx.Done()
	_ = l.Leadership.Release(ctx)
	return ctx.Err()
}

// TestStopReleaseBounded: with the store gone, Stop waits one QueryTimeout
// in all to release the stream leases, however many streams the cycle
// walked.
func TestStopReleaseBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		reached := make(chan struct{})
		work := recovery.WorkTrackerFunc(func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
			if e.Stream == "c" {
				close(reached)
				<-ctx.Done() // Stop comes while c is walked
				return nil, false, ctx.Err()
			}
			return nil, false, nil
		})
		const timeout = time.Minute
		sv, err := cleanup.New(s, &cleanup.Config{
			Elector:      downElector{cleanup.NewLocalElector()},
			BatchSize:    2,
			ScanLimit:    2,
			QueryTimeout: timeout,
			Pipeline:     newPipeline(t, s, &recovery.Config{WorkTracker: work}),
		})
		require.NoError(t, err)
		for _, stream := range []string{"a", "b", "c"} {
			leaseExpired(t, s, stream, 2)
		}
		require.NoError(t, sv.Start(context.Background()))
		<-reached
		start := time.Now()
		sv.Stop()
		require.Equal(t, timeout, time.Since(start))
	})
}
