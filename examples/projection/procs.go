package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/store"
)

// With -procs N the run is split across N worker processes that share one
// PostgreSQL: each leases, works and commits the events whose index is its
// own modulo N, redelivers its own events whose numbers became gaps, and
// runs a cleanup loop; the named lease seqlease/cleanup/<stream> lets only
// one of them clean the stream at a time. Partial work and finished results
// go to a table, so whichever process cleans can recover what a worker of
// another process left. This process follows the stream, projects, and
// checks the result as in a single-process run.

// childFlag starts a process as worker number i of a -procs run on stream.
const childFlag = "child"

// runMainEnv, set to 1, makes a test binary of this package run main
// instead of its tests, so tests can start worker processes too.
const runMainEnv = "PROJECTION_RUN_MAIN"

// workTable is where -procs workers record their work, in the demo schema.
const workTable = "projection_demo_work"

// pgLog is a workLog in workTable, one kind of record per log, for one
// stream. The table outlives a run (each run has a stream of its own in the
// same schema) and every run's operation ids are the same ("ev-000042"), so
// a record's key is the stream and the operation id: otherwise a later run
// with another -seed or -events would recover an earlier run's work.
type pgLog struct {
	pool   *pgxpool.Pool
	table  string // quoted, schema-qualified
	kind   string // "partial" or "result"
	stream string
}

