package model

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/store/storetest"
)

// Store is everything the model test calls on a backend.
type Store interface {
	storetest.Store
	storetest.NamedLeaseStore
}

// maxRecoveryAttempts is the cleanup loop's Config.MaxRecoveryAttempts in
// the model test: low, so that failing trackers end as recovery-failed gaps.
const maxRecoveryAttempts = 3

// wakeTimeout bounds the wait of an ordered commit whose turn has come by
// the backend's watermark: longer means the barrier did not wake it.
const wakeTimeout = 10 * time.Second

// procs is the number of processes of a system under test.
const procs = 2

// backend opens fresh systems under test on one kind of store.
type backend struct {
	name string
	tick time.Duration // the length of a tick of the schedules
	// open returns a fresh store for each process, all on the same data
	// (a clock for the memory backend), and a function that disposes of
	// them.
	open func(ctx context.Context) ([procs]Store, *clock, func(), error)
}

// memoryBackend is store/memory on a clock the schedule moves; its
// processes share the store, as goroutines of one process would.
func memoryBackend() backend {
	return backend{name: "memory", tick: time.Second, open: func(context.Context) ([procs]Store, *clock, func(), error) {
		clk := newClock()
		s := memory.New(&memory.Config{Now: clk.now})
		return [procs]Store{s, s}, clk, func() {}, nil
	}}
}

// postgresBackend is store/postgres on a fresh, migrated schema, each
// process on a pool of its own (separate processes, as far as the database
// can tell); the schema is dropped when the run is over. Ticks are real
// time, short.
func postgresBackend(pools [procs]*pgxpool.Pool) backend {
	pool := pools[0]
	return backend{name: "postgres", tick: 20 * time.Millisecond, open: func(ctx context.Context) ([procs]Store, *clock, func(), error) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		schema := "t_" + hex.EncodeToString(b[:]) // pgtest's naming
		drop := func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}
		var stores [procs]Store
		m, err := migrations.New(&migrations.Config{Schema: schema})
		if err == nil {
			_, err = m.Up(ctx, pool)
		}
		for i := 0; i < procs && err == nil; i++ {
			stores[i], err = postgres.New(pools[i], &postgres.Config{Schema: schema})
		}
		if err != nil {
			drop()
			return stores, nil, nil, fmt.Errorf("postgres schema: %w", err)
		}
		return stores, nil, drop, nil
	}}
}

// clock is the memory store's clock: it stands still until the schedule
// moves it. Its readings carry the monotonic clock (sequence.Config.Now
// needs one).
type clock struct {
	base   time.Time
	offset atomic.Int64
}

func newClock() *clock { return &clock{base: time.Now()} }

func (c *clock) now() time.Time      { return c.base.Add(time.Duration(c.offset.Load())) }
func (c *clock) add(d time.Duration) { c.offset.Add(int64(d)) }

// tracker is the WorkTracker and OperationTracker of the cleanup loops
// (the user's, shared by the processes): it answers from the plans of the
// lease steps and logs every call, per process.
type tracker struct {
	seq   *atomic.Int64 // orders the calls with the cleanup's writes
	mu    sync.Mutex
	plans map[string]plan // by operation id
	fails map[string]int  // failures given so far, by operation id
	calls [procs][]trackerCall
}

// trackerCall is one call of a tracker.
type trackerCall struct {
	Seq    int64
	Stream string
	Number int64
	Op     string
	Result bool   // the OperationTracker; else the WorkTracker
	Work   string // what it returned, when it had something
	Has    bool
	Err    bool
}

var errTracker = errors.New("model: tracker unavailable")

func newTracker(seq *atomic.Int64) *tracker {
	return &tracker{seq: seq, plans: map[string]plan{}, fails: map[string]int{}}
}

func (t *tracker) add(op string, p plan) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.plans[op] = p
}

