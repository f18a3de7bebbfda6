package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// EnvWorker is the environment variable that makes a test binary of this
// package a worker process: it holds the process's WorkerConfig as JSON.
const EnvWorker = "SEQLEASE_CHAOS_WORKER"

// SingletonLease is the named lease that workers with WorkerConfig.Contend
// campaign for.
const SingletonLease = "chaos/singleton"

// The points of an operation at which WorkerConfig.Die kills the process.
const (
	PhaseLease  = "lease"  // the lease returned; no work done yet
	PhaseWork   = "work"   // halfway through the work
	PhaseTx     = "tx"     // inside CommitTx: the conditional write and the side row done, not committed
	PhaseBatch  = "batch"  // a batch of commits of several streams is in flight: sent, no reply yet
	PhaseCommit = "commit" // the commit returned success, not yet acknowledged to the parent
)

// Phases lists the phases in the order an operation reaches them.
var Phases = []string{PhaseLease, PhaseWork, PhaseTx, PhaseBatch, PhaseCommit}

// Payload prefixes: an operation committed through CommitTx writes a side
// row in the same transaction; one committed through Commit does not.
const (
	txPrefix     = "tx:"
	commitPrefix = "c:"
)

// WorkerConfig configures a worker process (RunWorker). Zero values are
// the defaults stated.
type WorkerConfig struct {
	URL     string // the database
	AppName string // application_name of every connection, so faults can target this process
	Schema  string
	Streams []string
	Owner   string // lease owner, and the prefix of the operation ids

	Concurrency  int           // goroutines that lease, work and commit; default 3
	TTL          time.Duration // sequence lease TTL, kept alive while the work runs and the commit waits; default 1 s
	MaxWork      time.Duration // each operation works a random 0..MaxWork; default 20 ms
	TxShare      float64       // share of commits through CommitTx (with a side row); the rest use Commit
	ResultShare  float64       // share of operations that record their result first, for the Retry step
	ReleaseShare float64       // share of operations released instead of committed
	Interval     time.Duration // cleanup interval; default 100 ms
	ElectorTTL   time.Duration // TTL of the cleanup's stream leases and of the singleton; default 1 s
	Contend      bool          // campaign for SingletonLease and write under its fence
	Skew         time.Duration // added to the wall clock of the leaser's and lease manager's Now
	PoolSize     int32         // default Concurrency + 1

	// Die, "phase@k", makes the process SIGKILL itself the k-th time an
	// operation reaches phase (one of Phases).
	Die string

	// Hold replaces the load: lease one number of Streams[0] (kept alive
	// if HoldKeepAlive), report "held", and commit it through CommitTx
	// after HoldFor; HoldIn says where the wait is: "work" (before the
	// commit) or "tx" (inside the commit's transaction). Then report the
	// outcome ("late") and, if it was refused, the outcome of a direct
	// commit with the same token through the store, which no local
	// deadline can short-cut.
	Hold          bool
	HoldIn        string
	HoldFor       time.Duration
	HoldKeepAlive bool
}

func (c *WorkerConfig) defaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 3
	}
	if c.TTL == 0 {
		c.TTL = time.Second
	}
	if c.MaxWork == 0 {
		c.MaxWork = 20 * time.Millisecond
	}
	if c.Interval == 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.ElectorTTL == 0 {
		c.ElectorTTL = time.Second
	}
	if c.PoolSize == 0 {
		c.PoolSize = int32(c.Concurrency) + 1
	}
}

// WorkerStats are a worker process's counts, reported every
// statsInterval and at its end (so a killed worker's last report is at
// most that old).
type WorkerStats struct {
	Leased, Acked, AckedTx, Released int64
	Refused                          int64 // commits refused: the lease had expired, or its number was resolved otherwise
	Retried                          int64 // commits whose outcome was unknown (connection lost) and that a retry with the same handle resolved (I7)
	RetriedCommitted                 int64 // of Retried, those whose retry reported success
	Unknown                          int64 // commits whose outcome stayed unknown after every retry
	LeaseErrors, CommitErrors        int64 // failed calls (a connection lost, the database down)
	SingletonHeld, FencedWrites      int64
	FenceRefused                     int64         // fenced writes refused: the singleton had moved on
	LongestCycle                     time.Duration // the longest cleanup cycle that ended
}

