package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// backend is what the pipeline uses of a store.
type backend interface {
	sequence.Store
	barrier.Source
	cleanup.Store
	gap.Store
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
	Stats(ctx context.Context, stream string) (store.StreamStats, error)
	barrier.Checkpoints      // the projector's saved position
	metrics.CheckpointLister // the reader lag gauge
	SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error
}

// The projector is a named reader: its checkpoint in the stream shows how
// far it got (`seqlease readers`, the seqlease_reader_lag gauge).
const (
	readerName      = "projection"
	checkpointEvery = 100 // entries between saves; the last one is saved too
)

// cleanerTTL is the TTL of the named lease that elects the cleaner of the
// stream (cleanup.Config.LeaseTTL; the library's default is 15 s). A worker
// process killed in the middle of a cleanup walk holds the stream's cleaning
// for that long: the demo keeps it short so that the survivors take over
// soon.
const cleanerTTL = 2 * time.Second

// workLog is the demo's WorkTracker and OperationTracker: what workers
// recorded before they crashed, by operation id. In one process it is a map;
// with -procs it is a table, so that the cleaner, in whichever process it
// runs, finds what a worker of another process left.
type workLog interface {
	record(ctx context.Context, id string, payload []byte) error
	lookup(ctx context.Context, e store.Entry) ([]byte, bool, error)
}

// memLog is the in-process workLog.
type memLog struct {
	mu   sync.Mutex
	work map[string][]byte
}

func newMemLog() *memLog { return &memLog{work: map[string][]byte{}} }

func (t *memLog) record(_ context.Context, id string, payload []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.work[id] = payload
	return nil
}

func (t *memLog) lookup(_ context.Context, e store.Entry) ([]byte, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.work[e.OperationID]
	return w, ok, nil
}

// counters are what the pipeline did, for the progress line and the report.
type counters struct {
	committed, stalled, lateRefused, crashed, partial, retried atomic.Int64
	redelivered, applied, recovered, duplicates                atomic.Int64
}

// pipeline is one run, or with -procs one process's part of it.
type pipeline struct {
	c       config
	st      backend
	stream  string
	events  []event
	next    []int // next[i]: the event of i's account after i, -1 after its last
	leaser  *sequence.Leaser
	barrier *barrier.Barrier
	partial workLog  // partial work, for the PartialWork step
	results workLog  // completed results, for the Retry step
	jobs    chan int // event indices ready to process; nil in the -procs parent
	n       counters
	// observed is every number the projector read, in order, for the
	// audit of I5.
	observed []int64
	// lastApplied is the number of the last entry the projector applied,
	// where its checkpoint must end.
	lastApplied int64
	// deaths are the worker processes of a -procs run that died, for the
	// report.
	deaths []death
	// onApply, if set, is called by the projector with the count of events
	// applied after each one (the -kill trigger of a -procs run).
	onApply func(applied int64)
}

// run runs the pipeline in this process, or with -procs in worker
// processes while this one projects.
func run(ctx context.Context, c config) (*report, error) {
	if c.procs > 1 {
		return runParent(ctx, c)
	}
	st, _, closeStore, err := openStore(ctx, c, "")
	if err != nil {
		return nil, err
	}
	defer closeStore()

	p := &pipeline{
		c: c, st: st,
		stream:  fmt.Sprintf("projection-%d", time.Now().UnixNano()),
		events:  generate(c.seed, c.events, c.accounts),
		partial: newMemLog(), results: newMemLog(),
		jobs: make(chan int, c.events), // each event is in it at most once
	}
	stop, err := p.startNode(ctx, "projection-demo")
	if err != nil {
		return nil, err
	}
	defer stop()

	// An account's first event is ready at once; each next one when the
	// projector has applied the one before it.
	next, first := successors(p.events)
	p.next = next
	for _, i := range first {
		p.jobs <- i
	}
	start := time.Now()
	var workers sync.WaitGroup
	for w := range c.workers {
		workers.Go(func() { p.worker(ctx, uint64(w)) })
	}
	stopProgress := p.progress(start)
	model, err := p.project(ctx)
	stopProgress()
	close(p.jobs)
	workers.Wait()
	elapsed := time.Since(start)
	if err != nil {
		return nil, err
	}
	return p.check(ctx, model, elapsed)
}