func (t *tracker) call(proc int, e store.Entry, result bool) ([]byte, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.plans[e.OperationID]
	c := trackerCall{Seq: t.seq.Add(1), Stream: e.Stream, Number: e.Number, Op: e.OperationID, Result: result}
	switch {
	case !result && t.fails[e.OperationID] < p.Fails:
		t.fails[e.OperationID]++
		c.Err = true
	case !result && p.Partial:
		c.Has, c.Work = true, fmt.Sprintf("w%s/%d", e.OperationID, e.Number)
	case result && p.Result:
		c.Has, c.Work = true, fmt.Sprintf("r%s/%d", e.OperationID, e.Number)
	}
	t.calls[proc] = append(t.calls[proc], c)
	if c.Err {
		return nil, false, errTracker
	}
	return []byte(c.Work), c.Has, nil
}

// take returns the calls of process proc logged since the last take.
func (t *tracker) take(proc int) []trackerCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	calls := t.calls[proc]
	t.calls[proc] = nil
	return calls
}

// write is one resolving call the cleanup loop made.
type write struct {
	Seq      int64
	Stream   string
	Numbers  []int64 // ResolveExpiredBatch, ResolveExpired (one)
	Resolved []int64 // ResolveExpiredBatch: the numbers it resolved
	Reason   string  // ResolveExpired
	Items    []store.RecoverItem
	Results  []store.RecoverResult // RecoverExpiredBatch, RecoverExpired (one)
	Refused  error                 // ResolveExpired: why it left the entry alone
	Err      error                 // the call failed: its outcome is unknown
}

// recorder is the store as the cleanup loop sees it: it logs the loop's
// resolving calls.
type recorder struct {
	Store
	seq    *atomic.Int64
	mu     sync.Mutex
	writes []write
}

func (r *recorder) log(w write) {
	w.Seq = r.seq.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, w)
}

func (r *recorder) take() []write {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.writes
	r.writes = nil
	return ws
}

func (r *recorder) ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error) {
	res, err := r.Store.ResolveExpiredBatch(ctx, stream, numbers, p)
	r.log(write{Stream: stream, Numbers: slices.Clone(numbers), Resolved: res, Reason: store.ReasonExpired, Err: err})
	return res, err
}

func (r *recorder) ResolveExpired(ctx context.Context, stream string, number int64, p *store.ResolveExpiredParams) error {
	err := r.Store.ResolveExpired(ctx, stream, number, p)
	w := write{Stream: stream, Numbers: []int64{number}, Reason: store.ReasonExpired}
	if p != nil && p.Reason != "" {
		w.Reason = p.Reason
	}
	switch {
	case err == nil:
		w.Resolved = w.Numbers
	case errors.Is(err, store.ErrNotExpired) || recovery.ResolvedMeanwhile(err):
		w.Refused = err
	default:
		w.Err = err
	}
	r.log(w)
	return err
}

func (r *recorder) RecoverExpiredBatch(ctx context.Context, stream string, items []store.RecoverItem, p *store.RecoverBatchParams) ([]store.RecoverResult, error) {
	res, err := r.Store.RecoverExpiredBatch(ctx, stream, items, p)
	r.log(write{Stream: stream, Items: slices.Clone(items), Results: res, Err: err})
	return res, err
}

func (r *recorder) RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error) {
	moved, err := r.Store.RecoverExpired(ctx, stream, number, p)
	w := write{Stream: stream, Items: []store.RecoverItem{{Number: number, Payload: p.Payload, RecoveryType: p.RecoveryType}},
		Results: []store.RecoverResult{{Moved: moved, Err: err}}}
	if !errors.Is(err, store.ErrNotExpired) && !recovery.ResolvedMeanwhile(err) {
		w.Err = err
	}
	r.log(w)
	return moved, err
}

// batchPause is how long each batch of commits of a Leaser takes at least.
const batchPause = time.Millisecond

// errCut is what a batch of commits cut by a cut step returns: a lost
// connection, whose outcome is unknown.
var errCut = errors.New("model: connection cut mid-batch")

// cutter is the store as a process's Leaser sees it: it has the
// capabilities to batch across streams (on memory too: it hides
// store.InProcess), counts the batches of commits that span streams, and
// loses the connection of its next batch of commits once a cut step armed
// it, after the backend took the batch or before.
type cutter struct {
	Store
	spans *atomic.Int64 // batches of commits across streams, of the run
	cuts  *atomic.Int64 // batches cut
	armed atomic.Int32  // 0: no cut; 1: cut before the backend takes it; 2: after
}

