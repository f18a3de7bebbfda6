package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/bench/pgbench"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store/postgres"
)

// payload is what every commit writes, in seqlease and in the limits.
var payload = []byte("payload")

// leaseTTL is the TTL of every lease the throughput loops take: long
// enough that nothing expires during a run.
const leaseTTL = time.Minute

// pgbenchSpecs are the limits: pgbench running the scripts of bench/pgbench
// on a fresh schema of seqlease's tables.
func pgbenchSpecs() []spec {
	var out []spec
	for _, s := range []struct {
		script, name string
		clients      []int
		// setup, if not nil, prepares the fresh schema before pgbench runs.
		setup func(ctx context.Context, e *env, schema string) error
	}{
		{script: pgbench.Lease, name: "(a) lease, one per transaction", clients: []int{1, 4, 16}},
		{script: pgbench.LeaseCommit, name: "(b) lease + commit, two transactions", clients: []int{1, 4, 16}},
		{script: pgbench.NamedLease, name: "(c) named-lease acquire (guarded upsert) + release", clients: []int{1, 4, 16}},
		{script: pgbench.OwnStream, name: "(d) lease + commit, two transactions, each client on its own stream", clients: []int{1, 4, 16, 64}},
		{script: pgbench.OwnStreamNotify, name: "(d+notify) (d), the commit's transaction also NOTIFYing once", clients: []int{16}},
		{script: pgbench.Sequence, name: "(e) lease numbered by a plain sequence (nextval) + commit, two transactions, one stream", clients: []int{1, 4, 16}, setup: createSequence},
	} {
		for _, c := range s.clients {
			out = append(out, spec{
				key:     fmt.Sprintf("pgbench/%s/c=%d", s.script, c),
				section: secLimit,
				name:    s.name + ", " + plural(c, "client"),
				metrics: []metric{{key: "rate", unit: "tx/s"}},
				run: func(ctx context.Context, e *env) (map[string]float64, error) {
					schema, drop, err := e.newSchema(ctx)
					if err != nil {
						return nil, err
					}
					defer drop()
					if s.setup != nil {
						if err := s.setup(ctx, e, schema); err != nil {
							return nil, err
						}
					}
					tps, err := pgbench.Run(ctx, pgbench.Params{DSN: e.dsn, Schema: schema, Script: s.script, Clients: c, Duration: e.dur})
					return map[string]float64{"rate": tps}, err
				},
			})
		}
	}
	return out
}

// createSequence creates the sequence that script (e) numbers its leases
// with, in the fresh schema.
func createSequence(ctx context.Context, e *env, schema string) error {
	if _, err := e.admin.Exec(ctx, "CREATE SEQUENCE "+pgx.Identifier{schema, pgbench.SequenceName}.Sanitize()); err != nil {
		return fmt.Errorf("create sequence %s.%s: %w", schema, pgbench.SequenceName, err)
	}
	return nil
}

// seqEnv is a Leaser on PostgreSQL: a fresh schema, a pool, a started
// barrier.
type seqEnv struct {
	pool    *pgxpool.Pool
	store   *postgres.Store
	barrier *barrier.Barrier
	leaser  *sequence.Leaser
	close   func()
}

// newSeqEnv sets up a Leaser on a fresh schema. wrap, if not nil, wraps
// the store the Leaser uses (the barrier reads the store itself).
func newSeqEnv(ctx context.Context, e *env, schema string, maxConns int, cfg sequence.Config, wrap func(sequence.Store) sequence.Store) (*seqEnv, error) {
	pool, err := e.pool(ctx, maxConns, "")
	if err != nil {
		return nil, err
	}
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	b, err := barrier.New(s, nil)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := b.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	cfg.Barrier = b
	var ls sequence.Store = s
	if wrap != nil {
		ls = wrap(s)
	}
	l, err := sequence.New(ls, &cfg)
	if err != nil {
		b.Stop()
		pool.Close()
		return nil, err
	}
	return &seqEnv{pool: pool, store: s, barrier: b, leaser: l, close: func() { b.Stop(); pool.Close() }}, nil
}

