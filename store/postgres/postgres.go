package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
)

// DB is what the Store needs of a connection pool: *pgxpool.Pool satisfies
// it, and so does a wrapper that injects faults. A pgx.Tx satisfies it
// too, but a Store in the application's transaction is better had from
// the pool's Store with InTx, which shares its statements and hands what
// the transaction resolved to its Watch (see InTx).
type DB interface {
	querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// querier runs one statement: a DB or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config configures a Store. A nil *Config means the defaults.
type Config struct {
	// Schema holds the tables; it must have been migrated (package
	// migrations). Default: migrations.DefaultSchema ("seqlease").
	Schema string
	// Logger receives diagnostics, such as a lost listener connection, a
	// listener that hears nothing (ListenDeafMessage, at ERROR level), or
	// a pool smaller than MinPoolConns. Default: discard.
	Logger *slog.Logger
	// AcquireTimeout bounds each wait of a call for a connection from the
	// pool (a DB that hands out connections: *pgxpool.Pool); a call that
	// waited that long fails with a *PoolExhaustedError, having sent
	// nothing. The caller's context still ends the wait earlier, with its
	// own error. Statements on a caller's transaction wait for nothing.
	// It applies to a *pgxpool.Pool; another DB (a type of yours wrapping
	// a pool) is used as it is. Default (0): DefaultAcquireTimeout, 5 s.
	// Negative: no bound but the caller's context (pgxpool's own
	// behaviour).
	AcquireTimeout time.Duration
	// ListenDSN is the connection string of the connections Watch and
	// WatchLeases LISTEN on: a direct or session-mode connection to the
	// same database, for a Store whose DB goes through a
	// transaction-mode pooler, where LISTEN hears nothing. Each watch
	// dials one connection with it and keeps it. Default: "", each takes
	// a connection out of the DB, which must then be a pool.
	ListenDSN string
	// ListenCheckTimeout is how long a listener waits to hear its own
	// self-check notice before it is deemed deaf (see Listening in
	// the package doc). Default: DefaultListenCheckTimeout (5 s).
	ListenCheckTimeout time.Duration
	// DeafPollInterval is how often the sink of a deaf listener is polled
	// (store.Poller's Poll, else Reset). Default: DefaultDeafPollInterval
	// (50 ms).
	DeafPollInterval time.Duration
	// DeafRecheckInterval is how long a deaf listener polls before it
	// reconnects and checks again. Default: DefaultDeafRecheckInterval
	// (30 s).
	DeafRecheckInterval time.Duration
	// HistoryLimit bounds what the Store remembers to detect a database
	// that lost history (see AcceptHistory): at most this many streams,
	// and as many named leases, each about 100 bytes. The ones used least
	// recently are forgotten first; a stream or name forgotten is checked
	// again from its next answer on, and a loss of what was forgotten
	// goes unnoticed. Refused streams and names are never forgotten.
	// Default: DefaultHistoryLimit (10,000). Negative: invalid.
	HistoryLimit int
}

// DefaultHistoryLimit is the default of Config.HistoryLimit: 10,000
// streams and 10,000 named leases, about 2 MB at most.
const DefaultHistoryLimit = 10_000

// Store is the PostgreSQL backend.
type Store struct {
	db      DB
	q       queries
	inq     inboxQueries       // inbox.go
	ckq     *checkpointQueries // checkpoint.go
	channel string             // the NOTIFY channel: the schema's name
	logger  *slog.Logger
	decided decidedSetup // see queryDecided
	notes   *notices     // notice.go
	root    *Store       // of a Store in a caller's transaction (InTx); nil otherwise
	history *history     // history.go; nil in a caller's transaction (the root's)
	tracks  bool         // whether this Store records and checks history (not on a pgx.Tx)

	// Listening (listen.go).
	listenConfig           *pgx.ConnConfig // Config.ListenDSN parsed; nil: listen on the DB's connections
	checkTimeout, deafPoll time.Duration
	recheckEvery           time.Duration
	health                 listenHealth
}

// New returns a Store on db. It validates the schema name but does not touch
// the database. On a pool (*pgxpool.Pool), each wait for a connection is
// bounded by Config.AcquireTimeout, and a pool whose MaxConns is below
// MinPoolConns is logged at warn with the numbers and the fix: it works,
// but one worker holding a connection of its own, with the background
// work, can exhaust it.
//
// To lease, commit or append inside a transaction the application owns,
// make the Store on the pool and take s.InTx(tx) in each transaction:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "INSERT INTO orders ..."); err != nil {
//			return err
//		}
//		_, err := s.InTx(tx).Append(ctx, "orders", []store.AppendRequest{{Payload: event}}, nil)
//		return err
//	})
//
// New(tx, cfg) works as well, but it prepares nothing shared and always
// notifies inside the transaction.
func New(db DB, cfg *Config) (*Store, error) {
	schema := migrations.DefaultSchema
	if cfg != nil && cfg.Schema != "" {
		schema = cfg.Schema
	}
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("postgres: Config.Schema: %w", err)
	}
	if cfg == nil {
		cfg = &Config{}
	}
	switch {
	case cfg.ListenCheckTimeout < 0:
		return nil, fmt.Errorf("postgres: Config.ListenCheckTimeout %v is negative: %w", cfg.ListenCheckTimeout, store.ErrInvalidArgument)
	case cfg.DeafPollInterval < 0:
		return nil, fmt.Errorf("postgres: Config.DeafPollInterval %v is negative: %w", cfg.DeafPollInterval, store.ErrInvalidArgument)
	case cfg.DeafRecheckInterval < 0:
		return nil, fmt.Errorf("postgres: Config.DeafRecheckInterval %v is negative: %w", cfg.DeafRecheckInterval, store.ErrInvalidArgument)
	case cfg.HistoryLimit < 0:
		return nil, fmt.Errorf("postgres: Config.HistoryLimit %d is negative: %w", cfg.HistoryLimit, store.ErrInvalidArgument)
	}
	var listenConfig *pgx.ConnConfig
	if cfg.ListenDSN != "" {
		lc, err := pgx.ParseConfig(cfg.ListenDSN)
		if err != nil {
			// pgx's parse errors hide the password.
			return nil, fmt.Errorf("postgres: Config.ListenDSN: %w: %v", store.ErrInvalidArgument, err)
		}
		listenConfig = lc
	}
	logger := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	// Only a pool itself is wrapped: a type of the caller's that embeds one
	// (to inject faults, to trace) keeps its own methods, which a wrapper
	// around its embedded Acquire would bypass.
	if pool, ok := db.(*pgxpool.Pool); ok {
		db = boundPool(pool, cfg, logger)
	}
	s := &Store{db: db, q: buildQueries(schema), inq: buildInboxQueries(schema), ckq: buildCheckpointQueries(schema), channel: schema, logger: logger,
		listenConfig: listenConfig, checkTimeout: cmp.Or(cfg.ListenCheckTimeout, DefaultListenCheckTimeout),
		deafPoll: cmp.Or(cfg.DeafPollInterval, DefaultDeafPollInterval), recheckEvery: cmp.Or(cfg.DeafRecheckInterval, DefaultDeafRecheckInterval)}
	s.notes = newNotices(s)
	_, onTx := db.(pgx.Tx)
	s.history, s.tracks = newHistory(logger, cmp.Or(cfg.HistoryLimit, DefaultHistoryLimit)), !onTx
	s.history.forget = s.notes.forget
	return s, nil
}