// statsInterval is how often a worker reports its counts.
const statsInterval = 500 * time.Millisecond

// maxCommitAttempts bounds the retries of a commit whose outcome is unknown.
const maxCommitAttempts = 30

// commitTimeout bounds one commit attempt (the wait for earlier numbers
// included).
const commitTimeout = 30 * time.Second

// cleanupMaxBackoff caps a worker's cleanup pause after a failed cycle.
const cleanupMaxBackoff = 500 * time.Millisecond

// CycleAllowance is the time ResolveBound allows for the cleanup cycle that
// resolves a lease. A worker's cycle lists the expired leases, takes the
// stream's lease and resolves them, a statement or two each (the Retry step
// reads the results table, then moves the work): the longest of a fault
// test's workers took 14-125 ms under -race on a loaded 2-core machine
// (WorkerStats.LongestCycle, in the fault tests' summaries). A cycle whose
// write waits on the row lock of a holder stopped inside its commit's
// transaction lasts as long as the stop, but that number is not left
// unresolved: the holder's commit was decided, and stands when it goes on.
// 5 s leaves room for a machine several times slower, or for a cycle whose
// first statement waits for a connection re-established after a fault.
const CycleAllowance = 5 * time.Second

// ResolveBound returns how long past its expiry, by the database clock, a
// sequence lease of workers configured as c may stay unresolved while some
// of them run (I6: within TTL + cleanup interval + one cycle; the TTL is
// already behind the expiry). The cleaner of the lease's stream may be a
// worker that was just killed or stopped, whose stream lease must lapse
// first (ElectorTTL: its last renewal may have come just before the fault);
// then the next cycle of a live worker starts within Interval plus its
// 10% jitter, or, if its last cycle failed (a connection ended under it),
// after at most cleanupMaxBackoff; and that cycle takes at most
// CycleAllowance.
func (c WorkerConfig) ResolveBound() time.Duration {
	c.defaults()
	return c.ElectorTTL + c.Interval + c.Interval/10 + cleanupMaxBackoff + CycleAllowance
}

// Tables of the workers, in the test schema.
func resultsTable(schema string) string { return pgx.Identifier{schema, "chaos_results"}.Sanitize() }
func sideTable(schema string) string    { return pgx.Identifier{schema, "chaos_side"}.Sanitize() }
func fencedTable(schema string) string  { return pgx.Identifier{schema, "chaos_fenced"}.Sanitize() }

// CreateTables creates, in schema, the tables the workers write besides the
// ledger: their completed results (for the Retry step), the side rows of
// CommitTx, and the fenced writes of the singleton's holders.
func CreateTables(ctx context.Context, db *pgxpool.Pool, schema string) error {
	for _, sql := range []string{
		"CREATE TABLE IF NOT EXISTS " + resultsTable(schema) + " (op text PRIMARY KEY, payload bytea NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + sideTable(schema) + " (id bigserial PRIMARY KEY, stream text NOT NULL, number bigint NOT NULL, op text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + fencedTable(schema) + " (id bigserial PRIMARY KEY, name text NOT NULL, fence bigint NOT NULL, owner text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())",
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			return fmt.Errorf("chaos: create tables: %w", err)
		}
	}
	return nil
}

// resultTracker is the Retry step's tracker: the results table.
func resultTracker(db *pgxpool.Pool, schema string) recovery.OperationTrackerFunc {
	q := "SELECT payload FROM " + resultsTable(schema) + " WHERE op = $1"
	return func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
		var b []byte
		err := db.QueryRow(ctx, q, e.OperationID).Scan(&b)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, nil
		}
		return b, err == nil, err
	}
}

// lowLoad makes the cleanup run every step, whatever the load.
var lowLoad = recovery.LoadProbeFunc(func(context.Context, recovery.Signals) recovery.Level { return recovery.Low })

// NewPool connects a pool to url whose connections carry appName.
func NewPool(ctx context.Context, url, appName string, size int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("chaos: pool: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	if size > 0 {
		cfg.MaxConns = size
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("chaos: pool: %w", err)
	}
	return pool, nil
}

