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
	"syscall"
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
//
// This process is also the supervisor of the worker processes: one that
// dies (killed by a signal, or exited with an error) is restarted, at most
// maxRestarts times. With -kill the supervisor SIGKILLs worker process 0
// itself a third of the way in. What the dead process leased stays in the
// stream and expires; the cleanup loop of the others resolves it as it
// resolves the demo's simulated crashes. What it kept only in memory (its
// queue of ready events, its counts) is lost: the restarted process
// rebuilds its queue from the stream (runChild), and the report counts
// only what the processes that finished reported.

// childFlag starts a process as worker number i of a -procs run on stream;
// childRunFlag tells it how many times it was restarted (its owner name
// says so).
const (
	childFlag    = "child"
	childRunFlag = "child-run"
)

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

// plus returns the sum of k and o.
func (k childCounts) plus(o childCounts) childCounts {
	return childCounts{
		Committed: k.Committed + o.Committed, Stalled: k.Stalled + o.Stalled, LateRefused: k.LateRefused + o.LateRefused,
		Crashed: k.Crashed + o.Crashed, Partial: k.Partial + o.Partial, Retried: k.Retried + o.Retried, Redelivered: k.Redelivered + o.Redelivered,
	}
}

// addTo adds k to the counters n.
func (k childCounts) addTo(n *counters) {
	n.committed.Add(k.Committed)
	n.stalled.Add(k.Stalled)
	n.lateRefused.Add(k.LateRefused)
	n.crashed.Add(k.Crashed)
	n.partial.Add(k.Partial)
	n.retried.Add(k.Retried)
	n.redelivered.Add(k.Redelivered)
}

// maxRestarts bounds how many times the supervisor restarts one worker
// process: a process that keeps dying (a bad DSN, a bug) ends the run.
const maxRestarts = 3

// death is a worker process that ended abnormally: killed by a signal or
// exited with an error.
type death struct {
	proc, run int            // the process and its incarnation (0: as first started)
	status    string         // as the OS tells it, e.g. "signal: killed"
	signal    syscall.Signal // the signal that ended it; 0 if it exited
	byKill    bool           // the supervisor sent the signal (-kill)
	applied   int64          // events the projector had applied by then
	// held are the numbers it had leased and not resolved, read once its
	// connections ended (nil if that read failed): the cleanup loop of the
	// other processes resolves them when they expire.
	held []int64
	// heldRecovered and heldGaps are how held were resolved in the end
	// (filled by check): work moved to a new number by a recovery, or a
	// gap, whose event was redelivered.
	heldRecovered, heldGaps int
}

// supervisor runs the worker processes of a -procs run: it starts them,
// restarts one that dies (up to maxRestarts times each) and sums the counts
// of the incarnations that finish. The counts of a process that dies die
// with it; the ledger, not the counts, is what the run is checked against.
type supervisor struct {
	c       config
	st      backend
	pool    *pgxpool.Pool // nil: no connections to wait for (tests)
	exe     string
	stream  string
	cancel  context.CancelCauseFunc // a process that cannot be kept running ends the run
	applied func() int64            // the projector's count, for the record of a death
	wg      sync.WaitGroup

	mu     sync.Mutex
	cmds   []*exec.Cmd // each process's running incarnation, nil between two
	runs   []int       // the incarnation of cmds[i]
	killed []bool      // the supervisor SIGKILLed cmds[i]
	counts childCounts // summed over the incarnations that finished
	deaths []death
}

// start starts c.procs worker processes, each kept running in a goroutine
// that wait waits for.
func (s *supervisor) start(ctx context.Context) {
	s.cmds, s.runs, s.killed = make([]*exec.Cmd, s.c.procs), make([]int, s.c.procs), make([]bool, s.c.procs)
	for i := range s.c.procs {
		s.wg.Go(func() { s.keep(ctx, i) })
	}
}

// wait waits until every worker process has finished its share or the run
// is cancelled.
func (s *supervisor) wait() { s.wg.Wait() }

