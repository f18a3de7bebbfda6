package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Names and recovery types of the built-in steps.
const (
	MethodPartialWork = "partial-work"
	MethodRetry       = "retry"
	MethodGap         = "gap"
)

// WorkTracker is the caller's record of partial work, for PartialWork.
type WorkTracker interface {
	// RecoverableWork returns the partial work of e's operation
	// (e.OperationID) that another worker can resume, or ok false if there
	// is none.
	RecoverableWork(ctx context.Context, e store.Entry) (work []byte, ok bool, err error)
}

// WorkTrackerFunc adapts a function to a WorkTracker.
type WorkTrackerFunc func(ctx context.Context, e store.Entry) ([]byte, bool, error)

// RecoverableWork calls f.
func (f WorkTrackerFunc) RecoverableWork(ctx context.Context, e store.Entry) ([]byte, bool, error) {
	return f(ctx, e)
}

// OperationTracker is the caller's record of completed results, for Retry.
type OperationTracker interface {
	// CompletedResult returns the result of e's operation if it was
	// computed but never committed, or ok false.
	CompletedResult(ctx context.Context, e store.Entry) (result []byte, ok bool, err error)
}

// OperationTrackerFunc adapts a function to an OperationTracker.
type OperationTrackerFunc func(ctx context.Context, e store.Entry) ([]byte, bool, error)

// CompletedResult calls f.
func (f OperationTrackerFunc) CompletedResult(ctx context.Context, e store.Entry) ([]byte, bool, error) {
	return f(ctx, e)
}

// Recoverer moves expired work to a new number (store/memory,
// store/postgres).
type Recoverer interface {
	RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error)
}

// Resolver declares an expired lease a gap (store/memory, store/postgres).
type Resolver interface {
	ResolveExpired(ctx context.Context, stream string, number int64, p *store.ResolveExpiredParams) error
}

// PartialWork returns the step that moves an expired operation's partial
// work, as its WorkTracker reports it, to a new number. owner is recorded on
// the new entry.
func PartialWork(s Recoverer, t WorkTracker, owner string) Step {
	return NewStep(MethodPartialWork, func(ctx context.Context, e store.Entry) (Result, error) {
		work, ok, err := t.RecoverableWork(ctx, e)
		if err != nil {
			return Result{}, fmt.Errorf("work tracker: %w", err)
		}
		if !ok {
			return Result{Reason: "no partial work"}, nil
		}
		return move(ctx, s, e, work, MethodPartialWork, owner)
	})
}

// Retry returns the step that commits an expired operation's completed
// result, as its OperationTracker reports it, under a new number.
func Retry(s Recoverer, t OperationTracker, owner string) Step {
	return NewStep(MethodRetry, func(ctx context.Context, e store.Entry) (Result, error) {
		result, ok, err := t.CompletedResult(ctx, e)
		if err != nil {
			return Result{}, fmt.Errorf("operation tracker: %w", err)
		}
		if !ok {
			return Result{Reason: "no completed result"}, nil
		}
		return move(ctx, s, e, result, MethodRetry, owner)
	})
}

// move moves the work; an entry resolved meanwhile (its holder committed or
// released at the last moment, or another cleaner got there first) counts as
// resolved: there is nothing left to recover.
func move(ctx context.Context, s Recoverer, e store.Entry, payload []byte, method, owner string) (Result, error) {
	moved, err := s.RecoverExpired(ctx, e.Stream, e.Number, &store.RecoverParams{
		Payload: payload, RecoveryType: method, Owner: owner,
	})
	if err != nil {
		if resolvedMeanwhile(err) {
			return Result{Recovered: true, Reason: "resolved meanwhile: " + err.Error()}, nil
		}
		return Result{}, err
	}
	return Result{Recovered: true, NewNumber: moved, Reason: fmt.Sprintf("moved to %d", moved)}, nil
}

// Gap returns the step that declares the expired number a gap. It succeeds
// whenever the database answers. The cleanup loop recognises it
// (IsGap) and declares runs of gaps with one statement.
func Gap(s Resolver) Step { return gapStep{s} }

type gapStep struct{ s Resolver }

func (gapStep) Name() string { return MethodGap }

func (g gapStep) TryRecover(ctx context.Context, e store.Entry) (Result, error) {
	err := g.s.ResolveExpired(ctx, e.Stream, e.Number, nil)
	switch {
	case err == nil:
		return Result{Recovered: true, Reason: store.ReasonExpired}, nil
	case resolvedMeanwhile(err):
		return Result{Recovered: true, Reason: "resolved meanwhile: " + err.Error()}, nil
	}
	return Result{}, err
}

// IsGap reports whether p is nothing but the built-in Gap step: the
// entries it handles can be declared gaps in batches.
func (p Pipeline) IsGap() bool {
	if len(p) != 1 {
		return false
	}
	_, ok := p[0].(gapStep)
	return ok
}

// resolvedMeanwhile reports an error saying the entry is already resolved.
func resolvedMeanwhile(err error) bool {
	return errors.Is(err, store.ErrCommitted) || errors.Is(err, store.ErrReleased) ||
		errors.Is(err, store.ErrExpired) || errors.Is(err, store.ErrGap)
}

// Metadata describes an entry that carries recovered work.
type Metadata struct {
	OriginalNumber      int64
	OriginalOperationID string
	RecoveredAt         time.Time
	Type                string // MethodPartialWork, MethodRetry, or a custom step's
}

// MetadataOf returns the recovery metadata of e, and false if e carries no
// recovered work.
func MetadataOf(e store.Entry) (Metadata, bool) {
	if e.RecoveredFrom == 0 {
		return Metadata{}, false
	}
	return Metadata{
		OriginalNumber:      e.RecoveredFrom,
		OriginalOperationID: e.OperationID,
		RecoveredAt:         e.ResolvedAt,
		Type:                e.RecoveryType,
	}, true
}
