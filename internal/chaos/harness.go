package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// Harness runs worker processes on one schema of a database, injects faults
// into them, and checks what they left: it is the parent side of the fault
// tests and of the soak. Worker processes are re-executions of the running
// test binary restricted to its TestWorker test, which calls RunWorker when
// EnvWorker is set.
type Harness struct {
	URL     string
	Schema  string
	Streams []string
	// Prefix starts the application_name of every connection of the
	// harness and its workers ("chaos-<8 hex digits>-"), so that Terminate
	// ends theirs and nobody else's.
	Prefix string
	// Pool is the harness's own pool, for checks and faults; Terminate
	// spares it.
	Pool  *pgxpool.Pool
	Store *postgres.Store
	// Stderr receives the workers' standard error. Default: os.Stderr.
	Stderr io.Writer

	exe   string
	nAcks atomic.Int64
	wg    sync.WaitGroup // the procs' and the follower's goroutines

	mu       sync.Mutex
	acks     map[string]map[int64][]byte
	spawned  int
	procs    []*Proc
	faults   map[string]int
	observed map[string][]int64
	follower *follower
}

// NewHarness connects to url, creates the workers' tables in schema (which
// must be migrated) and returns a harness for streams.
func NewHarness(ctx context.Context, url, schema string, streams []string) (*Harness, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	h := &Harness{
		URL: url, Schema: schema, Streams: streams, Prefix: "chaos-" + hex.EncodeToString(tag[:]) + "-",
		Stderr: os.Stderr, exe: exe,
		acks: map[string]map[int64][]byte{}, faults: map[string]int{}, observed: map[string][]int64{},
	}
	if h.Pool, err = NewPool(ctx, url, h.Prefix+"admin", 3); err != nil {
		return nil, err
	}
	if h.Store, err = postgres.New(h.Pool, &postgres.Config{Schema: schema}); err == nil {
		err = CreateTables(ctx, h.Pool, schema)
	}
	if err != nil {
		h.Pool.Close()
		return nil, err
	}
	return h, nil
}

// Close kills the workers still running, stops the follower and closes the
// pool.
func (h *Harness) Close() {
	h.mu.Lock()
	procs := slices.Clone(h.procs)
	h.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	h.StopFollow()
	h.wg.Wait()
	h.Pool.Close()
}

// Proc is a worker process.
type Proc struct {
	ID     int
	Config WorkerConfig

	h      *Harness
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{}
	events chan []string // "held" and "late" reports
	exited chan struct{}

	mu     sync.Mutex
	stats  WorkerStats
	state  *os.ProcessState
	killed bool // by Kill
}

