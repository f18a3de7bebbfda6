//go:build failover

package failover_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

const (
	standbyWorkers = 4
	standbyLoad    = 5 * time.Second // how long the workers commit
	releaseEvery   = 10              // every 10th lease is released: a gap
)

// follower reads the stream through a barrier over a Standby, following,
// gaps included, and checks each entry as it comes.
type standbyFollower struct {
	name    string
	stream  string
	b       *barrier.Barrier
	replica *postgres.Standby // reads the standby's watermark for the check; nil: none

	mu       sync.Mutex
	got      []store.Entry
	lags     []time.Duration // yield time - the primary's resolved_at, committed entries
	problems []string
	err      error
	progress chan struct{} // capacity 1: an entry came
}

func (f *standbyFollower) run(ctx context.Context) {
	for e, err := range f.b.Entries(ctx, f.stream, &barrier.ReadOpts{Follow: true, IncludeGaps: true}) {
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
			snap, err = f.replica.Snapshot(ctx, f.stream, 1)
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

func (f *standbyFollower) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.got)
}

// standbyRig is a schema on the cluster with the writers' Store, barrier,
// cleanup loop and Leaser on the primary (through the multi-host URL),
// and followers of its stream.
type standbyRig struct {
	schema, stream   string
	ns               []node
	primary, standby int // node indexes
	spool            *pgxpool.Pool
	s                *postgres.Store
	b                *barrier.Barrier
	l                *sequence.Leaser
	followers        []*standbyFollower
	stop             func() // stops the followers and waits for them
}

// newStandbyRig migrates schema and starts the writers' side and three
// followers of stream: two on the synchronous standby through a
// postgres.Standby, one woken by the primary's notices and one by its
// poll alone, and, for comparison, one on the primary. The standby's
// pool uses the cluster's multi-host URL with
// target_session_attrs=prefer-standby, as docs/readers.md suggests.
func newStandbyRig(t *testing.T, schema, stream string) *standbyRig {
	url, ns := nodes(t)
	ctx := t.Context()
	r := &standbyRig{schema: schema, stream: stream, ns: ns, primary: -1, standby: -1}

	pool := migratedPool(t, url, schema, 16)

	for i, n := range ns {
		switch ok, err := writable(ctx, n.port); {
		case err == nil && ok:
			r.primary = i
		case err == nil:
			r.standby = i
		}
	}
	require.GreaterOrEqual(t, r.primary, 0, "no node accepts writes")
	require.GreaterOrEqual(t, r.standby, 0, "no node is in recovery")
	t.Logf("primary: node%d (port %d); standby: node%d (port %d)",
		r.primary+1, ns[r.primary].port, r.standby+1, ns[r.standby].port)
	r.spool = openPool(t, strings.Replace(url, "target_session_attrs=read-write", "target_session_attrs=prefer-standby", 1), 8)
	var inRecovery bool
	require.NoError(t, r.spool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery))
	require.True(t, inRecovery, "the standby's pool reaches the primary")
	// The migrations reach the synchronous standby before they return
	// (flushed), and are visible there once replayed.
	require.Eventually(t, func() bool {
		var ok bool
		err := r.spool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", schema+".entries").Scan(&ok)
		return err == nil && ok
	}, 30*time.Second, 20*time.Millisecond, "the schema never showed on the standby")

	var err error
	r.s, err = postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	r.b, err = barrier.New(r.s, &barrier.Config{PollInterval: 500 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.b.Start(ctx))
	t.Cleanup(r.b.Stop)
	cl, err := cleanup.New(r.s, &cleanup.Config{Interval: time.Second, Barrier: r.b})
	require.NoError(t, err)
	require.NoError(t, cl.Start(ctx))
	t.Cleanup(cl.Stop)
	r.l, err = sequence.New(r.s, &sequence.Config{Barrier: r.b, Owner: "standby"})
	require.NoError(t, err)

	newFollower := func(name string, sc *postgres.StandbyConfig) *standbyFollower {
		sc.Schema = schema
		sb, err := postgres.NewStandby(r.spool, sc)
		require.NoError(t, err)
		fb, err := barrier.New(sb, nil)
		require.NoError(t, err)
		require.NoError(t, fb.Start(ctx))
		t.Cleanup(fb.Stop)
		check, err := postgres.NewStandby(r.spool, &postgres.StandbyConfig{Schema: schema})
		require.NoError(t, err)
		return &standbyFollower{name: name, stream: stream, b: fb, replica: check, progress: make(chan struct{}, 1)}
	}
	r.followers = []*standbyFollower{
		newFollower("notices", &postgres.StandbyConfig{Primary: r.s}),
		newFollower("poll", &postgres.StandbyConfig{PollInterval: 100 * time.Millisecond}),
		// For comparison: a follower on the primary, through the workers'
		// barrier, as readers were before.
		{name: "on the primary", stream: stream, b: r.b, progress: make(chan struct{}, 1)},
	}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, f := range r.followers {
		wg.Go(func() { f.run(fctx) })
	}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(r.stop)
	return r
}

