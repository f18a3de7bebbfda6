package barrier_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

var (
	_ barrier.Checkpoints = (*memory.Store)(nil)
	_ barrier.Checkpoints = (*postgres.Store)(nil)
)

// checkpointer is a backend with checkpoints.
type checkpointer interface {
	source
	barrier.Checkpoints
	SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error
	Trim(ctx context.Context, stream string, below int64) (int64, error)
}

// readAll reads stream to its watermark and returns the numbers, or the
// first error.
func readAll(b *barrier.Barrier, stream string, opts *barrier.ReadOpts) ([]int64, error) {
	var got []int64
	for e, err := range b.Entries(context.Background(), stream, opts) {
		if err != nil {
			return got, err
		}
		got = append(got, e.Number)
	}
	return got, nil
}

// TestReaderStartsAfterItsCheckpoint: a named reader starts after its saved
// checkpoint, from the start when it has none; a checkpoint below the
// retention low point is ErrTrimmed.
func TestReaderStartsAfterItsCheckpoint(t *testing.T) {
	t.Parallel()
	for name, src := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := src.(checkpointer)
			b := start(t, src, nil)
			for _, e := range lease(t, src, "ckpt", 6) {
				commit(t, src, e)
			}
			got, err := readAll(b, "ckpt", &barrier.ReadOpts{Reader: "projection"})
			require.NoError(t, err)
			require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, got, "no checkpoint: from the start")

			require.NoError(t, s.SaveCheckpoint(ctx, "projection", "ckpt", 4, nil))
			got, err = readAll(b, "ckpt", &barrier.ReadOpts{Reader: "projection"})
			require.NoError(t, err)
			require.Equal(t, []int64{5, 6}, got)
			got, err = readAll(b, "ckpt", &barrier.ReadOpts{Reader: "other"})
			require.NoError(t, err)
			require.Len(t, got, 6, "another reader's checkpoint was used")

			_, err = s.Trim(ctx, "ckpt", 6) // keeps 6 on: a reader at 4 missed 5
			require.NoError(t, err)
			got, err = readAll(b, "ckpt", &barrier.ReadOpts{Reader: "projection", Follow: true})
			require.Empty(t, got)
			require.ErrorIs(t, err, store.ErrTrimmed)
			var te *store.TrimmedError
			require.True(t, errors.As(err, &te))
			require.Equal(t, int64(6), te.LowPoint)
		})
	}
}

// plainSource is a Source without checkpoints.
type plainSource struct{ s *memory.Store }

func (p plainSource) Snapshot(ctx context.Context, stream string, limit int) (store.Snapshot, error) {
	return p.s.Snapshot(ctx, stream, limit)
}
func (p plainSource) Watch(ctx context.Context, sink store.Sink) error { return p.s.Watch(ctx, sink) }
func (p plainSource) ReadResolved(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	return p.s.ReadResolved(ctx, stream, after, limit)
}

// TestReaderRefusesAmbiguousStart: Reader with After, a bad reader name and
// a source without checkpoints each yield one typed error before anything
// is read.
func TestReaderRefusesAmbiguousStart(t *testing.T) {
	t.Parallel()
	src := &readCounter{Store: memory.New(nil)}
	b := start(t, src, nil)
	for _, e := range lease(t, src, "opts", 2) {
		commit(t, src, e)
	}
	for _, c := range []struct {
		name string
		opts barrier.ReadOpts
		want error
	}{
		{"After and Reader", barrier.ReadOpts{After: 1, Reader: "r"}, barrier.ErrAfterWithReader},
		{"empty-looking reader", barrier.ReadOpts{Reader: "\x00"}, store.ErrInvalidReader},
		{"reader not UTF-8", barrier.ReadOpts{Reader: "\xff", Follow: true}, store.ErrInvalidReader},
	} {
		got, err := readAll(b, "opts", &c.opts)
		require.Empty(t, got, c.name)
		require.ErrorIs(t, err, c.want, c.name)
		require.ErrorIs(t, err, store.ErrInvalidArgument, c.name)
	}
	require.Zero(t, src.reads.Load(), "a refused reader read")

	plain := start(t, plainSource{memory.New(nil)}, nil)
	_, err := readAll(plain, "opts", &barrier.ReadOpts{Reader: "r"})
	require.ErrorIs(t, err, barrier.ErrNoCheckpoints)
}

