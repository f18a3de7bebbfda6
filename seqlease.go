package seqlease

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// DefaultSchema is the PostgreSQL schema of seqlease's tables when
// Options.Schema names none.
const DefaultSchema = "seqlease"

// Options configure a Client. A nil *Options means the defaults; so does
// the zero value of each field.
//
// The parts' own configurations (Leaser, Barrier, Leases, Recovery,
// Cleanup, Postgres) are for tuning; Open sets what wires the parts
// together (the Leaser's barrier, the cleanup loop's pipeline, elector and
// barrier, the schema, the owner, the logger, the observers) and refuses
// a configuration that sets them differently.
type Options struct {
	// Schema is the PostgreSQL schema that holds seqlease's tables, named
	// here once for the migrations, the store and the fence checks. It is
	// ignored in memory. Default: DefaultSchema ("seqlease").
	Schema string
	// Migrate makes Open apply the migrations the schema lacks (under an
	// advisory lock: processes that start together serialize, and all but
	// the first find nothing to do). It needs DDL rights. Default: false,
	// Open fails with an error matching migrations.ErrPending that names
	// the command to run.
	Migrate bool
	// Owner is recorded on every lease this process takes, sequence leases
	// and named leases, so operators can tell whose leases they see.
	// Default: "<hostname>:<pid>:<6 random hex digits>".
	Owner string
	// WorkTracker and OperationTracker let the cleanup loop recover the
	// work of a crashed holder instead of turning its number into a gap
	// (see package recovery). Default: none, every expired lease becomes a
	// gap.
	WorkTracker      recovery.WorkTracker
	OperationTracker recovery.OperationTracker
	// NoCleanup stops Open from running the cleanup loop in this process,
	// for processes that only append or read. Some process must run it, or
	// the leases of crashed workers are never resolved. Default: false,
	// run it.
	NoCleanup bool
	// Logger receives every part's diagnostics. Default: discard.
	Logger *slog.Logger
	// MeterProvider receives the metrics (package metrics). Default: the
	// global one, a no-op until the application sets one.
	MeterProvider metric.MeterProvider

	// Leaser tunes the sequence leaser (DefaultTTL, MaxPayload, batching).
	Leaser *sequence.Config
	// Barrier tunes the barrier.
	Barrier *barrier.Config
	// Leases tunes the named-lease Manager.
	Leases *lease.Config
	// Recovery tunes the cleanup loop's recovery pipeline; its trackers are
	// WorkTracker and OperationTracker above.
	Recovery *recovery.Config
	// Cleanup tunes the cleanup loop (Interval, cascade mode, hooks).
	Cleanup *cleanup.Config
	// Postgres tunes the PostgreSQL store (the listener's DSN, pool
	// timeouts); its Schema is Schema above.
	Postgres *postgres.Config
}

// backend is what the parts need of a store: both backends satisfy it.
type backend interface {
	sequence.Store
	barrier.Source
	cleanup.Store
	lease.Store
	gap.Store
	recovery.Store
	metrics.CheckpointLister
	metrics.ParkedCounter
	SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error
}

var (
	_ backend = (*postgres.Store)(nil)
	_ backend = (*memory.Store)(nil)
)

// Client is an open seqlease deployment: a store, the barrier, the
// sequence leaser, the named-lease Manager and, unless Options.NoCleanup,
// the cleanup loop, started and wired together. It is safe for concurrent
// use. Close stops what Open started.
type Client struct {
	st      backend
	pg      *postgres.Store // nil in memory
	schema  string
	barrier *barrier.Barrier
	leaser  *sequence.Leaser
	leases  *lease.Manager
	gaps    *gap.Gaps
	cleaner *cleanup.Service // nil with Options.NoCleanup
	metrics *metrics.Metrics

	closeOnce sync.Once
	closeErr  error
}