func newPGLogs(ctx context.Context, pool *pgxpool.Pool, schema, stream string) (partial, results *pgLog, err error) {
	table := pgx.Identifier{schema, workTable}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		kind text NOT NULL, op_id text NOT NULL, payload bytea NOT NULL, PRIMARY KEY (kind, op_id))`)
	if err != nil {
		return nil, nil, fmt.Errorf("work table: %w", err)
	}
	return &pgLog{pool, table, "partial", stream}, &pgLog{pool, table, "result", stream}, nil
}

// key is the op_id column of the record of operation id.
func (l *pgLog) key(id string) string { return l.stream + "/" + id }

func (l *pgLog) record(ctx context.Context, id string, payload []byte) error {
	_, err := l.pool.Exec(ctx, `INSERT INTO `+l.table+` (kind, op_id, payload) VALUES ($1, $2, $3)
		ON CONFLICT (kind, op_id) DO UPDATE SET payload = excluded.payload`, l.kind, l.key(id), payload)
	return err
}

func (l *pgLog) lookup(ctx context.Context, e store.Entry) ([]byte, bool, error) {
	var payload []byte
	err := l.pool.QueryRow(ctx, `SELECT payload FROM `+l.table+` WHERE kind = $1 AND op_id = $2`, l.kind, l.key(e.OperationID)).Scan(&payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	return payload, err == nil, err
}

// childCounts is what a worker process reports to the parent when it ends.
type childCounts struct {
	Committed, Stalled, LateRefused, Crashed, Partial, Retried, Redelivered int64
}

// runParent starts the worker processes, projects the stream while they run,
// and checks the outcome.
func runParent(ctx context.Context, c config) (*report, error) {
	if c.dsn == "" {
		return nil, errors.New("-procs needs -dsn: worker processes share a PostgreSQL")
	}
	st, pool, closeStore, err := openStore(ctx, c)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	p := &pipeline{c: c, st: st, stream: fmt.Sprintf("projection-%d", time.Now().UnixNano()), events: generate(c.seed, c.events, c.accounts)}
	if _, _, err := newPGLogs(ctx, pool, c.schema, p.stream); err != nil { // the table, before the workers use it
		return nil, err
	}
	p.next, _ = successors(p.events)
	if p.barrier, err = barrier.New(st, nil); err != nil {
		return nil, err
	}
	if err := p.barrier.Start(ctx); err != nil {
		return nil, err
	}
	defer p.barrier.Stop()

	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	counts := make([]childCounts, c.procs)
	var children sync.WaitGroup
	for i := range c.procs {
		cmd := exec.CommandContext(ctx, exe, childArgs(c, p.stream, i)...)
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start worker process %d: %w", i, err)
		}
		children.Go(func() {
			// The last line a worker prints is its counts.
			sc := bufio.NewScanner(out)
			var last []byte
			for sc.Scan() {
				last = append(last[:0], sc.Bytes()...)
			}
			err := cmd.Wait()
			if err == nil {
				err = json.Unmarshal(last, &counts[i])
			}
			if err != nil {
				cancel(fmt.Errorf("worker process %d: %w", i, err))
			}
		})
	}
	stopProgress := p.progress(start)
	model, err := p.project(ctx)
	stopProgress()
	children.Wait()
	elapsed := time.Since(start)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return nil, cause
	}
	if err != nil {
		return nil, err
	}
	for _, k := range counts {
		p.n.committed.Add(k.Committed)
		p.n.stalled.Add(k.Stalled)
		p.n.lateRefused.Add(k.LateRefused)
		p.n.crashed.Add(k.Crashed)
		p.n.partial.Add(k.Partial)
		p.n.retried.Add(k.Retried)
		p.n.redelivered.Add(k.Redelivered)
	}
	return p.check(ctx, model, elapsed)
}

// childArgs are the command line of worker process i.
func childArgs(c config, stream string, i int) []string {
	f := func(d time.Duration) string { return d.String() }
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	return []string{
		"-" + childFlag, stream + ":" + strconv.Itoa(i),
		"-procs", strconv.Itoa(c.procs),
		"-events", strconv.Itoa(c.events), "-workers", strconv.Itoa(c.workers), "-accounts", strconv.Itoa(c.accounts),
		"-seed", strconv.FormatUint(c.seed, 10), "-ttl", f(c.ttl), "-cleanup-interval", f(c.interval),
		"-stall", g(c.stall), "-crash", g(c.crash), "-partial", g(c.partial), "-retry", g(c.retry),
		"-dsn", c.dsn, "-schema", c.schema, "-progress", "0",
	}
}

// runChild is worker process index of a -procs run on stream: it works its
// share of the events until every one of them is committed, then prints its
// counts as the last line of its output.
func runChild(ctx context.Context, c config, stream string, index int) error {
	st, pool, closeStore, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer closeStore()
	partial, results, err := newPGLogs(ctx, pool, c.schema, stream)
	if err != nil {
		return err
	}
	p := &pipeline{
		c: c, st: st, stream: stream, events: generate(c.seed, c.events, c.accounts),
		partial: partial, results: results, jobs: make(chan int, c.events),
	}
	stop, err := p.startNode(ctx, fmt.Sprintf("projection-proc-%d", index))
	if err != nil {
		return err
	}
	defer stop()
	own := func(idx int) bool { return idx%c.procs == index }
	mine := 0
	for i := range p.events {
		if own(i) {
			mine++
		}
	}
	next, first := successors(p.events)
	p.next = next
	for _, i := range first {
		if own(i) {
			p.jobs <- i
		}
	}
	var workers sync.WaitGroup
	for w := range c.workers {
		workers.Go(func() { p.worker(ctx, uint64(index*c.workers+w)) })
	}
	err = p.redeliver(ctx, own, mine)
	close(p.jobs)
	workers.Wait()
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(childCounts{
		Committed: p.n.committed.Load(), Stalled: p.n.stalled.Load(), LateRefused: p.n.lateRefused.Load(),
		Crashed: p.n.crashed.Load(), Partial: p.n.partial.Load(), Retried: p.n.retried.Load(), Redelivered: p.n.redelivered.Load(),
	})
}

// redeliver follows the stream until mine of the events that own selects
// are committed (by a worker or by a recovery), redelivers each of them
// whose number became a gap without its work moving elsewhere, and makes
// each of them ready once its account's previous event is committed
// (whichever process owned that one).
func (p *pipeline) redeliver(ctx context.Context, own func(int) bool, mine int) error {
	if mine == 0 {
		return nil
	}
	done := make([]bool, len(p.events))
	for e, err := range p.barrier.Entries(ctx, p.stream, &barrier.ReadOpts{Follow: true, IncludeGaps: true}) {
		if err != nil {
			return err
		}
		if e.State == store.Gap {
			idx, err := eventIndex(e.OperationID)
			if err != nil {
				return err
			}
			if e.RecoveredAs == 0 && own(idx) && !done[idx] {
				p.n.redelivered.Add(1)
				p.jobs <- idx
			}
			continue
		}
		var o op
		if err := json.Unmarshal(e.Payload, &o); err != nil {
			return fmt.Errorf("entry %d: %w", e.Number, err)
		}
		if done[o.Event] {
			continue
		}
		done[o.Event] = true
		if n := p.next[o.Event]; n >= 0 && own(n) {
			p.jobs <- n
		}
		if own(o.Event) {
			if mine--; mine == 0 {
				return nil
			}
		}
	}
	return ctx.Err()
}