// Spawn starts a worker process with cfg; URL, Schema, AppName, Owner and
// (if empty) Streams are filled in.
func (h *Harness) Spawn(cfg WorkerConfig) (*Proc, error) {
	h.mu.Lock()
	h.spawned++
	id := h.spawned
	h.mu.Unlock()
	cfg.URL, cfg.Schema = h.URL, h.Schema
	cfg.AppName = h.Prefix + "w" + strconv.Itoa(id)
	cfg.Owner = "w" + strconv.Itoa(id)
	if len(cfg.Streams) == 0 {
		cfg.Streams = h.Streams
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(h.exe, "-test.run=^TestWorker$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), EnvWorker+"="+string(js))
	cmd.Stderr = h.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chaos: start worker %d: %w", id, err)
	}
	p := &Proc{ID: id, Config: cfg, h: h, cmd: cmd, stdin: stdin,
		ready: make(chan struct{}), events: make(chan []string, 64), exited: make(chan struct{})}
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	h.wg.Go(func() { p.read(stdout) })
	return p, nil
}

// read handles the worker's reports until its output ends, then reaps it.
func (p *Proc) read(stdout io.Reader) {
	defer close(p.exited)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	ready := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "chaos" {
			continue
		}
		switch f[1] {
		case "ready":
			if !ready {
				ready = true
				close(p.ready)
			}
		case "ack":
			if len(f) == 5 {
				n, _ := strconv.ParseInt(f[3], 10, 64)
				p.h.ack(f[2], n, []byte(f[4]))
			}
		case "stats":
			var s WorkerStats
			if len(f) == 3 && json.Unmarshal([]byte(f[2]), &s) == nil {
				p.mu.Lock()
				p.stats = s
				p.mu.Unlock()
			}
		case "held", "late":
			select {
			case p.events <- f[1:]:
			default:
			}
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	_ = p.cmd.Wait()
	p.mu.Lock()
	p.state = p.cmd.ProcessState
	p.mu.Unlock()
}

func (h *Harness) ack(stream string, n int64, payload []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.acks[stream] == nil {
		h.acks[stream] = map[int64][]byte{}
	}
	h.acks[stream][n] = payload
	h.nAcks.Add(1)
}

// Ready waits until the worker has started its components.
func (p *Proc) Ready(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-p.exited:
		return fmt.Errorf("chaos: worker %d exited before it was ready (%v)", p.ID, p.State())
	case <-ctx.Done():
		return fmt.Errorf("chaos: worker %d not ready: %w", p.ID, ctx.Err())
	}
}

// Event waits for the worker's next "held" or "late" report.
func (p *Proc) Event(ctx context.Context) ([]string, error) {
	select {
	case e := <-p.events:
		return e, nil
	case <-p.exited:
		return nil, fmt.Errorf("chaos: worker %d exited (%v)", p.ID, p.State())
	case <-ctx.Done():
		return nil, fmt.Errorf("chaos: worker %d: no report: %w", p.ID, ctx.Err())
	}
}

// Kill sends SIGKILL and waits until the process is reaped.
func (p *Proc) Kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Pause stops the process (SIGSTOP); Resume continues it (SIGCONT).
func (p *Proc) Pause() error  { return p.cmd.Process.Signal(syscall.SIGSTOP) }
func (p *Proc) Resume() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// Exited is closed once the process has ended and was reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// State returns the process's end state; nil while it runs.
func (p *Proc) State() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Killed reports whether the process ended by SIGKILL.
func (p *Proc) Killed() bool {
	st := p.State()
	if st == nil {
		return false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Stats returns the worker's last reported counts.
func (p *Proc) Stats() WorkerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Shutdown stops the worker gracefully (it closes its stdin) and waits for
// it: it must exit with status 0 (a data race found by -race, a leaked
// goroutine or an error fails it). If ctx ends first the process dumps its
// goroutines (SIGQUIT) and is killed.
func (p *Proc) Shutdown(ctx context.Context) error {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-ctx.Done():
		// SIGQUIT first: the worker's goroutines are dumped to its standard
		// error, which says where it hung.
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.exited:
		case <-time.After(2 * time.Second):
		}
		p.Kill()
		return fmt.Errorf("chaos: worker %d did not stop: %w", p.ID, ctx.Err())
	}
	if st := p.State(); !st.Success() && !p.expectedEnd() {
		return fmt.Errorf("chaos: worker %d: %v", p.ID, st)
	}
	return nil
}

// expectedEnd reports whether the process ended as a fault meant it to:
// by Kill, or by its own SIGKILL at WorkerConfig.Die (which it may reach
// while it drains after Shutdown closed its stdin).
func (p *Proc) expectedEnd() bool {
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	return killed || p.Config.Die != "" && p.Killed()
}

// Unexpected describes the workers that ended otherwise than expected:
// neither by Kill, nor by their own SIGKILL at WorkerConfig.Die, nor with
// status 0 (Shutdown). A worker that fails (an error, a data race found by
// -race, a leaked goroutine) ends so.
func (h *Harness) Unexpected() []string {
	h.mu.Lock()
	procs := slices.Clone(h.procs)
	h.mu.Unlock()
	var out []string
	for _, p := range procs {
		st := p.State()
		if st == nil || st.Success() || p.expectedEnd() {
			continue
		}
		out = append(out, fmt.Sprintf("worker %d (%s) ended by itself: %v", p.ID, p.Config.AppName, st))
	}
	return out
}

// Live returns the workers that have not exited.
func (h *Harness) Live() []*Proc {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Proc
	for _, p := range h.procs {
		select {
		case <-p.exited:
		default:
			out = append(out, p)
		}
	}
	return out
}

// ShutdownAll stops every live worker gracefully, at once.
func (h *Harness) ShutdownAll(ctx context.Context) error {
	live := h.Live()
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, p := range live {
		wg.Go(func() { errs[i] = p.Shutdown(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Procs returns how many worker processes were started.
func (h *Harness) Procs() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.procs)
}

// Stats sums the workers' last reported counts (LongestCycle is the
// longest of theirs).
func (h *Harness) Stats() WorkerStats {
	h.mu.Lock()
	procs := slices.Clone(h.procs)
	h.mu.Unlock()
	var t WorkerStats
	for _, p := range procs {
		s := p.Stats()
		t.Leased += s.Leased
		t.Acked += s.Acked
		t.AckedTx += s.AckedTx
		t.Released += s.Released
		t.Refused += s.Refused
		t.Retried += s.Retried
		t.RetriedCommitted += s.RetriedCommitted
		t.Unknown += s.Unknown
		t.LeaseErrors += s.LeaseErrors
		t.CommitErrors += s.CommitErrors
		t.SingletonHeld += s.SingletonHeld
		t.FencedWrites += s.FencedWrites
		t.FenceRefused += s.FenceRefused
		t.LongestCycle = max(t.LongestCycle, s.LongestCycle)
	}
	return t
}

// Acks returns how many commits the workers acknowledged.
func (h *Harness) Acks() int64 { return h.nAcks.Load() }

// AcksOf returns how many commits of stream the workers acknowledged.
func (h *Harness) AcksOf(stream string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return int64(len(h.acks[stream]))
}

// WaitAcks waits until the workers acknowledged at least n commits.
func (h *Harness) WaitAcks(ctx context.Context, n int64) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for h.Acks() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %d commits acknowledged, waiting for %d: %w", h.Acks(), n, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Fault counts an injected fault of kind.
func (h *Harness) Fault(kind string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults[kind]++
}

// Faults returns the faults injected, by kind.
func (h *Harness) Faults() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.faults)
}

// Targets of Terminate.
const (
	TargetAll       = "all"       // every connection
	TargetListeners = "listeners" // the LISTEN connections (barrier, named-lease watch)
	TargetBusy      = "busy"      // connections running a statement or inside a transaction
)

// Terminate ends, with pg_terminate_backend, the workers' and the
// follower's connections (those whose application_name starts with Prefix,
// except the harness's own) that match target. It returns how many it
// ended. The connections are chosen first and ended after, so nothing
// outside them is ever touched.
func (h *Harness) Terminate(ctx context.Context, target string) (int, error) {
	var n int
	err := h.Pool.QueryRow(ctx, `
WITH t AS MATERIALIZED (
	SELECT pid FROM pg_stat_activity
	WHERE starts_with(application_name, $1) AND application_name <> $2 AND pid <> pg_backend_pid()
		AND ($3 = 'all'
			OR ($3 = 'listeners' AND query ILIKE 'listen %')
			OR ($3 = 'busy' AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')))
)
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM t`, h.Prefix, h.Prefix+"admin", target).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("chaos: terminate %s: %w", target, err)
	}
	return n, nil
}

// Listeners counts the LISTEN connections of each application_name of the
// workers and the follower.
func (h *Harness) Listeners(ctx context.Context) (map[string]int, error) {
	rows, err := h.Pool.Query(ctx, `
SELECT application_name, count(*)::int FROM pg_stat_activity
WHERE starts_with(application_name, $1) AND query ILIKE 'listen %' GROUP BY 1`, h.Prefix)
	if err != nil {
		return nil, fmt.Errorf("chaos: listeners: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		out[name] = n
	}
	return out, rows.Err()
}

// follower reads the streams in order in this process, as a consumer
// would, and records what it saw (I5).
type follower struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	pool    *pgxpool.Pool
	barrier *barrier.Barrier
}

// Follow starts following every stream with an ordered reader (a barrier
// of its own, on a pool whose connections Terminate ends too); a read that
// fails resumes after the last entry read.
func (h *Harness) Follow(ctx context.Context) error {
	pool, err := NewPool(ctx, h.URL, h.Prefix+"reader", 2)
	if err != nil {
		return err
	}
	st, err := postgres.New(pool, &postgres.Config{Schema: h.Schema})
	if err != nil {
		pool.Close()
		return err
	}
	b, err := barrier.New(st, nil)
	if err != nil {
		pool.Close()
		return err
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := b.Start(fctx); err != nil {
		cancel()
		pool.Close()
		return err
	}
	f := &follower{cancel: cancel, pool: pool, barrier: b}
	for _, stream := range h.Streams {
		f.wg.Go(func() {
			var after int64
			for fctx.Err() == nil {
				for e, err := range b.Entries(fctx, stream, &barrier.ReadOpts{Follow: true, After: after}) {
					if err != nil {
						break
					}
					after = e.Number
					h.mu.Lock()
					h.observed[stream] = append(h.observed[stream], e.Number)
					h.mu.Unlock()
				}
				sleep(fctx, 50*time.Millisecond)
			}
		})
	}
	h.mu.Lock()
	h.follower = f
	h.mu.Unlock()
	return nil
}

// StopFollow stops the follower, if one runs.
func (h *Harness) StopFollow() {
	h.mu.Lock()
	f := h.follower
	h.follower = nil
	h.mu.Unlock()
	if f == nil {
		return
	}
	f.cancel()
	f.wg.Wait()
	f.barrier.Stop()
	f.pool.Close()
}

// Drain resolves what the workers left: a cleanup loop of this process
// (with the Retry step on the workers' results, and history-recording stream
// leases) runs until no entry of any stream is leased, or ctx ends.
func (h *Harness) Drain(ctx context.Context) error {
	m, err := lease.New(h.Store, &lease.Config{Owner: h.Prefix + "drain"})
	if err != nil {
		return err
	}
	defer m.Stop()
	elector, err := cleanup.NewLeaseElector(m, time.Second)
	if err != nil {
		return err
	}
	pipeline, err := recovery.New(h.Store, &recovery.Config{
		Probe: lowLoad, OperationTracker: resultTracker(h.Pool, h.Schema), Owner: h.Prefix + "drain",
	})
	if err != nil {
		return err
	}
	sv, err := cleanup.New(h.Store, &cleanup.Config{
		Interval: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Pipeline: pipeline, Elector: elector,
	})
	if err != nil {
		return err
	}
	if err := sv.Start(ctx); err != nil {
		return err
	}
	defer sv.Stop()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		left := int64(0)
		for _, s := range h.Streams {
			st, err := h.Store.Stats(ctx, s)
			if err != nil && !errors.Is(err, store.ErrStreamNotFound) {
				left++ // a passing failure: look again
				continue
			}
			left += st.Unresolved
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: drain: %d entries still leased: %w", left, ctx.Err())
		case <-t.C:
		}
	}
}

// Counts describe a ledger.
type Counts struct {
	Entries, Committed, Leased, Gaps int
	ByHolder                         int            // committed by their holders
	Recovered                        map[string]int // committed entries carrying moved work, by recovery type
	GapReasons                       map[string]int
}

// Verdict is what Verify found.
type Verdict struct {
	Audits       []*audit.Report
	Ledger       Counts
	SideRows     int // side rows of CommitTx commits
	FencedWrites int
	LeaseEvents  int // named-lease history events checked for I8
	Violations   []string
}

// OK reports whether nothing was violated.
func (v *Verdict) OK() bool { return len(v.Violations) == 0 }

// Err returns nil for a clean verdict, else an error listing the violations.
func (v *Verdict) Err() error {
	if v.OK() {
		return nil
	}
	const most = 40
	lines := v.Violations
	if len(lines) > most {
		lines = append(slices.Clone(lines[:most]), fmt.Sprintf("... and %d more", len(v.Violations)-most))
	}
	return fmt.Errorf("chaos: %d violations:\n  %s", len(v.Violations), strings.Join(lines, "\n  "))
}

// Audit checks what holds while the workers run: it audits every stream
// (audit.Stream: I1, I2, I4 ordered, I5 what the follower read, I6 every
// acknowledged commit present with its payload and, if maxUnresolved > 0,
// no lease unresolved that long past its expiry by the database clock), the
// fenced writes of the singleton (fences never go back), and the
// named-lease history (I8, CheckLeaseHistory). What the workers
// acknowledged and the follower read is taken before the ledger is read.
func (h *Harness) Audit(ctx context.Context, maxUnresolved time.Duration) (*Verdict, error) {
	v, _, err := h.audit(ctx, maxUnresolved)
	return v, err
}

// Verify is Audit plus the check of the CommitTx side rows against the
// ledger (exactly one per CommitTx commit of a holder, none for anything
// else, in number order), which holds only at rest: call it after the
// workers stopped.
func (h *Harness) Verify(ctx context.Context, maxUnresolved time.Duration) (*Verdict, error) {
	v, ledgers, err := h.audit(ctx, maxUnresolved)
	if err != nil {
		return nil, err
	}
	if err := h.checkSide(ctx, v, ledgers); err != nil {
		return nil, err
	}
	return v, nil
}

func (h *Harness) audit(ctx context.Context, maxUnresolved time.Duration) (*Verdict, map[string]map[int64]store.Entry, error) {
	v := &Verdict{Ledger: Counts{Recovered: map[string]int{}, GapReasons: map[string]int{}}}
	h.mu.Lock()
	observed := map[string][]int64{}
	for s, o := range h.observed {
		observed[s] = slices.Clone(o)
	}
	following := h.follower != nil || len(h.observed) > 0
	acks := map[string]map[int64][]byte{}
	for s, a := range h.acks {
		acks[s] = maps.Clone(a)
	}
	h.mu.Unlock()
	now, err := h.Store.Now(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("chaos: audit: %w", err)
	}
	ledgers := map[string]map[int64]store.Entry{}
	for _, stream := range h.Streams {
		opts := &audit.Options{Ordered: true, Acknowledged: acks[stream], MaxUnresolved: maxUnresolved, Now: now}
		if opts.Acknowledged == nil {
			opts.Acknowledged = map[int64][]byte{}
		}
		if following {
			opts.Observed = observed[stream]
			if opts.Observed == nil {
				opts.Observed = []int64{}
			}
		}
		src := &recorder{Store: h.Store}
		r, err := audit.Stream(ctx, src, stream, opts)
		if err != nil {
			return nil, nil, err
		}
		v.Audits = append(v.Audits, r)
		for _, x := range r.Violations {
			v.Violations = append(v.Violations, stream+": "+x.String())
		}
		ledgers[stream] = map[int64]store.Entry{}
		for _, e := range src.read {
			ledgers[stream][e.Number] = e
			v.Ledger.count(e)
		}
	}
	if err := h.checkFenced(ctx, v); err != nil {
		return nil, nil, err
	}
	var events []store.LeaseEvent
	for after := int64(0); ; {
		page, err := h.Store.LeaseHistory(ctx, "", &store.LeaseHistoryParams{AfterID: after, Limit: store.MaxListLimit})
		if err != nil {
			return nil, nil, err
		}
		events = append(events, page...)
		if len(page) < store.MaxListLimit {
			break
		}
		after = page[len(page)-1].ID
	}
	v.LeaseEvents = len(events)
	v.Violations = append(v.Violations, CheckLeaseHistory(events)...)
	return v, ledgers, nil
}

func (c *Counts) count(e store.Entry) {
	c.Entries++
	switch e.State {
	case store.Leased:
		c.Leased++
	case store.Gap:
		c.Gaps++
		reason := e.GapReason
		if e.RecoveredAs != 0 {
			reason += " (work moved)"
		}
		c.GapReasons[reason]++
	case store.Committed:
		c.Committed++
		if e.RecoveredFrom != 0 {
			c.Recovered[e.RecoveryType]++
		} else if e.FilledAt.IsZero() {
			c.ByHolder++
		}
	}
}

// checkSide checks the CommitTx side rows: one per entry its holder
// committed through CommitTx, none for anything else, in number order per
// stream (side effects happen in sequence order).
func (h *Harness) checkSide(ctx context.Context, v *Verdict, ledgers map[string]map[int64]store.Entry) error {
	rows, err := h.Pool.Query(ctx, "SELECT stream, number, op FROM "+sideTable(h.Schema)+" ORDER BY id")
	if err != nil {
		return fmt.Errorf("chaos: side rows: %w", err)
	}
	defer rows.Close()
	seen := map[string]map[int64]bool{}
	last := map[string]int64{}
	bad := func(format string, args ...any) {
		v.Violations = append(v.Violations, "side rows: "+fmt.Sprintf(format, args...))
	}
	for rows.Next() {
		var stream, op string
		var n int64
		if err := rows.Scan(&stream, &n, &op); err != nil {
			return err
		}
		v.SideRows++
		e, ok := ledgers[stream][n]
		switch {
		case !ok:
			bad("%s/%d: a side row for a number not in the ledger", stream, n)
		case seen[stream][n]:
			bad("%s/%d: two side rows: the commit's work ran twice", stream, n)
		case e.State != store.Committed || e.RecoveredFrom != 0 || !bytes.HasPrefix(e.Payload, []byte(txPrefix)):
			bad("%s/%d: a side row, but the entry is %s %q: a side effect of a commit that did not happen", stream, n, e.State, e.Payload)
		case e.OperationID != op:
			bad("%s/%d: the side row's operation %q is not the entry's %q", stream, n, op, e.OperationID)
		case n <= last[stream]:
			bad("%s/%d: side row after the one of %d: side effects out of order", stream, n, last[stream])
		}
		if seen[stream] == nil {
			seen[stream] = map[int64]bool{}
		}
		seen[stream][n] = true
		last[stream] = max(last[stream], n)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for stream, es := range ledgers {
		for n, e := range es {
			if e.State == store.Committed && e.RecoveredFrom == 0 && e.FilledAt.IsZero() &&
				bytes.HasPrefix(e.Payload, []byte(txPrefix)) && !seen[stream][n] {
				bad("%s/%d: committed through CommitTx without its side row", stream, n)
			}
		}
	}
	return nil
}

// checkFenced checks that the fenced writes never went back to an older
// fence.
func (h *Harness) checkFenced(ctx context.Context, v *Verdict) error {
	rows, err := h.Pool.Query(ctx, "SELECT name, fence, owner FROM "+fencedTable(h.Schema)+" ORDER BY id")
	if err != nil {
		return fmt.Errorf("chaos: fenced writes: %w", err)
	}
	defer rows.Close()
	last := map[string]int64{}
	for rows.Next() {
		var name, owner string
		var fence int64
		if err := rows.Scan(&name, &fence, &owner); err != nil {
			return err
		}
		v.FencedWrites++
		if fence < last[name] {
			v.Violations = append(v.Violations, fmt.Sprintf("I8: %s: %s wrote with fence %d after fence %d had written", name, owner, fence, last[name]))
		}
		last[name] = max(last[name], fence)
	}
	return rows.Err()
}

// recorder is the auditor's source: the store, keeping what it read.
type recorder struct {
	*postgres.Store
	read []store.Entry
}

func (r *recorder) Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	es, err := r.Store.Read(ctx, stream, after, limit)
	r.read = append(r.read, es...)
	return es, err
}
