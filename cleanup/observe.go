package cleanup

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// StepObserver is an Observer that also wants the outcome of every recovery
// step the loop tries: the metrics package counts them by step and kind.
// The loop detects it on Config.Observer. Its method must not block.
type StepObserver interface {
	// Step reports one step tried on e: r.Recovered and a nil err when it
	// resolved the entry (r.Elsewhere when it found it resolved by someone
	// else), a nil err and r.Recovered false when it declined, an error
	// when it could not decide. ctx is the recovery's (see Tracer). Steps
	// whose writes the loop batches are reported once each entry's write
	// is done.
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
	// StartRecovery is called as the loop starts deciding what becomes of
	// one expired entry; the outcome comes once its write is done (or
	// abandoned, with an error).
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

// step reports one step tried on e to the StepObserver and to the
// pipeline (its rate filter and recovery history: recovery.Pipeline.Outcome).
// A step that found the entry resolved elsewhere tells the pipeline nothing
// about the step.
func (sv *Service) step(ctx context.Context, e store.Entry, step string, r recovery.Result, err error) {
	if so, ok := sv.observer.(StepObserver); ok {
		so.Step(ctx, e, step, r, err)
	}
	if !r.Elsewhere {
		sv.pipeline.Outcome(step, e.Kind, r, err)
		sv.history.dirty.Store(true)
	}
}

// historySync is when the loop syncs the pipeline's recovery history with
// the store (recovery.Pipeline.SyncHistory): before its first cycle, so a
// restart reads the record back, and after each cycle that tried a step,
// so its outcomes are kept and the record of other processes is read.
type historySync struct {
	loaded bool        // read once; under Service.mu
	dirty  atomic.Bool // a step was tried since the last sync
}

// syncHistory syncs the recovery history, within the query timeout; a
// failure is logged and tried again after the next cycle (the outcomes
// stay in the pipeline meanwhile).
func (sv *Service) syncHistory(ctx context.Context) {
	sv.history.dirty.Store(false)
	qctx, cancel := context.WithTimeout(ctx, sv.qTimeout)
	err := sv.pipeline.SyncHistory(qctx)
	cancel()
	if err != nil {
		sv.history.dirty.Store(true)
		if ctx.Err() == nil {
			sv.logger.Warn("cleanup: could not sync the recovery history with the store; the selector sees this process's record meanwhile",
				slog.Any("error", err))
		}
		return
	}
	sv.history.loaded = true
}
