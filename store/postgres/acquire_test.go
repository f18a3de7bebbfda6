package postgres_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// testWait is the connection wait of the tests' Stores: short, so that an
// exhausted pool fails them quickly.
const testWait = 200 * time.Millisecond

// poolSetup is a small pool of its own, on a fresh schema, with a Store
// whose waits for a connection are bounded by testWait.
type poolSetup struct {
	pool   *pgxpool.Pool
	schema string
	s      *postgres.Store
}

func newPoolSetup(t *testing.T, maxConns int32) *poolSetup {
	t.Helper()
	pool, err := pgtest.NewPool(t.Context(), &pgtest.Options{MaxConns: maxConns})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema, AcquireTimeout: testWait})
	require.NoError(t, err)
	return &poolSetup{pool: pool, schema: schema, s: s}
}

// holdAll takes every connection of the pool in a transaction left open,
// as workers that each hold a transaction of their own would, and returns
// the function that ends them.
func (ps *poolSetup) holdAll(t *testing.T) (release func()) {
	t.Helper()
	var held []pgx.Tx
	for range ps.pool.Config().MaxConns {
		tx, err := ps.pool.Begin(t.Context())
		require.NoError(t, err)
		held = append(held, tx)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			for _, tx := range held {
				require.NoError(t, tx.Rollback(context.WithoutCancel(t.Context())))
			}
		})
	}
	t.Cleanup(release)
	return release
}

// requireExhausted checks that err is the pool's typed error, with its
// numbers, and that it says nothing was sent.
func requireExhausted(t *testing.T, err error, maxConns int32) {
	t.Helper()
	require.ErrorIs(t, err, postgres.ErrPoolExhausted)
	require.ErrorIs(t, err, store.ErrNotSent)
	var pe *postgres.PoolExhaustedError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, testWait, pe.Wait)
	require.Equal(t, maxConns, pe.MaxConns)
	require.Equal(t, maxConns, pe.Acquired)
	require.Contains(t, err.Error(), "the statement was not sent, so it changed nothing")
	require.Contains(t, err.Error(), "pool_max_conns")
	require.NotErrorIs(t, err, context.DeadlineExceeded) // not the caller's deadline
}