// flaky is a memory backend whose reads fail while failing is set, or
// every time once failAll is.
type flaky struct {
	*memory.Store
	failing atomic.Int64 // reads still to fail
	failAll atomic.Bool
	fails   atomic.Int64 // reads failed so far
}

var errFlaky = errors.New("connection reset")

func (f *flaky) ReadResolved(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	if f.failAll.Load() || f.failing.Add(-1) >= 0 {
		f.fails.Add(1)
		return nil, errFlaky
	}
	return f.Store.ReadResolved(ctx, stream, after, limit)
}

// warnings counts the warnings logged, and calls onWarn for each.
type warnings struct {
	n      atomic.Int64
	onWarn func()
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(context.Context, slog.Record) error {
	w.n.Add(1)
	if w.onWarn != nil {
		w.onWarn()
	}
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// TestFollowerRetriesFailedReads: a follower rides through failed reads
// (warning each time) and yields every entry exactly once; with
// StopOnError, and without Follow, the first failure ends the reader with
// the error.
func TestFollowerRetriesFailedReads(t *testing.T) {
	t.Parallel()
	src := &flaky{Store: memory.New(nil)}
	warns := &warnings{}
	b := start(t, src, &barrier.Config{Logger: slog.New(warns)})
	es := lease(t, src, "flaky", 6)
	for _, e := range es[:3] {
		commit(t, src, e)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []int64
	var wg sync.WaitGroup
	src.failing.Store(2)
	for e, err := range b.Entries(ctx, "flaky", &barrier.ReadOpts{Follow: true, PageSize: 2}) {
		require.NoError(t, err)
		got = append(got, e.Number)
		switch e.Number {
		case 2:
			src.failing.Store(1) // the next page fails once
		case 3:
			src.failing.Store(2) // the read at the watermark fails twice, then it waits
			wg.Go(func() {
				for _, e := range es[3:] {
					commit(t, src, e)
				}
			})
		}
		if e.Number == 6 {
			break
		}
	}
	wg.Wait()
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, got)
	require.Equal(t, int64(5), src.fails.Load())
	require.Equal(t, int64(5), warns.n.Load(), "one warning per failed read")

	src.failing.Store(1)
	_, err := readAll(b, "flaky", &barrier.ReadOpts{Follow: true, StopOnError: true})
	require.ErrorIs(t, err, errFlaky)
	src.failing.Store(1)
	_, err = readAll(b, "flaky", nil)
	require.ErrorIs(t, err, errFlaky)
	require.Equal(t, int64(5), warns.n.Load(), "a reader that ends on errors warned")
}

// TestFollowerRetriesWhenTheStreamMoves: a follower pausing after a failed
// read (a pause of an hour here, as after a long outage) reads again as
// soon as the barrier hears of a resolution on its stream, the sign that
// the backend answers again (a failover ended).
func TestFollowerRetriesWhenTheStreamMoves(t *testing.T) {
	t.Parallel()
	src := &flaky{Store: memory.New(nil)}
	src.failAll.Store(true)
	warned := make(chan struct{}, 1)
	warns := &warnings{onWarn: func() {
		select {
		case warned <- struct{}{}:
		default:
		}
	}}
	b := start(t, src, &barrier.Config{Logger: slog.New(warns)})
	barrier.SetRetryPauses(b, time.Hour, time.Hour)
	es := lease(t, src, "moves", 2)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		<-warned // the follower pauses: the backend comes back, a commit lands
		src.failAll.Store(false)
		commit(t, src, es[0])
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []int64
	for e, err := range b.Entries(ctx, "moves", &barrier.ReadOpts{Follow: true}) {
		require.NoError(t, err, "the follower did not retry when its stream moved")
		got = append(got, e.Number)
		break
	}
	require.Equal(t, []int64{1}, got)
	require.Equal(t, int64(1), src.fails.Load())
}

// TestFollowerRetryEndsOnCancel: a follower pausing between failed reads
// ends as soon as its context ends, with the context's error.
func TestFollowerRetryEndsOnCancel(t *testing.T) {
	t.Parallel()
	src := &flaky{Store: memory.New(nil)}
	src.failAll.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	warns := &warnings{onWarn: cancel} // cancel during the first pause
	b := start(t, src, &barrier.Config{Logger: slog.New(warns)})
	var last error
	for _, err := range b.Entries(ctx, "down", &barrier.ReadOpts{Follow: true}) {
		last = err
	}
	require.ErrorIs(t, last, context.Canceled)
	require.NotErrorIs(t, last, errFlaky)
	require.Equal(t, int64(1), warns.n.Load())
}

// TestFollowerSurvivesTerminatedConnections follows a PostgreSQL stream
// while a writer commits 1..N and the reader's server connections are
// terminated (pg_terminate_backend) again and again: the follower reads
// exactly 1..N, each once, and it did meet failed reads.
func TestFollowerSurvivesTerminatedConnections(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	shared := pgtest.Shared(t, false)
	cfg := &postgres.Config{Schema: pgtest.NewSchema(t, shared)}
	writer, err := postgres.New(shared, cfg)
	require.NoError(t, err)

	var tag [8]byte
	_, _ = rand.Read(tag[:])
	app := "seqlease-reader-" + hex.EncodeToString(tag[:])
	pcfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	pcfg.ConnConfig.RuntimeParams["application_name"] = app
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reader, err := postgres.New(pool, cfg)
	require.NoError(t, err)
	warns := &warnings{}
	b := start(t, reader, &barrier.Config{Logger: slog.New(warns)})
	kill := func() {
		_, err := shared.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app)
		require.NoError(t, err)
	}

	const n = 300
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for range n / 10 {
			reqs := make([]store.LeaseRequest, 10)
			for i := range reqs {
				reqs[i] = store.LeaseRequest{TTL: time.Minute}
			}
			es, err := writer.Lease(ctx, "killed", reqs, nil)
			if !assertNoError(t, err) {
				return
			}
			for _, e := range es {
				if _, err := writer.Commit(ctx, e.Stream, e.Number, e.Token, nil); !assertNoError(t, err) {
					return
				}
			}
		}
	})
	seen := make(map[int64]int)
	var order []int64
	for e, err := range b.Entries(ctx, "killed", &barrier.ReadOpts{Follow: true, PageSize: 7}) {
		require.NoError(t, err)
		seen[e.Number]++
		order = append(order, e.Number)
		if e.Number%25 == 0 {
			kill()
		}
		if e.Number == n {
			break
		}
	}
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i + 1)
	}
	require.Equal(t, want, order, "the follower skipped or repeated entries")
	require.Positive(t, warns.n.Load(), "no read failed: the test did not test retries")
	t.Logf("%d failed reads retried", warns.n.Load())
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("writer: %v", err)
		return false
	}
	return true
}

