package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/store/storetest"
)

// The tests through PgBouncer in transaction mode (pgtest.PgBouncerURL:
// `make test` starts one, and so do the tests when pgbouncer is installed).
// Schemas are made and dropped through a direct pool (the migrations take
// a session-level advisory lock); the Stores under test go through the
// pooler only, but where a test gives a direct ListenDSN.

// bouncerPool returns a new pool through PgBouncer, closed when t ends:
// in pgx's simple protocol mode, or else its default (cached prepared
// statements).
func bouncerPool(t *testing.T, simple bool) *pgxpool.Pool {
	t.Helper()
	pool, err := pgtest.NewPool(t.Context(), &pgtest.Options{URL: pgtest.PgBouncerURL(t), SimpleProtocol: simple, MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// records is a slog.Handler that keeps what it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}

// find returns the records with msg, as "LEVEL listener=..." strings.
func (r *records) find(msg string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Message != msg {
			continue
		}
		s := rec.Level.String()
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "listener" {
				s += " listener=" + a.Value.String()
			}
			return true
		})
		out = append(out, s)
	}
	return out
}

// TestConformancePgBouncer runs the suite through PgBouncer in transaction
// mode, in pgx's simple protocol mode, with no direct connection at all:
// the Watch's LISTEN hears nothing there, its self-check finds so, and it
// falls back to polling (the suite's Watch tests hear this Store's own
// resolutions in process, as everywhere).
func TestConformancePgBouncer(t *testing.T) {
	direct := pgtest.Shared(t, false)
	pool := bouncerPool(t, true)
	storetest.Run(t, func(t *testing.T) storetest.Store {
		s, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, direct), ListenCheckTimeout: time.Second})
		require.NoError(t, err)
		return s
	})
}

// TestNamedLeaseConformancePgBouncer runs the named-lease suite through
// PgBouncer in transaction mode, configured right: every statement through
// the pooler in the simple protocol, the LISTEN of WatchLeases on a direct
// connection (Config.ListenDSN). Its self-checks hear (through the pooler's
// NOTIFY), and none is deaf.
func TestNamedLeaseConformancePgBouncer(t *testing.T) {
	direct := pgtest.Shared(t, false)
	pool := bouncerPool(t, true)
	storetest.RunNamedLeases(t, func(t *testing.T) storetest.NamedLeaseStore {
		s, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, direct), ListenDSN: pgtest.URL()})
		require.NoError(t, err)
		t.Cleanup(func() {
			require.Zero(t, s.ListenHealth().DeafChecks, "a direct ListenDSN hears its self-checks")
		})
		return s
	})
}

// TestPgBouncerDefaultModeSaysWhatToSet runs the Store through PgBouncer in
// pgx's default mode (cached prepared statements), which the pooler breaks:
// the error is ErrPooler, a *PoolerError with the SQLSTATE, and names the
// setting that fixes it.
func TestPgBouncerDefaultModeSaysWhatToSet(t *testing.T) {
	t.Parallel()
	direct := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, direct)
	ctx := t.Context()

	// Two clients of the pooler, each with one connection that caches its
	// prepared statements, take turns with the same statement: one finds
	// the other's prepared statement on the server session the pooler
	// lent it (it reuses the session freed last), or misses its own.
	var stores [2]*postgres.Store
	for i := range stores {
		pool, err := pgtest.NewPool(ctx, &pgtest.Options{URL: pgtest.PgBouncerURL(t), MaxConns: 1})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		stores[i], err = postgres.New(pool, &postgres.Config{Schema: schema})
		require.NoError(t, err)
	}
	var failed error
	for k := 0; k < 100 && failed == nil; k++ {
		_, failed = stores[k%2].Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	}
	require.Error(t, failed, "100 leases by 2 clients taking turns through the pooler in the default mode all succeeded")
	require.ErrorIs(t, failed, postgres.ErrPooler)
	var pe *postgres.PoolerError
	require.ErrorAs(t, failed, &pe)
	require.Contains(t, []string{"42P05", "26000", "08P01"}, pe.Code)
	require.ErrorContains(t, failed, "default_query_exec_mode=simple_protocol")
	require.True(t, strings.HasPrefix(failed.Error(), "lease: "), "the operation prefixes it: %v", failed)
	t.Logf("the error: %v", failed)
}

// TestBarrierThroughPgBouncer runs ordered commits of one stream from two
// processes (two pools, two Stores, two barriers), each through PgBouncer
// alone: a number's turn comes when the other process committed the one
// before, which only the other's notice, or a poll, tells. The LISTEN hears
// nothing through the pooler: each Watch's self-check must find so, log
// the ERROR that names the fix, count it (the deaf gauge of package
// metrics), and poll fast, so that the commits keep going. With the
// barrier's safety poll alone (5 s), the 40 commits would not end within
// the minute the test gives them.
func TestBarrierThroughPgBouncer(t *testing.T) {
	t.Parallel()
	direct := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, direct)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	type proc struct {
		st   *postgres.Store
		b    *barrier.Barrier
		logs *records
	}
	var procs [2]proc
	for i := range procs {
		logs := &records{}
		st, err := postgres.New(bouncerPool(t, true), &postgres.Config{Schema: schema, Logger: slog.New(logs),
			ListenCheckTimeout: 500 * time.Millisecond})
		require.NoError(t, err)
		b, err := barrier.New(st, nil)
		require.NoError(t, err)
		require.NoError(t, b.Start(ctx))
		t.Cleanup(b.Stop)
		procs[i] = proc{st, b, logs}
	}

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Gaps: procs[0].st})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()

	const n = 40
	require.NoError(t, alternateCommits(ctx, n, procs[0].st, procs[0].b, procs[1].st, procs[1].b),
		"the ordered commits stalled: no fallback to polling?")

	for i, p := range procs {
		require.Equal(t, []string{"ERROR listener=resolutions"}, p.logs.find(postgres.ListenDeafMessage)[:1], "process %d", i)
		h := p.st.ListenHealth()
		require.Equal(t, 1, h.Deaf, "process %d", i)
		require.GreaterOrEqual(t, h.DeafChecks, int64(1), "process %d", i)
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	deaf := int64(-1)
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name == metrics.NameListenDeaf {
				deaf = mt.Data.(metricdata.Gauge[int64]).DataPoints[0].Value
			}
		}
	}
	require.Equal(t, int64(1), deaf, "the deaf listeners gauge")

	procs[0].b.Stop()
	require.Zero(t, procs[0].st.ListenHealth().Deaf, "a stopped Watch is deaf no more")
	snap, err := procs[1].st.Snapshot(ctx, "s", 0)
	require.NoError(t, err)
	require.Equal(t, int64(n), snap.Watermark)
}