// worker is one worker process's machinery.
type worker struct {
	cfg     WorkerConfig
	pool    *pgxpool.Pool
	store   *postgres.Store
	barrier *barrier.Barrier
	leaser  *sequence.Leaser
	leases  *lease.Manager
	cleaner *cleanup.Service
	out     *lineWriter

	stats struct {
		leased, acked, ackedTx, released, refused, retried, retriedCommitted, unknown atomic.Int64
		leaseErrors, commitErrors, singletonHeld, fencedWrites, fenceRefused          atomic.Int64
		longestCycle                                                                  atomic.Int64 // nanoseconds
	}
	ops     atomic.Int64
	diePh   string
	dieAt   int64
	reached atomic.Int64
}

// RunWorker runs a worker process: it starts a barrier, a leaser, a lease
// manager and a cleanup loop on its own pool, reports "ready", then runs the
// load (or the hold, WorkerConfig.Hold) until stdin closes, and stops
// gracefully: operations under way finish, every component stops. It writes
// its reports to out, one line each, starting with "chaos ": "ack STREAM
// NUMBER PAYLOAD" for every acknowledged commit, "stats JSON" for its
// counts, "held STREAM NUMBER" and "late STREAM NUMBER OUTCOME RAW" in hold
// mode.
func RunWorker(ctx context.Context, cfg WorkerConfig, stdin io.Reader, out io.Writer) (err error) {
	cfg.defaults()
	w := &worker{cfg: cfg, out: &lineWriter{w: out}}
	if cfg.Die != "" {
		ph, k, ok := strings.Cut(cfg.Die, "@")
		n, perr := strconv.ParseInt(k, 10, 64)
		if !ok || perr != nil || n < 1 {
			return fmt.Errorf("chaos: WorkerConfig.Die %q: want phase@k", cfg.Die)
		}
		w.diePh, w.dieAt = ph, n
	}
	stop, err := w.start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		stop()
		w.report()
	}()
	w.out.line("ready")

	loadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(io.Discard, stdin) // the parent closes stdin to stop this process
		cancel()
	})
	wg.Go(func() { w.reportEvery(loadCtx) })
	if cfg.Contend {
		wg.Go(func() { w.contend(loadCtx) })
	}
	if cfg.Hold {
		wg.Go(func() {
			if herr := w.hold(loadCtx); herr != nil {
				err = herr
			}
		})
	} else {
		for i := range cfg.Concurrency {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))
			wg.Go(func() {
				for loadCtx.Err() == nil {
					w.operate(loadCtx, rng)
				}
			})
		}
	}
	<-loadCtx.Done()
	wg.Wait() // stdin was closed (or ctx ended): the copy returned
	return err
}

