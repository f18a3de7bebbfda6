package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"log/slog"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/store"
)

// CommitBatch commits items in order, each exactly as Commit would, in one
// transaction and, without transaction functions, one round trip: the
// conditional writes are pipelined in one batch, which PostgreSQL runs as one
// implicit transaction, so a run of k commits costs one WAL flush. With
// p.Ordered each write checks that no earlier number is still leased, which
// counts the batch's earlier items exactly when they succeeded.
//
// Items with a Func (func(context.Context, pgx.Tx) error) run in an
// interactive transaction instead: each item's write and function sit in a
// savepoint, so a failing function rolls back its own item only.
//
// An error return means the outcome of every item is unknown (the connection
// failed): retry each with its token to learn it (I7).
func (s *Store) CommitBatch(ctx context.Context, stream string, items []store.CommitItem, p *store.CommitBatchParams) ([]store.CommitResult, error) {
	if p == nil {
		p = &store.CommitBatchParams{}
	}
	if err := store.ValidateBatch(stream, items); err != nil {
		return nil, fmt.Errorf("commit batch: %w", err)
	}
	funcs := false
	for _, it := range items {
		if it.Func == nil {
			continue
		}
		if _, ok := it.Func.(func(context.Context, pgx.Tx) error); !ok {
			return nil, fmt.Errorf("commit batch: %w: Func is %T, want func(context.Context, pgx.Tx) error", store.ErrUnsupported, it.Func)
		}
		funcs = true
	}
	if len(items) == 1 && !funcs { // one statement, no pipeline
		it := items[0]
		t, err := s.Commit(ctx, stream, it.Number, it.Token, &store.CommitParams{Payload: it.Payload, Ordered: p.Ordered, Now: p.Now})
		if err != nil && !isOutcome(err) {
			return nil, err
		}
		return []store.CommitResult{{ResolvedAt: t, Err: err}}, nil
	}
	var out []store.CommitResult
	var err error
	if funcs {
		out, err = s.commitTx(ctx, stream, items, p)
	} else {
		out, err = s.commitPipelined(ctx, stream, items, p)
	}
	if err != nil {
		return nil, interpretError("commit batch", err)
	}
	return out, nil
}

func (s *Store) commitPipelined(ctx context.Context, stream string, items []store.CommitItem, p *store.CommitBatchParams) ([]store.CommitResult, error) {
	b := &pgx.Batch{}
	for _, it := range items {
		b.Queue(s.q.commit, stream, it.Number, uuid(it.Token), it.Payload, p.Now, p.Ordered, s.channel)
	}
	br := s.db.SendBatch(ctx, b)
	out := make([]store.CommitResult, len(items))
	refused := false
	for i := range items {
		err := br.QueryRow().Scan(&out[i].ResolvedAt)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			refused = true
			out[i].Err = errChanged // explained below
		case err != nil:
			_ = br.Close()
			return nil, err
		}
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	if refused {
		for i, it := range items {
			if out[i].Err != nil {
				out[i].ResolvedAt, out[i].Err = s.explainBatchItem(ctx, s.db, stream, it, p)
			}
		}
	}
	return out, nil
}

// explainBatchItem explains a refused batch item after its transaction
// ended. An entry that changed in between (it resolved concurrently) is
// retried alone.
func (s *Store) explainBatchItem(ctx context.Context, q querier, stream string, it store.CommitItem, p *store.CommitBatchParams) (time.Time, error) {
	t, err := s.explainCommit(ctx, q, stream, it.Number, it.Token, p.Now, p.Ordered)
	if errors.Is(err, errChanged) {
		return s.Commit(ctx, stream, it.Number, it.Token, &store.CommitParams{Payload: it.Payload, Ordered: p.Ordered, Now: p.Now})
	}
	return t, err
}

