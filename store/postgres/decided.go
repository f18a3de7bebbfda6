package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// poolConns is a DB that hands out connections (*pgxpool.Pool).
type poolConns interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
	Config() *pgxpool.Config
}

// decidedSetup is what queryDecided learns once of the Store's DB.
type decidedSetup struct {
	once   sync.Once
	pool   poolConns       // nil: the DB does not qualify
	tracer pgx.QueryTracer // the pool's, if any
}

// setup returns the pool queryDecided may use, or nil.
func (d *decidedSetup) setup(db DB) *decidedSetup {
	d.once.Do(func() {
		pool, ok := db.(poolConns)
		if !ok {
			return
		}
		cc := pool.Config().ConnConfig // a copy: read once
		if cc.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
			return // the simple protocol (poolers), or no prepared statements
		}
		d.pool = pool
		d.tracer = cc.Tracer
	})
	return d
}

// queryDecided runs sql like Query. When it can (the DB is a pool whose
// connections cache prepared statements, pgx's default mode), it asks for
// the rows before the commit (the package doc, Rows before the commit,
// tells how) and returns commit, which waits for the commit, reports its
// error, and gives the connection back; the caller must call it once,
// after it closed the rows. Otherwise commit is nil, and the rows come
// after the commit, as from Query. It prepares sql on each connection
// once, as pgx's Query would, and calls the pool's
// QueryTracer, if any, around the statement and its commit.
func (s *Store) queryDecided(ctx context.Context, sql string, args ...any) (pgx.Rows, func() error, error) {
	d := s.decided.setup(s.db)
	if d.pool == nil {
		rows, err := s.db.Query(ctx, sql, args...)
		return rows, nil, err
	}
	pc, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	conn := pc.Conn()
	sd, err := conn.Prepare(ctx, sql, sql) // cached per connection after the first
	if err != nil {
		pc.Release()
		return nil, nil, err
	}
	var eqb pgx.ExtendedQueryBuilder
	if err := eqb.Build(conn.TypeMap(), sd, args); err != nil {
		pc.Release()
		return nil, nil, err
	}
	tracer := d.tracer
	if tracer != nil {
		ctx = tracer.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: sql, Args: args})
	}
	pipe := conn.PgConn().StartPipeline(ctx)
	// finish reads up to the Sync's ReadyForQuery (the commit's outcome)
	// and gives the connection back; failed says the statement failed
	// before.
	finish := func(failed bool) error {
		err := pipe.Close()
		if tracer != nil {
			tracer.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{Err: err})
		}
		if (failed || err != nil) && !conn.IsClosed() {
			// As pgx does with its own statement cache: a statement that
			// failed may have been invalidated (a schema change); it is
			// prepared again at its next use.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = conn.Deallocate(dctx, sql)
			cancel()
		}
		pc.Release() // a connection broken meanwhile is destroyed, not reused
		return err
	}
	pipe.SendQueryStatement(sd, eqb.ParamValues, eqb.ParamFormats, eqb.ResultFormats)
	pipe.SendFlushRequest()
	pipe.SendPipelineSync()
	if err := pipe.Flush(); err != nil {
		_ = finish(true)
		return nil, nil, err
	}
	res, err := pipe.GetResults()
	if err != nil {
		_ = finish(true)
		return nil, nil, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		_ = finish(true)
		return nil, nil, fmt.Errorf("postgres: unexpected pipeline result %T", res)
	}
	rows := pgx.RowsFromResultReader(conn.TypeMap(), rr)
	return rows, func() error { return finish(rows.Err() != nil) }, nil
}