// withSeq runs fn with a Leaser on a fresh schema and cleans up.
func withSeq(ctx context.Context, e *env, maxConns int, cfg sequence.Config, fn func(*seqEnv) (map[string]float64, error)) (map[string]float64, error) {
	schema, drop, err := e.newSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	s, err := newSeqEnv(ctx, e, schema, maxConns, cfg, nil)
	if err != nil {
		return nil, err
	}
	defer s.close()
	return fn(s)
}

// streamSpecs are seqlease's stream operations on PostgreSQL, and the raw
// pgx loop doing the unordered lease + commit of pgbench script (b).
func streamSpecs() []spec {
	var out []spec
	for _, group := range []bool{false, true} {
		for _, w := range []int{1, 4, 16} {
			cfg, label := sequence.Config{MaxGroup: 1}, "off"
			if group {
				cfg, label = sequence.Config{}, "on"
			}
			out = append(out, spec{
				key:     fmt.Sprintf("seq/ordered/group=%s/w=%d", label, w),
				section: secStreams,
				name:    "lease + ordered commit, group commit " + label + ", " + plural(w, "worker"),
				metrics: []metric{{key: "rate", unit: "ops/s"}},
				run: func(ctx context.Context, e *env) (map[string]float64, error) {
					return withSeq(ctx, e, w+4, cfg, func(s *seqEnv) (map[string]float64, error) {
						r, err := loop(ctx, loopOpts{workers: w, warm: e.warm, dur: e.dur}, func(ctx context.Context, _ int) error {
							x, err := s.leaser.Lease(ctx, "bench", &sequence.LeaseOpts{TTL: leaseTTL})
							if err != nil {
								return err
							}
							return x.Commit(ctx, payload)
						})
						return map[string]float64{"rate": r.perSecond()}, err
					})
				},
			})
		}
	}
	for _, w := range []int{1, 4, 16} {
		out = append(out, spec{
			key:     fmt.Sprintf("seq/complete/w=%d", w),
			section: secStreams,
			name:    "lease + unordered Complete, " + plural(w, "worker"),
			metrics: []metric{{key: "rate", unit: "ops/s"}},
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				return withSeq(ctx, e, w+4, sequence.Config{}, func(s *seqEnv) (map[string]float64, error) {
					r, err := loop(ctx, loopOpts{workers: w, warm: e.warm, dur: e.dur}, func(ctx context.Context, _ int) error {
						x, err := s.leaser.Lease(ctx, "bench", &sequence.LeaseOpts{TTL: leaseTTL})
						if err != nil {
							return err
						}
						return x.Complete(ctx, payload)
					})
					return map[string]float64{"rate": r.perSecond()}, err
				})
			},
		})
	}
	for _, w := range []int{1, 4, 16} {
		out = append(out, spec{
			key:     fmt.Sprintf("raw/leasecommit/w=%d", w),
			section: secStreams,
			name:    "raw pgx: lease + commit (script (b), unordered), " + plural(w, "worker"),
			metrics: []metric{{key: "rate", unit: "ops/s"}},
			run:     func(ctx context.Context, e *env) (map[string]float64, error) { return rawLeaseCommit(ctx, e, w) },
		})
	}
	for _, n := range []int{100, 1000} {
		out = append(out, spec{
			key:     fmt.Sprintf("seq/leasen/%d", n),
			section: secStreams,
			name:    fmt.Sprintf("batch lease (LeaseN of %s), one stream, 1 worker", group(strconv.Itoa(n))),
			metrics: []metric{{key: "rate", unit: "numbers/s"}},
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				return withSeq(ctx, e, 4, sequence.Config{}, func(s *seqEnv) (map[string]float64, error) {
					r, err := loop(ctx, loopOpts{workers: 1, warm: e.warm, dur: e.dur}, func(ctx context.Context, _ int) error {
						_, err := s.leaser.LeaseN(ctx, "bench", n, &sequence.LeaseOpts{TTL: leaseTTL})
						return err
					})
					return map[string]float64{"rate": r.perSecond() * float64(n)}, err
				})
			},
		})
	}
	return out
}