// alternateCommits leases n numbers of stream "s" and has two processes
// commit them in order, taking turns: process i (a Store and its
// barrier) commits every other number, from the i-th.
func alternateCommits(ctx context.Context, n int, st0 *postgres.Store, b0 *barrier.Barrier, st1 *postgres.Store, b1 *barrier.Barrier) error {
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: 5 * time.Minute}
	}
	es, err := st0.Lease(ctx, "s", reqs, nil)
	if err != nil {
		return err
	}
	sts, bs := [2]*postgres.Store{st0, st1}, [2]*barrier.Barrier{b0, b1}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			for k := i; k < n; k += 2 {
				e := es[k]
				if err := bs[i].WaitFor(ctx, "s", e.Number); err != nil {
					errs[i] = err
					return
				}
				if _, err := sts[i].Commit(ctx, "s", e.Number, e.Token, &store.CommitParams{Ordered: true}); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestBarrierThroughPgBouncerListenDSN is TestBarrierThroughPgBouncer
// configured right: every statement through the pooler, the LISTEN on a
// direct connection (Config.ListenDSN). The self-checks hear (their
// notices go through the pooler), nothing is logged or counted deaf, and
// the commits take turns on the notices.
func TestBarrierThroughPgBouncerListenDSN(t *testing.T) {
	t.Parallel()
	direct := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, direct)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var sts [2]*postgres.Store
	var bs [2]*barrier.Barrier
	logs := &records{}
	for i := range sts {
		st, err := postgres.New(bouncerPool(t, true), &postgres.Config{Schema: schema, Logger: slog.New(logs), ListenDSN: pgtest.URL()})
		require.NoError(t, err)
		b, err := barrier.New(st, nil)
		require.NoError(t, err)
		require.NoError(t, b.Start(ctx))
		t.Cleanup(b.Stop)
		sts[i], bs[i] = st, b
	}
	require.NoError(t, alternateCommits(ctx, 40, sts[0], bs[0], sts[1], bs[1]))
	for i, st := range sts {
		h := st.ListenHealth()
		require.Zero(t, h.Deaf, "process %d", i)
		require.Zero(t, h.DeafChecks, "process %d", i)
		require.Equal(t, h.Watches, h.Hearing, "process %d: every watch hears", i)
		require.False(t, h.LastHeard.IsZero(), "process %d", i)
	}
	require.Empty(t, logs.find(postgres.ListenDeafMessage))
}

// TestLeaseManagerThroughPgBouncer has a blocked Acquire of one process wait
// for a release by another, both through PgBouncer alone: the waiter's
// WatchLeases finds its LISTEN deaf (the ERROR names the leases listener)
// and the waiter takes the name although the release's notice is never
// heard. (Its own announcement refresh, every 3 s, would also wake it: the
// barrier test is the one that fails without the polling.)
func TestLeaseManagerThroughPgBouncer(t *testing.T) {
	t.Parallel()
	direct := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, direct)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var ms [2]*lease.Manager
	var logs [2]*records
	for i := range ms {
		logs[i] = &records{}
		st, err := postgres.New(bouncerPool(t, true), &postgres.Config{Schema: schema, Logger: slog.New(logs[i]),
			ListenCheckTimeout: 500 * time.Millisecond})
		require.NoError(t, err)
		m, err := lease.New(st, &lease.Config{Owner: "p" + string(rune('0'+i)), PollInterval: time.Hour})
		require.NoError(t, err)
		require.NoError(t, m.Start(ctx))
		t.Cleanup(m.Stop)
		ms[i] = m
	}
	held, err := ms[0].Acquire(ctx, "job", &lease.AcquireOpts{TTL: 50 * time.Minute})
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := ms[1].Acquire(ctx, "job", &lease.AcquireOpts{TTL: 50 * time.Minute})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	// The waiter found the name held: it marked it wanted.
	require.Eventually(t, func() bool {
		var wanted bool
		err := direct.QueryRow(ctx, "SELECT wanted_until IS NOT NULL FROM "+pgx.Identifier{schema, "leases"}.Sanitize()+
			" WHERE name = 'job'").Scan(&wanted)
		return err == nil && wanted
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-got, "the blocked Acquire was not woken: no fallback to polling?")
	require.NotEmpty(t, logs[1].find(postgres.ListenDeafMessage), "the waiter's watch found its LISTEN deaf")
	require.Equal(t, "ERROR listener=leases", logs[1].find(postgres.ListenDeafMessage)[0])
}
