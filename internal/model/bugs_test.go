package model

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// bugs are stores with a bug put in on purpose.
var bugs = []struct {
	name string
	wrap func(Store) Store
}{
	// I3: a commit after the expiry succeeds (the store is asked again
	// with its clock pinned just before the expiry).
	{"commit after expiry", func(s Store) Store { return &lateCommit{buggy{s}} }},
	// I1: a released number vanishes from reads, a hole.
	{"release leaves a hole", func(s Store) Store { return &holeRelease{buggy: buggy{s}} }},
	// I8: an acquire of a held name force-releases the holder and takes it.
	{"acquire ignores a live holder", func(s Store) Store { return &greedyAcquire{buggy{s}} }},
	// The expired scan lists leases that expire within a minute: the
	// cleanup loop asks the trackers for the work of live holders.
	{"expired scan lists live leases", func(s Store) Store { return &earlyScan{buggy{s}} }},
	// I6: the expired scan finds nothing, so nothing expired is resolved.
	{"expired scan finds nothing", func(s Store) Store { return &blindScan{buggy{s}} }},
}

// TestModelFindsBugs runs the model test against memory stores with a bug
// put in on purpose, and expects it to report a violation and shrink the
// schedule to a handful of steps that pass without the bug: the checker
// can fail. The shrunk schedule then runs on PostgreSQL with the same bug
// (it must fail) and without (it must pass).
func TestModelFindsBugs(t *testing.T) {
	for _, bug := range bugs {
		t.Run(bug.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := memoryBackend()
			var fd *found
			for seed := uint64(1); seed <= 50 && fd == nil; seed++ {
				s := generate(seed, defaultSteps)
				if f, _ := runSchedule(ctx, b, s, bug.wrap); f != nil {
					fd = &found{seed: seed, s: s, f: f}
				}
			}
			require.NotNil(t, fd, "no schedule of seeds 1..50 found the bug")
			sh := &shrinker{kind: fd.f.kind, maxRuns: 200, deadline: time.Now().Add(time.Minute),
				fails: failsOn(ctx, b, bug.wrap)}
			small, sf := sh.shrink(fd.s, fd.f)
			t.Logf("seed %d: %v\nshrunk in %d runs to:\n%s  %v", fd.seed, fd.f, sh.runs, small, sf)
			require.LessOrEqual(t, small.steps(), 6, "shrunk schedule:\n%s", small)
			require.Nil(t, failsOn(ctx, b, nil)(small), "the shrunk schedule fails without the bug")

			// Longer ticks than the exploration's: the shrunk schedule's
			// rounds, and what the test does between them, must fit in a
			// tick or two also on a loaded machine.
			pg := openPostgres(t)
			pg.tick = 100 * time.Millisecond
			f := failsOn(ctx, pg, bug.wrap)(small)
			require.NotNil(t, f, "the shrunk schedule passes on PostgreSQL with the bug")
			t.Logf("on PostgreSQL: %v", f)
			require.Nil(t, failsOn(ctx, pg, nil)(small), "the shrunk schedule fails on PostgreSQL without the bug")
		})
	}
}

// buggy is the base of the buggy stores: the store, and its InProcess
// (the memory store's capability, which the Leaser looks for) passed
// through.
type buggy struct{ Store }

func (s buggy) InProcess() bool {
	ip, ok := s.Store.(store.InProcess)
	return ok && ip.InProcess()
}

// lateCommit is a store whose Commit succeeds after the expiry.
type lateCommit struct{ buggy }

func (s *lateCommit) Commit(ctx context.Context, stream string, n int64, token store.Token, p *store.CommitParams) (time.Time, error) {
	t, err := s.Store.Commit(ctx, stream, n, token, p)
	if !errors.Is(err, store.ErrExpired) {
		return t, err
	}
	es, rerr := s.Read(ctx, stream, n-1, 1)
	if rerr != nil || len(es) == 0 || es[0].State != store.Leased {
		return t, err
	}
	before := es[0].ExpiresAt.Add(-time.Microsecond)
	q := *p
	q.Now = &before
	return s.Store.Commit(ctx, stream, n, token, &q)
}