// boundPool returns pool with its waits bounded as cfg says (a negative
// AcquireTimeout: no bound but the caller's context), and warns if it is
// smaller than MinPoolConns.
func boundPool(pool connPool, cfg *Config, logger *slog.Logger) DB {
	if n := pool.Config().MaxConns; n < MinPoolConns {
		logger.Warn("postgres: connection pool smaller than what seqlease needs at once; calls may fail with ErrPoolExhausted",
			slog.Int("max_conns", int(n)), slog.Int("min_conns", MinPoolConns),
			slog.String("needs", "lease statement, commit transaction, notice sender, cleanup loop, one worker's own transaction"),
			slog.String("fix", fmt.Sprintf("set pool_max_conns in the database URL (or pgxpool.Config.MaxConns) to %d plus the connections your own code holds at once, at least %d", MinPoolConns-1, MinPoolConns)))
	}
	wait := DefaultAcquireTimeout
	if cfg != nil && cfg.AcquireTimeout != 0 {
		wait = cfg.AcquireTimeout
	}
	return &boundedPool{p: pool, wait: wait}
}

// maxAttempts bounds the retries of a conditional write whose refusal could
// not be explained because the row changed in between (a concurrent writer).
const maxAttempts = 3

// Lease implements the storage contract's Lease in one statement.
func (s *Store) Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error) {
	if err := store.ValidateLease(stream, reqs, p); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if p == nil {
		p = &store.LeaseParams{}
	}
	ops := make([]string, len(reqs))
	kinds := make([]string, len(reqs))
	ttls := make([]int64, len(reqs))
	tokens := make([]pgtype.UUID, len(reqs))
	for i, r := range reqs {
		ops[i], kinds[i], ttls[i] = r.OperationID, r.Kind, r.TTL.Microseconds()
		tokens[i] = pgtype.UUID{Bytes: store.NewToken(), Valid: true}
	}
	h, tracks := s.hist()
	seen, err := h.stream(stream)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	var base int64
	var leasedAt time.Time
	err = s.db.QueryRow(ctx, s.q.lease, stream, len(reqs), p.Now, p.Owner, ops, kinds, ttls, tokens).Scan(&base, &leasedAt)
	if err != nil {
		return nil, interpretError("lease", err)
	}
	if tracks {
		if err := h.numbers(stream, seen, base+1, base+int64(len(reqs))); err != nil {
			return nil, fmt.Errorf("lease: %w", err)
		}
	}
	out := make([]store.Entry, len(reqs))
	for i, r := range reqs {
		out[i] = store.Entry{
			Stream: stream, Number: base + int64(i) + 1, State: store.Leased, Token: tokens[i].Bytes,
			Owner: p.Owner, OperationID: r.OperationID, Kind: r.Kind,
			// the statement's arithmetic: whole microseconds
			LeasedAt: leasedAt, ExpiresAt: leasedAt.Add(time.Duration(ttls[i]) * time.Microsecond),
		}
	}
	return out, nil
}

