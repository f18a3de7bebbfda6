package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/seqlease/seqlease/store"
)

var _ store.RecoveryHistory = (*Store)(nil)

// recoveryStats is the memory equivalent of the recovery_stats table: the
// records of the Store, shared by every pipeline on it, kept for its life.
type recoveryStats struct {
	mu   sync.Mutex
	rows map[[2]string]store.RecoveryStat // by kind and method
}

// AddRecoveryStats implements store.RecoveryHistory.
func (s *Store) AddRecoveryStats(ctx context.Context, tallies []store.RecoveryTally, p *store.AddRecoveryStatsParams) error {
	ts, err := store.ValidateRecoveryTallies(tallies)
	if err != nil {
		return fmt.Errorf("add recovery stats: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("add recovery stats: %w", store.NotSent(err))
	}
	if p == nil {
		p = &store.AddRecoveryStatsParams{}
	}
	now := store.Micro(s.clock(p.Now))
	s.rstats.mu.Lock()
	defer s.rstats.mu.Unlock()
	if s.rstats.rows == nil {
		s.rstats.rows = map[[2]string]store.RecoveryStat{}
	}
	for _, t := range ts {
		k := [2]string{t.Kind, t.Method}
		r, ok := s.rstats.rows[k]
		if !ok {
			r = store.RecoveryStat{Kind: t.Kind, Method: t.Method}
		}
		r.Recovered += t.Recovered
		r.Declined += t.Declined
		r.Failed += t.Failed
		if t.Recovered > 0 && now.After(r.LastRecoveredAt) {
			r.LastRecoveredAt = now
		}
		if t.Failed > 0 && now.After(r.LastFailedAt) {
			r.LastFailedAt = now
		}
		if now.After(r.UpdatedAt) {
			r.UpdatedAt = now
		}
		s.rstats.rows[k] = r
	}
	return nil
}

// ListRecoveryStats implements store.RecoveryHistory.
func (s *Store) ListRecoveryStats(ctx context.Context, p *store.ListRecoveryStatsParams) ([]store.RecoveryStat, error) {
	limit, err := store.ValidateListRecoveryStats(p)
	if err != nil {
		return nil, fmt.Errorf("list recovery stats: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list recovery stats: %w", store.NotSent(err))
	}
	if p == nil {
		p = &store.ListRecoveryStatsParams{}
	}
	after := [2]string{p.AfterKind, p.AfterMethod}
	s.rstats.mu.Lock()
	defer s.rstats.mu.Unlock()
	keys := slices.SortedFunc(maps.Keys(s.rstats.rows), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	var out []store.RecoveryStat
	for _, k := range keys {
		if cmp.Or(cmp.Compare(k[0], after[0]), cmp.Compare(k[1], after[1])) <= 0 {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, s.rstats.rows[k])
	}
	return out, nil
}
