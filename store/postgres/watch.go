package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

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
	h, tracks := s.hist()
	seen, _ := h.stream(stream) // a refused stream is still read
	var last int64
	var unresolved []int64
	err := s.db.QueryRow(ctx, s.q.snapshot, stream, limit).Scan(&last, &unresolved)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if tracks {
			h.read(stream, seen, 0, 0) // a stream this Store saw is gone
		}
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
	if tracks {
		// A read that goes back is logged and counted, and returns what
		// the server has; only writes refuse (see history.read).
		h.read(stream, seen, last, snap.Watermark)
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
		if h, tracks := s.hist(); tracks {
			h.sawNumber(stream, out[len(out)-1].Number)
		}
		return out, nil
	}
	var low int64
	err = s.db.QueryRow(ctx, s.q.lowPoint, stream).Scan(&low)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("read resolved: %w: %s", store.ErrStreamNotFound, store.QuoteInput(stream))
	case err != nil:
		return nil, interpretError("read resolved", err)
	case after < low-1: // not after+1 < low: after may be math.MaxInt64
		return nil, fmt.Errorf("read resolved: %w", &store.TrimmedError{Stream: stream, LowPoint: low})
	}
	return nil, nil
}

// Watch delivers the resolutions of every stream in the schema to sink until
// ctx ends: those this Store makes, in process, as they commit; those of
// other Stores (other processes), from LISTEN on a connection of its own:
// taken out of the pool, or dialled with Config.ListenDSN. It calls
// sink.Reset each time it starts listening (first and after a reconnect), so
// the receiver re-reads the truth for what it may have missed. Each time,
// it proves that the LISTEN hears (see Listening in the package doc): when
// it does not, as through a transaction-mode pooler, it logs an ERROR and
// polls sink (store.Poller, else Reset) every Config.DeafPollInterval until
// a later check hears. Connection errors are retried with exponential
// backoff (up to a 30 s pause). It needs a DB that can hand out a
// connection (*pgxpool.Pool) or Config.ListenDSN.
//
// While it runs, it also sends this Store's notices to the other processes
// in the background (see Notices in the package doc), and waits for that before
// it returns.
func (s *Store) Watch(ctx context.Context, sink store.Sink) error {
	if s.notes.inTx() {
		return s.errInTx("watch")
	}
	l, err := s.listener("watch", listenerResolutions, sink, func(payload string) {
		sender, records, ok := parsePayload(payload)
		if !ok || sender == s.notes.id { // this Store's own: heard in process already
			return
		}
		for _, nt := range records {
			nt.deliver(sink)
		}
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.notes.serve(ctx) })
	wg.Go(func() { s.notes.confirm(ctx) }) // what Stores in callers' transactions hand over (tx.go)
	defer s.notes.watch(sink)()            // this Store's own resolutions, in process
	return l.run(ctx)
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