// Commit implements the storage contract's Commit: one conditional UPDATE,
// and on refusal one read that explains it.
func (s *Store) Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error) {
	if err := store.ValidateHolding(stream, number, token); err != nil {
		return time.Time{}, fmt.Errorf("commit: %w", err)
	}
	if p == nil {
		p = &store.CommitParams{}
	}
	for range maxAttempts {
		var resolvedAt time.Time
		var xid int64
		err := s.db.QueryRow(ctx, s.q.commit, stream, number, uuid(token), p.Payload, p.Now, p.Ordered).Scan(&resolvedAt, &xid)
		if err == nil {
			s.notes.sawXact(xid)
			if err := s.committed(ctx, stream, number, p.Ordered); err != nil {
				return time.Time{}, noticeFailed("commit", err)
			}
			return resolvedAt, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return time.Time{}, interpretError("commit", err)
		}
		resolvedAt, err = s.explainCommit(ctx, s.db, stream, number, token, p.Payload, p.Now, p.Ordered)
		if err == nil {
			// a repeat: notice it again, in case the first was lost
			if err := s.committed(ctx, stream, number, false); err != nil {
				return time.Time{}, noticeFailed("commit", err)
			}
		}
		if !errors.Is(err, errChanged) {
			return resolvedAt, err
		}
	}
	return time.Time{}, fmt.Errorf("commit: entry %d kept changing under concurrent writers", number)
}

// committed notices the commit of number: with ordered, every number up
// to it is resolved.
// An error is that of a statement in the caller's transaction (InTx).
func (s *Store) committed(ctx context.Context, stream string, number int64, ordered bool) error {
	if ordered {
		return s.notes.resolved(ctx, stream, number)
	}
	return s.notes.resolved(ctx, stream, 0, number)
}

// errChanged says a refused write could not be explained because the entry
// changed in between: try again.
var errChanged = errors.New("entry changed")

// explainCommit turns a refused commit into its outcome: success for the
// holder's retry of a commit that took effect (I7) with the same payload,
// else the reason.
func (s *Store) explainCommit(ctx context.Context, q querier, stream string, number int64, token store.Token, payload []byte, now *time.Time, ordered bool) (time.Time, error) {
	pr, err := s.probe(ctx, q, stream, number, token, now)
	switch {
	case err != nil:
		return time.Time{}, interpretError("commit", err)
	case pr.state == store.Committed && !pr.filled:
		var same bool
		switch err := q.QueryRow(ctx, s.q.samePayload, stream, number, payload).Scan(&same); {
		case errors.Is(err, pgx.ErrNoRows):
			return time.Time{}, errChanged // trimmed in between: the probe says so next
		case err != nil:
			return time.Time{}, interpretError("commit", err)
		}
		if !same {
			return time.Time{}, fmt.Errorf("commit: %w", store.ErrPayloadMismatch)
		}
		return pr.resolvedAt, nil
	case pr.state.Resolved():
		return time.Time{}, fmt.Errorf("commit: %w", store.GapError(pr.gapReason))
	case pr.expired:
		return time.Time{}, fmt.Errorf("commit: %w", store.ErrExpired)
	case ordered && pr.earlierUnresolved:
		return time.Time{}, fmt.Errorf("commit: %w", store.ErrNotReady)
	}
	return time.Time{}, errChanged
}

