package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for pglock

	"github.com/seqlease/seqlease/bench/pgbench"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store/postgres"
)

// namedCase is one shape of the named-lease loops.
type namedCase struct {
	key, name  string
	goroutines int
	oneName    bool // all contend for one name with blocking acquires
}

var namedCases = []namedCase{
	{"1", "1 goroutine", 1, false},
	{"16", "16 goroutines, distinct names", 16, false},
	{"16-one", "16 goroutines, one name, blocking acquire", 16, true},
}

// namedMetrics are the figures of a named-lease loop; the spread of the
// successes among the goroutines matters on one name.
func namedMetrics(oneName bool) []metric {
	m := []metric{{key: "rate", unit: "cycles/s"}}
	if oneName {
		m = append(m,
			metric{key: "min", label: "fewest cycles of one goroutine", unit: "cycles"},
			metric{key: "max", label: "most cycles of one goroutine", unit: "cycles"},
			metric{key: "winners", label: "goroutines that got the name", unit: "of 16"},
			metric{key: "share", label: "fewest cycles of one goroutine / mean", unit: "ratio"})
	}
	return m
}

func loopMetrics(r loopResult, oneName bool) map[string]float64 {
	out := map[string]float64{"rate": r.perSecond()}
	if oneName {
		lo, hi, winners := spread(r.perWorker)
		out["min"], out["max"], out["winners"] = float64(lo), float64(hi), float64(winners)
		out["share"] = 0
		if mean := float64(r.ops()) / float64(len(r.perWorker)); mean > 0 {
			out["share"] = float64(lo) / mean
		}
	}
	return out
}

// namedSpecs are the named-lease loops: seqlease's Manager, the pglock peer,
// the raw pgx upsert + release, and the WAL a try-acquire of a held name
// writes in each.
func namedSpecs() []spec {
	var out []spec
	for _, c := range namedCases {
		out = append(out, spec{
			key:     "named/seq/" + c.key,
			section: secNamed,
			name:    "seqlease lease.Manager, " + c.name,
			metrics: namedMetrics(c.oneName),
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				return seqNamed(ctx, e, c, false)
			},
		})
	}
	for _, c := range namedCases[:2] {
		out = append(out, spec{
			key:     "named/seq-nohist/" + c.key,
			section: secNamed,
			name:    "seqlease lease.Manager, history off, " + c.name,
			metrics: namedMetrics(false),
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				return seqNamed(ctx, e, c, true)
			},
		})
	}
	for _, c := range namedCases {
		out = append(out, spec{
			key:     "named/pglock/" + c.key,
			section: secNamed,
			name:    "pglock v1.16.1 (pgx stdlib, heartbeats off), " + c.name,
			metrics: namedMetrics(c.oneName),
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				return pglockNamed(ctx, e, c)
			},
		})
	}
	for _, notify := range []bool{false, true} {
		for _, c := range namedCases[:2] {
			key, name := "named/raw/", "raw pgx: guarded upsert + release (script (c)), "
			if notify {
				key, name = "named/raw-notify/", "raw pgx: the same, the release also NOTIFYing a listener, "
			}
			out = append(out, spec{
				key:     key + c.key,
				section: secNamed,
				name:    name + c.name,
				metrics: namedMetrics(false),
				run: func(ctx context.Context, e *env) (map[string]float64, error) {
					return rawNamed(ctx, e, c, notify)
				},
			})
		}
	}
	for _, w := range []struct{ key, name string }{
		{"seq", "seqlease TryAcquire"},
		{"raw", "raw guarded upsert (script (c))"},
		{"pglock", "pglock Acquire with FailIfLocked"},
	} {
		out = append(out, spec{
			key:     "wal/" + w.key,
			section: secNamed,
			name:    "WAL written by a try-acquire of a held name: " + w.name,
			metrics: []metric{{key: "bytes", unit: "bytes/try"}},
			run: func(ctx context.Context, e *env) (map[string]float64, error) {
				return walPerTry(ctx, e, w.key)
			},
		})
	}
	return out
}

