package cleanup

import (
	"context"

	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// StepObserver is an Observer that also wants the outcome of every recovery
// step the loop tries: the metrics package counts them by step and kind,
// and a recovery.RateFilter can be fed from it (Record). The loop detects it
// on Config.Observer. Its method must not block.
type StepObserver interface {
	// Step reports one step tried on e: r.Recovered and a nil err when it
	// resolved the entry, a nil err and r.Recovered false when it declined,
	// an error when it could not decide. ctx is the recovery's (see
	// Tracer). Entries declared gaps in a batch report the Gap step once
	// each.
	Step(ctx context.Context, e store.Entry, step string, r recovery.Result, err error)
}

// Tracer is an Observer that also follows cycles and recoveries as they
// run, with the contexts they run under, for traces (the metrics package
// provides one). The loop detects it on Config.Observer. Each Start returns
// the context the work continues under and a function called exactly once
// with the outcome.
type Tracer interface {
	// StartCycle is called as a cycle starts.
	StartCycle(ctx context.Context) (context.Context, func(CycleResult, error))
	// StartRecovery is called as the loop starts resolving one expired
	// entry (for entries declared gaps in a batch: as the batch starts).
	StartRecovery(ctx context.Context, e store.Entry) (context.Context, func(recovery.Result, error))
}

// startCycle starts following a cycle, if the Observer is a Tracer.
func (sv *Service) startCycle(ctx context.Context) (context.Context, func(CycleResult, error)) {
	if t, ok := sv.observer.(Tracer); ok {
		return t.StartCycle(ctx)
	}
	return ctx, func(CycleResult, error) {}
}

// startRecovery starts following the recovery of e, if the Observer is a
// Tracer.
func (sv *Service) startRecovery(ctx context.Context, e store.Entry) (context.Context, func(recovery.Result, error)) {
	if t, ok := sv.observer.(Tracer); ok {
		return t.StartRecovery(ctx, e)
	}
	return ctx, func(recovery.Result, error) {}
}

// stepFunc returns the observe function of recovery.Pipeline.Run for e, nil
// if the Observer is no StepObserver.
func (sv *Service) stepFunc(ctx context.Context, e store.Entry) func(string, recovery.Result, error) {
	so, ok := sv.observer.(StepObserver)
	if !ok {
		return nil
	}
	return func(step string, r recovery.Result, err error) { so.Step(ctx, e, step, r, err) }
}

// runPipeline runs pipeline p on e, followed by the Tracer and StepObserver.
func (sv *Service) runPipeline(ctx context.Context, p recovery.Pipeline, e store.Entry) (recovery.Result, error) {
	ctx, end := sv.startRecovery(ctx, e)
	r, err := p.Run(ctx, e, sv.stepFunc(ctx, e))
	end(r, err)
	return r, err
}

// batchSpans follows entries declared gaps in one batch.
type batchSpans struct {
	sv   *Service
	ctxs []context.Context
	ends []func(recovery.Result, error)
}

// startBatch starts following the entries of a gap batch.
func (sv *Service) startBatch(ctx context.Context, es []store.Entry) *batchSpans {
	b := &batchSpans{sv: sv}
	if _, ok := sv.observer.(Tracer); !ok {
		if _, ok := sv.observer.(StepObserver); !ok {
			return b
		}
	}
	b.ctxs = make([]context.Context, len(es))
	b.ends = make([]func(recovery.Result, error), len(es))
	for i, e := range es {
		b.ctxs[i], b.ends[i] = sv.startRecovery(ctx, e)
	}
	return b
}

// end reports the outcome of the i-th entry of the batch.
func (b *batchSpans) end(i int, e store.Entry, r recovery.Result, err error) {
	if b.ends == nil {
		return
	}
	if so, ok := b.sv.observer.(StepObserver); ok {
		so.Step(b.ctxs[i], e, recovery.MethodGap, r, err)
	}
	b.ends[i](r, err)
}