// Release implements the storage contract's Release.
func (s *Store) Release(ctx context.Context, stream string, number int64, token store.Token, p *store.ReleaseParams) error {
	if err := store.ValidateHolding(stream, number, token); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if p == nil {
		p = &store.ReleaseParams{}
	}
	for range maxAttempts {
		var xid int64
		err := s.db.QueryRow(ctx, s.q.release, stream, number, uuid(token), p.Now).Scan(&xid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return interpretError("release", err)
		}
		if err == nil {
			s.notes.sawXact(xid)
			if err := s.notes.resolved(ctx, stream, 0, number); err != nil {
				return noticeFailed("release", err)
			}
			return nil
		}
		pr, err := s.probe(ctx, s.db, stream, number, token, p.Now)
		if err != nil {
			return interpretError("release", err)
		}
		switch {
		case pr.gapReason == store.ReasonReleased:
			return nil // repeated release (the gap may have been filled since)
		case pr.state == store.Committed && pr.filled:
			return fmt.Errorf("release: %w", store.GapError(pr.gapReason))
		case pr.state == store.Committed:
			return fmt.Errorf("release: %w", store.ErrCommitted)
		case pr.state == store.Gap:
			return fmt.Errorf("release: %w", store.GapError(pr.gapReason))
		}
	}
	return fmt.Errorf("release: entry %d kept changing under concurrent writers", number)
}

// Extend implements the storage contract's Extend.
func (s *Store) Extend(ctx context.Context, stream string, number int64, token store.Token, p *store.ExtendParams) (time.Time, time.Time, error) {
	if p == nil {
		p = &store.ExtendParams{}
	}
	if err := store.ValidateTTL(p.TTL, 0); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", err)
	}
	if err := store.ValidateHolding(stream, number, token); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", err)
	}
	for range maxAttempts {
		var now, expiresAt time.Time
		err := s.db.QueryRow(ctx, s.q.extend, stream, number, uuid(token), p.Now, p.TTL.Microseconds()).Scan(&now, &expiresAt)
		if err == nil {
			return now, expiresAt, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return time.Time{}, time.Time{}, interpretError("extend", err)
		}
		pr, err := s.probe(ctx, s.db, stream, number, token, p.Now)
		if err != nil {
			return time.Time{}, time.Time{}, interpretError("extend", err)
		}
		switch {
		case pr.state == store.Committed && pr.filled:
			return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", store.GapError(pr.gapReason))
		case pr.state == store.Committed:
			return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", store.ErrCommitted)
		case pr.state == store.Gap:
			return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", store.GapError(pr.gapReason))
		case pr.expired:
			return time.Time{}, time.Time{}, fmt.Errorf("extend: %w", store.ErrExpired)
		}
	}
	return time.Time{}, time.Time{}, fmt.Errorf("extend: entry %d kept changing under concurrent writers", number)
}

// ResolveExpired implements the storage contract's ResolveExpired.
func (s *Store) ResolveExpired(ctx context.Context, stream string, number int64, p *store.ResolveExpiredParams) error {
	if p == nil {
		p = &store.ResolveExpiredParams{}
	}
	reason, err := store.ExpiryReason(stream, number, p)
	if err != nil {
		return fmt.Errorf("resolve expired: %w", err)
	}
	for range maxAttempts {
		sql := s.q.resolveExpired
		if p.Hook {
			sql = s.q.resolveExpiredHook
		}
		tag, err := s.db.Exec(ctx, sql, stream, number, reason, p.RecoveredAs, p.Now)
		if err != nil {
			return interpretError("resolve expired", err)
		}
		if tag.RowsAffected() == 1 {
			if err := s.notes.resolved(ctx, stream, 0, number); err != nil {
				return noticeFailed("resolve expired", err)
			}
			return nil
		}
		if err := s.explainExpiry(ctx, stream, number, p.Now); !errors.Is(err, errChanged) {
			return fmt.Errorf("resolve expired: %w", err)
		}
	}
	return fmt.Errorf("resolve expired: entry %d kept changing under concurrent writers", number)
}