// keep runs worker process i until an incarnation of it finishes its share,
// restarting it when it dies, at most maxRestarts times.
func (s *supervisor) keep(ctx context.Context, i int) {
	for run := 0; ; run++ {
		k, err := s.runOnce(ctx, i, run)
		if err == nil {
			s.mu.Lock()
			s.counts = s.counts.plus(k)
			s.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return // the run ends: CommandContext killed it
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			s.cancel(fmt.Errorf("worker process %d: %w", i, err))
			return
		}
		d := death{proc: i, run: run, status: exit.String(), applied: s.applied()}
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			d.signal = ws.Signal()
		}
		// What its connections had sent may still be running in the
		// database: a lease or a commit landing after the restarted
		// process read the stream would fool it. Its connections end soon
		// after it (the database notices the closed sockets).
		if err := s.awaitDisconnected(ctx, appName(s.stream, ownerName(i, run))); err != nil {
			s.cancel(fmt.Errorf("worker process %d: %w", i, err))
			return
		}
		if d.held, err = s.held(ctx, ownerName(i, run)); err != nil {
			fmt.Fprintf(os.Stderr, "projection: the leases of dead worker process %d: %v\n", i, err)
		}
		s.mu.Lock()
		d.byKill = s.killed[i]
		s.deaths = append(s.deaths, d)
		s.mu.Unlock()
		if run == maxRestarts {
			s.cancel(fmt.Errorf("worker process %d: %s, after %d restarts", i, d.status, maxRestarts))
			return
		}
		fmt.Fprintf(os.Stderr, "projection: worker process %d ended (%s) at %d events applied; restarting it (%d of at most %d)\n",
			i, d.status, d.applied, run+1, maxRestarts)
	}
}

// runOnce runs incarnation run of worker process i to its end and returns
// the counts it printed last.
func (s *supervisor) runOnce(ctx context.Context, i, run int) (childCounts, error) {
	cmd := exec.CommandContext(ctx, s.exe, childArgs(s.c, s.stream, i, run)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return childCounts{}, err
	}
	if err := cmd.Start(); err != nil {
		return childCounts{}, fmt.Errorf("start: %w", err)
	}
	s.mu.Lock()
	s.cmds[i], s.runs[i], s.killed[i] = cmd, run, false
	s.mu.Unlock()
	// The last line a worker prints is its counts.
	sc := bufio.NewScanner(out)
	var last []byte
	for sc.Scan() {
		last = append(last[:0], sc.Bytes()...)
	}
	err = cmd.Wait()
	s.mu.Lock()
	s.cmds[i] = nil
	s.mu.Unlock()
	if err != nil {
		return childCounts{}, err
	}
	var k childCounts
	if err := json.Unmarshal(last, &k); err != nil {
		return childCounts{}, fmt.Errorf("its counts: %w", err)
	}
	return k, nil
}

// disconnectTimeout bounds the wait for a dead worker process's
// connections to end.
const disconnectTimeout = 30 * time.Second

// awaitDisconnected waits until no connection of application_name name is
// left in the database, checking every few milliseconds: nothing signals
// the end of another process's connection.
func (s *supervisor) awaitDisconnected(ctx context.Context, name string) error {
	if s.pool == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, disconnectTimeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n)
		switch {
		case err != nil:
			return fmt.Errorf("wait for its connections to end: %w", err)
		case n == 0:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of its connections still open after %v", n, disconnectTimeout)
		case <-tick.C:
		}
	}
}

// held returns the numbers that owner leased and are not resolved yet.
func (s *supervisor) held(ctx context.Context, owner string) ([]int64, error) {
	var held []int64
	var after int64
	for {
		es, err := s.st.Read(ctx, s.stream, after, store.MaxListLimit)
		if errors.Is(err, store.ErrStreamNotFound) {
			return nil, nil // nothing leased yet
		}
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if e.Owner == owner && !e.State.Resolved() {
				held = append(held, e.Number)
			}
		}
		if len(es) < store.MaxListLimit {
			return held, nil
		}
		after = es[len(es)-1].Number
	}
}

// holdsLeases reports whether the running incarnation of worker process i
// holds a lease: an unresolved number it leased (they are all above the
// watermark).
func (s *supervisor) holdsLeases(ctx context.Context, i int) (bool, error) {
	s.mu.Lock()
	running, owner := s.cmds[i] != nil, ownerName(i, s.runs[i])
	s.mu.Unlock()
	if !running {
		return false, nil
	}
	st, err := s.st.Stats(ctx, s.stream)
	if err != nil {
		return false, err
	}
	es, err := s.st.Read(ctx, s.stream, st.Watermark, store.MaxListLimit)
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if e.Owner == owner && !e.State.Resolved() {
			return true, nil
		}
	}
	return false, nil
}