// projectBatch is the loop of docs/projections.md: it applies up to 100
// entries after the reader's checkpoint to the read model and saves the
// checkpoint, in one transaction. It returns how many entries it passed
// (0: caught up) and the checkpoint it committed. fail, if set, is called
// before the commit and aborts the batch when it returns an error.
func projectBatch(ctx context.Context, b *barrier.Barrier, st *postgres.Store, pool *pgxpool.Pool, fail func() error) (int, int64, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	n, last := 0, int64(0)
	for e, err := range b.Entries(ctx, "orders", &barrier.ReadOpts{Reader: "balances", IncludeGaps: true, PageSize: 100}) {
		if err != nil {
			return 0, 0, err
		}
		n, last = n+1, e.Number
		if e.State == store.Committed {
			// The read model: one row per applied entry, so that an
			// entry applied twice would fail on the primary key.
			if _, err := tx.Exec(ctx, `INSERT INTO applied (number, payload) VALUES ($1, $2)`, e.Number, e.Payload); err != nil {
				return 0, 0, err
			}
		}
		if n == 100 {
			break
		}
	}
	if n == 0 {
		return 0, 0, nil
	}
	if err := st.InTx(tx).SaveCheckpoint(ctx, "balances", "orders", last, nil); err != nil {
		return 0, 0, err
	}
	if fail != nil {
		if err := fail(); err != nil {
			return 0, 0, err
		}
	}
	return n, last, tx.Commit(ctx)
}