// TestPoolExhaustedFailsCalls holds every connection of a pool of two and
// checks that the Store's calls (a lease, a commit, a batch of commits, a
// commit transaction, a snapshot, a named lease), the Leaser's Lease and
// Commit and the barrier's Watermark fail after the configured wait with
// ErrPoolExhausted; that they wrote nothing; and that they work again once
// the connections are given back (the failed Commit retried with its
// lease), returning every connection they took.
func TestPoolExhaustedFailsCalls(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ps := newPoolSetup(t, 2)
	s := ps.s
	before, err := s.Lease(ctx, "pool", []store.LeaseRequest{{TTL: time.Hour}, {TTL: time.Hour}}, nil)
	require.NoError(t, err)
	b, err := barrier.New(s, nil)
	require.NoError(t, err)
	bctx, stopBarrier := context.WithCancel(ctx)
	defer stopBarrier()
	require.NoError(t, b.Start(bctx))
	defer b.Stop()
	leaser, err := sequence.New(s, &sequence.Config{Barrier: b})
	require.NoError(t, err)

	held, err := leaser.Lease(ctx, "pool-commit", nil)
	require.NoError(t, err)

	release := ps.holdAll(t)
	_, err = s.Lease(ctx, "pool", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	requireExhausted(t, err, 2)
	_, err = s.Commit(ctx, "pool", before[0].Number, before[0].Token, &store.CommitParams{Payload: []byte("x")})
	requireExhausted(t, err, 2)
	_, err = s.CommitMulti(ctx, []store.StreamCommit{
		{Stream: "pool", Number: before[0].Number, Token: before[0].Token},
		{Stream: "pool", Number: before[1].Number, Token: before[1].Token},
	}, nil)
	requireExhausted(t, err, 2)
	_, err = s.CommitTx(ctx, []store.TxCommit[pgx.Tx]{{StreamCommit: store.StreamCommit{Stream: "pool", Number: before[1].Number, Token: before[1].Token}}}, nil)
	requireExhausted(t, err, 2)
	_, err = s.Snapshot(ctx, "pool", 0)
	requireExhausted(t, err, 2)
	_, err = s.AcquireLease(ctx, "pool-name", "alice", &store.AcquireLeaseParams{TTL: time.Hour})
	requireExhausted(t, err, 2)
	_, err = leaser.Lease(ctx, "pool", nil)
	requireExhausted(t, err, 2)
	t.Logf("what a worker sees: %v", err)
	err = held.Commit(ctx, []byte("x"))
	requireExhausted(t, err, 2)
	_, err = b.Watermark(ctx, "pool")
	requireExhausted(t, err, 2)

	// The caller's own deadline, shorter than the wait, is the caller's
	// error.
	patient, err := postgres.New(ps.pool, &postgres.Config{Schema: ps.schema, AcquireTimeout: time.Hour})
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	_, err = patient.Lease(short, "pool", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, postgres.ErrPoolExhausted)
	require.ErrorIs(t, err, store.ErrNotSent, "it ended while waiting for a connection")

	release()
	// Nothing was written: no number handed out, nothing committed, the
	// name free.
	st, err := s.Stats(ctx, "pool")
	require.NoError(t, err)
	require.Equal(t, int64(3), st.NextNumber)
	require.Equal(t, int64(2), st.Unresolved)
	_, err = s.GetLease(ctx, "pool-name", nil)
	require.ErrorIs(t, err, store.ErrLeaseNotFound)

	// And everything works again.
	_, err = s.Commit(ctx, "pool", before[0].Number, before[0].Token, &store.CommitParams{Payload: []byte("x")})
	require.NoError(t, err)
	res, err := s.CommitMulti(ctx, []store.StreamCommit{{Stream: "pool", Number: before[1].Number, Token: before[1].Token}}, nil)
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.NoError(t, held.Commit(ctx, []byte("x")), "the retry of a commit that sent nothing")
	got, err := s.Read(ctx, "pool-commit", 0, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, store.Committed, got[0].State)
	x, err := leaser.Lease(ctx, "pool", nil)
	require.NoError(t, err)
	require.NoError(t, x.Commit(ctx, nil))
	w, err := b.Watermark(ctx, "pool")
	require.NoError(t, err)
	require.GreaterOrEqual(t, w, int64(2))
	_, err = s.AcquireLease(ctx, "pool-name", "alice", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	b.Stop() // its Watch and refresher take connections in the background
	// A commit returns once decided, while its batch may still hold the
	// connection through the WAL flush (early hand-off): wait for that,
	// not for ever.
	require.Eventually(t, func() bool { return ps.pool.Stat().AcquiredConns() == 0 },
		5*time.Second, 5*time.Millisecond, "a call kept a connection")
}

// TestPoolExhaustedAcquireTimeoutDisabled checks that a negative
// AcquireTimeout leaves the wait to the caller's context, as pgxpool does.
func TestPoolExhaustedAcquireTimeoutDisabled(t *testing.T) {
	t.Parallel()
	ps := newPoolSetup(t, 1)
	s, err := postgres.New(ps.pool, &postgres.Config{Schema: ps.schema, AcquireTimeout: -1})
	require.NoError(t, err)
	ps.holdAll(t)
	ctx, cancel := context.WithTimeout(t.Context(), testWait)
	defer cancel()
	_, err = s.Lease(ctx, "pool", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, postgres.ErrPoolExhausted)
	require.ErrorIs(t, err, store.ErrNotSent, "it ended while waiting for a connection")
}

// TestWatchHoldsNoPoolConnection checks that a Watch's LISTEN connection
// leaves the pool: with a pool of one, a running Watch, leases and commits
// work, and the Watch hears the commit.
func TestWatchHoldsNoPoolConnection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ps := newPoolSetup(t, 1)
	sink := &resetSink{reset: make(chan struct{}, 1), resolved: make(chan int64, 16)}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = ps.s.Watch(wctx, sink) })
	defer wg.Wait()
	defer stop()
	<-sink.reset // listening
	e, err := ps.s.Lease(ctx, "pool", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	require.NoError(t, err)
	_, err = ps.s.Commit(ctx, "pool", e[0].Number, e[0].Token, nil)
	require.NoError(t, err)
	require.Equal(t, e[0].Number, <-sink.resolved)
}