// ResolveExpiredBatch implements the storage contract's ResolveExpiredBatch
// in one statement.
func (s *Store) ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error) {
	if p == nil {
		p = &store.ResolveExpiredParams{}
	}
	reason, err := store.ValidateExpiredBatch(stream, numbers, p)
	if err != nil {
		return nil, fmt.Errorf("resolve expired batch: %w", err)
	}
	lo, hi := slices.Min(numbers), slices.Max(numbers)
	sql := s.q.resolveExpiredBatch
	if p.Hook {
		sql = s.q.resolveExpiredBatchHook
	}
	rows, err := s.db.Query(ctx, sql, stream, numbers, reason, p.Now, lo, hi)
	if err != nil {
		return nil, interpretError("resolve expired batch", err)
	}
	resolved, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, interpretError("resolve expired batch", err)
	}
	if len(resolved) > 0 {
		if err := s.notes.resolved(ctx, stream, 0, resolved...); err != nil {
			return nil, noticeFailed("resolve expired batch", err)
		}
	}
	return resolved, nil
}

// RecoverExpired implements the storage contract's RecoverExpired in one
// statement (recoverExpired): the new committed entry and the old entry's
// gap commit together or not at all.
func (s *Store) RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error) {
	if err := store.ValidateRecover(stream, number, p); err != nil {
		return 0, fmt.Errorf("recover expired: %w", err)
	}
	h, tracks := s.hist()
	seen, err := h.stream(stream)
	if err != nil {
		return 0, fmt.Errorf("recover expired: %w", err)
	}
	reason := cmp.Or(p.Reason, store.ReasonRecovered)
	sql := s.q.recoverExpired
	if p.Hook {
		sql = s.q.recoverExpiredHook
	}
	for range maxAttempts {
		var moved, xid int64
		err := s.db.QueryRow(ctx, sql, stream, number, p.Owner, p.Payload, p.RecoveryType, reason, p.Now).Scan(&moved, &xid)
		if err == nil {
			s.notes.sawXact(xid)
			if tracks {
				if err := h.numbers(stream, seen, moved, moved); err != nil {
					return 0, fmt.Errorf("recover expired: %w", err)
				}
			}
			if err := s.notes.resolved(ctx, stream, 0, number, moved); err != nil {
				return 0, noticeFailed("recover expired", err)
			}
			return moved, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, interpretError("recover expired", err)
		}
		if err := s.explainExpiry(ctx, stream, number, p.Now); !errors.Is(err, errChanged) {
			return 0, fmt.Errorf("recover expired: %w", err)
		}
	}
	return 0, fmt.Errorf("recover expired: entry %d kept changing under concurrent writers", number)
}

// RecoverExpiredBatch implements the storage contract's RecoverExpiredBatch
// in one statement (recoverExpiredBatch), and explains the items it did not
// move with one more.
func (s *Store) RecoverExpiredBatch(ctx context.Context, stream string, items []store.RecoverItem, p *store.RecoverBatchParams) ([]store.RecoverResult, error) {
	if p == nil {
		p = &store.RecoverBatchParams{}
	}
	if err := store.ValidateRecoverBatch(stream, items, p); err != nil {
		return nil, fmt.Errorf("recover expired batch: %w", err)
	}
	h, tracks := s.hist()
	seen, err := h.stream(stream)
	if err != nil {
		return nil, fmt.Errorf("recover expired batch: %w", err)
	}
	moved, err := s.moveRows(ctx, s.db, stream, items, p)
	if err != nil {
		return nil, interpretError("recover expired batch", err)
	}
	if tracks {
		if err := h.moved(stream, seen, moved); err != nil {
			return nil, fmt.Errorf("recover expired batch: %w", err)
		}
	}
	return s.movedResults(ctx, stream, items, moved, "recover expired batch")
}

// rowsQuerier runs a statement that returns rows: a DB or a transaction.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// moveRows runs recoverExpiredBatch (or its hooked variant) on q and
// returns the new number of each old number that moved.
func (s *Store) moveRows(ctx context.Context, q rowsQuerier, stream string, items []store.RecoverItem, p *store.RecoverBatchParams) (map[int64]int64, error) {
	numbers := make([]int64, len(items))
	payloads := make([][]byte, len(items))
	types := make([]string, len(items))
	for i, it := range items {
		numbers[i], payloads[i], types[i] = it.Number, it.Payload, it.RecoveryType
	}
	reason := cmp.Or(p.Reason, store.ReasonRecovered)
	sql := s.q.recoverExpiredBatch
	if p.Hook {
		sql = s.q.recoverExpiredBatchHook
	}
	rows, err := q.Query(ctx, sql, stream, numbers, payloads, types, p.Owner, reason, p.Now)
	if err != nil {
		return nil, err
	}
	moved := map[int64]int64{}
	var old, to int64
	_, err = pgx.ForEachRow(rows, []any{&old, &to}, func() error {
		moved[old] = to
		return nil
	})
	if err != nil {
		return nil, err
	}
	return moved, nil
}