func (c *cutter) LeaseMulti(ctx context.Context, items []store.StreamLeases, p *store.LeaseParams) []store.LeaseResult {
	if ml, ok := c.Store.(store.MultiLeaser); ok {
		return ml.LeaseMulti(ctx, items, p)
	}
	out := make([]store.LeaseResult, len(items)) // a store with a bug put in (TestModelFindsBugs): item by item
	for i, it := range items {
		out[i].Entries, out[i].Err = c.Store.Lease(ctx, it.Stream, it.Requests, p)
	}
	return out
}

// commitMulti commits items through the store's CommitMulti, or item by
// item on a store with a bug put in.
func (c *cutter) commitMulti(ctx context.Context, items []store.StreamCommit, p *store.CommitMultiParams) ([]store.CommitResult, error) {
	if mc, ok := c.Store.(store.MultiCommitter); ok {
		return mc.CommitMulti(ctx, items, p)
	}
	out := make([]store.CommitResult, len(items))
	for i, it := range items {
		out[i].ResolvedAt, out[i].Err = c.Store.Commit(ctx, it.Stream, it.Number, it.Token, &store.CommitParams{Payload: it.Payload, Ordered: it.Ordered})
	}
	return out, nil
}

func (c *cutter) CommitMulti(ctx context.Context, items []store.StreamCommit, p *store.CommitMultiParams) ([]store.CommitResult, error) {
	if slices.ContainsFunc(items, func(it store.StreamCommit) bool { return it.Stream != items[0].Stream }) {
		c.spans.Add(1)
	}
	// A batch takes a moment, as over a network: the commits of the round
	// that come meanwhile queue, and go in the next batch together.
	time.Sleep(batchPause)
	switch c.armed.Swap(0) {
	case 1:
		c.cuts.Add(1)
		return nil, errCut
	case 2:
		c.cuts.Add(1)
		if _, err := c.commitMulti(ctx, items, p); err != nil {
			return nil, err
		}
		return nil, errCut
	}
	return c.commitMulti(ctx, items, p)
}

// system is everything one run works with: fresh stores and the
// library's components on them, in each process.
type system struct {
	procs   [procs]*proc
	clock   *clock // memory only
	tick    time.Duration
	tracker *tracker
	close   func()
	spans   atomic.Int64 // batches of commits across streams
	cuts    atomic.Int64 // batches of commits cut
}

// proc is one process: a store and the components on it.
type proc struct {
	st      Store
	barrier *barrier.Barrier
	leaser  *sequence.Leaser
	gaps    *gap.Gaps
	cleaner *cleanup.Service
	rec     *recorder
	cut     *cutter      // the store of the Leaser
	level   atomic.Int32 // the load level the cleanup's probe reports
}

// open builds a system on fresh stores of b; wrap, if not nil, wraps each
// process's store (a deliberate bug) for every component.
func open(ctx context.Context, b backend, wrap func(Store) Store) (*system, error) {
	stores, clk, dispose, err := b.open(ctx)
	if err != nil {
		return nil, err
	}
	seq := new(atomic.Int64)
	sys := &system{clock: clk, tick: b.tick, tracker: newTracker(seq)}
	var stops []func()
	sys.close = func() {
		for _, stop := range slices.Backward(stops) {
			stop()
		}
		dispose()
	}
	for i, st := range stores {
		if wrap != nil {
			st = wrap(st)
		}
		p, err := sys.openProc(ctx, i, st, seq, &stops)
		if err != nil {
			sys.close()
			return nil, err
		}
		sys.procs[i] = p
	}
	return sys, nil
}