// namedName is the name worker w uses.
func namedName(c namedCase, w int) string {
	if c.oneName {
		return "bench"
	}
	return "bench-" + strconv.Itoa(w)
}

func seqNamed(ctx context.Context, e *env, c namedCase, noHistory bool) (map[string]float64, error) {
	schema, drop, err := e.newSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	pool, err := e.pool(ctx, c.goroutines+4, "")
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	m, err := lease.New(s, &lease.Config{Owner: "seqbench", DisableHistory: noHistory, CleanupInterval: -1})
	if err != nil {
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		return nil, err
	}
	defer m.Stop()
	opts := &lease.AcquireOpts{TTL: leaseTTL}
	r, err := loop(ctx, loopOpts{workers: c.goroutines, warm: e.warm, dur: e.dur, cutAtEnd: c.oneName}, func(ctx context.Context, w int) error {
		acquire := m.TryAcquire
		if c.oneName {
			acquire = m.Acquire
		}
		l, err := acquire(ctx, namedName(c, w), opts)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	})
	return loopMetrics(r, c.oneName), err
}

// pglockClient opens pglock on a database/sql pool through pgx's stdlib
// driver (pglock.New accepts only lib/pq, hence UnsafeNew), with its table
// in schema and heartbeats off.
func pglockClient(e *env, schema, owner string, maxConns int) (*pglock.Client, *sql.DB, error) {
	db, err := sql.Open("pgx", e.dsn)
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	c, err := pglock.UnsafeNew(db,
		pglock.WithCustomTable(schema+".locks"),
		pglock.WithHeartbeatFrequency(0),
		pglock.WithLeaseDuration(leaseTTL),
		pglock.WithOwner(owner))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return c, db, nil
}

func pglockNamed(ctx context.Context, e *env, c namedCase) (map[string]float64, error) {
	schema, drop, err := e.newSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	client, db, err := pglockClient(e, schema, "seqbench", c.goroutines)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := client.CreateTable(); err != nil {
		return nil, err
	}
	var opts []pglock.LockOption
	if !c.oneName {
		opts = append(opts, pglock.FailIfLocked())
	}
	r, err := loop(ctx, loopOpts{workers: c.goroutines, warm: e.warm, dur: e.dur, cutAtEnd: c.oneName}, func(ctx context.Context, w int) error {
		l, err := client.AcquireContext(ctx, namedName(c, w), opts...)
		if err != nil {
			return err
		}
		return client.ReleaseContext(ctx, l)
	})
	return loopMetrics(r, c.oneName), err
}

// namedStatements returns the acquire and release of pgbench script (c).
func namedStatements() (acquire, release string, err error) {
	stmts, _, err := pgbench.Statements(pgbench.NamedLease)
	if err != nil {
		return "", "", err
	}
	return stmts[0], stmts[1], nil
}