func (s *Store) commitTx(ctx context.Context, stream string, items []store.CommitItem, p *store.CommitBatchParams) ([]store.CommitResult, error) {
	out := make([]store.CommitResult, len(items))
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		for i, it := range items {
			sp, err := tx.Begin(ctx) // a savepoint
			if err != nil {
				return err
			}
			err = sp.QueryRow(ctx, s.q.commit, stream, it.Number, uuid(it.Token), it.Payload, p.Now, p.Ordered, s.channel).Scan(&out[i].ResolvedAt)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
				out[i].ResolvedAt, out[i].Err = s.explainCommit(ctx, tx, stream, it.Number, it.Token, p.Now, p.Ordered)
				if errors.Is(out[i].Err, errChanged) {
					out[i].Err = fmt.Errorf("commit: %w: entry %d changed concurrently", store.ErrNotReady, it.Number)
				}
				continue
			case err != nil:
				return err
			}
			if fn, _ := it.Func.(func(context.Context, pgx.Tx) error); fn != nil {
				if ferr := fn(ctx, sp); ferr != nil {
					if err := sp.Rollback(ctx); err != nil {
						return err
					}
					out[i] = store.CommitResult{Err: ferr}
					continue
				}
			}
			if err := sp.Commit(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Snapshot returns the barrier's starting point for stream in one statement:
// the watermark and up to limit unresolved numbers above it (0:
// store.MaxListLimit). An unknown stream has an empty snapshot.
func (s *Store) Snapshot(ctx context.Context, stream string, limit int) (store.Snapshot, error) {
	if err := store.ValidateStream(stream); err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	if limit <= 0 || limit > store.MaxListLimit {
		limit = store.MaxListLimit
	}
	var last int64
	var unresolved []int64
	err := s.db.QueryRow(ctx, s.q.snapshot, stream, limit).Scan(&last, &unresolved)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.Snapshot{}, nil
	case err != nil:
		return store.Snapshot{}, interpretError("snapshot", err)
	}
	snap := store.Snapshot{Watermark: last, Known: last, Unresolved: unresolved}
	if len(unresolved) > 0 {
		snap.Watermark = unresolved[0] - 1
		if len(unresolved) == limit {
			snap.Known = unresolved[len(unresolved)-1]
		}
	}
	return snap, nil
}

// ReadResolved returns up to limit entries with numbers > after, ascending,
// stopping before the first unresolved one: never past the watermark. It is
// one statement, so one snapshot.
func (s *Store) ReadResolved(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	limit, err := store.ValidateRead(stream, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read resolved: %w", err)
	}
	rows, err := s.db.Query(ctx, s.q.readResolved, stream, after, limit)
	if err != nil {
		return nil, interpretError("read resolved", err)
	}
	out, err := collectEntries(rows)
	if err != nil {
		return nil, interpretError("read resolved", err)
	}
	if len(out) > 0 {
		return out, nil
	}
	var low int64
	err = s.db.QueryRow(ctx, s.q.lowPoint, stream).Scan(&low)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("read resolved: %w: %q", store.ErrStreamNotFound, stream)
	case err != nil:
		return nil, interpretError("read resolved", err)
	case after+1 < low:
		return nil, fmt.Errorf("read resolved: %w", &store.TrimmedError{Stream: stream, LowPoint: low})
	}
	return nil, nil
}

// Watch delivers the resolutions of every stream in the schema to sink until
// ctx ends, from LISTEN on a connection it takes out of the pool. It calls
// sink.Reset each time it starts listening (first and after a reconnect), so
// the receiver re-reads the truth for what it may have missed. Connection
// errors are retried with exponential backoff (up to a 30 s pause). It
// needs a DB that can hand out a connection (*pgxpool.Pool).
func (s *Store) Watch(ctx context.Context, sink store.Sink) error {
	pool, ok := s.db.(interface {
		Acquire(ctx context.Context) (*pgxpool.Conn, error)
	})
	if !ok {
		return fmt.Errorf("watch: %w: the DB is a %T, not a pool", store.ErrUnsupported, s.db)
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 30 * time.Second
	bo.MaxElapsedTime = 0
	for {
		err := s.listen(ctx, pool, sink, bo.Reset)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pause := bo.NextBackOff()
		s.logger.WarnContext(ctx, "postgres: listener lost, reconnecting", slog.Any("error", err), slog.Duration("pause", pause))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// listen holds one listening connection until it fails or ctx ends.
func (s *Store) listen(ctx context.Context, pool interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}, sink store.Sink, connected func()) error {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A listening connection must not go back to the pool.
	conn := pc.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, s.q.listen); err != nil {
		return err
	}
	connected()
	sink.Reset()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if stream, number, ok := parseResolution(n.Payload); ok {
			sink.Resolved(stream, number)
		}
	}
}

// parseResolution parses a notice of notifyExpr. Any session may NOTIFY on
// the channel, so it accepts exactly what notifyExpr sends: "r", a valid
// stream name and a number >= 1 as PostgreSQL prints it, separated by tabs.
func parseResolution(payload string) (string, int64, bool) {
	kind, rest, ok := strings.Cut(payload, "\t")
	if !ok || kind != "r" {
		return "", 0, false
	}
	stream, num, ok := strings.Cut(rest, "\t")
	if !ok || store.ValidateStream(stream) != nil {
		return "", 0, false
	}
	n, ok := parseBigint(num)
	if !ok || n < 1 {
		return "", 0, false
	}
	return stream, n, true
}

// parseBigint parses a bigint >= 0 as PostgreSQL prints it: decimal digits,
// no sign, no leading zero.
func parseBigint(s string) (int64, bool) {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// isOutcome reports whether a Commit error is the item's outcome (a refusal)
// rather than a failure of the call.
func isOutcome(err error) bool {
	for _, target := range []error{store.ErrNotFound, store.ErrTokenMismatch, store.ErrExpired,
		store.ErrReleased, store.ErrGap, store.ErrNotReady, store.ErrCommitted} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