// TestExactlyOnceProjection runs the transactional loop of
// docs/projections.md while a writer commits 1..N (with a gap), and aborts
// some batches after their writes and their save: every committed entry is
// applied exactly once, and the checkpoint ends at N.
func TestExactlyOnceProjection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Shared(t, false)
	cfg := &postgres.Config{Schema: pgtest.NewSchema(t, pool)}
	st, err := postgres.New(pool, cfg)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{cfg.Schema, "applied"}.Sanitize()+` (number bigint PRIMARY KEY, payload bytea)`)
	require.NoError(t, err)
	poolCfg := pool.Config()
	poolCfg.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	readPool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	require.NoError(t, err)
	t.Cleanup(readPool.Close)
	b := start(t, st, nil)

	const n = 450
	es := lease(t, st, "orders", n)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for _, e := range es {
			if e.Number == 200 {
				assertNoError(t, st.Release(ctx, e.Stream, e.Number, e.Token, nil))
				continue
			}
			commit(t, st, e)
		}
	})
	batches, aborted := 0, 0
	for {
		var fail func() error
		if batches%3 == 1 {
			fail = func() error { aborted++; return errors.New("crash before commit") }
		}
		batches++
		passed, last, err := projectBatch(ctx, b, st, readPool, fail)
		if fail != nil && err != nil {
			continue // the batch rolled back: its writes and its save with it
		}
		require.NoError(t, err)
		if last == n {
			break
		}
		if passed == 0 {
			pos, err := st.Checkpoint(ctx, "balances", "orders")
			require.NoError(t, err)
			require.NoError(t, b.WaitFor(ctx, "orders", pos+2)) // the next entry
		}
	}
	require.Positive(t, aborted)
	var count, sum int64
	require.NoError(t, readPool.QueryRow(ctx, `SELECT count(*), COALESCE(sum(number), 0) FROM applied`).Scan(&count, &sum))
	require.Equal(t, int64(n-1), count, "every committed entry once, the gap never")
	require.Equal(t, int64(n*(n+1)/2-200), sum)
	pos, err := st.Checkpoint(ctx, "balances", "orders")
	require.NoError(t, err)
	require.Equal(t, int64(n), pos)
}

// TestReaderSavesEvery: with SaveEvery the reader saves its checkpoint
// itself, after every n entries the loop body returned from (a skipped gap
// counts), when it catches up, and when it ends; a break saves up to the
// entry before.
func TestReaderSavesEvery(t *testing.T) {
	t.Parallel()
	for name, src := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := src.(checkpointer)
			b := start(t, src, nil)
			es := lease(t, src, "save", 15)
			for _, e := range es[:10] {
				if e.Number == 5 {
					require.NoError(t, src.Release(ctx, e.Stream, e.Number, e.Token, nil))
					continue
				}
				commit(t, src, e)
			}
			checkpoint := func() int64 {
				pos, err := s.Checkpoint(ctx, "relay", "save")
				require.NoError(t, err)
				return pos
			}
			seen := map[int64]int64{} // entry -> checkpoint while the body ran
			for e, err := range b.Entries(ctx, "save", &barrier.ReadOpts{Reader: "relay", SaveEvery: 3}) {
				require.NoError(t, err)
				seen[e.Number] = checkpoint()
			}
			require.Equal(t, map[int64]int64{1: 0, 2: 0, 3: 0, 4: 3, 6: 3, 7: 6, 8: 6, 9: 6, 10: 9}, seen,
				"saved after 3, after 6 (the gap 5 counted), after 9")
			require.Equal(t, int64(10), checkpoint(), "saved at the watermark")

			for _, e := range es[10:] {
				commit(t, src, e)
			}
			var got []int64
			for e, err := range b.Entries(ctx, "save", &barrier.ReadOpts{Reader: "relay", SaveEvery: 100}) {
				require.NoError(t, err)
				if e.Number == 13 {
					break // 13 may not be done: saved up to 12
				}
				got = append(got, e.Number)
			}
			require.Equal(t, []int64{11, 12}, got)
			require.Equal(t, int64(12), checkpoint())

			// A follower saves when it catches up, and waits.
			fctx, cancel := context.WithCancel(ctx)
			ended := make(chan error, 1)
			go func() {
				var last error
				for _, err := range b.Entries(fctx, "save", &barrier.ReadOpts{Reader: "relay", SaveEvery: 100, Follow: true}) {
					last = err
				}
				ended <- last
			}()
			require.Eventually(t, func() bool { return checkpoint() == 15 }, 10*time.Second, time.Millisecond)
			cancel()
			require.ErrorIs(t, <-ended, context.Canceled)
		})
	}
}