// movedResults notices the moves that committed and explains the items
// that did not move.
func (s *Store) movedResults(ctx context.Context, stream string, items []store.RecoverItem, moved map[int64]int64, op string) ([]store.RecoverResult, error) {
	if len(moved) > 0 {
		var resolved []int64
		for old, to := range moved {
			resolved = append(resolved, old, to)
		}
		if err := s.notes.resolved(ctx, stream, 0, resolved...); err != nil {
			return nil, noticeFailed(op, err)
		}
	}
	out := make([]store.RecoverResult, len(items))
	var left []int64
	for i, it := range items {
		if out[i].Moved = moved[it.Number]; out[i].Moved == 0 {
			left = append(left, it.Number)
		}
	}
	if len(left) == 0 {
		return out, nil
	}
	why, err := s.explainBatch(ctx, stream, left)
	if err != nil {
		// %v, not %w: the call wrote, so its error must not match what the
		// explaining read's failure matches (store.ErrNotSent, say).
		return nil, fmt.Errorf("%s: the moves committed, but explaining the rest failed: %v", op, err)
	}
	for i, it := range items {
		if out[i].Moved == 0 {
			out[i].Err = why[it.Number]
		}
	}
	return out, nil
}

// explainBatch explains, in one statement, why entries were not moved.
func (s *Store) explainBatch(ctx context.Context, stream string, numbers []int64) (map[int64]error, error) {
	rows, err := s.db.Query(ctx, s.q.probeBatch, stream, numbers)
	if err != nil {
		return nil, interpretError("probe", err)
	}
	why := make(map[int64]error, len(numbers))
	for _, n := range numbers {
		why[n] = fmt.Errorf("%w: number %d", store.ErrNotFound, n)
	}
	var (
		n      int64
		state  store.State
		reason *string
		filled bool
	)
	_, err = pgx.ForEachRow(rows, []any{&n, &state, &reason, &filled}, func() error {
		gapReason := ""
		if reason != nil {
			gapReason = *reason
		}
		switch {
		case state == store.Committed && filled, state == store.Gap:
			why[n] = store.GapError(gapReason)
		case state == store.Committed:
			why[n] = store.ErrCommitted
		default: // leased: not expired when the moves were decided
			why[n] = store.ErrNotExpired
		}
		return nil
	})
	if err != nil {
		return nil, interpretError("probe", err)
	}
	return why, nil
}

// explainExpiry explains a refused expiry resolution; errChanged if the
// entry is leased and expired after all (it changed in between).
func (s *Store) explainExpiry(ctx context.Context, stream string, number int64, now *time.Time) error {
	pr, err := s.probe(ctx, s.db, stream, number, store.Token{}, now)
	switch {
	case err != nil:
		return interpretError("probe", err)
	case pr.state == store.Committed && pr.filled:
		return store.GapError(pr.gapReason)
	case pr.state == store.Committed:
		return store.ErrCommitted
	case pr.state == store.Gap:
		return store.GapError(pr.gapReason)
	case !pr.expired:
		return store.ErrNotExpired
	}
	return errChanged
}

// probed is the state of an entry as probe found it.
type probed struct {
	state             store.State
	gapReason         string
	resolvedAt        time.Time
	filled            bool // a gap since filled (state committed)
	expired           bool
	earlierUnresolved bool // some number below it is still leased
}

// probe reads an entry to explain a refused write. It returns ErrNotFound for
// a number never handed out and, unless token is zero, ErrTokenMismatch for
// a token that does not hold it.
func (s *Store) probe(ctx context.Context, q querier, stream string, number int64, token store.Token, now *time.Time) (probed, error) {
	var pr probed
	var tok pgtype.UUID
	var reason *string
	var resolvedAt *time.Time
	err := q.QueryRow(ctx, s.q.probe, stream, number, now).Scan(
		&pr.state, &tok, &reason, &resolvedAt, &pr.filled, &pr.expired, &pr.earlierUnresolved)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Trimmed by retention, or never handed out.
		if low, lerr := s.lowPoint(ctx, stream); lerr == nil && number < low {
			return pr, &store.TrimmedError{Stream: stream, LowPoint: low}
		}
		return pr, fmt.Errorf("%w: number %d", store.ErrNotFound, number)
	case err != nil:
		return pr, err
	}
	if reason != nil {
		pr.gapReason = *reason
	}
	if resolvedAt != nil {
		pr.resolvedAt = *resolvedAt
	}
	if !token.IsZero() && store.Token(tok.Bytes) != token {
		return pr, store.ErrTokenMismatch
	}
	return pr, nil
}

