package recovery

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqlease/seqlease/store"
)

// Result is the outcome of a step or a pipeline on one expired entry.
type Result struct {
	// Recovered is true when the entry is resolved: its work moved to a
	// new number, or (the Gap step) the number became a gap, or it was
	// found resolved already (Elsewhere).
	Recovered bool
	// Method is the name of the step that resolved it.
	Method string
	// Reason says why a step declined, or what it did.
	Reason string
	// NewNumber is the number the work moved to; 0 if it did not move.
	NewNumber int64
	// Elsewhere is true when the step found the entry resolved by someone
	// else before it could act (its holder released it late, another
	// cleaner got there first): Recovered is true, but this step changed
	// nothing.
	Elsewhere bool
}

// Step tries to recover one expired entry.
type Step interface {
	// Name identifies the step in results, logs and metrics.
	Name() string
	// TryRecover recovers e, or declines with Recovered false when it has
	// nothing to recover (the pipeline then tries the next step). An error
	// means the step could not decide (a tracker or the database failed):
	// the pipeline stops there and the entry stays expired for a later
	// attempt, so that recoverable work is not turned into a gap by a
	// passing failure.
	TryRecover(ctx context.Context, e store.Entry) (Result, error)
}

// StepFunc adapts a function to a Step, with NewStep.
type StepFunc func(ctx context.Context, e store.Entry) (Result, error)

// NewStep returns a Step named name that runs fn.
func NewStep(name string, fn StepFunc) Step { return funcStep{name: name, fn: fn} }

type funcStep struct {
	name string
	fn   StepFunc
}

func (s funcStep) Name() string { return s.name }

func (s funcStep) TryRecover(ctx context.Context, e store.Entry) (Result, error) {
	return s.fn(ctx, e)
}

// Steps run in order; the first that recovers the entry wins. A Selector
// picks them for each entry (Pipeline.Select).
type Steps []Step

// ErrUnrecovered is returned by Steps.Run and Steps.Plan when no step
// resolved the entry, because one failed or every one declined; the entry
// stays expired and is tried again later.
var ErrUnrecovered = errors.New("recovery: no step resolved the entry")

// Run runs the steps on e until one recovers it, and returns that step's
// result with Method set. A step that declines passes e to the next; a step
// that fails stops the pipeline: Run returns an error matching
// ErrUnrecovered and wrapping the step's. So does a pipeline whose every
// step declined. Each step tried is reported to observe (nil: no report).
func (p Steps) Run(ctx context.Context, e store.Entry, observe func(step string, r Result, err error)) (Result, error) {
	for _, s := range p {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		r, err := s.TryRecover(ctx, e)
		if err == nil && r.Recovered {
			r.Method = s.Name()
		}
		if observe != nil {
			observe(s.Name(), r, err)
		}
		switch {
		case err != nil:
			return Result{}, stepFailed(e, s.Name(), err)
		case r.Recovered:
			return r, nil
		}
	}
	return Result{}, declined(e)
}

func stepFailed(e store.Entry, step string, err error) error {
	return fmt.Errorf("%w: %s/%d: %s: %w", ErrUnrecovered, e.Stream, e.Number, step, err)
}

func declined(e store.Entry) error {
	return fmt.Errorf("%w: %s/%d: every step declined", ErrUnrecovered, e.Stream, e.Number)
}

// WorkFinder is a Step whose decision can be taken apart from its write:
// FindWork asks the caller's tracker for the work to move, and the caller
// moves it, possibly together with other entries' work in one transaction
// (the cleanup loop uses the store's RecoverExpiredBatch), as TryRecover
// would with RecoverExpired. PartialWork and Retry are WorkFinders.
type WorkFinder interface {
	Step
	// FindWork returns the work of e to move to a new number, ok false when
	// the step declines, or an error when it cannot decide.
	FindWork(ctx context.Context, e store.Entry) (work []byte, ok bool, err error)
}

// Plan is what the steps decided for an expired entry, before anything
// changed: declare it a gap, or move Work to a new number with recovery
// type Step.
type Plan struct {
	Step string // the step that takes the entry
	Gap  bool   // the Gap step: declare the number a gap
	Work []byte // otherwise the work to move
}

// Plannable reports whether Plan can decide for p: every step is a
// WorkFinder or the built-in Gap step.
func (p Steps) Plannable() bool {
	for _, s := range p {
		if _, ok := s.(WorkFinder); !ok && !isGap(s) {
			return false
		}
	}
	return true
}

// Plan runs the deciding half of Plannable steps on e: the WorkFinders
// in order until one has work, or the Gap step. A failing step stops it, as
// in Run; so does a run whose every step declined. Declining and
// failing steps are reported to observe (nil: no report); the step that
// takes the entry is not: the caller reports it once it applied the plan.
func (p Steps) Plan(ctx context.Context, e store.Entry, observe func(step string, r Result, err error)) (Plan, error) {
	for _, s := range p {
		if err := ctx.Err(); err != nil {
			return Plan{}, err
		}
		if isGap(s) {
			return Plan{Step: s.Name(), Gap: true}, nil
		}
		f, ok := s.(WorkFinder)
		if !ok {
			return Plan{}, fmt.Errorf("recovery: step %q cannot plan: use Run", s.Name())
		}
		work, ok, err := f.FindWork(ctx, e)
		switch {
		case err != nil:
			if observe != nil {
				observe(s.Name(), Result{}, err)
			}
			return Plan{}, stepFailed(e, s.Name(), err)
		case ok:
			return Plan{Step: s.Name(), Work: work}, nil
		}
		if observe != nil {
			observe(s.Name(), Result{Reason: declineReason(s.Name())}, nil)
		}
	}
	return Plan{}, declined(e)
}
