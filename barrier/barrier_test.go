package barrier_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// source is a backend the barrier runs on, with the writes the tests need.
type source interface {
	barrier.Source
	Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error)
	Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error)
	Release(ctx context.Context, stream string, number int64, token store.Token, p *store.ReleaseParams) error
}

var (
	_ source = (*memory.Store)(nil)
	_ source = (*postgres.Store)(nil)
)

func backends(t *testing.T) map[string]source {
	pool := pgtest.Shared(t, false)
	pg, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
	require.NoError(t, err)
	return map[string]source{"memory": memory.New(nil), "postgres": pg}
}

func start(t *testing.T, src barrier.Source, cfg *barrier.Config) *barrier.Barrier {
	b, err := barrier.New(src, cfg)
	require.NoError(t, err)
	require.NoError(t, b.Start(context.Background()))
	t.Cleanup(b.Stop)
	return b
}

func lease(t *testing.T, s source, stream string, n int) []store.Entry {
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Hour}
	}
	es, err := s.Lease(context.Background(), stream, reqs, nil)
	require.NoError(t, err)
	return es
}

func commit(t *testing.T, s source, e store.Entry) {
	_, err := s.Commit(context.Background(), e.Stream, e.Number, e.Token, &store.CommitParams{Payload: []byte(fmt.Sprint(e.Number))})
	assert.NoError(t, err) // called from worker goroutines too
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitClosed waits for ch, failing the test after a generous bound.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not woken", what)
	}
}

// TestWakesExactlyWhoseTurnCame parks a waiter per number and resolves the
// numbers out of order: after each resolution exactly the waiters whose turn
// came are awake, and the watermark never goes back.
func TestWakesExactlyWhoseTurnCame(t *testing.T) {
	t.Parallel()
	for name, src := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			b := start(t, src, nil)
			const n = 40
			es := lease(t, src, "s", n)
			ready := make([]<-chan struct{}, n+2)
			for i := 1; i <= n+1; i++ {
				ch, cancel, err := b.Ready(ctx, "s", int64(i))
				require.NoError(t, err)
				defer cancel()
				ready[i] = ch
			}
			require.True(t, closed(ready[1]), "1 waits for nothing")
			// Resolve in a scrambled order: evens descending, then odds.
			var order []int
			for i := n; i >= 1; i -= 2 {
				order = append(order, i)
			}
			for i := 1; i <= n; i += 2 {
				order = append(order, i)
			}
			resolved := map[int]bool{}
			last := int64(0)
			for _, k := range order {
				if k%3 == 0 {
					require.NoError(t, src.Release(ctx, "s", int64(k), es[k-1].Token, nil))
				} else {
					commit(t, src, es[k-1])
				}
				resolved[k] = true
				w := 0
				for resolved[w+1] {
					w++
				}
				// Wake-ups may arrive a little later across the wire, never wrongly.
				waitClosed(t, ready[w+1], fmt.Sprintf("after resolving %d, waiter %d", k, w+1))
				for i := w + 2; i <= n+1; i++ {
					require.False(t, closed(ready[i]), "after resolving %d (W=%d), waiter %d woke early", k, w, i)
				}
				got, err := b.Watermark(ctx, "s")
				require.NoError(t, err)
				require.GreaterOrEqual(t, got, last, "the watermark went back")
				last = got
			}
			require.Equal(t, int64(n), last)
		})
	}
}

func TestWaitForContextAndLifecycle(t *testing.T) {
	t.Parallel()
	src := memory.New(nil)
	b, err := barrier.New(src, nil)
	require.NoError(t, err)
	require.ErrorIs(t, b.WaitFor(context.Background(), "s", 1), barrier.ErrNotStarted)
	b.Stop() // before Start: fine
	require.ErrorIs(t, b.Start(context.Background()), barrier.ErrStopped)
	b.Stop() // twice: fine

	b = start(t, src, nil)
	lease(t, src, "s", 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, b.WaitFor(ctx, "s", 2), context.Canceled)
	require.NoError(t, b.WaitFor(ctx, "s", 1), "no wait needed: no context check")
	require.ErrorIs(t, b.WaitFor(context.Background(), "", 1), store.ErrInvalidStream)
	b.Stop()
	require.ErrorIs(t, b.WaitFor(context.Background(), "s", 2), barrier.ErrStopped)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	src := memory.New(nil)
	for name, cfg := range map[string]barrier.Config{
		"PollInterval":  {PollInterval: -1},
		"QueryTimeout":  {QueryTimeout: -1},
		"SnapshotLimit": {SnapshotLimit: store.MaxListLimit + 1},
	} {
		_, err := barrier.New(src, &cfg)
		require.ErrorContains(t, err, "Config."+name)
	}
	_, err := barrier.New(nil, nil)
	require.Error(t, err)
}