// ListExpired implements the storage contract's ListExpired.
func (s *Store) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	if p == nil {
		p = &store.ListExpiredParams{}
	}
	limit, err := store.ValidateListExpired(p)
	if err != nil {
		return nil, fmt.Errorf("list expired: %w", err)
	}
	var rows pgx.Rows
	if p.Stream != "" {
		after := p.AfterNumber
		switch {
		case p.AfterStream > p.Stream:
			return nil, nil
		case p.AfterStream < p.Stream:
			after = 0
		}
		rows, err = s.db.Query(ctx, s.q.listExpiredStream, p.Now, p.Stream, after, limit)
	} else {
		rows, err = s.db.Query(ctx, s.q.listExpired, p.Now, p.AfterStream, p.AfterNumber, limit)
	}
	if err != nil {
		return nil, interpretError("list expired", err)
	}
	out, err := collectEntries(rows)
	if err != nil {
		return nil, interpretError("list expired", err)
	}
	return out, nil
}

// Read implements the storage contract's Read.
func (s *Store) Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	limit, err := store.ValidateRead(stream, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	rows, err := s.db.Query(ctx, s.q.read, stream, after, limit)
	if err != nil {
		return nil, interpretError("read", err)
	}
	out, err := collectEntries(rows)
	if err != nil {
		return nil, interpretError("read", err)
	}
	first := int64(0)
	if len(out) > 0 {
		first = out[0].Number
	}
	if err := s.checkRead(ctx, "read", stream, after, first); err != nil {
		return nil, err
	}
	return out, nil
}

// checkRead tells why a read after `after` found first as its first
// number (0: nothing). Numbers are dense, so a result that does not start
// at after+1 (or is empty) means the stream is unknown, the caller is at
// its end, or the entries were trimmed. The low point only rises, so
// reading it after the entries cannot call a read trimmed that found its
// entries.
func (s *Store) checkRead(ctx context.Context, op, stream string, after, first int64) error {
	if first == after+1 {
		return nil
	}
	low, err := s.lowPoint(ctx, stream)
	switch {
	case err != nil:
		return interpretError(op, err)
	case after+1 < low:
		return fmt.Errorf("%s: %w", op, &store.TrimmedError{Stream: stream, LowPoint: low})
	}
	return nil
}

// Stats implements the storage contract's Stats in one statement.
func (s *Store) Stats(ctx context.Context, stream string) (store.StreamStats, error) {
	if err := store.ValidateStream(stream); err != nil {
		return store.StreamStats{}, fmt.Errorf("stats: %w", err)
	}
	st := store.StreamStats{Stream: stream}
	var last int64
	var oldest *int64
	var oldestAt *time.Time
	err := s.db.QueryRow(ctx, s.q.stats, stream).Scan(&last, &st.Unresolved, &oldest, &oldestAt, &st.LowPoint)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.StreamStats{}, fmt.Errorf("stats: %w: %s", store.ErrStreamNotFound, store.QuoteInput(stream))
	}
	if err != nil {
		return store.StreamStats{}, interpretError("stats", err)
	}
	st.NextNumber = last + 1
	st.Watermark = last
	if oldest != nil {
		st.OldestUnresolved = *oldest
		st.OldestUnresolvedAt = *oldestAt
		st.Watermark = *oldest - 1
	}
	return st, nil
}

// Streams implements the storage contract's Streams.
func (s *Store) Streams(ctx context.Context, after string, limit int) ([]string, error) {
	limit, err := store.ListLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	rows, err := s.db.Query(ctx, s.q.streams, after, limit)
	if err != nil {
		return nil, interpretError("streams", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError("streams", err)
	}
	return names, nil
}

// Now returns the database's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.db.QueryRow(ctx, s.q.now).Scan(&now); err != nil {
		return time.Time{}, interpretError("now", err)
	}
	return now, nil
}