// startNode starts what a process that leases and cleans needs: the
// barrier, the leaser and the cleanup loop. stop stops them.
func (p *pipeline) startNode(ctx context.Context, owner string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if p.barrier, err = barrier.New(p.st, nil); err != nil {
		return nil, err
	}
	if err := p.barrier.Start(ctx); err != nil {
		return nil, err
	}
	stops = append(stops, p.barrier.Stop)
	var leaserObs sequence.Observer
	var cleanupObs cleanup.Observer
	if p.c.telemetry != nil {
		m, err := p.instrument(p.c.telemetry)
		if err != nil {
			stop()
			return nil, err
		}
		p.c.telemetry.onClose(m.Close)
		leaserObs, cleanupObs = m.Leaser(), m.Cleanup()
	}
	if p.leaser, err = sequence.New(p.st, &sequence.Config{Barrier: p.barrier, DefaultTTL: p.c.ttl, Owner: owner, Observer: leaserObs}); err != nil {
		stop()
		return nil, err
	}
	rp, err := recovery.New(p.st, &recovery.Config{
		WorkTracker:      recovery.WorkTrackerFunc(p.partial.lookup),
		OperationTracker: recovery.OperationTrackerFunc(p.results.lookup),
		Owner:            owner + "/cleanup",
	})
	if err != nil {
		stop()
		return nil, err
	}
	cl, err := cleanup.New(p.st, &cleanup.Config{
		Interval: p.c.interval,
		Pipeline: rp,
		Cascade:  &cleanup.CascadeConfig{Booster: p.leaser},
		Barrier:  p.barrier,
		LeaseTTL: cleanerTTL,
		Observer: cleanupObs,
		// Its warnings (leases expiring often: a TTL too short for the
		// machine; cascade mode) on stderr.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		stop()
		return nil, err
	}
	if err := cl.Start(ctx); err != nil {
		stop()
		return nil, err
	}
	stops = append(stops, cl.Stop)
	return stop, nil
}

// openStore returns the memory backend, or PostgreSQL (migrated) with -dsn,
// and then also its pool.
//
// appName, if not empty, is the application_name of its connections (the
// supervisor of a -procs run waits for a dead worker process's connections
// to end, by that name, before it restarts it).
func openStore(ctx context.Context, c config, appName string) (backend, *pgxpool.Pool, func(), error) {
	if c.dsn == "" {
		return memory.New(nil), nil, func() {}, nil
	}
	cfg, err := pgxpool.ParseConfig(c.dsn)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-dsn: %w", err)
	}
	if appName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect: %w", err)
	}
	m, err := migrations.New(&migrations.Config{Schema: c.schema})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	if _, err := m.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, nil, fmt.Errorf("migrate: %w", err)
	}
	st, err := postgres.New(pool, &postgres.Config{Schema: c.schema})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return st, pool, pool.Close, nil
}

// worker processes events: lease a number, do the work, commit in order.
// Some attempts go wrong on purpose.
func (p *pipeline) worker(ctx context.Context, id uint64) {
	r := rand.New(rand.NewPCG(p.c.seed, id))
	for idx := range p.jobs {
		e := p.events[idx]
		lease, err := p.leaser.Lease(ctx, p.stream, &sequence.LeaseOpts{OperationID: e.ID, Kind: e.Type})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// A transient failure (the database restarting, say): the event
			// goes back in the queue and the worker tries again shortly.
			fmt.Fprintln(os.Stderr, "projection: lease:", err)
			p.jobs <- idx
			time.Sleep(p.c.ttl)
			continue
		}
		result, _ := json.Marshal(project(e))
		switch f := r.Float64(); {
		case f < p.c.stall:
			// Paused (GC, SIGSTOP, a partition) past the lease: the late
			// commit is refused, and the number was resolved without us.
			p.n.stalled.Add(1)
			time.Sleep(p.c.ttl * 3 / 2)
			if err := lease.Commit(ctx, result); errors.Is(err, sequence.ErrExpired) || errors.Is(err, sequence.ErrGap) {
				p.n.lateRefused.Add(1)
			}
			continue
		case f < p.c.stall+p.c.crash:
			p.n.crashed.Add(1) // dies holding the lease
			continue
		case f < p.c.stall+p.c.crash+p.c.partial:
			p.n.partial.Add(1)
			p.recordThenDie(ctx, p.partial, lease, e.ID, result) // half done, then dies
			continue
		case f < p.c.stall+p.c.crash+p.c.partial+p.c.retry:
			p.n.retried.Add(1)
			p.recordThenDie(ctx, p.results, lease, e.ID, result) // done, then dies before committing
			continue
		}
		_ = lease.KeepAlive(nil)
		time.Sleep(time.Duration(r.IntN(1000)) * time.Microsecond) // the work
		if err := lease.Commit(ctx, result); err != nil {
			// Lost the number (it expired while waiting): the projector
			// will see a gap and redeliver the event.
			continue
		}
		p.n.committed.Add(1)
	}
}

// recordThenDie records what a worker did before it "crashes". If the
// record cannot be written, the worker gives the number up instead, so the
// event is redelivered rather than lost.
func (p *pipeline) recordThenDie(ctx context.Context, log workLog, lease *sequence.Lease, id string, result []byte) {
	if err := log.record(ctx, id, result); err != nil {
		fmt.Fprintln(os.Stderr, "projection: record work:", err)
		_ = lease.Release(ctx)
	}
}

