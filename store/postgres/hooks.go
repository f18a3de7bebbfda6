package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

// The capabilities of hooks and of moves in the caller's transaction.
var (
	_ store.HookQueue           = (*Store)(nil)
	_ store.TxRecoverer[pgx.Tx] = (*Store)(nil)
)

// The statements of pending hooks (migration 000005), as templates with {s}
// for the quoted schema.
const (
	// hookSource is what a resolving UPDATE returns so that hookInsert can
	// record the pending hook of each entry it resolved; hookSourceE is the
	// same for an UPDATE of entries aliased e.
	hookSource  = `stream, number, token, owner, operation_id, kind, leased_at, expires_at, renewals, resolved_at`
	hookSourceE = `e.stream, e.number, e.token, e.owner, e.operation_id, e.kind, e.leased_at, e.expires_at, e.renewals, e.resolved_at`

	// claimHooksSQL claims the due records: c picks them, longest due
	// first, skipping those another claimer holds locked right now; the
	// update makes them due again only when the claim ($2 µs) ends.
	claimHooksSQL = `
WITH c AS (
	SELECT stream, number FROM {s}.pending_hooks
	WHERE due_at <= ` + nowExprSQL3 + `
	ORDER BY due_at, stream, number LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE {s}.pending_hooks p
SET attempts = p.attempts + 1, due_at = ` + nowExprSQL3 + ` + $2 * interval '1 microsecond'
FROM c WHERE p.stream = c.stream AND p.number = c.number
RETURNING p.stream, p.number, p.token, p.owner, p.operation_id, p.kind, p.leased_at, p.expires_at,
	p.renewals, p.created_at, p.attempts, COALESCE(p.last_error, '')`

	// ackHookSQL deletes a delivered record, fenced by its claim.
	ackHookSQL = `DELETE FROM {s}.pending_hooks WHERE stream = $1 AND number = $2 AND attempts = $3`

	// retryHookSQL makes a failed record due again after $4 µs.
	retryHookSQL = `
UPDATE {s}.pending_hooks
SET due_at = clock_timestamp() + $4 * interval '1 microsecond', last_error = $5
WHERE stream = $1 AND number = $2 AND attempts = $3`

	// addHooksSQL records the hooks of resolved entries made without one.
	addHooksSQL = `
INSERT INTO {s}.pending_hooks (stream, number, token, owner, operation_id, kind, leased_at, expires_at,
	renewals, created_at, due_at)
SELECT stream, number, token, owner, operation_id, kind, leased_at, expires_at, renewals,
	clock_timestamp(), clock_timestamp()
FROM {s}.entries WHERE stream = $1 AND number = ANY($2::bigint[]) AND state <> 'leased'
ON CONFLICT DO NOTHING
RETURNING number`

	hookStatsSQL = `
SELECT count(*), count(*) FILTER (WHERE last_error IS NOT NULL), min(created_at)
FROM {s}.pending_hooks`

	nowExprSQL3 = `COALESCE($3::timestamptz, clock_timestamp())`
)

// hookInsert is the CTE body that records a pending hook for every row of
// src (a CTE returning hookSource's columns), due at once.
func hookInsert(src string) string {
	return `
	INSERT INTO {s}.pending_hooks (stream, number, token, owner, operation_id, kind, leased_at, expires_at,
		renewals, created_at, due_at)
	SELECT stream, number, token, owner, operation_id, kind, leased_at, expires_at, renewals,
		resolved_at, resolved_at
	FROM ` + src + `
	ON CONFLICT DO NOTHING
`
}

// ClaimHooks implements store.HookQueue in one statement.
func (s *Store) ClaimHooks(ctx context.Context, p *store.ClaimHooksParams) ([]store.PendingHook, error) {
	limit, err := store.ValidateClaimHooks(p)
	if err != nil {
		return nil, fmt.Errorf("claim hooks: %w", err)
	}
	rows, err := s.db.Query(ctx, s.q.claimHooks, limit, p.For.Microseconds(), p.Now)
	if err != nil {
		return nil, interpretError("claim hooks", err)
	}
	var out []store.PendingHook
	var h store.PendingHook
	var token [16]byte
	e := &h.Entry
	_, err = pgx.ForEachRow(rows, []any{&e.Stream, &e.Number, &token, &e.Owner, &e.OperationID, &e.Kind,
		&e.LeasedAt, &e.ExpiresAt, &e.Renewals, &h.CreatedAt, &h.Attempts, &h.LastError}, func() error {
		e.State, e.Token = store.Leased, token
		out = append(out, h)
		return nil
	})
	if err != nil {
		return nil, interpretError("claim hooks", err)
	}
	slices.SortFunc(out, func(a, b store.PendingHook) int {
		return cmpRef(a.Entry.Stream, a.Entry.Number, b.Entry.Stream, b.Entry.Number)
	})
	return out, nil
}

