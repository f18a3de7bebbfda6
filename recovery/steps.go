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

// ReasonRecoveryFailed is the gap reason of an expired entry whose recovery
// kept failing and whose work was given up to unblock its stream: only when
// the Pipeline's Config.MaxAttempts is set (by default it never gives
// up).
const ReasonRecoveryFailed = "recovery-failed"

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

// Recoverer moves expired work to a new number, and reads an entry back
// when the outcome of a move is unknown (store/memory, store/postgres).
type Recoverer interface {
	RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error)
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
}

// Resolver declares an expired lease a gap (store/memory, store/postgres).
type Resolver interface {
	ResolveExpired(ctx context.Context, stream string, number int64, p *store.ResolveExpiredParams) error
}

// PartialWork returns the step that moves an expired operation's partial
// work, as its WorkTracker reports it, to a new number. owner is recorded on
// the new entry.
func PartialWork(s Recoverer, t WorkTracker, owner string) Step {
	return moveStep{name: MethodPartialWork, s: s, owner: owner, find: func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
		work, ok, err := t.RecoverableWork(ctx, e)
		if err != nil {
			return nil, false, fmt.Errorf("work tracker: %w", err)
		}
		return work, ok, nil
	}}
}

// Retry returns the step that commits an expired operation's completed
// result, as its OperationTracker reports it, under a new number.
func Retry(s Recoverer, t OperationTracker, owner string) Step {
	return moveStep{name: MethodRetry, s: s, owner: owner, find: func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
		result, ok, err := t.CompletedResult(ctx, e)
		if err != nil {
			return nil, false, fmt.Errorf("operation tracker: %w", err)
		}
		return result, ok, nil
	}}
}

// moveStep is a built-in step that moves the work its tracker finds.
type moveStep struct {
	name  string
	s     Recoverer
	owner string
	find  func(ctx context.Context, e store.Entry) ([]byte, bool, error)
}

func (m moveStep) Name() string { return m.name }

// FindWork implements WorkFinder.
func (m moveStep) FindWork(ctx context.Context, e store.Entry) ([]byte, bool, error) {
	return m.find(ctx, e)
}

// TryRecover implements Step.
func (m moveStep) TryRecover(ctx context.Context, e store.Entry) (Result, error) {
	work, ok, err := m.find(ctx, e)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return Result{Reason: declineReason(m.name)}, nil
	}
	return move(ctx, m.s, e, work, m.name, m.owner)
}

func declineReason(step string) string {
	switch step {
	case MethodPartialWork:
		return "no partial work"
	case MethodRetry:
		return "no completed result"
	}
	return "declined"
}

// move moves the work. An entry found resolved by someone else (its holder
// released it at the last moment, or another cleaner got there first) is
// resolved: there is nothing left to recover. When the outcome is unknown
// (the reply was lost), the entry is read back: a move that committed is
// reported as one.
func move(ctx context.Context, s Recoverer, e store.Entry, payload []byte, method, owner string) (Result, error) {
	moved, err := s.RecoverExpired(ctx, e.Stream, e.Number, &store.RecoverParams{
		Payload: payload, RecoveryType: method, Owner: owner,
	})
	switch {
	case err == nil:
		return Result{Recovered: true, NewNumber: moved, Reason: fmt.Sprintf("moved to %d", moved)}, nil
	case ResolvedMeanwhile(err):
		return Result{Recovered: true, Elsewhere: true, Reason: "resolved meanwhile: " + err.Error()}, nil
	}
	if now, rerr := readBack(ctx, s, e); rerr == nil && now.State.Resolved() {
		return Outcome(now), nil
	}
	return Result{}, err
}

// readBackTimeout bounds the read that settles an unknown outcome.
const readBackTimeout = 5 * time.Second

// readBack reads e again after a write whose outcome is unknown. It runs
// even when ctx was cancelled (the write may have committed all the same),
// bounded by a few seconds.
func readBack(ctx context.Context, s interface {
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
}, e store.Entry) (store.Entry, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
	defer cancel()
	es, err := s.Read(ctx, e.Stream, e.Number-1, 1)
	switch {
	case err != nil:
		return store.Entry{}, err
	case len(es) == 0 || es[0].Number != e.Number:
		return store.Entry{}, fmt.Errorf("%w: %s/%d", store.ErrNotFound, e.Stream, e.Number)
	}
	return es[0], nil
}

// Outcome describes an expired entry found resolved after a write whose
// outcome was unknown: a gap whose work moved is the move (its new number),
// anything else was resolved elsewhere.
func Outcome(now store.Entry) Result {
	if now.State == store.Gap && now.RecoveredAs != 0 {
		return Result{Recovered: true, NewNumber: now.RecoveredAs, Reason: fmt.Sprintf("moved to %d", now.RecoveredAs)}
	}
	return Result{Recovered: true, Elsewhere: true, Reason: fmt.Sprintf("resolved meanwhile: %s %s", now.State, now.GapReason)}
}

// Gap returns the step that declares the expired number a gap. It succeeds
// whenever the database answers. The cleanup loop recognises it and
// declares runs of gaps with one statement.
func Gap(s Resolver) Step { return gapStep{s} }

type gapStep struct{ s Resolver }

func (gapStep) Name() string { return MethodGap }

func (g gapStep) TryRecover(ctx context.Context, e store.Entry) (Result, error) {
	err := g.s.ResolveExpired(ctx, e.Stream, e.Number, nil)
	switch {
	case err == nil:
		return Result{Recovered: true, Reason: store.ReasonExpired}, nil
	case ResolvedMeanwhile(err):
		return Result{Recovered: true, Elsewhere: true, Reason: "resolved meanwhile: " + err.Error()}, nil
	}
	return Result{}, err
}

func isGap(s Step) bool {
	_, ok := s.(gapStep)
	return ok
}

// ResolvedMeanwhile reports whether err, from a store's resolving call on an
// expired entry, says the entry is resolved already (committed, released,
// or a gap).
func ResolvedMeanwhile(err error) bool {
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
