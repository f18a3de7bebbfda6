package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/examples/internal/natsrun"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// drainTimeout bounds the wait, once the writers are done, for the relays
// to publish the last message of every stream.
const drainTimeout = 2 * time.Minute

// backend is what the example uses of a store.
type backend interface {
	relaySource
	sequence.Store
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
}

// writeCounts are what the writers did.
type writeCounts struct {
	placed, declined, abandoned atomic.Int64
}

// run is one run: the writers and the check in this process, the relays
// here too or, with -procs, in relay processes.
func run(ctx context.Context, c config) (_ *report, err error) {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	n := newNames()
	n.streams = c.streams
	rep := newReport(c)
	st, pg, pool, closeStore, err := openStore(ctx, c)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	url, stopNATS, err := natsrun.Use(c.natsURL, nil)
	if err != nil {
		return nil, err
	}
	defer stopNATS()
	b, err := dialBroker(ctx, url, n, true, c.dedupe)
	if err != nil {
		return nil, err
	}
	defer b.close()
	if c.natsURL != "" && !c.keep {
		defer func() { _ = b.js.DeleteStream(context.WithoutCancel(ctx), n.jsStream()) }()
	}
	col, err := collect(ctx, b)
	if err != nil {
		return nil, err
	}
	defer col.stop()

	var w writer
	if pool != nil {
		pw, err := newPGWriter(ctx, pool, pg, c.schema, n.run, true)
		if err != nil {
			return nil, err
		}
		defer pw.close()
		w = pw
	} else {
		leaser, err := sequence.New(st, &sequence.Config{Owner: "outbox-writer", UnorderedOnly: true}) // appends only
		if err != nil {
			return nil, err
		}
		w = newMemWriter(leaser)
	}
	orders := generate(c, n)
	declines := 0
	for _, o := range orders {
		if o.Declined {
			declines++
		}
	}

	// The relays.
	var stopRelays func() (relayCounts, error)
	var sup *supervisor
	if c.procs == 1 {
		rl, err := startRelays(ctx, st, b, n.routes(), relayConfig{owner: "relay", ttl: c.relayTTL})
		if err != nil {
			return nil, err
		}
		stopRelays = func() (relayCounts, error) { return rl.stop(), nil }
	} else {
		if sup, err = startChildren(ctx, c, n, url, fail); err != nil {
			return nil, err
		}
		stopRelays = sup.stop
		if c.kill {
			// About a third of the way in, by messages published.
			sup.killHolderAt(st, col, n.route(0), (len(orders)-declines)/3)
		}
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = stopRelays()
		}
	}()

	// The writers.
	var wc writeCounts
	start := time.Now()
	stopProgress := progress(c, start, len(orders), &wc, col)
	err = writeAll(ctx, c, w, orders, &wc)
	wrote := time.Now()
	lag := int(wc.placed.Load()) - col.count()
	if err != nil {
		stopProgress()
		return nil, errors.Join(err, context.Cause(ctx))
	}

	// Wait for the last message of every stream, then stop the relays and
	// read JetStream to its end.
	ledger, err := readLedger(ctx, st, n.routes())
	if err != nil {
		stopProgress()
		return nil, err
	}
	want := map[string]int64{}
	for rt, es := range ledger {
		for _, e := range es {
			if e.State == store.Committed {
				want[rt.subject] = e.Number
			}
		}
	}
	dctx, cancel := context.WithTimeoutCause(ctx, drainTimeout, fmt.Errorf("the relays did not publish every stream's last message within %v", drainTimeout))
	err = col.wait(dctx, func(c *collector) bool {
		for subject, last := range want {
			if c.last[subject] < last {
				return false
			}
		}
		return true
	})
	if err == nil {
		last := map[route]int64{}
		for rt, es := range ledger {
			last[rt] = int64(len(es))
		}
		err = waitCheckpoints(dctx, st, last)
	}
	cancel()
	stopProgress()
	if err != nil {
		return nil, errors.Join(err, context.Cause(ctx))
	}
	published := time.Now()
	msgs, _ := col.result()
	for _, m := range msgs {
		published = m.at // the arrival of the last message
	}
	stopped = true
	counts, err := stopRelays()
	if err != nil {
		return nil, err
	}
	if rep.checkpoints, err = readCheckpoints(ctx, st, n.routes()); err != nil {
		return nil, err
	}
	total, err := b.messages(ctx)
	if err != nil {
		return nil, err
	}
	if err := col.wait(ctx, func(c *collector) bool { return len(c.msgs) >= int(total) }); err != nil {
		return nil, err
	}
	msgs, bad := col.result()
	rows, err := w.rows(ctx)
	if err != nil {
		return nil, err
	}

	rep.backend, rep.broker = "in-memory", "embedded NATS"
	if c.dsn != "" {
		rep.backend = "PostgreSQL"
	}
	if c.natsURL != "" {
		rep.broker = "NATS at " + c.natsURL
	}
	rep.placed, rep.declined, rep.abandoned = int(wc.placed.Load()), int(wc.declined.Load()), int(wc.abandoned.Load())
	rep.relays = counts
	rep.writeElapsed, rep.publishElapsed, rep.drain, rep.lagAtEnd = wrote.Sub(start), published.Sub(start), published.Sub(wrote), lag
	rep.jsMessages = int(total)
	if sup != nil {
		rep.kill = sup.killed()
	}
	rep.verify(ledger, msgs, rows)
	if bad != nil {
		rep.problems = append(rep.problems, bad.Error())
	}
	return rep, rep.err()
}