// holeRelease is a store whose reads lose the numbers it released.
type holeRelease struct {
	buggy
	mu   sync.Mutex
	lost map[string][]int64
}

func (s *holeRelease) Release(ctx context.Context, stream string, n int64, token store.Token, p *store.ReleaseParams) error {
	err := s.Store.Release(ctx, stream, n, token, p)
	if err == nil {
		s.mu.Lock()
		if s.lost == nil {
			s.lost = map[string][]int64{}
		}
		s.lost[stream] = append(s.lost[stream], n)
		s.mu.Unlock()
	}
	return err
}

func (s *holeRelease) hide(stream string, es []store.Entry) []store.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(es, func(e store.Entry) bool { return slices.Contains(s.lost[stream], e.Number) })
}

func (s *holeRelease) Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	es, err := s.Store.Read(ctx, stream, after, limit)
	return s.hide(stream, es), err
}

func (s *holeRelease) ReadResolved(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	es, err := s.Store.ReadResolved(ctx, stream, after, limit)
	return s.hide(stream, es), err
}

// greedyAcquire is a store whose AcquireLease of a held name takes it
// from its live holder.
type greedyAcquire struct{ buggy }

func (s *greedyAcquire) AcquireLease(ctx context.Context, name, owner string, p *store.AcquireLeaseParams) (store.NamedLease, error) {
	l, err := s.Store.AcquireLease(ctx, name, owner, p)
	var he *store.HeldError
	if !errors.As(err, &he) || he.Owner == owner {
		return l, err
	}
	if _, err := s.ForceReleaseLeases(ctx, he.Owner, nil); err != nil {
		return l, err
	}
	return s.Store.AcquireLease(ctx, name, owner, p)
}

// earlyScan is a store whose ListExpired looks a minute ahead.
type earlyScan struct{ buggy }

func (s *earlyScan) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	now, err := s.Now(ctx)
	if err != nil {
		return nil, err
	}
	ahead := now.Add(time.Minute)
	q := *p
	q.Now = &ahead
	return s.Store.ListExpired(ctx, &q)
}

// blindScan is a store whose ListExpired finds nothing.
type blindScan struct{ buggy }

func (s *blindScan) ListExpired(context.Context, *store.ListExpiredParams) ([]store.Entry, error) {
	return nil, nil
}

// TestExtendAfterLocalDeadline is what the model test found on PostgreSQL
// (docs/internals/reliability.md): a Lease whose local deadline had passed stayed over
// after an Extend that the database accepted, so an ordered Commit then
// failed at once although the lease was live. Extend now refuses a handle
// that is over, consistently, and changes nothing.
func TestExtendAfterLocalDeadline(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	st := memory.New(&memory.Config{Now: clk.now})
	b, err := barrier.New(st, nil)
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	defer b.Stop()
	l, err := sequence.New(st, &sequence.Config{Barrier: b, Now: clk.now})
	require.NoError(t, err)
	opts := &sequence.LeaseOpts{TTL: 10 * time.Second}
	_, err = l.Lease(ctx, "s", opts) // 1 stays unresolved
	require.NoError(t, err)
	x, err := l.Lease(ctx, "s", opts)
	require.NoError(t, err)
	before := x.ExpiresAt()
	clk.add(9500 * time.Millisecond) // past the local deadline (TTL - 1 s margin), before the expiry
	require.ErrorIs(t, x.Err(), sequence.ErrExpired)
	require.ErrorIs(t, x.Extend(ctx, 10*time.Second), sequence.ErrExpired)
	require.Equal(t, before, x.ExpiresAt(), "nothing extended")
	es, err := st.Read(ctx, "s", 1, 1)
	require.NoError(t, err)
	require.Equal(t, before, es[0].ExpiresAt, "nothing extended in the store")
}
