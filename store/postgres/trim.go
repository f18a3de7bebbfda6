package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

const (
	// trimSQL is the whole of Trim, one statement, so one snapshot.
	//
	// cur computes the bound from that snapshot: the oldest leased number
	// (from the partial index entries_unresolved), or last_number+1 when
	// nothing is leased, capped by $2. Both come from the same snapshot on
	// purpose. A lease that commits while the statement runs is invisible to
	// it: its numbers lie above the snapshot's last_number, hence at or
	// above the bound, and are neither deleted nor passed by the low point.
	// (Reading last_number from a row locked FOR UPDATE would be wrong here:
	// after waiting for a concurrent lease, the lock returns the row's newest
	// version, whose last_number counts entries the snapshot does not see
	// as leased, and the bound would overtake them.) A resolution that
	// commits meanwhile only makes the bound conservative. Every entry below
	// the bound is resolved, and resolved entries stay resolved.
	//
	// up then takes the stream row's lock (the order Lease takes its locks
	// in: the stream row, then entries), raises low_point and never lowers
	// it (GREATEST over the newest row version, should a concurrent Trim
	// have raised it further). del runs after up, as it joins up: it deletes
	// the primary key range [old low point, bound), which only trimmed or
	// resolved entries occupy; state <> 'leased' says so once more.
	trimSQL = `
WITH cur AS (
	SELECT s.low_point, LEAST($2::bigint, COALESCE(
		(SELECT min(e.number) FROM {s}.entries e WHERE e.stream = $1 AND e.state = 'leased'),
		s.last_number + 1)) AS bound
	FROM {s}.streams s WHERE s.name = $1
), up AS (
	UPDATE {s}.streams s SET low_point = GREATEST(s.low_point, cur.bound)
	FROM cur WHERE s.name = $1
	RETURNING s.low_point
), del AS (
	DELETE FROM {s}.entries e USING cur, up
	WHERE e.stream = $1 AND e.number >= cur.low_point AND e.number < cur.bound
		AND e.state <> 'leased'
)
SELECT low_point FROM up`
)

// Trim implements the storage contract's Trim in one statement (trimSQL).
func (s *Store) Trim(ctx context.Context, stream string, below int64) (int64, error) {
	if err := store.ValidateTrim(stream, below); err != nil {
		return 0, fmt.Errorf("trim: %w", err)
	}
	var low int64
	err := s.db.QueryRow(ctx, s.q.trim, stream, below).Scan(&low)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("trim: %w: %s", store.ErrStreamNotFound, store.QuoteInput(stream))
	case err != nil:
		return 0, interpretError("trim", err)
	}
	return low, nil
}

// lowPoint returns the low point of stream, or ErrStreamNotFound.
func (s *Store) lowPoint(ctx context.Context, stream string) (int64, error) {
	var low int64
	err := s.db.QueryRow(ctx, s.q.lowPoint, stream).Scan(&low)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s", store.ErrStreamNotFound, store.QuoteInput(stream))
	}
	return low, err
}
