package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

// The statements of gaps (and trim.go's of retention), as templates with {s}
// for the quoted schema; buildQueries quotes them in.
const (
	// listGapsSQL reads open gaps through the partial index entries_gaps.
	listGapsSQL = `
SELECT ` + entryColumns + ` FROM {s}.entries
WHERE stream = $1 AND state = 'gap' AND number > $2 AND ($4::text = '' OR gap_reason = $4::text)
ORDER BY number LIMIT $3`

	// listGapHistorySQL reads open and filled gaps: exactly the entries with
	// a gap reason (the table's constraints), through entries_gap_history.
	listGapHistorySQL = `
SELECT ` + entryColumns + ` FROM {s}.entries
WHERE stream = $1 AND gap_reason IS NOT NULL AND number > $2 AND ($4::text = '' OR gap_reason = $4::text)
ORDER BY number LIMIT $3`

	// countGapsSQL counts from entries_gaps (an index-only scan once the
	// table is vacuumed); no row means no stream.
	countGapsSQL = `
SELECT (SELECT count(*) FROM {s}.entries e WHERE e.stream = $1 AND e.state = 'gap')
FROM {s}.streams WHERE name = $1`

	// findCommittedSQL reads a bounded range of the primary key for the
	// committed entries of some operation ids, without their payloads
	// (entryColumns, payload NULL).
	findCommittedSQL = `
SELECT stream, number, state, token, owner, operation_id, kind, leased_at,
	expires_at, renewals, resolved_at, NULL::bytea, gap_reason, recovered_as, filled_at, filled_by,
	recovered_from, recovery_type, 0, '', NULL::timestamptz
FROM {s}.entries
WHERE stream = $1 AND number > $2 AND number <= $3 AND state = 'committed' AND operation_id = ANY($4::text[])
ORDER BY number`

	// fillGapSQL is the conditional write of a fill. Its WHERE clause is the
	// decision: a concurrent fill of the same gap waits for the row lock and
	// then finds the entry committed, so exactly one fill wins. resolved_at,
	// gap_reason and recovered_as stay: the entry was resolved when it became
	// a gap, and the record says why.
	fillGapSQL = `
UPDATE {s}.entries
SET state = 'committed', payload = $3, filled_by = $4,
	filled_at = COALESCE($5::timestamptz, clock_timestamp())
WHERE stream = $1 AND number = $2 AND state = 'gap' AND recovered_as IS NULL`

	// fillProbeSQL explains a refused fill: no row means no stream; a NULL
	// state means no entry (never handed out, or trimmed below low_point).
	fillProbeSQL = `
SELECT s.low_point, e.state, e.filled_at IS NOT NULL, e.recovered_as
FROM {s}.streams s LEFT JOIN {s}.entries e ON e.stream = s.name AND e.number = $2
WHERE s.name = $1`
)

// ListGaps implements the storage contract's ListGaps.
func (s *Store) ListGaps(ctx context.Context, stream string, p *store.ListGapsParams) ([]store.Entry, error) {
	if p == nil {
		p = &store.ListGapsParams{}
	}
	limit, err := store.ValidateListGaps(stream, p)
	if err != nil {
		return nil, fmt.Errorf("list gaps: %w", err)
	}
	sql := s.q.listGaps
	if p.IncludeFilled {
		sql = s.q.listGapHistory
	}
	rows, err := s.db.Query(ctx, sql, stream, p.After, limit, p.Reason)
	if err != nil {
		return nil, interpretError("list gaps", err)
	}
	out, err := collectEntries(rows)
	if err != nil {
		return nil, interpretError("list gaps", err)
	}
	if len(out) == 0 {
		if _, err := s.lowPoint(ctx, stream); err != nil {
			return nil, interpretError("list gaps", err)
		}
	}
	return out, nil
}

var _ store.CommitFinder = (*Store)(nil)

// FindCommitted implements store.CommitFinder.
func (s *Store) FindCommitted(ctx context.Context, stream string, p *store.FindCommittedParams) ([]store.Entry, error) {
	if err := store.ValidateFindCommitted(stream, p); err != nil {
		return nil, fmt.Errorf("find committed: %w", err)
	}
	rows, err := s.db.Query(ctx, s.q.findCommitted, stream, p.After, p.Through, p.Operations)
	if err != nil {
		return nil, interpretError("find committed", err)
	}
	out, err := collectEntries(rows)
	if err != nil {
		return nil, interpretError("find committed", err)
	}
	if len(out) == 0 {
		if _, err := s.lowPoint(ctx, stream); err != nil {
			return nil, interpretError("find committed", err)
		}
	}
	return out, nil
}

// CountGaps implements the storage contract's CountGaps in one statement.
func (s *Store) CountGaps(ctx context.Context, stream string) (int64, error) {
	if err := store.ValidateStream(stream); err != nil {
		return 0, fmt.Errorf("count gaps: %w", err)
	}
	var n int64
	err := s.db.QueryRow(ctx, s.q.countGaps, stream).Scan(&n)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("count gaps: %w: %s", store.ErrStreamNotFound, store.QuoteInput(stream))
	case err != nil:
		return 0, interpretError("count gaps", err)
	}
	return n, nil
}

// FillGap implements the storage contract's FillGap: one conditional UPDATE,
// and on refusal one read that explains it.
func (s *Store) FillGap(ctx context.Context, stream string, number int64, p *store.FillParams) error {
	if err := store.ValidateFill(stream, number, p); err != nil {
		return fmt.Errorf("fill gap: %w", err)
	}
	for range maxAttempts {
		tag, err := s.db.Exec(ctx, s.q.fillGap, stream, number, p.Payload, p.FilledBy, p.Now)
		if err != nil {
			return interpretError("fill gap", err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var low int64
		var state *store.State
		var filled *bool
		var movedTo *int64
		err = s.db.QueryRow(ctx, s.q.fillProbe, stream, number).Scan(&low, &state, &filled, &movedTo)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("fill gap: %w: number %d", store.ErrNotFound, number)
		case err != nil:
			return interpretError("fill gap", err)
		case state == nil && number < low:
			return fmt.Errorf("fill gap: %w", &store.TrimmedError{Stream: stream, LowPoint: low})
		case state == nil:
			return fmt.Errorf("fill gap: %w: number %d", store.ErrNotFound, number)
		case *state != store.Gap:
			return fmt.Errorf("fill gap: %w", notGap(*state, *filled))
		case movedTo != nil:
			return fmt.Errorf("fill gap: %w", movedGap(*movedTo))
		}
		// A gap now: the holder released it between the write and the probe.
	}
	return fmt.Errorf("fill gap: entry %d kept changing under concurrent writers", number)
}

// movedGap explains why a gap whose work moved to number cannot be filled.
func movedGap(number int64) error {
	return fmt.Errorf("%w: its work moved to %d; filling it would make a second copy", store.ErrNotGap, number)
}

// notGap explains why an entry in state with filled cannot be filled.
func notGap(state store.State, filled bool) error {
	if filled {
		return fmt.Errorf("%w: already filled", store.ErrNotGap)
	}
	return fmt.Errorf("%w: %s", store.ErrNotGap, state)
}
