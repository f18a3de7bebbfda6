package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/store"
)

// DefaultAcquireTimeout is the default of Config.AcquireTimeout: 5 s. A
// statement of the Store takes milliseconds, so a wait that long means the
// pool is held by something that does not give connections back (long
// transactions, too small a pool for the workers), not by a burst; it is
// shorter than a lease's usual TTL, so a worker learns of it while its
// lease can still be committed or released.
const DefaultAcquireTimeout = 5 * time.Second

// MinPoolConns is the smallest pool (MaxConns) New accepts without a
// warning: at peak, the Leaser's lease statement and its commit
// transaction, the notice sender of a running Watch, a cleanup loop, and
// one worker holding a connection of its own (a transaction). A Watch's
// LISTEN connection is taken out of the pool for good (the pool opens
// another in its place), so it counts toward PostgreSQL's max_connections,
// not toward MaxConns.
const MinPoolConns = 5

// ErrPoolExhausted reports that a call waited Config.AcquireTimeout for a
// connection from the pool without getting one (see PoolExhaustedError).
var ErrPoolExhausted = errors.New("postgres: connection pool exhausted")

// PoolExhaustedError reports a call that got no connection from the pool
// within Config.AcquireTimeout, while its own context was still live. It
// matches ErrPoolExhausted. The statement it was to run was not sent: a
// step that failed so changed nothing, and a commit that failed so may be
// retried with the same token as any other. Acquired below MaxConns means
// the pool had room, but opening a new connection took longer than the
// wait.
type PoolExhaustedError struct {
	// Wait is how long the call waited (Config.AcquireTimeout).
	Wait time.Duration
	// MaxConns is the pool's size (pgxpool.Config.MaxConns).
	MaxConns int32
	// Acquired is how many of its connections were in use when the wait
	// ended.
	Acquired int32
}

// Error says what happened, that nothing was sent, and how to size the
// pool.
func (e *PoolExhaustedError) Error() string {
	const head = "postgres: connection pool exhausted: no connection within %s (%s); the statement was not sent, so it changed nothing. "
	if e.Acquired < e.MaxConns {
		return fmt.Sprintf(head+"The pool had room, but opening a new connection took longer: check that the "+
			"database is reachable, or raise postgres.Config.AcquireTimeout",
			e.Wait, fmt.Sprintf("%d of %d connections in use", e.Acquired, e.MaxConns))
	}
	return fmt.Sprintf(head+"The pool is too small for the connections held at once: set pool_max_conns in the "+
		"database URL (or pgxpool.Config.MaxConns) to at least %d plus the connections your own code holds at "+
		"the same time (each worker's open transaction); or raise postgres.Config.AcquireTimeout",
		e.Wait, fmt.Sprintf("all %d connections in use", e.MaxConns), MinPoolConns-1)
}

// Is reports whether target is ErrPoolExhausted or store.ErrNotSent.
func (e *PoolExhaustedError) Is(target error) bool {
	return target == ErrPoolExhausted || target == store.ErrNotSent
}

// connPool is a DB that hands out connections: *pgxpool.Pool.
type connPool interface {
	DB
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
	Config() *pgxpool.Config
	Stat() *pgxpool.Stat
}

// errWaited is the cause of an acquisition's context when its own bound
// ended it (not the caller's context).
var errWaited = errors.New("postgres: connection wait bound reached")

// boundedPool is a connPool whose every acquisition waits at most wait
// (negative: as long as the caller's context lets it).
// It returns connections as pgxpool does: after Exec, after a QueryRow's
// Scan, when rows or batch results are closed (or read to the end), and
// when a transaction commits or rolls back.
type boundedPool struct {
	p    connPool
	wait time.Duration
}

var _ connPool = (*boundedPool)(nil)

// Acquire returns a connection of the pool, waiting at most b.wait for it
// (within ctx), else a *PoolExhaustedError. Every failure matches
// store.ErrNotSent: the statement the connection was for was not sent.
// (Not pgconn.SafeToRetry's errors: on a caller's transaction a failed
// savepoint release can leave earlier statements in place.)
func (b *boundedPool) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if b.wait < 0 {
		c, err := b.p.Acquire(ctx)
		return c, store.NotSent(err)
	}
	actx, cancel := context.WithTimeoutCause(ctx, b.wait, errWaited)
	defer cancel()
	c, err := b.p.Acquire(actx)
	if err == nil {
		return c, nil
	}
	if ctx.Err() == nil && errors.Is(context.Cause(actx), errWaited) {
		st := b.p.Stat()
		return nil, &PoolExhaustedError{Wait: b.wait, MaxConns: st.MaxConns(), Acquired: st.AcquiredConns()}
	}
	return nil, store.NotSent(err)
}