// TestSaveEveryNeedsAReader: SaveEvery without Reader, or negative, is bad
// input; on a source without checkpoints it is ErrNoCheckpoints.
func TestSaveEveryNeedsAReader(t *testing.T) {
	t.Parallel()
	src := &readCounter{Store: memory.New(nil)}
	b := start(t, src, nil)
	_, err := readAll(b, "s", &barrier.ReadOpts{SaveEvery: 10})
	require.ErrorIs(t, err, barrier.ErrSaveWithoutReader)
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = readAll(b, "s", &barrier.ReadOpts{Reader: "r", SaveEvery: -1})
	require.ErrorIs(t, err, store.ErrInvalidCount)
	require.Zero(t, src.reads.Load())
	plain := start(t, plainSource{memory.New(nil)}, nil)
	_, err = readAll(plain, "s", &barrier.ReadOpts{Reader: "r", SaveEvery: 10})
	require.ErrorIs(t, err, barrier.ErrNoCheckpoints)
}

// readOnlySaver is a memory Store whose checkpoint saves are refused as
// read-only, as a store on a standby without a primary refuses them.
type readOnlySaver struct {
	*memory.Store
	saves atomic.Int32
}

func (r *readOnlySaver) SaveCheckpoint(context.Context, string, string, int64, *store.SaveCheckpointParams) error {
	r.saves.Add(1)
	return store.ErrReadOnly
}

// TestSaveRefusedAsReadOnlyEndsTheReader: a save refused with
// store.ErrReadOnly can never succeed, so it ends the iteration (after a
// skipped gap as after an entry, and at a follower's catch-up) instead of
// being logged and retried at every save.
func TestSaveRefusedAsReadOnlyEndsTheReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := &readOnlySaver{Store: memory.New(nil)}
	b := start(t, src, nil)
	es := lease(t, src, "s", 4)
	require.NoError(t, src.Release(ctx, "s", 1, es[0].Token, nil))
	for _, e := range es[1:] {
		commit(t, src, e)
	}
	got, err := readAll(b, "s", &barrier.ReadOpts{Reader: "r", SaveEvery: 1})
	require.ErrorIs(t, err, store.ErrReadOnly)
	require.Empty(t, got, "the skipped gap 1 was the first save")
	got, err = readAll(b, "s", &barrier.ReadOpts{Reader: "r", SaveEvery: 2, IncludeGaps: true})
	require.ErrorIs(t, err, store.ErrReadOnly)
	require.Equal(t, []int64{1, 2}, got)
	got, err = readAll(b, "s", &barrier.ReadOpts{Reader: "r", SaveEvery: 100, Follow: true})
	require.ErrorIs(t, err, store.ErrReadOnly, "the save at the catch-up")
	require.Equal(t, []int64{2, 3, 4}, got)
	require.EqualValues(t, 3, src.saves.Load(), "one refused save each, none on exit")
}