// collectEntries scans rows of entryColumns.
func collectEntries(rows pgx.Rows) ([]store.Entry, error) {
	var out []store.Entry
	var (
		e           store.Entry
		token       pgtype.UUID
		resolvedAt  *time.Time
		gapReason   *string
		recoveredAs *int64
		filledAt    *time.Time
		filledBy    *string
		recFrom     *int64
		recType     *string
		parkedAt    *time.Time
	)
	dest := []any{&e.Stream, &e.Number, &e.State, &token, &e.Owner, &e.OperationID, &e.Kind,
		&e.LeasedAt, &e.ExpiresAt, &e.Renewals, &resolvedAt, &e.Payload, &gapReason, &recoveredAs,
		&filledAt, &filledBy, &recFrom, &recType, &e.RecoveryAttempts, &e.LastRecoveryError, &parkedAt}
	_, err := pgx.ForEachRow(rows, dest, func() error {
		x := e
		x.Token = token.Bytes
		if resolvedAt != nil {
			x.ResolvedAt = *resolvedAt
		}
		if gapReason != nil {
			x.GapReason = *gapReason
		}
		if recoveredAs != nil {
			x.RecoveredAs = *recoveredAs
		}
		if filledAt != nil {
			x.FilledAt, x.FilledBy = *filledAt, *filledBy
		}
		if recFrom != nil {
			x.RecoveredFrom, x.RecoveryType = *recFrom, *recType
		}
		if parkedAt != nil {
			x.ParkedAt = *parkedAt
		}
		out = append(out, x)
		e, resolvedAt, gapReason, recoveredAs, filledAt, filledBy, recFrom, recType, parkedAt = store.Entry{}, nil, nil, nil, nil, nil, nil, nil, nil
		return nil
	})
	return out, err
}

func uuid(t store.Token) pgtype.UUID { return pgtype.UUID{Bytes: t, Valid: true} }

// interpretError maps a driver error to the sentinels of package store, with
// the operation as prefix. It is the one place that knows pgx's errors.
func interpretError(op string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return fmt.Errorf("%s: %w: %s (run the migrations)", op, ErrSchemaMissing, pgErr.Message)
	case errors.As(err, &pgErr) && pgErr.Code == "3F000": // invalid_schema_name
		return fmt.Errorf("%s: %w: %s (run the migrations)", op, ErrSchemaMissing, pgErr.Message)
	case errors.As(err, &pgErr) && pgErr.Code == "25006": // read_only_sql_transaction
		return fmt.Errorf("%s: %w: %w", op, store.ErrReadOnly, err)
	case errors.As(err, &pgErr) && isPoolerCode(pgErr):
		return fmt.Errorf("%s: %w", op, &PoolerError{Code: pgErr.Code, Err: err})
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isPoolerCode reports whether pgErr is what pgx's cached prepared
// statements meet behind a transaction-mode pooler, which lends the
// server session that prepared them to other clients: prepared statement
// already exists (42P05), does not exist (26000), or a Bind that does not
// match the statement prepared under that name (08P01, protocol
// violation, naming a prepared statement).
func isPoolerCode(pgErr *pgconn.PgError) bool {
	switch pgErr.Code {
	case "42P05", "26000":
		return true
	case "08P01":
		return strings.Contains(pgErr.Message, "prepared statement")
	}
	return false
}

// ErrPooler reports prepared statements that failed because the connection
// goes through a transaction-mode pooler (PgBouncer pool_mode =
// transaction) while pgx caches prepared statements (its default query
// mode). The error is a *PoolerError, which names the setting to use.
var ErrPooler = errors.New("postgres: prepared statements fail behind a transaction-mode pooler")

// PoolerError is a driver error that a transaction-mode pooler caused
// (prepared statement already exists or does not exist). It matches
// ErrPooler and unwraps to the driver's error.
type PoolerError struct {
	Code string // the SQLSTATE: 42P05, 26000 or 08P01
	Err  error  // the driver's error
}

// Error implements error: it names the setting that fixes it.
func (e *PoolerError) Error() string {
	return fmt.Sprintf("%v (SQLSTATE %s): add default_query_exec_mode=simple_protocol (or exec) to the connection string, "+
		"or set pgx.ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeSimpleProtocol: %v", ErrPooler, e.Code, e.Err)
}

// Is makes a *PoolerError match ErrPooler.
func (e *PoolerError) Is(target error) bool { return target == ErrPooler }

// Unwrap returns the driver's error.
func (e *PoolerError) Unwrap() error { return e.Err }

// ErrSchemaMissing reports that the configured schema or its tables do not
// exist: the migrations have not run.
var ErrSchemaMissing = errors.New("postgres: schema not migrated")