// manyConns is the pool of every many-streams row: the Leaser batches
// leases and commits across streams, so a worker holds no connection of its
// own while it waits; the barrier's listener takes one of them.
const manyConns = 24

// manySpecs are lease + ordered commit on several streams of one database
// at once, by one process: w workers over s streams. Worker i's k-th
// operation is on stream (i + k*w) mod s: with s <= w (w a multiple of s)
// that is always stream i mod s; with s > w (s a multiple of w) worker i
// takes streams i, i+w, i+2w, ... in turn, so that every stream is used.
func manySpecs() []spec {
	var out []spec
	for _, ws := range []struct{ w, s int }{{16, 1}, {16, 4}, {16, 16}, {16, 64}, {64, 64}} {
		w, n := ws.w, ws.s
		name := fmt.Sprintf("lease + ordered commit, group commit on, %s over %s", plural(w, "worker"), plural(n, "stream"))
		if n > w {
			name += fmt.Sprintf(" (each worker takes %d streams in turn)", n/w)
		}
		out = append(out, spec{
			key:     fmt.Sprintf("seq/streams/s=%d/w=%d", n, w),
			section: secMany,
			name:    name,
			metrics: []metric{{key: "rate", unit: "ops/s"}},
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				streams := make([]string, n)
				for i := range streams {
					streams[i] = fmt.Sprintf("bench-%d", i)
				}
				next := make([]int, w) // worker i's next stream; only worker i touches next[i]
				for i := range next {
					next[i] = i % n
				}
				return withSeq(ctx, e, manyConns, sequence.Config{}, func(s *seqEnv) (map[string]float64, error) {
					r, err := loop(ctx, loopOpts{workers: w, warm: e.warm, dur: e.dur}, func(ctx context.Context, i int) error {
						stream := streams[next[i]]
						next[i] = (next[i] + w) % n
						x, err := s.leaser.Lease(ctx, stream, &sequence.LeaseOpts{TTL: leaseTTL})
						if err != nil {
							return err
						}
						return x.Commit(ctx, payload)
					})
					if err == nil {
						err = checkCommitted(ctx, s, streams, r.ops())
					}
					return map[string]float64{"rate": r.perSecond()}, err
				})
			},
		})
	}
	return out
}

// checkCommitted checks that the streams hold at least counted commits and
// that every number handed out is resolved: the rate counts real work.
func checkCommitted(ctx context.Context, s *seqEnv, streams []string, counted int64) error {
	var resolved int64
	for _, name := range streams {
		st, err := s.store.Stats(ctx, name)
		if err != nil {
			return err
		}
		if st.Unresolved != 0 {
			return fmt.Errorf("stream %s: %d numbers unresolved after the run", name, st.Unresolved)
		}
		resolved += st.Watermark
	}
	if resolved < counted {
		return fmt.Errorf("%d commits counted, %d numbers resolved", counted, resolved)
	}
	return nil
}

// rawLeaseCommit runs the statements of pgbench script (b) through a pgx
// pool: lease one number, then commit it, two transactions per item.
func rawLeaseCommit(ctx context.Context, e *env, workers int) (map[string]float64, error) {
	stmts, _, err := pgbench.Statements(pgbench.LeaseCommit)
	if err != nil {
		return nil, err
	}
	schema, drop, err := e.newSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	pool, err := e.pool(ctx, workers, schema)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	lease, commit := stmts[0], stmts[1]
	r, err := loop(ctx, loopOpts{workers: workers, warm: e.warm, dur: e.dur}, func(ctx context.Context, _ int) error {
		var number int64
		var token pgtype.UUID
		if err := pool.QueryRow(ctx, lease).Scan(&number, &token); err != nil {
			return fmt.Errorf("raw lease: %w", err)
		}
		tag, err := pool.Exec(ctx, commit, number, token)
		if err != nil {
			return fmt.Errorf("raw commit: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("raw commit of %d: %d rows", number, tag.RowsAffected())
		}
		return nil
	})
	return map[string]float64{"rate": r.perSecond()}, err
}