// start starts the components; stop stops them in reverse order.
func (w *worker) start(ctx context.Context) (stop func(), err error) {
	cfg := w.cfg
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if w.pool, err = NewPool(ctx, cfg.URL, cfg.AppName, cfg.PoolSize); err != nil {
		return nil, err
	}
	stops = append(stops, w.pool.Close)
	if w.store, err = postgres.New(w.pool, &postgres.Config{Schema: cfg.Schema}); err != nil {
		return nil, err
	}
	if w.barrier, err = barrier.New(w.store, nil); err != nil {
		return nil, err
	}
	if err = w.barrier.Start(ctx); err != nil {
		return nil, err
	}
	stops = append(stops, w.barrier.Stop)
	now := time.Now
	if cfg.Skew != 0 {
		now = func() time.Time { return time.Now().Add(cfg.Skew) } // Add keeps the monotonic reading
	}
	if w.leaser, err = sequence.New(&batchWatch{Store: w.store, w: w}, &sequence.Config{Barrier: w.barrier, Owner: cfg.Owner, Now: now}); err != nil {
		return nil, err
	}
	if w.leases, err = lease.New(w.store, &lease.Config{Owner: cfg.Owner, Now: now}); err != nil {
		return nil, err
	}
	if err = w.leases.Start(ctx); err != nil {
		return nil, err
	}
	stops = append(stops, w.leases.Stop)
	elector, err := cleanup.NewLeaseElector(w.leases, cfg.ElectorTTL)
	if err != nil {
		return nil, err
	}
	pipeline, err := recovery.New(w.store, &recovery.Config{
		Probe:            lowLoad,
		OperationTracker: resultTracker(w.pool, cfg.Schema),
		Owner:            cfg.Owner + "/cleanup",
	})
	if err != nil {
		return nil, err
	}
	w.cleaner, err = cleanup.New(w.store, &cleanup.Config{
		Interval:     cfg.Interval,
		MaxBackoff:   cleanupMaxBackoff,
		Pipeline:     pipeline,
		Elector:      elector,
		Barrier:      w.barrier,
		Observer:     cycleTimer{&w.stats.longestCycle},
		Cascade:      &cleanup.CascadeConfig{Booster: w.leaser},
		QueryTimeout: 10 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	if err = w.cleaner.Start(ctx); err != nil {
		return nil, err
	}
	stops = append(stops, w.cleaner.Stop)
	return stop, nil
}

// operate runs one operation: lease, work, then commit (or release).
func (w *worker) operate(ctx context.Context, rng *rand.Rand) {
	cfg := w.cfg
	stream := cfg.Streams[rng.IntN(len(cfg.Streams))]
	op := fmt.Sprintf("%s-%d", cfg.Owner, w.ops.Add(1))
	x, err := w.leaser.Lease(ctx, stream, &sequence.LeaseOpts{OperationID: op, Kind: "chaos", TTL: cfg.TTL})
	if err != nil {
		if ctx.Err() == nil {
			w.stats.leaseErrors.Add(1)
			sleep(ctx, time.Duration(50+rng.IntN(100))*time.Millisecond)
		}
		return
	}
	w.stats.leased.Add(1)
	w.reach(PhaseLease)
	_ = x.KeepAlive(nil)    // renewed while the work runs and the commit waits for its turn
	defer x.StopKeepAlive() // a refused or unknown commit leaves nothing renewing
	work := time.Duration(rng.Int64N(int64(cfg.MaxWork) + 1))
	time.Sleep(work / 2) // an operation under way finishes even when the process stops
	w.reach(PhaseWork)
	time.Sleep(work - work/2)
	if rng.Float64() < cfg.ReleaseShare {
		rctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		defer cancel()
		if x.Release(rctx) == nil {
			w.stats.released.Add(1)
		}
		return
	}
	tx := rng.Float64() < cfg.TxShare
	payload := []byte(commitPrefix + op)
	if tx {
		payload = []byte(txPrefix + op)
	}
	if rng.Float64() < cfg.ResultShare {
		rctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		_, _ = w.pool.Exec(rctx, "INSERT INTO "+resultsTable(cfg.Schema)+" (op, payload) VALUES ($1, $2) ON CONFLICT DO NOTHING", op, payload)
		cancel()
	}
	w.commit(x, payload, tx)
}

// commit commits x, retrying with the same handle while the outcome is
// unknown (I7), and acknowledges a success to the parent.
func (w *worker) commit(x *sequence.Lease, payload []byte, tx bool) {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		err := w.commitOnce(ctx, x, payload, tx)
		cancel()
		if attempt > 0 && (err == nil || Refused(err)) {
			w.stats.retried.Add(1)
			if err == nil {
				w.stats.retriedCommitted.Add(1)
			}
		}
		switch {
		case err == nil:
			w.reach(PhaseCommit)
			w.stats.acked.Add(1)
			if tx {
				w.stats.ackedTx.Add(1)
			}
			w.out.line("ack", x.Stream(), strconv.FormatInt(x.Number(), 10), string(payload))
			return
		case Refused(err):
			w.stats.refused.Add(1)
			return
		case attempt == maxCommitAttempts-1:
			w.stats.unknown.Add(1)
			fmt.Fprintf(os.Stderr, "chaos worker %s: commit %s/%d: outcome unknown after %d attempts: %v\n",
				w.cfg.Owner, x.Stream(), x.Number(), maxCommitAttempts, err)
			return
		}
		w.stats.commitErrors.Add(1)
		time.Sleep(time.Duration(min(attempt+1, 10)) * 50 * time.Millisecond)
	}
}

// commitOnce is one ordered commit: through CommitTx with a side row, or
// Commit.
func (w *worker) commitOnce(ctx context.Context, x *sequence.Lease, payload []byte, tx bool) error {
	if !tx {
		return x.Commit(ctx, payload)
	}
	return sequence.CommitTx(ctx, x, payload, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+sideTable(w.cfg.Schema)+" (stream, number, op) VALUES ($1, $2, $3)",
			x.Stream(), x.Number(), x.OperationID())
		if err == nil {
			w.reach(PhaseTx)
		}
		return err
	})
}