func (sys *system) openProc(ctx context.Context, i int, st Store, seq *atomic.Int64, stops *[]func()) (*proc, error) {
	p := &proc{st: st, rec: &recorder{Store: st, seq: seq}, cut: &cutter{Store: st, spans: &sys.spans, cuts: &sys.cuts}}
	var err error
	if p.barrier, err = barrier.New(st, &barrier.Config{PollInterval: time.Second}); err != nil {
		return nil, err
	}
	if err := p.barrier.Start(ctx); err != nil {
		return nil, err
	}
	*stops = append(*stops, p.barrier.Stop)
	cfg := &sequence.Config{Barrier: p.barrier, Owner: fmt.Sprintf("model-p%d", i)}
	if sys.clock != nil {
		cfg.Now = sys.clock.now
	}
	if p.leaser, err = sequence.New(p.cut, cfg); err != nil {
		return nil, err
	}
	if p.gaps, err = gap.New(st, nil); err != nil {
		return nil, err
	}
	pipeline, err := recovery.New(p.rec, &recovery.Config{
		WorkTracker: recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
			return sys.tracker.call(i, e, false)
		}),
		OperationTracker: recovery.OperationTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
			return sys.tracker.call(i, e, true)
		}),
		Probe: recovery.LoadProbeFunc(func(context.Context, recovery.Signals) recovery.Level {
			return recovery.Level(p.level.Load())
		}),
		MaxAttempts: maxRecoveryAttempts,
		Owner:       fmt.Sprintf("model-cleanup-p%d", i),
	})
	if err != nil {
		return nil, err
	}
	p.cleaner, err = cleanup.New(p.rec, &cleanup.Config{
		Pipeline: pipeline,
		// Small pages, windows and cascades, so that a few leases
		// exercise the loop's batching and cascade mode.
		BatchSize: 2, ScanLimit: 4,
		Cascade: &cleanup.CascadeConfig{Threshold: 6, Batch: 2, Delay: time.Millisecond},
	})
	if err != nil {
		return nil, err
	}
	*stops = append(*stops, p.cleaner.Stop)
	return p, nil
}

// now reads the backend's clock.
func (sys *system) now(ctx context.Context) (time.Time, error) {
	if sys.clock != nil {
		return store.Micro(sys.clock.now()), nil
	}
	return sys.procs[0].st.Now(ctx)
}

// advance lets d pass: the memory clock moves, PostgreSQL's is waited for.
func (sys *system) advance(ctx context.Context, d time.Duration) {
	if sys.clock != nil {
		sys.clock.add(d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// outcome is what one step returned.
type outcome struct {
	skip     bool // it named a handle or holding that does not exist
	err      error
	leases   []*sequence.Lease // lease
	entries  []store.Entry     // lease: the handles' views
	exp      time.Time         // extend: the handle's expiry after
	named    store.NamedLease  // acquire, renew
	number   int64             // fill: the number; trim: the bound; read: the position
	low      int64             // trim
	read     []store.Entry     // read
	canceled bool              // commit: given up when the rest of its round was over
	cut      bool              // complete, commit: its batch was cut, and err is its retry's
	cycle    *cycleOutcome     // cleanup
}

// cycleOutcome is what a cleanup step did.
type cycleOutcome struct {
	proc   int
	res    cleanup.CycleResult
	err    error
	calls  []trackerCall
	writes []write
}

// snapshot is the backend's state after a round.
type snapshot struct {
	streams map[string]*realStream // nil: the stream does not exist
	names   map[string]*store.NamedLease
}

type realStream struct {
	stats   store.StreamStats
	entries []store.Entry
}

func (sys *system) snapshot(ctx context.Context) (*snapshot, error) {
	st := sys.procs[0].st
	snap := &snapshot{streams: map[string]*realStream{}, names: map[string]*store.NamedLease{}}
	for _, name := range streams {
		stats, err := st.Stats(ctx, name)
		if errors.Is(err, store.ErrStreamNotFound) {
			snap.streams[name] = nil
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("stats %s: %w", name, err)
		}
		rs := &realStream{stats: stats}
		for after := stats.LowPoint - 1; ; {
			page, err := st.Read(ctx, name, after, store.MaxListLimit)
			if err != nil {
				return nil, fmt.Errorf("read %s after %d: %w", name, after, err)
			}
			rs.entries = append(rs.entries, page...)
			if len(page) < store.MaxListLimit {
				break
			}
			after = page[len(page)-1].Number
		}
		snap.streams[name] = rs
	}
	for _, name := range names {
		nl, err := st.GetLease(ctx, name, nil)
		switch {
		case errors.Is(err, store.ErrLeaseNotFound):
			snap.names[name] = nil
		case err != nil:
			return nil, fmt.Errorf("get lease %s: %w", name, err)
		default:
			snap.names[name] = &nl
		}
	}
	return snap, nil
}
