package recovery

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqlease/seqlease/store"
)

// Result is the outcome of a step or a pipeline on one expired entry.
type Result struct {
	// Recovered is true when the step resolved the entry: its work moved to
	// a new number, or (the Gap step) the number became a gap.
	Recovered bool
	// Method is the name of the step that resolved it.
	Method string
	// Reason says why a step declined, or what it did.
	Reason string
	// NewNumber is the number the work moved to; 0 if it did not move.
	NewNumber int64
}

// Step tries to recover one expired entry.
type Step interface {
	// Name identifies the step in results, logs and metrics.
	Name() string
	// TryRecover recovers e, or declines with Recovered false. An error
	// means the step could not decide (a tracker or the database failed);
	// the pipeline then tries the next step.
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

// Pipeline runs steps in order; the first that recovers the entry wins.
type Pipeline []Step

// ErrUnrecovered is returned by Pipeline.Run when no step resolved the
// entry; it stays expired and is tried again later.
var ErrUnrecovered = errors.New("recovery: no step resolved the entry")

// Run runs the steps on e until one recovers it. It returns that step's
// result, or ErrUnrecovered joined with every step's error. Each declining
// or failing step is reported to observe (nil: no report).
func (p Pipeline) Run(ctx context.Context, e store.Entry, observe func(step string, r Result, err error)) (Result, error) {
	var errs []error
	for _, s := range p {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		r, err := s.TryRecover(ctx, e)
		if err == nil && r.Recovered {
			r.Method = s.Name()
			if observe != nil {
				observe(s.Name(), r, nil)
			}
			return r, nil
		}
		if observe != nil {
			observe(s.Name(), r, err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
		}
	}
	return Result{}, errors.Join(append([]error{fmt.Errorf("%w: %s/%d", ErrUnrecovered, e.Stream, e.Number)}, errs...)...)
}