// TestSnapshotCutAtLimit makes the barrier work from snapshots that list
// fewer unresolved numbers than exist, so it must read again as it advances.
func TestSnapshotCutAtLimit(t *testing.T) {
	t.Parallel()
	for name, src := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := start(t, src, &barrier.Config{SnapshotLimit: 2, PollInterval: 10 * time.Millisecond})
			es := lease(t, src, "s", 10)
			ch, cancel, err := b.Ready(context.Background(), "s", 11)
			require.NoError(t, err)
			defer cancel()
			for _, e := range es {
				commit(t, src, e)
			}
			waitClosed(t, ch, "waiter for 11")
		})
	}
}

// TestCrossPool runs what two processes would on two independent pools of
// one schema: each pool has its own store, barrier (with a safety poll of an
// hour, so wake-ups come from notifications and from the re-read after a
// reconnect) and Leaser. The numbers alternate between the pools, and the
// commits of a round are parked in reverse order before the first is made:
// every ordered commit then waits for a number the other pool committed, so
// wake-ups cross in both directions. With the second round parked, both
// listening connections are killed with pg_terminate_backend and the round
// is set off at once: it loses no wake-up either.
func TestCrossPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	poolA := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, poolA)
	poolB, err := pgtest.NewPool(ctx, &pgtest.Options{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(poolB.Close)
	type side struct {
		store  *postgres.Store
		waiter *parkCounter
		leaser *sequence.Leaser
	}
	var sides [2]side
	for i, pool := range []*pgxpool.Pool{poolA, poolB} {
		s, err := postgres.New(pool, &postgres.Config{Schema: schema})
		require.NoError(t, err)
		w := &parkCounter{Waiter: start(t, s, &barrier.Config{PollInterval: time.Hour}), parks: map[int64]int{}}
		l, err := sequence.New(s, &sequence.Config{Barrier: w, Owner: fmt.Sprint("pool ", i)})
		require.NoError(t, err)
		sides[i] = side{s, w, l}
	}

	const perRound = 8
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // a failed round leaves commits parked until their lease ends
	type round struct {
		what    string
		xs      []*sequence.Lease
		results []chan error
	}
	// park leases a round's numbers, alternately in each pool, and parks
	// the commits of all but the first, in reverse order.
	park := func(what string) round {
		t.Helper()
		r := round{what, make([]*sequence.Lease, perRound), make([]chan error, perRound)}
		for i := range r.xs {
			r.xs[i], err = sides[i%2].leaser.Lease(ctx, "x", &sequence.LeaseOpts{TTL: 30 * time.Second})
			require.NoError(t, err)
		}
		for i := perRound - 1; i >= 1; i-- {
			x, ch := r.xs[i], make(chan error, 1)
			r.results[i] = ch
			wg.Go(func() { ch <- x.Commit(ctx, fmt.Append(nil, x.Number())) })
			w := sides[i%2].waiter
			require.Eventually(t, func() bool { return w.parked(x.Number()) >= 1 }, 10*time.Second, 100*time.Microsecond,
				"%s: the commit of %d did not park", what, x.Number())
		}
		return r
	}
	// run commits the round's first number, which sets off the chain: each
	// parked commit is woken by the commit before it, made in the other pool.
	run := func(r round) {
		t.Helper()
		for i := 1; i < perRound; i++ {
			select {
			case err := <-r.results[i]:
				t.Fatalf("%s: %d committed before %d: %v", r.what, r.xs[i].Number(), r.xs[0].Number(), err)
			default:
			}
		}
		require.NoError(t, r.xs[0].Commit(ctx, fmt.Append(nil, r.xs[0].Number())))
		for i := 1; i < perRound; i++ {
			select {
			case err := <-r.results[i]:
				require.NoError(t, err, "%s: commit of %d", r.what, r.xs[i].Number())
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: the commit of %d (pool %d) was not woken by %d's (pool %d)",
					r.what, r.xs[i].Number(), i%2, r.xs[i-1].Number(), (i-1)%2)
			}
		}
	}
	run(park("connected"))

	// Kill both listeners with a round parked, and set it off as soon as
	// they are gone: its first notifications are sent while the pools
	// reconnect (after a pause of 50 ms), so the barriers learn of them
	// from the re-read after the reconnect.
	r := park("after the listeners were killed")
	rows, err := poolB.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'`, schema)
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Len(t, pids, 2, "one listener per pool")
	_, err = poolB.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid`, pids)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var alive bool
		err := poolB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = ANY($1))`, pids).Scan(&alive)
		return err == nil && !alive
	}, 10*time.Second, 100*time.Microsecond)
	run(r)

	es, err := sides[0].store.Read(ctx, "x", 0, 0)
	require.NoError(t, err)
	require.Len(t, es, 2*perRound)
	var latest time.Time
	for i, e := range es {
		require.Equal(t, int64(i+1), e.Number)
		require.Equal(t, store.Committed, e.State)
		require.Equal(t, fmt.Sprint("pool ", i%2), e.Owner, "the pools alternate")
		require.False(t, e.ResolvedAt.Before(latest), "%d committed before %d", e.Number, e.Number-1)
		latest = e.ResolvedAt
	}
}