// rawNamed runs the statements of pgbench script (c) through a pgx pool.
// With notify, the release also sends a NOTIFY on the schema's channel
// (as seqlease's release does, so that waiters elsewhere wake) and a
// connection listens to it, to show what the notice costs.
func rawNamed(ctx context.Context, e *env, c namedCase, notify bool) (map[string]float64, error) {
	acquire, release, err := namedStatements()
	if err != nil {
		return nil, err
	}
	schema, drop, err := e.newSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	pool, err := e.pool(ctx, c.goroutines+1, schema)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if notify {
		release = "WITH u AS (" + release + " RETURNING 1) SELECT u.* FROM u, LATERAL pg_notify($3, 'l' || chr(9) || $1::text) n"
		stop, err := listen(ctx, pool, schema)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	r, err := loop(ctx, loopOpts{workers: c.goroutines, warm: e.warm, dur: e.dur}, func(ctx context.Context, w int) error {
		id := strconv.Itoa(w)
		var fence int64
		if err := pool.QueryRow(ctx, acquire, id).Scan(&fence); err != nil {
			return fmt.Errorf("raw acquire: %w", err)
		}
		args := []any{id, fence}
		if notify {
			args = append(args, schema)
		}
		tag, err := pool.Exec(ctx, release, args...)
		if err != nil {
			return fmt.Errorf("raw release: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("raw release: %d rows", tag.RowsAffected())
		}
		return nil
	})
	return loopMetrics(r, false), err
}

// listen holds a connection of pool listening on channel, and consumes its
// notices, until the returned function is called.
func listen(ctx context.Context, pool *pgxpool.Pool, channel string) (stop func(), err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Release()
		return nil, err
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := conn.Conn().WaitForNotification(lctx); err != nil {
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
		conn.Hijack().Close(context.Background()) // interrupted mid-wait: do not reuse
	}, nil
}

// walPerTry measures the WAL the server writes while one client tries,
// tries times in a row, to acquire a name another holds; every try must
// fail. The position is the server's, so other sessions' writes count too:
// the smallest of several runs is the one to trust.
func walPerTry(ctx context.Context, e *env, who string) (map[string]float64, error) {
	tries := 500
	if e.smoke {
		tries = 50
	}
	schema, drop, err := e.newSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	var try func(ctx context.Context) error // one failed try-acquire
	switch who {
	case "seq":
		pool, err := e.pool(ctx, 4, "")
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		s, err := postgres.New(pool, &postgres.Config{Schema: schema})
		if err != nil {
			return nil, err
		}
		holder, err := lease.New(s, &lease.Config{Owner: "holder", CleanupInterval: -1})
		if err != nil {
			return nil, err
		}
		defer holder.Stop()
		trier, err := lease.New(s, &lease.Config{Owner: "trier", CleanupInterval: -1})
		if err != nil {
			return nil, err
		}
		defer trier.Stop()
		if _, err := holder.TryAcquire(ctx, "held", &lease.AcquireOpts{TTL: time.Hour}); err != nil {
			return nil, err
		}
		try = func(ctx context.Context) error {
			_, err := trier.TryAcquire(ctx, "held", &lease.AcquireOpts{TTL: time.Hour})
			if errors.Is(err, lease.ErrHeld) {
				return nil
			}
			return fmt.Errorf("try-acquire of a held name: %v", err)
		}
	case "raw":
		acquire, _, err := namedStatements()
		if err != nil {
			return nil, err
		}
		pool, err := e.pool(ctx, 2, schema)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		var fence int64
		if err := pool.QueryRow(ctx, acquire, "held").Scan(&fence); err != nil {
			return nil, err
		}
		try = func(ctx context.Context) error {
			err := pool.QueryRow(ctx, acquire, "held").Scan(&fence)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return fmt.Errorf("guarded upsert of a held name: %v", err)
		}
	case "pglock":
		holder, hdb, err := pglockClient(e, schema, "holder", 2)
		if err != nil {
			return nil, err
		}
		defer hdb.Close()
		if err := holder.CreateTable(); err != nil {
			return nil, err
		}
		trier, tdb, err := pglockClient(e, schema, "trier", 2)
		if err != nil {
			return nil, err
		}
		defer tdb.Close()
		if _, err := holder.AcquireContext(ctx, "held"); err != nil {
			return nil, err
		}
		try = func(ctx context.Context) error {
			_, err := trier.AcquireContext(ctx, "held", pglock.FailIfLocked())
			if errors.Is(err, pglock.ErrNotAcquired) {
				return nil
			}
			return fmt.Errorf("pglock acquire of a held name: %v", err)
		}
	default:
		return nil, fmt.Errorf("unknown WAL case %q", who)
	}
	if err := try(ctx); err != nil { // warm: prepared statements, connections
		return nil, err
	}
	before, err := e.walLSN(ctx)
	if err != nil {
		return nil, err
	}
	for range tries {
		if err := try(ctx); err != nil {
			return nil, err
		}
	}
	bytes, err := e.walSince(ctx, before)
	if err != nil {
		return nil, err
	}
	return map[string]float64{"bytes": bytes / float64(tries)}, nil
}