// Open opens the seqlease deployment in pool's database: it checks that
// the schema holds the migrations this build needs (or applies them, with
// Options.Migrate), then builds and starts the parts. ctx bounds Open's
// own work; the parts run until Close.
//
// A schema that lacks migrations fails with an error matching
// migrations.ErrPending, one whose migrations were changed after they
// were applied with migrations.ErrChecksumMismatch; bad options with an
// error matching store.ErrInvalidArgument that names the field.
func Open(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Client, error) {
	if pool == nil {
		return nil, fmt.Errorf("seqlease: open: %w: nil pool (OpenMemory runs without a database)", store.ErrInvalidArgument)
	}
	o, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	m, err := migrations.New(&migrations.Config{Schema: o.Schema, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("seqlease: open: Options.Schema: %w", err)
	}
	if o.Migrate {
		_, err = m.Up(ctx, pool)
	} else {
		err = m.Check(ctx, pool)
	}
	if err != nil {
		return nil, fmt.Errorf("seqlease: open: %w", err)
	}
	pc := postgres.Config{}
	if o.Postgres != nil {
		pc = *o.Postgres
	}
	if pc.Schema != "" && pc.Schema != o.Schema {
		return nil, invalid("Options.Postgres.Schema", "set Options.Schema instead")
	}
	pc.Schema, pc.Logger = o.Schema, o.Logger
	pg, err := postgres.New(pool, &pc)
	if err != nil {
		return nil, fmt.Errorf("seqlease: open: %w", err)
	}
	c, err := start(ctx, pg, o)
	if err != nil {
		return nil, err
	}
	c.pg, c.schema = pg, o.Schema
	return c, nil
}

// OpenMemory opens a deployment in this process's memory: the embedded
// default, for one process, tests and demos, with the same semantics as
// PostgreSQL and nothing to run. Options.Schema, Migrate and Postgres do
// not apply; Tx's calls fail with store.ErrUnsupported.
func OpenMemory(opts *Options) (*Client, error) {
	o, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	return start(context.Background(), memory.New(nil), o)
}

// resolve returns opts with the defaults filled in, or why they are bad.
func resolve(opts *Options) (Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// start builds the parts on st and starts them, in the order they depend
// on each other; on failure it stops what it started.
func start(ctx context.Context, st backend, o Options) (c *Client, err error) {
	c = &Client{st: st}
	defer func() {
		if err != nil {
			_ = c.Close()
			err = fmt.Errorf("seqlease: open: %w", err)
		}
	}()
	// The parts run until Close, not until ctx ends.
	run := context.WithoutCancel(ctx)

	// The named-lease Manager first: it settles the owner (Options.Owner,
	// or one of its own) that the leaser records too.
	mgr := lease.Config{}
	if o.Leases != nil {
		mgr = *o.Leases
	}
	if mgr.Owner != "" && mgr.Owner != o.Owner {
		return c, invalid("Options.Leases.Owner", "set Options.Owner instead")
	}
	mgr.Owner, mgr.Logger = o.Owner, o.Logger
	if c.barrier, err = barrier.New(st, withLogger(o.Barrier, o.Logger)); err != nil {
		return c, err
	}
	c.metrics, err = metrics.New(&metrics.Config{MeterProvider: o.MeterProvider, Logger: o.Logger,
		Watermarks: c.barrier, Gaps: st, Checkpoints: st, Parked: st})
	if err != nil {
		return c, err
	}
	mgr.Observer = c.metrics.NamedLeases()
	if c.leases, err = lease.New(st, &mgr); err != nil {
		return c, err
	}
	if err = c.barrier.Start(run); err != nil {
		c.barrier = nil
		return c, err
	}
	if err = c.leases.Start(run); err != nil {
		c.leases = nil
		return c, err
	}

	lc := sequence.Config{}
	if o.Leaser != nil {
		lc = *o.Leaser
	}
	if lc.Barrier != nil {
		return c, invalid("Options.Leaser.Barrier", "Open wires the barrier")
	}
	lc.Barrier, lc.Owner, lc.Observer = c.barrier, c.leases.Owner(), c.metrics.Leaser()
	if c.leaser, err = sequence.New(st, &lc); err != nil {
		return c, err
	}
	if c.gaps, err = gap.New(st, nil); err != nil {
		return c, err
	}
	if o.NoCleanup {
		return c, nil
	}

	rc := recovery.Config{}
	if o.Recovery != nil {
		rc = *o.Recovery
	}
	rc.WorkTracker, rc.OperationTracker = o.WorkTracker, o.OperationTracker
	pipeline, err := recovery.New(st, &rc)
	if err != nil {
		return c, err
	}
	cc := cleanup.Config{}
	if o.Cleanup != nil {
		cc = *o.Cleanup
	}
	if cc.Pipeline != nil || cc.Elector != nil || cc.Barrier != nil {
		return c, invalid("Options.Cleanup", "Open wires its Pipeline, Elector and Barrier")
	}
	if cc.Elector, err = cleanup.NewLeaseElector(c.leases, cc.LeaseTTL); err != nil {
		return c, err
	}
	cc.Pipeline, cc.Barrier, cc.Logger, cc.Observer = pipeline, c.barrier, o.Logger, c.metrics.Cleanup()
	if cc.Cascade == nil {
		cc.Cascade = &cleanup.CascadeConfig{}
	}
	if cc.Cascade.Booster == nil {
		cascade := *cc.Cascade
		cascade.Booster = c.leaser // longer default leases during a mass expiry
		cc.Cascade = &cascade
	}
	if c.cleaner, err = cleanup.New(st, &cc); err != nil {
		return c, err
	}
	if err = c.cleaner.Start(run); err != nil {
		c.cleaner = nil
		return c, err
	}
	return c, nil
}

// withLogger returns a copy of cfg (nil: the defaults) with its Logger set.
func withLogger(cfg *barrier.Config, l *slog.Logger) *barrier.Config {
	c := barrier.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Logger = l
	return &c
}

// invalid returns the error of an option at fault.
func invalid(field, why string) error {
	return fmt.Errorf("%w: %s: %s", store.ErrInvalidArgument, field, why)
}

// Close stops the parts Open started, in order: the cleanup loop, the
// named-lease Manager (releasing the leases it holds), the barrier, the
// metrics. It waits for their goroutines, and is safe to call twice. The
// pool is the caller's: Close leaves it open.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		if c.cleaner != nil {
			c.cleaner.Stop()
		}
		if c.leases != nil {
			c.leases.Stop()
		}
		if c.barrier != nil {
			c.barrier.Stop()
		}
		if c.metrics != nil {
			c.closeErr = c.metrics.Close()
		}
	})
	return c.closeErr
}

