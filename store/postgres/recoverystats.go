package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

var _ store.RecoveryHistory = (*Store)(nil)

// The statements of the recovery record (migration 000009), as templates
// with {s} for the quoted schema.
const (
	// addRecoveryStatsSQL adds the tallies (unnested arrays, summed and in
	// (kind, method) order: rows are locked in one order by every writer)
	// in one upsert. The clock is read once (c).
	addRecoveryStatsSQL = `
INSERT INTO {s}.recovery_stats AS t (kind, method, recovered, declined, failed, last_recovered_at, last_failed_at, updated_at)
SELECT u.k, u.m, u.r, u.d, u.f, CASE WHEN u.r > 0 THEN c.t END, CASE WHEN u.f > 0 THEN c.t END, c.t
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) WITH ORDINALITY AS u(k, m, r, d, f, i),
	(SELECT COALESCE($6::timestamptz, clock_timestamp()) AS t) c
ORDER BY u.i
ON CONFLICT (kind, method) DO UPDATE SET
	recovered = t.recovered + EXCLUDED.recovered,
	declined = t.declined + EXCLUDED.declined,
	failed = t.failed + EXCLUDED.failed,
	last_recovered_at = GREATEST(t.last_recovered_at, EXCLUDED.last_recovered_at),
	last_failed_at = GREATEST(t.last_failed_at, EXCLUDED.last_failed_at),
	updated_at = GREATEST(t.updated_at, EXCLUDED.updated_at)`

	listRecoveryStatsSQL = `
SELECT kind, method, recovered, declined, failed, last_recovered_at, last_failed_at, updated_at
FROM {s}.recovery_stats WHERE (kind, method) > ($1, $2) ORDER BY kind, method LIMIT $3`
)

// AddRecoveryStats implements store.RecoveryHistory in one statement.
func (s *Store) AddRecoveryStats(ctx context.Context, tallies []store.RecoveryTally, p *store.AddRecoveryStatsParams) error {
	ts, err := store.ValidateRecoveryTallies(tallies)
	if err != nil {
		return fmt.Errorf("add recovery stats: %w", err)
	}
	if len(ts) == 0 {
		return nil
	}
	if p == nil {
		p = &store.AddRecoveryStatsParams{}
	}
	kinds, methods := make([]string, len(ts)), make([]string, len(ts))
	rec, dec, fail := make([]int64, len(ts)), make([]int64, len(ts)), make([]int64, len(ts))
	for i, t := range ts {
		kinds[i], methods[i], rec[i], dec[i], fail[i] = t.Kind, t.Method, t.Recovered, t.Declined, t.Failed
	}
	if _, err := s.db.Exec(ctx, s.settingsSQL(addRecoveryStatsSQL), kinds, methods, rec, dec, fail, p.Now); err != nil {
		return interpretError("add recovery stats", err)
	}
	return nil
}

// ListRecoveryStats implements store.RecoveryHistory.
func (s *Store) ListRecoveryStats(ctx context.Context, p *store.ListRecoveryStatsParams) ([]store.RecoveryStat, error) {
	limit, err := store.ValidateListRecoveryStats(p)
	if err != nil {
		return nil, fmt.Errorf("list recovery stats: %w", err)
	}
	if p == nil {
		p = &store.ListRecoveryStatsParams{}
	}
	rows, err := s.db.Query(ctx, s.settingsSQL(listRecoveryStatsSQL), p.AfterKind, p.AfterMethod, limit)
	if err != nil {
		return nil, interpretError("list recovery stats", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.RecoveryStat, error) {
		var st store.RecoveryStat
		var lastRec, lastFail *time.Time
		err := r.Scan(&st.Kind, &st.Method, &st.Recovered, &st.Declined, &st.Failed, &lastRec, &lastFail, &st.UpdatedAt)
		if lastRec != nil {
			st.LastRecoveredAt = *lastRec
		}
		if lastFail != nil {
			st.LastFailedAt = *lastFail
		}
		return st, err
	})
	if err != nil {
		return nil, interpretError("list recovery stats", err)
	}
	return out, nil
}