// Refused reports whether a commit's error is a refusal, a definite outcome
// (the number will never commit with this token), rather than a failure
// whose outcome is unknown.
func Refused(err error) bool {
	for _, target := range []error{store.ErrExpired, store.ErrGap, store.ErrReleased, store.ErrCommitted,
		store.ErrTokenMismatch, store.ErrNotFound} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// batchWatch is the store as the worker's Leaser sees it: a batch of
// commits that spans streams reaches PhaseBatch once it is on its way to
// the server (a moment after it was sent, so that the kill lands while
// the server runs it, or commits it, or replies).
type batchWatch struct {
	*postgres.Store
	w *worker
}

func (b *batchWatch) CommitMulti(ctx context.Context, items []store.StreamCommit, p *store.CommitMultiParams) ([]store.CommitResult, error) {
	defer b.inFlight(items)()
	return b.Store.CommitMulti(ctx, items, p)
}

func (b *batchWatch) CommitTx(ctx context.Context, items []store.TxCommit[pgx.Tx], p *store.CommitMultiParams) ([]store.CommitResult, error) {
	plain := make([]store.StreamCommit, len(items))
	for i, it := range items {
		plain[i] = it.StreamCommit
	}
	defer b.inFlight(plain)()
	return b.Store.CommitTx(ctx, items, p)
}

// inFlight has a batch of several streams reach PhaseBatch while it is in
// flight; the returned function, deferred, ends the watch.
func (b *batchWatch) inFlight(items []store.StreamCommit) (done func()) {
	if b.w.diePh != PhaseBatch || !slices.ContainsFunc(items, func(it store.StreamCommit) bool { return it.Stream != items[0].Stream }) {
		return func() {}
	}
	end := make(chan struct{})
	t := time.AfterFunc(time.Duration(rand.IntN(500))*time.Microsecond, func() {
		select {
		case <-end: // the batch returned first: no longer in flight
		default:
			b.w.reach(PhaseBatch)
		}
	})
	return func() {
		close(end)
		t.Stop()
	}
}

// reach kills the process at the configured point.
func (w *worker) reach(phase string) {
	if phase != w.diePh {
		return
	}
	if w.reached.Add(1) == w.dieAt {
		w.report() // the counts so far, then no chance to say more
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// contend campaigns for the singleton lease; its holder writes under the
// lease's fence for a while, then lets it go.
func (w *worker) contend(ctx context.Context) {
	insert := "INSERT INTO " + fencedTable(w.cfg.Schema) + " (name, fence, owner) VALUES ($1, $2, $3)"
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 99))
	_ = w.leases.Run(ctx, SingletonLease, &lease.AcquireOpts{TTL: w.cfg.ElectorTTL, Kind: "chaos"}, func(ctx context.Context, l *lease.Lease) error {
		w.stats.singletonHeld.Add(1)
		until := time.Now().Add(time.Duration(50+rng.IntN(250)) * time.Millisecond)
		for time.Now().Before(until) && ctx.Err() == nil {
			err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
				if err := postgres.CheckFence(ctx, tx, w.cfg.Schema, SingletonLease, l.Fence()); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, insert, SingletonLease, l.Fence(), w.cfg.Owner)
				return err
			})
			switch {
			case err == nil:
				w.stats.fencedWrites.Add(1)
			case errors.Is(err, store.ErrStaleFence):
				w.stats.fenceRefused.Add(1)
				return nil // lost: campaign again
			}
			sleep(ctx, 20*time.Millisecond)
		}
		return nil
	})
}