// kill sends SIGKILL to the running incarnation of worker process i: a
// real kill -9, which the process cannot catch. keep restarts it.
func (s *supervisor) kill(i int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmds[i] == nil {
		return fmt.Errorf("worker process %d is not running", i)
	}
	s.killed[i] = true
	return s.cmds[i].Process.Kill()
}

// runParent starts the worker processes, projects the stream while they run,
// and checks the outcome. With -kill it SIGKILLs worker process 0 once a
// third of the events are applied, at a moment it holds leases.
func runParent(ctx context.Context, c config) (*report, error) {
	if c.dsn == "" {
		return nil, errors.New("-procs needs -dsn: worker processes share a PostgreSQL")
	}
	st, pool, closeStore, err := openStore(ctx, c, "")
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
	sup := &supervisor{c: c, st: st, pool: pool, exe: exe, stream: p.stream, cancel: cancel, applied: p.n.applied.Load}
	var kill killRecord
	if c.kill {
		kill.at = max(1, int64(c.events)/3)
		p.onApply = func(applied int64) {
			if applied < kill.at || kill.done || kill.err != nil {
				return
			}
			// At the first moment it holds leases, so that the kill
			// leaves some for the others to clean up.
			holding, err := sup.holdsLeases(ctx, 0)
			if err == nil && !holding {
				return
			}
			if err == nil {
				err = sup.kill(0)
			}
			kill.err, kill.done, kill.applied = err, err == nil, applied
		}
	}
	start := time.Now()
	sup.start(ctx)
	stopProgress := p.progress(start)
	model, err := p.project(ctx)
	stopProgress()
	sup.wait()
	elapsed := time.Since(start)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return nil, cause
	}
	if err != nil {
		return nil, err
	}
	sup.counts.addTo(&p.n)
	p.deaths = sup.deaths
	rep, err := p.check(ctx, model, elapsed)
	if rep != nil && c.kill {
		rep.kill, rep.killAt = true, kill.applied
		if err == nil {
			err = kill.check(sup.deaths)
			rep.killChecked = err == nil
		}
	}
	return rep, err
}

// killRecord is what -kill did, written by the projector (in runParent's
// goroutine).
type killRecord struct {
	at      int64 // kill once this many events are applied
	done    bool  // the signal was sent
	applied int64 // the events applied then
	err     error // it could not be
}

// check verifies that the kill happened: a worker process died of the
// SIGKILL the supervisor sent, and (the run having finished) its restart
// did its share.
func (k killRecord) check(deaths []death) error {
	if !k.done {
		return fmt.Errorf("-kill: no worker process killed: %v", k.err)
	}
	for _, d := range deaths {
		if d.byKill && d.signal == syscall.SIGKILL {
			return nil
		}
	}
	return fmt.Errorf("-kill: SIGKILL sent, but no worker process died of it (deaths: %v)", deaths)
}

// childArgs are the command line of worker process i.
func childArgs(c config, stream string, i, run int) []string {
	f := func(d time.Duration) string { return d.String() }
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	return []string{
		"-" + childFlag, stream + ":" + strconv.Itoa(i), "-" + childRunFlag, strconv.Itoa(run),
		"-procs", strconv.Itoa(c.procs),
		"-events", strconv.Itoa(c.events), "-workers", strconv.Itoa(c.workers), "-accounts", strconv.Itoa(c.accounts),
		"-seed", strconv.FormatUint(c.seed, 10), "-ttl", f(c.ttl), "-cleanup-interval", f(c.interval),
		"-stall", g(c.stall), "-crash", g(c.crash), "-partial", g(c.partial), "-retry", g(c.retry),
		"-dsn", c.dsn, "-schema", c.schema, "-progress", "0", "-timeout", f(c.timeout),
	}
}

