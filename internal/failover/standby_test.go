//go:build failover

package failover_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

const (
	standbySchema  = "standby"
	standbyStream  = "replica"
	standbyWorkers = 4
	standbyLoad    = 5 * time.Second // how long the workers commit
	releaseEvery   = 10              // every 10th lease is released: a gap
)

// follower reads the stream through a barrier over a Standby, following,
// gaps included, and checks each entry as it comes.
type follower struct {
	name    string
	b       *barrier.Barrier
	replica *postgres.Standby // reads the standby's watermark for the check; nil: none

	mu       sync.Mutex
	got      []store.Entry
	lags     []time.Duration // yield time - the primary's resolved_at, committed entries
	problems []string
	err      error
	progress chan struct{} // capacity 1: an entry came
}

func (f *follower) run(ctx context.Context) {
	for e, err := range f.b.Entries(ctx, standbyStream, &barrier.ReadOpts{Follow: true, IncludeGaps: true}) {
		if err != nil {
			if ctx.Err() == nil {
				f.mu.Lock()
				f.err = err
				f.mu.Unlock()
			}
			return
		}
		at := time.Now()
		// The standby's watermark, read after the yield, can only be
		// higher than at the yield: a number above it was not replayed.
		var snap store.Snapshot
		var err error
		if f.replica != nil {
			snap, err = f.replica.Snapshot(ctx, standbyStream, 1)
		} else {
			snap.Watermark = e.Number // the primary's own follower: no check
		}
		f.mu.Lock()
		switch {
		case err != nil && ctx.Err() == nil:
			f.problems = append(f.problems, fmt.Sprintf("watermark of the standby after %d: %v", e.Number, err))
		case err == nil && e.Number > snap.Watermark:
			f.problems = append(f.problems, fmt.Sprintf("yielded %d above the standby's watermark %d", e.Number, snap.Watermark))
		}
		if want := int64(len(f.got)) + 1; e.Number != want {
			f.problems = append(f.problems, fmt.Sprintf("yielded %d, expected %d", e.Number, want))
		}
		f.got = append(f.got, e)
		if e.State == store.Committed {
			f.lags = append(f.lags, at.Sub(e.ResolvedAt))
		}
		f.mu.Unlock()
		select {
		case f.progress <- struct{}{}:
		default:
		}
	}
}

func (f *follower) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.got)
}