// project follows the stream in order and applies each operation once. A
// gap whose work was not recovered elsewhere means its event still needs
// doing: in one process it is redelivered here; with -procs the worker
// process that owns the event redelivers it. In one process, applying an
// event also makes its account's next event ready (with -procs the worker
// processes do that).
//
// The projector reads as the named reader "projection", starting after its
// checkpoint, and saves the checkpoint every checkpointEvery entries and at
// its last. Its read model lives in memory, so here the checkpoint is
// progress and lag, not a restart point: a new run starts from an empty
// model on a new stream. With a read model in PostgreSQL, apply a batch
// and save the checkpoint in one transaction (docs/projections.md): a
// restart then resumes exactly after the last applied entry.
func (p *pipeline) project(ctx context.Context) (readModel, error) {
	model := readModel{}
	applied := make([]bool, len(p.events))
	var last int64
	for e, err := range p.barrier.Entries(ctx, p.stream, &barrier.ReadOpts{Reader: readerName, Follow: true, IncludeGaps: true}) {
		if err != nil {
			return nil, err
		}
		if e.Number <= last {
			return nil, fmt.Errorf("reader went back: %d after %d", e.Number, last)
		}
		last = e.Number
		done, err := p.handle(e, model, applied)
		if err != nil {
			return nil, err
		}
		if done || e.Number%checkpointEvery == 0 {
			p.saveCheckpoint(ctx, e.Number)
		}
		if done {
			p.lastApplied = e.Number
			return model, nil
		}
	}
	return nil, ctx.Err()
}

// handle applies one entry to model; done says every event is applied.
func (p *pipeline) handle(e store.Entry, model readModel, applied []bool) (done bool, err error) {
	if e.State == store.Committed {
		p.observed = append(p.observed, e.Number)
	}
	if e.State == store.Gap {
		if e.RecoveredAs == 0 {
			idx, err := p.eventIndex(e.OperationID)
			if err != nil {
				return false, err
			}
			if !applied[idx] && p.jobs != nil {
				p.n.redelivered.Add(1)
				p.jobs <- idx
			}
		}
		return false, nil
	}
	var o op
	if err := json.Unmarshal(e.Payload, &o); err != nil {
		return false, fmt.Errorf("entry %d: %w", e.Number, err)
	}
	if o.Event < 0 || o.Event >= len(p.events) {
		return false, fmt.Errorf("entry %d: event %d out of range", e.Number, o.Event)
	}
	if e.RecoveredFrom != 0 {
		p.n.recovered.Add(1)
	}
	if applied[o.Event] {
		p.n.duplicates.Add(1)
		return false, nil
	}
	applied[o.Event] = true
	model.apply(o)
	if n := p.next[o.Event]; n >= 0 && p.jobs != nil {
		p.jobs <- n
	}
	count := p.n.applied.Add(1)
	if p.onApply != nil {
		p.onApply(count)
	}
	return count == int64(len(p.events)), nil
}

// saveCheckpoint saves the projector's position. A failed save is only
// reported: the next one covers it (the checkpoint is progress here, see
// project).
func (p *pipeline) saveCheckpoint(ctx context.Context, position int64) {
	if err := p.st.SaveCheckpoint(ctx, readerName, p.stream, position, nil); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "projection: save checkpoint:", err)
	}
}

// eventIndex returns the index of the event of an operation id.
func (p *pipeline) eventIndex(opID string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(opID, "ev-"))
	if err != nil {
		return 0, fmt.Errorf("operation id %q: %w", opID, err)
	}
	if n < 0 || n >= len(p.events) {
		return 0, fmt.Errorf("operation id %q: no such event", opID)
	}
	return n, nil
}

// instrument builds the pipeline's metrics on tm's provider, with the
// barrier's watermarks, the gap count and the alert evaluator; alerts are
// printed as they fire and resolve.
func (p *pipeline) instrument(tm *telemetry) (*metrics.Metrics, error) {
	alerts, err := metrics.NewEvaluator(&metrics.EvaluatorConfig{
		Sink: func(a metrics.Alert) {
			state := "resolved"
			if a.Firing {
				state = "FIRING"
			}
			fmt.Fprintf(os.Stderr, "alert %s %s (%s): %s\n", a.Name, state, a.Level, a.Message)
		},
	})
	if err != nil {
		return nil, err
	}
	return metrics.New(&metrics.Config{
		MeterProvider: tm.provider,
		Watermarks:    p.barrier,
		Gaps:          p.st, // the store counts open gaps
		Checkpoints:   p.st, // the store lists the readers' checkpoints: reader lag
		Alerts:        alerts,
	})
}