// runChild is worker process index of a -procs run on stream, restarted
// run times before: it works its share of the events until every one of them
// is committed, then prints its counts as the last line of its output.
//
// A restarted process finds its share half done by the incarnation that
// died, and what that one left is in the stream: so every start begins by
// reading the stream (lastAttempts), and an event already leased is left to
// the outcome of its last attempt rather than queued again. The supervisor
// restarts it only once every connection of the dead incarnation has ended,
// so nothing that one sent can land in the stream after this reading. The
// first start finds none of its events there, and the reading changes
// nothing.
func runChild(ctx context.Context, c config, stream string, index, run int) error {
	st, pool, closeStore, err := openStore(ctx, c, appName(stream, ownerName(index, run)))
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
	stop, err := p.startNode(ctx, ownerName(index, run))
	if err != nil {
		return err
	}
	defer stop()
	// Before any worker of this incarnation leases: what the stream holds
	// then of this process's events is the work of the ones before it.
	last, err := p.lastAttempts(ctx)
	if err != nil {
		return err
	}
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
		if own(i) && last[i] == 0 {
			p.jobs <- i
		}
	}
	var workers sync.WaitGroup
	for w := range c.workers {
		workers.Go(func() { p.worker(ctx, uint64((run*c.procs+index)*c.workers+w)) })
	}
	err = p.redeliver(ctx, own, mine, last)
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

// ownerName is the owner (sequence.Config.Owner) of worker process index
// after run restarts.
func ownerName(index, run int) string {
	if run == 0 {
		return fmt.Sprintf("projection-proc-%d", index)
	}
	return fmt.Sprintf("projection-proc-%d-restart-%d", index, run)
}

// appName is the application_name of the connections of owner in the run
// on stream, unique across runs; PostgreSQL keeps 63 bytes of it, so it is
// cut to that length here too (names are ASCII).
func appName(stream, owner string) string {
	name := stream + "/" + owner
	return name[:min(len(name), 63)]
}

// lastAttempts reads the whole stream, whatever the state of its entries,
// and returns for each event the largest number that carries it (its last
// attempt), 0 for an event never leased.
func (p *pipeline) lastAttempts(ctx context.Context) ([]int64, error) {
	last := make([]int64, len(p.events))
	var after int64
	for {
		es, err := p.st.Read(ctx, p.stream, after, store.MaxListLimit)
		if errors.Is(err, store.ErrStreamNotFound) {
			return last, nil // nothing leased yet
		}
		if err != nil {
			return nil, fmt.Errorf("read the stream: %w", err)
		}
		for _, e := range es {
			idx, err := p.eventIndex(e.OperationID)
			if err != nil {
				return nil, err
			}
			last[idx] = e.Number
		}
		if len(es) < store.MaxListLimit {
			return last, nil
		}
		after = es[len(es)-1].Number
	}
}

// redeliver follows the stream until mine of the events that own selects
// are committed (by a worker or by a recovery), redelivers each of them
// whose number became a gap without its work moving elsewhere, and makes
// each of them ready once its account's previous event is committed
// (whichever process owned that one).
//
// last are the events' last attempts when this process started (see
// lastAttempts): an event leased before is not made ready again (its last
// attempt decides), and a gap below an event's last attempt is not
// redelivered (a later attempt exists). Each event that still needs doing
// thus has exactly one of: a place in the queue, an attempt in flight, or a
// gap this loop has yet to read.
func (p *pipeline) redeliver(ctx context.Context, own func(int) bool, mine int, last []int64) error {
	if mine == 0 {
		return nil
	}
	done := make([]bool, len(p.events))
	for e, err := range p.barrier.Entries(ctx, p.stream, &barrier.ReadOpts{Follow: true, IncludeGaps: true}) {
		if err != nil {
			return err
		}
		if e.State == store.Gap {
			idx, err := p.eventIndex(e.OperationID)
			if err != nil {
				return err
			}
			if e.RecoveredAs == 0 && own(idx) && !done[idx] && e.Number >= last[idx] {
				p.n.redelivered.Add(1)
				p.jobs <- idx
			}
			continue
		}
		var o op
		if err := json.Unmarshal(e.Payload, &o); err != nil {
			return fmt.Errorf("entry %d: %w", e.Number, err)
		}
		if o.Event < 0 || o.Event >= len(p.events) {
			return fmt.Errorf("entry %d: event %d out of range", e.Number, o.Event)
		}
		if done[o.Event] {
			continue
		}
		done[o.Event] = true
		if n := p.next[o.Event]; n >= 0 && own(n) && last[n] == 0 {
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