// writeAll places orders with c.writers writers, and fails at the first
// error.
func writeAll(ctx context.Context, c config, w writer, orders []order, wc *writeCounts) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan order)
	var wg sync.WaitGroup
	for range c.writers {
		wg.Go(func() {
			for o := range jobs {
				if o.Abandon {
					if err := w.leaveGap(ctx, o.Route.stream); err != nil {
						cancel(fmt.Errorf("leave a gap: %w", err))
						return
					}
					wc.abandoned.Add(1)
				}
				placed, err := w.write(ctx, o)
				if err != nil {
					cancel(fmt.Errorf("order %s: %w", o.ID, err))
					return
				}
				if placed {
					wc.placed.Add(1)
				} else {
					wc.declined.Add(1)
				}
			}
		})
	}
	for _, o := range orders {
		select {
		case jobs <- o:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(jobs)
	wg.Wait()
	return context.Cause(ctx)
}

// waitCheckpoints waits until the relays' checkpoint of every stream of
// want is at least at the number want gives (the stream's last number, a
// trailing gap included, which no message waits for). The checkpoints are
// saved by the relays' processes in the background, with nothing to wait
// on: it reads them again every checkpointPoll.
func waitCheckpoints(ctx context.Context, st checkpoints, want map[route]int64) error {
	t := time.NewTicker(checkpointPoll)
	defer t.Stop()
	for {
		behind := false
		for rt, n := range want {
			at, err := st.Checkpoint(ctx, relayReader, rt.stream)
			if err != nil {
				return fmt.Errorf("checkpoint of %s: %w", rt.stream, err)
			}
			behind = behind || at < n
		}
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the relays' checkpoints: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

// checkpointPoll is the pause between two reads of waitCheckpoints.
const checkpointPoll = 20 * time.Millisecond

// readCheckpoints reads the relays' checkpoint of every stream.
func readCheckpoints(ctx context.Context, st backend, routes []route) (map[route]int64, error) {
	out := map[route]int64{}
	for _, rt := range routes {
		at, err := st.Checkpoint(ctx, relayReader, rt.stream)
		if err != nil {
			return nil, fmt.Errorf("checkpoint of %s: %w", rt.stream, err)
		}
		out[rt] = at
	}
	return out, nil
}

// readLedger reads every entry of every stream.
func readLedger(ctx context.Context, st backend, routes []route) (map[route][]store.Entry, error) {
	out := map[route][]store.Entry{}
	for _, rt := range routes {
		var all []store.Entry
		for {
			es, err := st.Read(ctx, rt.stream, int64(len(all)), store.MaxListLimit)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", rt.stream, err)
			}
			all = append(all, es...)
			if len(es) < store.MaxListLimit {
				break
			}
		}
		out[rt] = all
	}
	return out, nil
}

// openStore returns the memory backend, or PostgreSQL (migrated) with -dsn,
// and then also the same Store as a *postgres.Store (the writers' root
// Store) and its pool.
func openStore(ctx context.Context, c config) (backend, *postgres.Store, *pgxpool.Pool, func(), error) {
	if c.dsn == "" {
		return memory.New(nil), nil, nil, func() {}, nil
	}
	pool, err := pgxpool.New(ctx, c.dsn)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("connect: %w", err)
	}
	m, err := migrations.New(&migrations.Config{Schema: c.schema})
	if err == nil {
		_, err = m.Up(ctx, pool)
	}
	if err != nil {
		pool.Close()
		return nil, nil, nil, nil, fmt.Errorf("migrate: %w", err)
	}
	st, err := postgres.New(pool, &postgres.Config{Schema: c.schema})
	if err != nil {
		pool.Close()
		return nil, nil, nil, nil, err
	}
	return st, st, pool, pool.Close, nil
}

// progress prints a progress line every c.progress until stopped.
func progress(c config, start time.Time, orders int, wc *writeCounts, col *collector) (stop func()) {
	if c.progress <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(c.progress)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			placed, published := wc.placed.Load(), col.count()
			written := placed + wc.declined.Load()
			fmt.Fprintf(os.Stderr, "%6.1fs  orders %d/%d  placed %d  published %d  lag %d\n",
				time.Since(start).Seconds(), written, orders, placed, published, placed-int64(published))
		}
	})
	return func() { close(done); wg.Wait() }
}