// replay reads the whole stream through b, gaps included or not.
func (r *standbyRig) replay(t *testing.T, b *barrier.Barrier, gaps bool) []store.Entry {
	t.Helper()
	var out []store.Entry
	for e, err := range b.Entries(t.Context(), r.stream, &barrier.ReadOpts{IncludeGaps: gaps}) {
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

// finish waits for every number of the stream to resolve on the primary
// and for the followers to read them all, stops the followers, and checks
// what they yielded against a replay on the primary, which it returns,
// and that every acknowledged commit is in it with its payload. It logs
// each follower's lag.
func (r *standbyRig) finish(t *testing.T, acked map[int64][]byte) []store.Entry {
	t.Helper()
	ctx := t.Context()
	stats, err := r.s.Stats(ctx, r.stream)
	require.NoError(t, err)
	last := stats.NextNumber - 1
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	require.NoError(t, r.b.WaitFor(wctx, r.stream, last+1), "the stream was not all resolved")
	cancel()
	for _, f := range r.followers {
		deadline := time.After(30 * time.Second)
		for f.count() < int(last) {
			select {
			case <-f.progress:
			case <-deadline:
				t.Fatalf("follower %s read %d of %d in 30 s after the load", f.name, f.count(), last)
			}
		}
	}
	r.stop()

	want := r.replay(t, r.b, true)
	require.Len(t, want, int(last))
	gaps := 0
	for _, e := range want {
		if e.State == store.Gap {
			gaps++
		}
	}
	for n, p := range acked {
		require.LessOrEqual(t, n, last)
		require.Equal(t, store.Committed, want[n-1].State, "acknowledged %d", n)
		require.Equal(t, p, want[n-1].Payload, "payload of %d", n)
	}
	for _, f := range r.followers {
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
	return want
}

// TestStandbyReader runs ordered workers on the primary while followers
// read the stream on the synchronous standby (see newStandbyRig). Each
// must yield exactly the primary's resolved sequence (numbers, states,
// payloads, gaps) in order, never a number above the standby's
// watermark; their lag behind the primary's commits is logged. Then a
// replay from 0 on the standby must equal one on the primary.
func TestStandbyReader(t *testing.T) {
	ctx := t.Context()
	r := newStandbyRig(t, "standby", "replica")

	// The load: ordered commits, every releaseEvery-th lease released.
	var (
		amu   sync.Mutex
		acked = map[int64][]byte{}
		fails = map[string]int{}
	)
	fail := func(what string, err error) {
		amu.Lock()
		fails[what+": "+err.Error()]++
		amu.Unlock()
	}
	lctx, stopLoad := context.WithTimeout(ctx, standbyLoad)
	defer stopLoad()
	var wg sync.WaitGroup
	for w := range standbyWorkers {
		wg.Go(func() {
			for i := 0; lctx.Err() == nil; i++ {
				x, err := r.l.Lease(lctx, r.stream, &sequence.LeaseOpts{TTL: 5 * time.Second})
				if err != nil {
					if lctx.Err() == nil {
						fail("lease", err)
					}
					continue
				}
				if i%releaseEvery == releaseEvery-1 {
					if err := x.Release(ctx); err != nil {
						fail("release", err)
					}
					continue
				}
				payload := fmt.Appendf(nil, "w%d/%d", w, i)
				// Not lctx: a commit cut at the load's end would leave its
				// number to the cleanup loop.
				if err := x.Commit(ctx, payload); err != nil {
					fail("commit", err)
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
	want := r.finish(t, acked)

	// A replay from 0 on the standby equals one on the primary, with and
	// without gaps.
	sb, err := postgres.NewStandby(r.spool, &postgres.StandbyConfig{Schema: r.schema})
	require.NoError(t, err)
	onStandby, err := barrier.New(sb, nil)
	require.NoError(t, err)
	require.NoError(t, onStandby.Start(ctx))
	defer onStandby.Stop()
	require.Equal(t, want, r.replay(t, onStandby, true), "replay with gaps")
	require.Equal(t, r.replay(t, r.b, false), r.replay(t, onStandby, false), "replay without gaps")
	w, err := onStandby.Watermark(ctx, r.stream)
	require.NoError(t, err)
	require.EqualValues(t, len(want), w)
	t.Logf("replay from 0: %d entries, equal on the standby and the primary", len(want))
}

// TestStandbyPromoted has followers read the synchronous standby while
// ordered workers commit, kills the primary node so that the standby is
// promoted, and checks that the followers go on, without a restart, and
// yield exactly the sequence the new primary holds. It kills a node, so
// it runs after TestStandbyReader, which needs both.
func TestStandbyPromoted(t *testing.T) {
	ctx := t.Context()
	r := newStandbyRig(t, "promoted", "promoted")
	g := &ledger{
		leased:  map[string]map[int64]string{r.stream: {}},
		acked:   map[string]map[int64][]byte{r.stream: {}},
		errs:    map[string]int{},
		resumed: make(chan struct{}),
		warm:    make(chan struct{}),
	}
	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	started := make(chan struct{}, standbyWorkers)
	for w := range standbyWorkers {
		wg.Go(func() { work(lctx, g, r.l, r.stream, fmt.Sprintf("w%d", w), started) })
	}
	stop := sync.OnceFunc(func() {
		stopLoad()
		wg.Wait()
	})
	defer stop()
	select {
	case <-g.warm:
	case <-time.After(time.Minute):
		t.Fatalf("fewer than %d commits within a minute before the kill", warmup)
	}
	kill(t, r.ns[r.primary])
	g.mu.Lock()
	g.killedAt = time.Now()
	g.mu.Unlock()
	t.Logf("killed node%d (the primary)", r.primary+1)
	select {
	case <-g.resumed:
	case <-time.After(resumeWait):
		t.Fatalf("fewer than %d commits within %v of the kill", afterKill, resumeWait)
	}
	stop()
	ok, err := writable(ctx, r.ns[r.standby].port)
	require.NoError(t, err)
	require.True(t, ok, "node%d was not promoted", r.standby+1)
	g.mu.Lock()
	acked := g.acked[r.stream]
	t.Logf("acknowledged commits: %d; failed calls: %v", len(acked), g.errs)
	g.mu.Unlock()
	want := r.finish(t, acked)
	require.Empty(t, g.dups, "numbers handed out twice")
	t.Logf("followers read %d entries across the promotion, equal to the new primary's", len(want))
}