// Lease leases the next number of stream: see sequence.Leaser.Lease.
func (c *Client) Lease(ctx context.Context, stream string, opts *sequence.LeaseOpts) (*sequence.Lease, error) {
	return c.leaser.Lease(ctx, stream, opts)
}

// Append appends committed entries to stream, with no lease: see
// sequence.Leaser.Append. Inside a transaction of yours, use Tx.
func (c *Client) Append(ctx context.Context, stream string, opts *sequence.AppendOpts, payloads ...[]byte) ([]int64, error) {
	return c.leaser.Append(ctx, stream, opts, payloads...)
}

// Entries reads stream in order, never past its watermark: see
// barrier.Barrier.Entries.
func (c *Client) Entries(ctx context.Context, stream string, opts *barrier.ReadOpts) iter.Seq2[store.Entry, error] {
	return c.barrier.Entries(ctx, stream, opts)
}

// SaveCheckpoint saves reader's position in stream, where Entries with
// ReadOpts.Reader resumes. Saved on its own, after the entries were
// applied, it makes a reader at least once: a crash in between applies
// them again. For exactly once, save it in the transaction that applies
// them (Tx.SaveCheckpoint).
func (c *Client) SaveCheckpoint(ctx context.Context, reader, stream string, position int64) error {
	return c.st.SaveCheckpoint(ctx, reader, stream, position, nil)
}

// Leaser returns the sequence leaser, for what Lease and Append do not
// cover (LeaseN, the TTL boost).
func (c *Client) Leaser() *sequence.Leaser { return c.leaser }

// Barrier returns the barrier: watermarks, waits, readers.
func (c *Client) Barrier() *barrier.Barrier { return c.barrier }

// Leases returns the named-lease Manager: leader election, mutual
// exclusion, fencing tokens. Its leases are released by Close.
func (c *Client) Leases() *lease.Manager { return c.leases }

// Gaps returns the gaps of the streams: listing, counting, filling.
func (c *Client) Gaps() *gap.Gaps { return c.gaps }

// Cleanup returns the cleanup loop, or nil with Options.NoCleanup.
func (c *Client) Cleanup() *cleanup.Service { return c.cleaner }

// Metrics returns the metrics of the parts, and the alert evaluator's
// inputs.
func (c *Client) Metrics() *metrics.Metrics { return c.metrics }

// Tx returns the deployment as seen from inside tx, a transaction of the
// application's on the pool Open was given: what it leases, commits,
// appends and saves commits or rolls back with tx. Like tx, it is for one
// goroutine at a time.
func (c *Client) Tx(tx pgx.Tx) *Tx {
	if c.pg == nil {
		return &Tx{err: fmt.Errorf("seqlease: %w: transactions need PostgreSQL (Open)", store.ErrUnsupported)}
	}
	in := c.pg.InTx(tx)
	return &Tx{c: c, tx: tx, st: in, leaser: c.leaser.InTx(in)}
}

// Tx is a Client inside a transaction of the application's: see
// Client.Tx.
type Tx struct {
	c      *Client
	tx     pgx.Tx
	st     *postgres.Store
	leaser *sequence.Leaser
	err    error // why nothing works (a Client in memory)
}

// Lease leases the next number of stream in the transaction: the number
// exists only if the transaction commits.
func (t *Tx) Lease(ctx context.Context, stream string, opts *sequence.LeaseOpts) (*sequence.Lease, error) {
	if t.err != nil {
		return nil, t.err
	}
	return t.leaser.Lease(ctx, stream, opts)
}

// Append appends committed entries to stream in the transaction: the
// outbox write. They exist, with their numbers, only if the transaction
// commits.
func (t *Tx) Append(ctx context.Context, stream string, opts *sequence.AppendOpts, payloads ...[]byte) ([]int64, error) {
	if t.err != nil {
		return nil, t.err
	}
	return t.leaser.Append(ctx, stream, opts, payloads...)
}

// SaveCheckpoint saves reader's position in stream in the transaction:
// with the writes that applied the entries up to it, exactly once.
func (t *Tx) SaveCheckpoint(ctx context.Context, reader, stream string, position int64) error {
	if t.err != nil {
		return t.err
	}
	return t.st.SaveCheckpoint(ctx, reader, stream, position, nil)
}

// CheckFence checks, in the transaction, that fence is the current
// holding of the named lease name and locks it until the transaction
// ends: a write made after it commits only if no later holder took the
// name. A deposed holder's fence fails with a *store.FenceError (matching
// store.ErrStaleFence).
func (t *Tx) CheckFence(ctx context.Context, name string, fence int64) error {
	if t.err != nil {
		return t.err
	}
	return postgres.CheckFence(ctx, t.tx, t.c.schema, name, fence)
}
