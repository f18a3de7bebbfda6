package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

var _ store.Parker = (*Store)(nil)

// The statements of parked work (migration 000006), as templates with {s}
// for the quoted schema. The record lives on the entry's row: the attempts,
// the last error and when it was parked.
const (
	// recordFailureSQL counts a failed recovery of a leased, expired entry
	// that is not parked, and parks it when its attempts reach $4 (> 0).
	// The clock is read once (c): it decides the expiry and is recorded as
	// parked_at.
	recordFailureSQL = `
WITH c AS MATERIALIZED (SELECT COALESCE($5::timestamptz, clock_timestamp()) AS t)
UPDATE {s}.entries e
SET recovery_attempts = COALESCE(e.recovery_attempts, 0) + 1, last_error = $3,
	parked_at = CASE WHEN $4::integer > 0 AND COALESCE(e.recovery_attempts, 0) + 1 >= $4::integer THEN c.t END
FROM c
WHERE e.stream = $1 AND e.number = $2 AND e.state = 'leased' AND e.expires_at <= c.t AND e.parked_at IS NULL
RETURNING ` + entryColumnsE

	listParkedSQL = `
SELECT ` + entryColumns + ` FROM {s}.entries
WHERE parked_at IS NOT NULL AND state = 'leased' AND (stream, number) > ($1, $2)
ORDER BY stream, number LIMIT $3`

	listParkedStreamSQL = `
SELECT ` + entryColumns + ` FROM {s}.entries
WHERE parked_at IS NOT NULL AND state = 'leased' AND stream = $1 AND number > $2
ORDER BY number LIMIT $3`

	countParkedSQL = `SELECT count(*) FROM {s}.entries WHERE parked_at IS NOT NULL AND state = 'leased'`

	// unparkSQL lets the cleanup loop try a parked entry again, from zero
	// attempts; the last error stays for the operator.
	unparkSQL = `
UPDATE {s}.entries SET parked_at = NULL, recovery_attempts = 0
WHERE stream = $1 AND number = $2 AND state = 'leased' AND parked_at IS NOT NULL`

	// parkedProbeSQL explains a refused write of a leased entry.
	parkedProbeSQL = `SELECT parked_at IS NOT NULL FROM {s}.entries WHERE stream = $1 AND number = $2 AND state = 'leased'`
)

// entryColumnsE is entryColumns of the entries aliased e.
const entryColumnsE = `e.stream, e.number, e.state, e.token, e.owner, e.operation_id, e.kind, e.leased_at,
	e.expires_at, e.renewals, e.resolved_at, e.payload, e.gap_reason, e.recovered_as, e.filled_at, e.filled_by,
	e.recovered_from, e.recovery_type, COALESCE(e.recovery_attempts, 0), COALESCE(e.last_error, ''), e.parked_at`

// RecordRecoveryFailure implements store.Parker in one statement.
func (s *Store) RecordRecoveryFailure(ctx context.Context, stream string, number int64, p *store.RecoveryFailureParams) (store.Entry, error) {
	msg, err := store.ValidateRecoveryFailure(stream, number, p)
	if err != nil {
		return store.Entry{}, fmt.Errorf("record recovery failure: %w", err)
	}
	if p == nil {
		p = &store.RecoveryFailureParams{}
	}
	for range maxAttempts {
		rows, err := s.db.Query(ctx, s.q.recordFailure, stream, number, msg, p.ParkAfter, p.Now)
		if err != nil {
			return store.Entry{}, interpretError("record recovery failure", err)
		}
		es, err := collectEntries(rows)
		if err != nil {
			return store.Entry{}, interpretError("record recovery failure", err)
		}
		if len(es) == 1 {
			return es[0], nil
		}
		err = s.explainExpiry(ctx, stream, number, p.Now)
		if errors.Is(err, errChanged) {
			err = s.explainParked(ctx, stream, number, true)
		}
		if !errors.Is(err, errChanged) {
			return store.Entry{}, fmt.Errorf("record recovery failure: %w", err)
		}
	}
	return store.Entry{}, fmt.Errorf("record recovery failure: entry %d kept changing under concurrent writers", number)
}

// explainParked explains a refused write of a leased entry: ErrParked if
// it is parked and parked is true, ErrNotParked if it is not and parked
// is false, errChanged otherwise (it changed meanwhile).
func (s *Store) explainParked(ctx context.Context, stream string, number int64, parked bool) error {
	var is bool
	err := s.db.QueryRow(ctx, s.q.parkedProbe, stream, number).Scan(&is)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errChanged
	case err != nil:
		return interpretError("probe", err)
	case is && parked:
		return store.ErrParked
	case !is && !parked:
		return store.ErrNotParked
	}
	return errChanged
}

// ListParked implements store.Parker from the partial index of parked
// entries.
func (s *Store) ListParked(ctx context.Context, p *store.ListParkedParams) ([]store.Entry, error) {
	limit, err := store.ValidateListParked(p)
	if err != nil {
		return nil, fmt.Errorf("list parked: %w", err)
	}
	if p == nil {
		p = &store.ListParkedParams{}
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
		rows, err = s.db.Query(ctx, s.q.listParkedStream, p.Stream, after, limit)
	} else {
		rows, err = s.db.Query(ctx, s.q.listParked, p.AfterStream, p.AfterNumber, limit)
	}
	if err != nil {
		return nil, interpretError("list parked", err)
	}
	out, err := collectEntries(rows)
	if err != nil {
		return nil, interpretError("list parked", err)
	}
	return out, nil
}

// CountParked implements store.Parker from the partial index of parked
// entries.
func (s *Store) CountParked(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, s.q.countParked).Scan(&n); err != nil {
		return 0, interpretError("count parked", err)
	}
	return n, nil
}

// UnparkEntry implements store.Parker in one statement.
func (s *Store) UnparkEntry(ctx context.Context, stream string, number int64) error {
	if err := store.ValidateEntryRef(stream, number); err != nil {
		return fmt.Errorf("unpark: %w", err)
	}
	for range maxAttempts {
		tag, err := s.db.Exec(ctx, s.q.unpark, stream, number)
		if err != nil {
			return interpretError("unpark", err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		pr, err := s.probe(ctx, s.db, stream, number, store.Token{}, nil)
		switch {
		case err != nil:
			return fmt.Errorf("unpark: %w", interpretError("probe", err))
		case pr.state == store.Committed && pr.filled, pr.state == store.Gap:
			return fmt.Errorf("unpark: %w", store.GapError(pr.gapReason))
		case pr.state == store.Committed:
			return fmt.Errorf("unpark: %w", store.ErrCommitted)
		}
		if err := s.explainParked(ctx, stream, number, false); !errors.Is(err, errChanged) {
			return fmt.Errorf("unpark: %w", err)
		}
	}
	return fmt.Errorf("unpark: entry %d kept changing under concurrent writers", number)
}
