package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
)

// testClock is a clock the test moves (for the batching's window).
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestCallersAnsweredTogetherAreSentTogether: goroutines whose acquires one
// backend call answered, and which release at once, release in one backend
// call, rather than the first to arrive alone and the others after it.
func TestCallersAnsweredTogetherAreSentTogether(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newGatedStore()
	m := newManager(t, s, &lease.Config{Owner: "m"})
	clock := newTestClock()
	lease.SetWaveClock(m, clock.now)
	lease.SetWaveWait(m, 10*time.Second) // the leader waits for all of them, however slow the machine

	entered, open := s.hold(true)
	first := make(chan *lease.Lease, 1)
	go func() {
		l, err := m.TryAcquire(ctx, "first", nil)
		noError(t, err)
		first <- l
	}()
	wait(t, entered, "the first acquire is in flight")
	names := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			l, err := m.TryAcquire(ctx, name, nil)
			if err == nil {
				err = l.Release(ctx)
			}
			noError(t, err)
		})
		queued(t, m, i+1, 0)
	}
	open()
	wg.Wait()
	clock.advance(time.Second) // the wave is over
	l := within(t, "the first acquire", func() *lease.Lease { return <-first })
	require.NoError(t, l.Release(ctx))

	acquires, releases, _ := s.calls()
	require.Equal(t, [][]string{{"first"}, names}, acquires)
	require.Len(t, releases, 2, "the four releases in one call, then the first's")
	require.ElementsMatch(t, names, releases[0])
	require.Equal(t, []string{"first"}, releases[1])
}

// decidingStore decides every batch early, before it passes the gate, as
// the PostgreSQL backend does when a statement has run but its commit is
// not yet durable (store.EarlyAcquirer).
type decidingStore struct{ *gatedStore }

func (s decidingStore) AcquireLeasesEarly(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams, decided func()) []store.AcquireLeaseResult {
	if decided != nil {
		decided()
	}
	return s.gatedStore.AcquireLeases(ctx, reqs, p)
}

// TestADecidedBatchHandsTheLeadOn: once the backend has decided a batch
// (its commit still out), the next batch is sent, without waiting for the
// first to return; with two out, the next waits for one of them.
func TestADecidedBatchHandsTheLeadOn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := decidingStore{newGatedStore()}
	m := newManager(t, s, &lease.Config{Owner: "m"})
	clock := newTestClock()
	lease.SetWaveClock(m, clock.now)

	var wg sync.WaitGroup
	acquire := func(name string) {
		wg.Go(func() {
			l, err := m.TryAcquire(ctx, name, nil)
			noError(t, err)
			if l != nil && l.Name() != name {
				t.Errorf("asked for %s, got %s", name, l.Name())
			}
		})
	}
	entered, open := s.hold(true)
	acquire("x0") // alone: nobody could use an early lead
	wait(t, entered, "x0 is in flight")
	acquire("x1")
	queued(t, m, 1, 0)
	acquire("x2")
	queued(t, m, 2, 0)
	entered2, open2 := s.hold(true)
	open()
	wait(t, entered2, "x1 and x2 are in flight, decided")

	entered3, open3 := s.hold(true)
	acquire("x3")
	wait(t, entered3, "x3 is sent while x1 and x2 are still out")
	acquire("x4")
	queued(t, m, 1, 0)
	a, _ := lease.InFlight(m)
	require.Equal(t, 2, a, "x4 waits: two backend calls are out")
	calls, _, _ := s.calls()
	require.Len(t, calls, 3)

	entered4, open4 := s.hold(true)
	open2()
	wait(t, entered4, "x4 is sent once x1 and x2 returned")
	open3()
	open4()
	wg.Wait()
	acquires, _, _ := s.calls()
	require.Equal(t, [][]string{{"x0"}, {"x1", "x2"}, {"x3"}, {"x4"}}, acquires)
}