// Config returns the pool's configuration.
func (b *boundedPool) Config() *pgxpool.Config { return b.p.Config() }

// Stat returns the pool's statistics.
func (b *boundedPool) Stat() *pgxpool.Stat { return b.p.Stat() }

// Exec runs sql on a connection of the pool.
func (b *boundedPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := b.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	return c.Exec(ctx, sql, args...)
}

// Query runs sql on a connection of the pool, given back when the rows
// close.
func (b *boundedPool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := b.Acquire(ctx)
	if err != nil {
		return failedRows{err}, err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		c.Release()
		return failedRows{err}, err
	}
	return &connRows{Rows: rows, c: c}, nil
}

// QueryRow runs sql on a connection of the pool, given back after Scan.
func (b *boundedPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c, err := b.Acquire(ctx)
	if err != nil {
		return failedRow{err}
	}
	return &connRow{r: c.QueryRow(ctx, sql, args...), c: c}
}

// SendBatch sends batch on a connection of the pool, given back when the
// results close.
func (b *boundedPool) SendBatch(ctx context.Context, batch *pgx.Batch) pgx.BatchResults {
	c, err := b.Acquire(ctx)
	if err != nil {
		return pgx.FailedBatchResults(batch, err)
	}
	br := c.SendBatch(ctx, batch)
	if tx := br.Tx(); tx != nil {
		return &connBatch{BatchResults: br, tx: &connTx{Tx: tx, c: c}}
	}
	return &connBatch{BatchResults: br, c: c}
}

// Begin starts a transaction on a connection of the pool, given back when
// it commits or rolls back.
func (b *boundedPool) Begin(ctx context.Context) (pgx.Tx, error) {
	c, err := b.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		c.Release()
		return nil, err
	}
	return &connTx{Tx: tx, c: c}, nil
}

// connRows gives its connection back when closed, as pgxpool's rows do.
type connRows struct {
	pgx.Rows
	c *pgxpool.Conn
}

func (r *connRows) Close() {
	r.Rows.Close()
	if r.c != nil {
		r.c.Release()
		r.c = nil
	}
}

func (r *connRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *connRows) Scan(dest ...any) error {
	err := r.Rows.Scan(dest...)
	if err != nil {
		r.Close()
	}
	return err
}

func (r *connRows) Values() ([]any, error) {
	v, err := r.Rows.Values()
	if err != nil {
		r.Close()
	}
	return v, err
}

// connRow gives its connection back after Scan.
type connRow struct {
	r pgx.Row
	c *pgxpool.Conn
}

func (r *connRow) Scan(dest ...any) error {
	defer r.c.Release() // also if Scan panics
	return r.r.Scan(dest...)
}

// connBatch gives its connection back when closed, or leaves it to the
// transaction the batch began.
type connBatch struct {
	pgx.BatchResults
	c  *pgxpool.Conn
	tx *connTx
}

func (b *connBatch) Close() error {
	err := b.BatchResults.Close()
	if b.c != nil {
		b.c.Release()
		b.c = nil
	}
	return err
}

func (b *connBatch) Tx() pgx.Tx {
	if b.tx == nil {
		return nil
	}
	return b.tx
}

// connTx gives its connection back when it commits or rolls back.
type connTx struct {
	pgx.Tx
	c *pgxpool.Conn
}

func (t *connTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.release()
	return err
}

func (t *connTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.release()
	return err
}

func (t *connTx) release() {
	if t.c != nil {
		t.c.Release()
		t.c = nil
	}
}

// failedRows and failedRow carry an error that came before the statement.
type failedRows struct{ err error }

func (failedRows) Close()                                       {}
func (e failedRows) Err() error                                 { return e.err }
func (failedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (failedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (failedRows) Next() bool                                   { return false }
func (e failedRows) Scan(...any) error                          { return e.err }
func (e failedRows) Values() ([]any, error)                     { return nil, e.err }
func (failedRows) RawValues() [][]byte                          { return nil }
func (failedRows) Conn() *pgx.Conn                              { return nil }
func (failedRows) TypeMap() *pgtype.Map                         { return nil }

type failedRow struct{ err error }

func (e failedRow) Scan(...any) error { return e.err }