// TestStandbyReader runs ordered workers on the primary (through the
// multi-host URL) while two followers read the stream on the synchronous
// standby's own pool, through a postgres.Standby: one woken by the
// primary's notices, one by its poll alone (and, for comparison, one
// follows on the primary). Each must yield exactly the
// primary's resolved sequence (numbers, states, payloads, gaps) in order,
// never a number above the standby's watermark; their lag behind the
// primary's commits is logged. Then a replay from 0 on the standby must
// equal one on the primary.
func TestStandbyReader(t *testing.T) {
	url, ns := nodes(t)
	ctx := t.Context()

	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	m, err := migrations.New(&migrations.Config{Schema: standbySchema})
	require.NoError(t, err)
	_, err = m.Up(ctx, pool)
	require.NoError(t, err)

	standby := -1
	for i, n := range ns {
		if ok, err := writable(ctx, n.port); err == nil && !ok {
			standby = i
		}
	}
	require.GreaterOrEqual(t, standby, 0, "no node is in recovery")
	t.Logf("standby: node%d (port %d)", standby+1, ns[standby].port)
	spool, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable&pool_max_conns=8", ns[standby].port))
	require.NoError(t, err)
	defer spool.Close()
	var inRecovery bool
	require.NoError(t, spool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery))
	require.True(t, inRecovery, "the standby's pool reaches a primary")
	// The migrations reach the synchronous standby before they return
	// (flushed), and are visible there once replayed.
	require.Eventually(t, func() bool {
		var ok bool
		err := spool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", standbySchema+".entries").Scan(&ok)
		return err == nil && ok
	}, 30*time.Second, 20*time.Millisecond, "the schema never showed on the standby")

	s, err := postgres.New(pool, &postgres.Config{Schema: standbySchema})
	require.NoError(t, err)
	b, err := barrier.New(s, &barrier.Config{PollInterval: 500 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	defer b.Stop()
	cl, err := cleanup.New(s, &cleanup.Config{Interval: time.Second, Barrier: b})
	require.NoError(t, err)
	require.NoError(t, cl.Start(ctx))
	defer cl.Stop()
	l, err := sequence.New(s, &sequence.Config{Barrier: b, Owner: "standby"})
	require.NoError(t, err)

	// The followers, each with its Standby and barrier.
	newFollower := func(name string, sc *postgres.StandbyConfig) *follower {
		sc.Schema = standbySchema
		sb, err := postgres.NewStandby(spool, sc)
		require.NoError(t, err)
		fb, err := barrier.New(sb, nil)
		require.NoError(t, err)
		require.NoError(t, fb.Start(ctx))
		t.Cleanup(fb.Stop)
		check, err := postgres.NewStandby(spool, &postgres.StandbyConfig{Schema: standbySchema})
		require.NoError(t, err)
		return &follower{name: name, b: fb, replica: check, progress: make(chan struct{}, 1)}
	}
	followers := []*follower{
		newFollower("notices", &postgres.StandbyConfig{Primary: s}),
		newFollower("poll", &postgres.StandbyConfig{PollInterval: 100 * time.Millisecond}),
		// For comparison: a follower on the primary, through the workers'
		// barrier, as readers were before.
		{name: "on the primary", b: b, progress: make(chan struct{}, 1)},
	}
	fctx, stopFollowers := context.WithCancel(ctx)
	var fwg sync.WaitGroup
	for _, f := range followers {
		fwg.Go(func() { f.run(fctx) })
	}
	stoppedFollowers := false
	stopF := func() {
		if !stoppedFollowers {
			stoppedFollowers = true
			stopFollowers()
			fwg.Wait()
		}
	}
	defer stopF()

	// The load: ordered commits, every releaseEvery-th lease released.
	var (
		amu   sync.Mutex
		acked = map[int64][]byte{}
		fails = map[string]int{}
	)
	lctx, stopLoad := context.WithTimeout(ctx, standbyLoad)
	defer stopLoad()
	var wg sync.WaitGroup
	for w := range standbyWorkers {
		wg.Go(func() {
			for i := 0; lctx.Err() == nil; i++ {
				x, err := l.Lease(lctx, standbyStream, &sequence.LeaseOpts{TTL: 5 * time.Second})
				if err != nil {
					if lctx.Err() == nil {
						amu.Lock()
						fails["lease: "+err.Error()]++
						amu.Unlock()
					}
					continue
				}
				if i%releaseEvery == releaseEvery-1 {
					if err := x.Release(context.WithoutCancel(lctx)); err != nil {
						amu.Lock()
						fails["release: "+err.Error()]++
						amu.Unlock()
					}
					continue
				}
				payload := fmt.Appendf(nil, "w%d/%d", w, i)
				// Not lctx: a commit cut at the load's end would leave its
				// number to the cleanup loop.
				if err := x.Commit(ctx, payload); err != nil {
					amu.Lock()
					fails["commit: "+err.Error()]++
					amu.Unlock()
					continue
				}
				amu.Lock()
				acked[x.Number()] = payload
				amu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("load: %d workers for %v: %d acknowledged commits (%.0f/s); failed calls: %v",
		standbyWorkers, standbyLoad, len(acked), float64(len(acked))/standbyLoad.Seconds(), fails)
	require.NotEmpty(t, acked)

	// Everything resolved on the primary: the last number.
	stats, err := s.Stats(ctx, standbyStream)
	require.NoError(t, err)
	last := stats.NextNumber - 1
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	require.NoError(t, b.WaitFor(wctx, standbyStream, last+1), "the stream was not all resolved")
	cancel()

	// The followers catch up.
	for _, f := range followers {
		deadline := time.After(30 * time.Second)
		for f.count() < int(last) {
			select {
			case <-f.progress:
			case <-deadline:
				t.Fatalf("follower %s read %d of %d in 30 s after the load", f.name, f.count(), last)
			}
		}
	}
	stopF()

	// The primary's sequence, replayed on the primary.
	replay := func(b *barrier.Barrier, gaps bool) []store.Entry {
		var out []store.Entry
		for e, err := range b.Entries(ctx, standbyStream, &barrier.ReadOpts{IncludeGaps: gaps}) {
			require.NoError(t, err)
			out = append(out, e)
		}
		return out
	}
	want := replay(b, true)
	require.Len(t, want, int(last))
	gaps := 0
	for _, e := range want {
		if e.State == store.Gap {
			gaps++
		} else if p, ok := acked[e.Number]; ok {
			require.Equal(t, p, e.Payload, "payload of %d", e.Number)
		}
	}
	for n := range acked {
		require.LessOrEqual(t, n, last)
		require.Equal(t, store.Committed, want[n-1].State, "acknowledged %d", n)
	}

	for _, f := range followers {
		f.mu.Lock()
		require.NoError(t, f.err, "follower %s", f.name)
		require.Empty(t, f.problems, "follower %s", f.name)
		require.Equal(t, want, f.got, "follower %s: not the primary's sequence", f.name)
		lags := slices.Clone(f.lags)
		f.mu.Unlock()
		slices.Sort(lags)
		q := func(p float64) time.Duration { return lags[int(p*float64(len(lags)-1))].Round(10 * time.Microsecond) }
		t.Logf("follower %s: %d entries (%d gaps) in order; lag behind the primary's commit (yield - resolved_at), %d committed: p50 %v, p90 %v, p99 %v, max %v",
			f.name, len(f.got), gaps, len(lags), q(0.5), q(0.9), q(0.99), lags[len(lags)-1].Round(10*time.Microsecond))
	}

	// A replay from 0 on the standby equals one on the primary, with and
	// without gaps.
	sb, err := postgres.NewStandby(spool, &postgres.StandbyConfig{Schema: standbySchema})
	require.NoError(t, err)
	onStandby, err := barrier.New(sb, nil)
	require.NoError(t, err)
	require.NoError(t, onStandby.Start(ctx))
	defer onStandby.Stop()
	require.Equal(t, want, replay(onStandby, true), "replay with gaps")
	require.Equal(t, replay(b, false), replay(onStandby, false), "replay without gaps")
	w, err := onStandby.Watermark(ctx, standbyStream)
	require.NoError(t, err)
	require.Equal(t, last, w)
	t.Logf("replay from 0: %d entries, %d gaps, equal on the standby and the primary", len(want), gaps)
}
