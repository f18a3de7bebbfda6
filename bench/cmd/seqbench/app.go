package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// appConns is the pool of the application-transaction rows: one
// connection per worker's transaction, the barrier's listener, and the
// Watch's confirmations.
const appConns = 24

// appWorkers is the number of workers of every application-transaction
// row.
const appWorkers = 16

// appTable is the business table of the application-transaction rows, in
// the fresh schema: the least an application writes.
const appTable = "app_orders"

// appVariant is what one application transaction does besides its
// business row.
type appVariant struct {
	key, name string
	// in runs in the transaction after the business row; nil: nothing.
	in func(ctx context.Context, s *seqEnv, tx pgx.Tx, stream string) error
	// noWatch runs it with no Watch of the Store the transactions come
	// from (no barrier): the notices go in the transaction.
	noWatch bool
	// entries says each transaction commits one entry with its row.
	entries bool
}

// rawAppendSQL is the statement of store/postgres's Append for one
// number, as text of its own (the library's is not exported), with the
// schema found on the search path: the append alone, through raw pgx.
const rawAppendSQL = `
WITH s AS (
	INSERT INTO streams AS s (name, last_number) VALUES ($1, 1)
	ON CONFLICT (name) DO UPDATE SET last_number = s.last_number + 1
	RETURNING s.last_number
)
INSERT INTO entries (stream, number, state, token, owner, operation_id, kind, leased_at, expires_at, resolved_at, payload)
SELECT $1, s.last_number, 'committed', $2, '', '', '', clock_timestamp(), clock_timestamp(), clock_timestamp(), $3 FROM s`

func appVariants() []appVariant {
	appendIn := func(ctx context.Context, s *seqEnv, tx pgx.Tx, stream string) error {
		_, err := s.leaser.InTx(s.store.InTx(tx)).Append(ctx, stream, nil, payload)
		return err
	}
	return []appVariant{
		{key: "row", name: "business row alone"},
		{key: "append", name: "business row + Append of its entry", in: appendIn, entries: true},
		{key: "append-nowatch", name: "business row + Append, no Watch running (the notice is sent in the transaction)", in: appendIn, noWatch: true, entries: true},
		{key: "lease", name: "business row + Lease + Complete", entries: true,
			in: func(ctx context.Context, s *seqEnv, tx pgx.Tx, stream string) error {
				x, err := s.leaser.InTx(s.store.InTx(tx)).Lease(ctx, stream, &sequence.LeaseOpts{TTL: leaseTTL})
				if err != nil {
					return err
				}
				return x.Complete(ctx, payload)
			}},
		{key: "raw-append", name: "business row + the Append statement sent raw through pgx, no library", entries: true,
			in: func(ctx context.Context, _ *seqEnv, tx pgx.Tx, stream string) error {
				_, err := tx.Exec(ctx, rawAppendSQL, stream, pgtype.UUID{Bytes: store.NewToken(), Valid: true}, payload)
				return err
			}},
	}
}

// appSpecs are application transactions (a business row, and what the
// variant adds) by 16 workers, over 16 streams (worker i on stream i) and,
// for Append, over 1 stream, where every transaction waits for the
// counter row the one before it holds until it commits.
func appSpecs() []spec {
	var out []spec
	for _, v := range appVariants() {
		streams := []int{appWorkers}
		if v.key == "append" {
			streams = append(streams, 1)
		}
		for _, n := range streams {
			out = append(out, spec{
				key:     fmt.Sprintf("app/%s/s=%d/w=%d", v.key, n, appWorkers),
				section: secApp,
				name:    fmt.Sprintf("%s, %s over %s", v.name, plural(appWorkers, "worker"), plural(n, "stream")),
				metrics: []metric{{key: "rate", unit: "tx/s"}},
				run:     func(ctx context.Context, e *env) (map[string]float64, error) { return runApp(ctx, e, v, n) },
			})
		}
	}
	return out
}

// runApp runs variant v by appWorkers workers over n streams, and checks
// that every committed business row has its entry.
func runApp(ctx context.Context, e *env, v appVariant, n int) (map[string]float64, error) {
	schema, drop, err := e.newSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	table := pgx.Identifier{schema, appTable}.Sanitize()
	if _, err := e.admin.Exec(ctx, "CREATE TABLE "+table+" (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, stream text NOT NULL, body bytea)"); err != nil {
		return nil, err
	}
	s, err := newAppEnv(ctx, e, schema, v.noWatch)
	if err != nil {
		return nil, err
	}
	defer s.close()
	streams := make([]string, n)
	for i := range streams {
		streams[i] = fmt.Sprintf("app-%d", i)
	}
	insert := "INSERT INTO " + table + " (stream, body) VALUES ($1, $2)"
	r, err := loop(ctx, loopOpts{workers: appWorkers, warm: e.warm, dur: e.dur}, func(ctx context.Context, w int) error {
		stream := streams[w%n]
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, insert, stream, payload); err != nil {
				return err
			}
			if v.in == nil {
				return nil
			}
			return v.in(ctx, s, tx, stream)
		})
	})
	if err == nil && v.entries {
		err = checkRowsHaveEntries(ctx, s, table, streams)
	}
	return map[string]float64{"rate": r.perSecond()}, err
}

// newAppEnv sets up a Leaser on schema, on a pool whose sessions find
// the schema's tables unqualified (the raw variant), with a started
// barrier (whose Watch takes the transactions' hand-overs) unless
// noWatch.
func newAppEnv(ctx context.Context, e *env, schema string, noWatch bool) (*seqEnv, error) {
	pool, err := e.pool(ctx, appConns, schema)
	if err != nil {
		return nil, err
	}
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	env := &seqEnv{pool: pool, store: s, close: pool.Close}
	cfg := sequence.Config{UnorderedOnly: noWatch} // the variants append and complete: no ordered commit
	if !noWatch {
		b, err := barrier.New(s, nil)
		if err != nil {
			pool.Close()
			return nil, err
		}
		if err := b.Start(ctx); err != nil {
			pool.Close()
			return nil, err
		}
		cfg.Barrier, env.barrier = b, b
		env.close = func() { b.Stop(); pool.Close() }
	}
	if env.leaser, err = sequence.New(s, &cfg); err != nil {
		env.close()
		return nil, err
	}
	return env, nil
}

// checkRowsHaveEntries checks that the business rows and the entries
// committed together: as many of each, every entry resolved.
func checkRowsHaveEntries(ctx context.Context, s *seqEnv, table string, streams []string) error {
	var rows int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
		return err
	}
	var entries int64
	for _, name := range streams {
		st, err := s.store.Stats(ctx, name)
		if err != nil {
			return err
		}
		if st.Unresolved != 0 {
			return fmt.Errorf("stream %s: %d numbers unresolved after the run", name, st.Unresolved)
		}
		entries += st.NextNumber - 1
	}
	if rows != entries {
		return fmt.Errorf("%d business rows committed, %d entries", rows, entries)
	}
	return nil
}