// hold is the hold mode (WorkerConfig.Hold).
func (w *worker) hold(ctx context.Context) error {
	cfg := w.cfg
	stream := cfg.Streams[0]
	x, err := w.leaser.Lease(ctx, stream, &sequence.LeaseOpts{OperationID: cfg.Owner + "-held", Kind: "chaos", TTL: cfg.TTL})
	if err != nil {
		return fmt.Errorf("chaos: hold: %w", err)
	}
	if cfg.HoldKeepAlive {
		if err := x.KeepAlive(nil); err != nil {
			return fmt.Errorf("chaos: hold: %w", err)
		}
		defer x.StopKeepAlive()
	}
	payload := []byte(txPrefix + x.OperationID())
	if cfg.ResultShare > 0 {
		if _, err := w.pool.Exec(ctx, "INSERT INTO "+resultsTable(cfg.Schema)+" (op, payload) VALUES ($1, $2)", x.OperationID(), payload); err != nil {
			return fmt.Errorf("chaos: hold: %w", err)
		}
	}
	number := strconv.FormatInt(x.Number(), 10)
	if cfg.HoldIn != "tx" {
		w.out.line("held", stream, number)
		time.Sleep(cfg.HoldFor) // the parent stops this process in here
	}
	cctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	err = sequence.CommitTx(cctx, x, payload, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+sideTable(cfg.Schema)+" (stream, number, op) VALUES ($1, $2, $3)",
			stream, x.Number(), x.OperationID()); err != nil {
			return err
		}
		if cfg.HoldIn == "tx" {
			w.out.line("held", stream, number)
			time.Sleep(cfg.HoldFor) // stopped here: the entry's row is locked, the commit decided
		}
		return nil
	})
	raw := "-"
	if Refused(err) {
		// The handle knows its lease is over; the store does not look at
		// local deadlines: the database decides alone.
		_, rerr := w.store.Commit(cctx, stream, x.Number(), x.Token(), &store.CommitParams{Payload: payload, Ordered: true})
		raw = outcome(rerr)
	}
	if err == nil {
		w.out.line("ack", stream, number, string(payload))
	}
	w.out.line("late", stream, number, outcome(err), raw)
	return nil
}

// outcome names a commit's outcome in one word.
func outcome(err error) string {
	for _, o := range []struct {
		err  error
		name string
	}{{store.ErrExpired, "expired"}, {store.ErrGap, "gap"}, {store.ErrReleased, "released"},
		{store.ErrCommitted, "committed"}, {store.ErrTokenMismatch, "token"}, {store.ErrNotFound, "notfound"}} {
		if errors.Is(err, o.err) {
			return o.name
		}
	}
	if err == nil {
		return "ok"
	}
	return "unknown"
}

func (w *worker) snapshot() WorkerStats {
	s := &w.stats
	return WorkerStats{
		Leased: s.leased.Load(), Acked: s.acked.Load(), AckedTx: s.ackedTx.Load(), Released: s.released.Load(),
		Refused: s.refused.Load(), Retried: s.retried.Load(), RetriedCommitted: s.retriedCommitted.Load(), Unknown: s.unknown.Load(),
		LeaseErrors: s.leaseErrors.Load(), CommitErrors: s.commitErrors.Load(),
		SingletonHeld: s.singletonHeld.Load(), FencedWrites: s.fencedWrites.Load(), FenceRefused: s.fenceRefused.Load(),
		LongestCycle: time.Duration(s.longestCycle.Load()),
	}
}

// cycleTimer is a cleanup.Observer that keeps the longest cycle.
type cycleTimer struct{ longest *atomic.Int64 }

func (c cycleTimer) Cycle(r cleanup.CycleResult, _ error) {
	for d := int64(r.Duration); ; {
		old := c.longest.Load()
		if d <= old || c.longest.CompareAndSwap(old, d) {
			return
		}
	}
}

func (cycleTimer) Handled(store.Entry, time.Time, recovery.Result, error) {}
func (cycleTimer) Cascade(bool)                                           {}
func (cycleTimer) HookFailed(store.Entry, error)                          {}

func (w *worker) report() {
	b, _ := json.Marshal(w.snapshot())
	w.out.line("stats", string(b))
}

func (w *worker) reportEvery(ctx context.Context) {
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.report()
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// lineWriter writes whole report lines, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(fields ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	bw := bufio.NewWriter(l.w)
	bw.WriteString("chaos " + strings.Join(fields, " ") + "\n")
	_ = bw.Flush()
}