// parkCounter counts the Ready calls per number: an ordered commit calls
// Ready each time it parks at the barrier.
type parkCounter struct {
	sequence.Waiter
	mu    sync.Mutex
	parks map[int64]int
}

func (w *parkCounter) Ready(ctx context.Context, stream string, n int64) (<-chan struct{}, func(), error) {
	w.mu.Lock()
	w.parks[n]++
	w.mu.Unlock()
	return w.Waiter.Ready(ctx, stream, n)
}

func (w *parkCounter) parked(n int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.parks[n]
}

// TestManyWaitersOneStream checks that a crowd of waiters is served
// correctly under concurrent resolutions (run with -race).
func TestManyWaitersOneStream(t *testing.T) {
	t.Parallel()
	src := memory.New(nil)
	b := start(t, src, nil)
	const n = 300
	es := lease(t, src, "s", n)
	var wg sync.WaitGroup
	woke := make([]int64, n+1)
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			assert.NoError(t, b.WaitFor(context.Background(), "s", int64(i)))
			w, err := b.Watermark(context.Background(), "s")
			assert.NoError(t, err)
			woke[i] = w
		})
	}
	for i := n - 1; i >= 0; i-- {
		wg.Go(func() { commit(t, src, es[i]) })
	}
	wg.Wait()
	for i := 1; i <= n; i++ {
		require.GreaterOrEqual(t, woke[i], int64(i-1), "waiter %d woke before its turn", i)
	}
}

// deafSource loses every notification while deaf, like a listener whose
// connection died; Reset then tells the barrier to re-read.
type deafSource struct {
	*memory.Store
	mu   sync.Mutex
	deaf bool
	sink store.Sink
}

func (d *deafSource) Watch(ctx context.Context, sink store.Sink) error {
	return d.Store.Watch(ctx, deafSink{d, sink})
}

type deafSink struct {
	d    *deafSource
	sink store.Sink
}

func (s deafSink) Resolved(stream string, n int64) {
	s.d.mu.Lock()
	deaf := s.d.deaf
	s.d.mu.Unlock()
	if !deaf {
		s.sink.Resolved(stream, n)
	}
}

func (s deafSink) ResolvedThrough(stream string, through int64) {
	s.d.mu.Lock()
	deaf := s.d.deaf
	s.d.mu.Unlock()
	if !deaf {
		s.sink.ResolvedThrough(stream, through)
	}
}

func (s deafSink) Reset() {
	s.d.mu.Lock()
	s.d.sink = s.sink
	s.d.mu.Unlock()
	s.sink.Reset()
}

// hear ends the deafness the way a reconnect does: with a Reset.
func (d *deafSource) hear() {
	d.mu.Lock()
	d.deaf = false
	sink := d.sink
	d.mu.Unlock()
	sink.Reset()
}

func TestResetRecoversMissedResolutions(t *testing.T) {
	t.Parallel()
	src := &deafSource{Store: memory.New(nil)}
	b := start(t, src, &barrier.Config{PollInterval: time.Hour})
	require.Eventually(t, func() bool { // the watch registered
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.sink != nil
	}, 10*time.Second, time.Millisecond)
	es := lease(t, src, "s", 3)
	ch, cancel, err := b.Ready(context.Background(), "s", 3)
	require.NoError(t, err)
	defer cancel()

	src.mu.Lock()
	src.deaf = true
	src.mu.Unlock()
	commit(t, src, es[0])
	commit(t, src, es[1])
	require.False(t, closed(ch), "the resolutions were missed")
	src.hear()
	waitClosed(t, ch, "waiter after the reset")
}

func TestSafetyPollRecoversMissedResolutions(t *testing.T) {
	t.Parallel()
	src := &deafSource{Store: memory.New(nil), deaf: true}
	b := start(t, src, &barrier.Config{PollInterval: 5 * time.Millisecond})
	es := lease(t, src, "s", 2)
	ch, cancel, err := b.Ready(context.Background(), "s", 3)
	require.NoError(t, err)
	defer cancel()
	commit(t, src, es[0])
	commit(t, src, es[1])
	waitClosed(t, ch, "waiter rescued by the poll")
}