// resetSink signals the first Reset and passes on resolved numbers.
type resetSink struct {
	once     sync.Once
	reset    chan struct{}
	resolved chan int64
}

func (r *resetSink) Resolved(_ string, n int64) {
	select {
	case r.resolved <- n:
	default:
	}
}
func (r *resetSink) ResolvedThrough(_ string, n int64) { r.Resolved("", n) }
func (r *resetSink) Reset()                            { r.once.Do(func() { close(r.reset) }) }

// TestNewWarnsSmallPool checks that New logs a pool smaller than
// MinPoolConns at warn, with the numbers and the fix, and says nothing of
// a pool large enough.
func TestNewWarnsSmallPool(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		maxConns int32
		warn     bool
	}{{1, true}, {postgres.MinPoolConns - 1, true}, {postgres.MinPoolConns, false}} {
		pool, err := pgtest.NewPool(t.Context(), &pgtest.Options{MaxConns: tc.maxConns})
		require.NoError(t, err)
		h := &recordHandler{}
		_, err = postgres.New(pool, &postgres.Config{Logger: slog.New(h)})
		pool.Close()
		require.NoError(t, err)
		if !tc.warn {
			require.Empty(t, h.records, "MaxConns %d", tc.maxConns)
			continue
		}
		require.Len(t, h.records, 1, "MaxConns %d", tc.maxConns)
		r := h.records[0]
		require.Equal(t, slog.LevelWarn, r.Level)
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		require.Equal(t, int64(tc.maxConns), attrs["max_conns"].Int64())
		require.Equal(t, int64(postgres.MinPoolConns), attrs["min_conns"].Int64())
		require.Contains(t, attrs["fix"].String(), "pool_max_conns")
	}
}

// recordHandler keeps the records logged to it.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// TestPoolExhaustedErrorText checks what the error tells its reader: the
// numbers, that nothing was sent, and the fix that fits (a bigger pool,
// or a database slow to connect).
func TestPoolExhaustedErrorText(t *testing.T) {
	t.Parallel()
	full := (&postgres.PoolExhaustedError{Wait: 5 * time.Second, MaxConns: 4, Acquired: 4}).Error()
	require.Contains(t, full, "no connection within 5s (all 4 connections in use)")
	require.Contains(t, full, "the statement was not sent, so it changed nothing")
	require.Contains(t, full, "set pool_max_conns in the database URL (or pgxpool.Config.MaxConns) to at least 4 plus")
	slow := (&postgres.PoolExhaustedError{Wait: 5 * time.Second, MaxConns: 4, Acquired: 3}).Error()
	require.Contains(t, slow, "(3 of 4 connections in use)")
	require.Contains(t, slow, "the statement was not sent, so it changed nothing")
	require.Contains(t, slow, "opening a new connection took longer")
	require.NotContains(t, slow, "too small")
	require.ErrorIs(t, &postgres.PoolExhaustedError{}, postgres.ErrPoolExhausted)
}

// BenchmarkAcquireBound measures what the bound on the wait for a
// connection costs a one-statement call (Now), against pgxpool's
// unbounded wait (AcquireTimeout negative).
func BenchmarkAcquireBound(b *testing.B) {
	pool := pgtest.Shared(b, false)
	for _, bc := range []struct {
		name string
		wait time.Duration
	}{{"bounded", 0}, {"unbounded", -1}} {
		s, err := postgres.New(pool, &postgres.Config{AcquireTimeout: bc.wait})
		require.NoError(b, err)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Now(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