// cmpRef orders hook records by stream, then number.
func cmpRef(sa string, na int64, sb string, nb int64) int {
	switch {
	case sa < sb:
		return -1
	case sa > sb:
		return 1
	case na < nb:
		return -1
	case na > nb:
		return 1
	}
	return 0
}

// AckHook implements store.HookQueue.
func (s *Store) AckHook(ctx context.Context, stream string, number int64, attempts int) (bool, error) {
	if err := store.ValidateHookRef(stream, number, attempts); err != nil {
		return false, fmt.Errorf("ack hook: %w", err)
	}
	tag, err := s.db.Exec(ctx, s.q.ackHook, stream, number, attempts)
	if err != nil {
		return false, interpretError("ack hook", err)
	}
	return tag.RowsAffected() == 1, nil
}

// RetryHook implements store.HookQueue.
func (s *Store) RetryHook(ctx context.Context, stream string, number int64, attempts int, delay time.Duration, msg string) (bool, error) {
	msg, err := store.ValidateRetryHook(stream, number, attempts, delay, msg)
	if err != nil {
		return false, fmt.Errorf("retry hook: %w", err)
	}
	tag, err := s.db.Exec(ctx, s.q.retryHook, stream, number, attempts, delay.Microseconds(), msg)
	if err != nil {
		return false, interpretError("retry hook", err)
	}
	return tag.RowsAffected() == 1, nil
}

// AddHooks implements store.HookQueue in one statement.
func (s *Store) AddHooks(ctx context.Context, stream string, numbers []int64) ([]int64, error) {
	if err := store.ValidateAddHooks(stream, numbers); err != nil {
		return nil, fmt.Errorf("add hooks: %w", err)
	}
	rows, err := s.db.Query(ctx, s.q.addHooks, stream, numbers)
	if err != nil {
		return nil, interpretError("add hooks", err)
	}
	added, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, interpretError("add hooks", err)
	}
	slices.Sort(added)
	return added, nil
}

// HookStats implements store.HookQueue.
func (s *Store) HookStats(ctx context.Context) (store.HookStats, error) {
	var st store.HookStats
	var oldest *time.Time
	if err := s.db.QueryRow(ctx, s.q.hookStats).Scan(&st.Pending, &st.Failing, &oldest); err != nil {
		return store.HookStats{}, interpretError("hook stats", err)
	}
	if oldest != nil {
		st.OldestAt = *oldest
	}
	return st, nil
}

// errTxFunc marks the error of RecoverExpiredTx's function.
type txFuncError struct{ err error }

func (e *txFuncError) Error() string { return e.err.Error() }
func (e *txFuncError) Unwrap() error { return e.err }

// RecoverExpiredTx implements store.TxRecoverer for pgx.Tx: the moves'
// statement (recoverExpiredBatch) and fn run in one interactive
// transaction, so fn's writes commit with the moves or not at all.
func (s *Store) RecoverExpiredTx(ctx context.Context, stream string, items []store.RecoverItem, p *store.RecoverBatchParams,
	fn func(ctx context.Context, tx pgx.Tx, moved []int64) error) ([]store.RecoverResult, error) {
	if p == nil {
		p = &store.RecoverBatchParams{}
	}
	if err := store.ValidateRecoverBatch(stream, items, p); err != nil {
		return nil, fmt.Errorf("recover expired tx: %w", err)
	}
	if fn == nil {
		return nil, fmt.Errorf("recover expired tx: %w: nil function", store.ErrInvalidArgument)
	}
	h, tracks := s.hist()
	seen, err := h.stream(stream)
	if err != nil {
		return nil, fmt.Errorf("recover expired tx: %w", err)
	}
	var moved map[int64]int64
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		if moved, err = s.moveRows(ctx, tx, stream, items, p); err != nil || len(moved) == 0 {
			return err
		}
		to := make([]int64, len(items))
		for i, it := range items {
			to[i] = moved[it.Number]
		}
		if err := fn(ctx, tx, to); err != nil {
			return &txFuncError{err}
		}
		return nil
	})
	if fe := (*txFuncError)(nil); errors.As(err, &fe) {
		return nil, fmt.Errorf("recover expired tx: rolled back: %w", fe.err)
	}
	if err != nil {
		return nil, interpretError("recover expired tx", err)
	}
	if tracks {
		if err := h.moved(stream, seen, moved); err != nil {
			return nil, fmt.Errorf("recover expired tx: %w", err)
		}
	}
	return s.movedResults(ctx, stream, items, moved, "recover expired tx")
}
