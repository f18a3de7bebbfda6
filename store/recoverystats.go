package store

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// MaxRecoveryTally bounds each count of a RecoveryTally: far above what one
// cleanup cycle tries, low enough that the totals never overflow.
const MaxRecoveryTally = math.MaxInt32

// RecoveryTally is what a batch of recovery attempts (a cleanup cycle's)
// adds to the record of one kind of work and one recovery method.
type RecoveryTally struct {
	Kind   string // the kind of work (Entry.Kind): may be empty
	Method string // the step's name (recovery.Result.Method): not empty
	// Recovered, Declined and Failed count the attempts that resolved the
	// entry, that declined it (nothing to recover), and that failed (the
	// step could not decide). Each in 0..MaxRecoveryTally.
	Recovered, Declined, Failed int64
}

// RecoveryStat is the recovery record of one kind of work and one method,
// over the life of the store: totals and the times of the last success and
// the last failure.
type RecoveryStat struct {
	Kind, Method                string
	Recovered, Declined, Failed int64
	LastRecoveredAt             time.Time // zero: never recovered
	LastFailedAt                time.Time // zero: never failed
	UpdatedAt                   time.Time // the last tally added
}

// Attempts returns the attempts recorded: recovered, declined and failed.
func (s RecoveryStat) Attempts() int64 { return s.Recovered + s.Declined + s.Failed }

// AddRecoveryStatsParams are the options of AddRecoveryStats. A nil
// *AddRecoveryStatsParams means the defaults.
type AddRecoveryStatsParams struct {
	Now *time.Time // the backend's clock when nil
}

// ListRecoveryStatsParams select the records ListRecoveryStats returns, in
// (kind, method) order, after the cursor (AfterKind, AfterMethod). A nil
// *ListRecoveryStatsParams means the defaults.
type ListRecoveryStatsParams struct {
	AfterKind, AfterMethod string
	Limit                  int // at most this many; zero means DefaultListLimit
}

// RecoveryHistory is implemented by a backend that keeps the recovery
// record of each kind of work and method, durably on PostgreSQL (the
// recovery_stats table, one row per kind and method), so that a step
// selector sees what recovery did for a kind before a restart
// (recovery.Situation.History). Both built-in backends implement it.
type RecoveryHistory interface {
	// AddRecoveryStats adds tallies to the records of their kind and
	// method, creating the missing ones, all together or none. A tally
	// with Recovered above 0 sets LastRecoveredAt, one with Failed above 0
	// LastFailedAt, each to the backend's now (times only move forward).
	// Tallies of one kind and method are summed. Bad input changes
	// nothing (ErrInvalidArgument).
	AddRecoveryStats(ctx context.Context, tallies []RecoveryTally, p *AddRecoveryStatsParams) error
	// ListRecoveryStats lists the records.
	ListRecoveryStats(ctx context.Context, p *ListRecoveryStatsParams) ([]RecoveryStat, error)
}

// ValidateRecoveryTallies checks an AddRecoveryStats call and returns the
// tallies with those of one kind and method summed, in (kind, method)
// order (the order writers lock the records in).
func ValidateRecoveryTallies(tallies []RecoveryTally) ([]RecoveryTally, error) {
	if len(tallies) > MaxListLimit {
		return nil, fmt.Errorf("%w: %d tallies, limit %d", ErrInvalidArgument, len(tallies), MaxListLimit)
	}
	byKey := make(map[[2]string]int, len(tallies))
	out := make([]RecoveryTally, 0, len(tallies))
	for i, t := range tallies {
		if err := ValidateText("kind", t.Kind); err != nil {
			return nil, fmt.Errorf("tally %d: %w", i, err)
		}
		if t.Method == "" {
			return nil, fmt.Errorf("%w: tally %d: empty method", ErrInvalidArgument, i)
		}
		if err := ValidateText("method", t.Method); err != nil {
			return nil, fmt.Errorf("tally %d: %w", i, err)
		}
		for _, c := range []struct {
			name string
			n    int64
		}{{"Recovered", t.Recovered}, {"Declined", t.Declined}, {"Failed", t.Failed}} {
			if c.n < 0 || c.n > MaxRecoveryTally {
				return nil, fmt.Errorf("%w: tally %d: %s %d, must be 0..%d", ErrInvalidArgument, i, c.name, c.n, MaxRecoveryTally)
			}
		}
		k := [2]string{t.Kind, t.Method}
		if j, ok := byKey[k]; ok {
			out[j].Recovered += t.Recovered
			out[j].Declined += t.Declined
			out[j].Failed += t.Failed
			continue
		}
		byKey[k] = len(out)
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b RecoveryTally) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Method, b.Method))
	})
	return out, nil
}

// ValidateListRecoveryStats checks a ListRecoveryStats call and returns its
// effective limit.
func ValidateListRecoveryStats(p *ListRecoveryStatsParams) (int, error) {
	if p == nil {
		return DefaultListLimit, nil
	}
	if err := ValidateText("after kind", p.AfterKind); err != nil {
		return 0, err
	}
	if err := ValidateText("after method", p.AfterMethod); err != nil {
		return 0, err
	}
	return ListLimit(p.Limit)
}
