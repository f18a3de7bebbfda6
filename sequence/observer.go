package sequence

import (
	"context"
	"time"
)

// Observer is told what a Leaser does, for metrics and traces; package
// metrics provides one (metrics.Metrics.Leaser). Its methods are called on
// the callers' goroutines, concurrently, and must not block. The Leaser
// calls them only for calls that passed validation.
//
// The Start methods return the context the call continues under (it may
// carry a span) and a function the Leaser calls exactly once with the
// call's outcome.
type Observer interface {
	// StartLease is called when a Lease or LeaseN call of n numbers goes to
	// the backend; end gets the first number granted (the n numbers are
	// consecutive) or the error.
	StartLease(ctx context.Context, stream, kind string, n int) (context.Context, func(first int64, err error))
	// StartCommit is called when Commit or CommitTx (ordered true) or
	// Complete (ordered false) starts working on a held lease; end gets the
	// outcome (nil: committed).
	StartCommit(ctx context.Context, stream, kind string, number int64, ordered bool) (context.Context, func(err error))
	// CommitReady reports that an ordered commit's turn came: wait is how
	// long it waited for the earlier numbers to resolve (at the barrier, or
	// until a group commit took it along). ctx is the one StartCommit
	// returned. A commit sent back to waiting (an earlier member of its
	// group failed) reports again, with the total wait.
	CommitReady(ctx context.Context, stream, kind string, wait time.Duration)
	// Released reports a Release call and its outcome.
	Released(ctx context.Context, stream, kind string, err error)
	// Extended reports an Extend call (keep-alive renewals included) and
	// its outcome.
	Extended(ctx context.Context, stream, kind string, err error)
}

// nopObserver is the Observer of a Leaser configured without one.
type nopObserver struct{}

func (nopObserver) StartLease(ctx context.Context, _, _ string, _ int) (context.Context, func(int64, error)) {
	return ctx, func(int64, error) {}
}

func (nopObserver) StartCommit(ctx context.Context, _, _ string, _ int64, _ bool) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func (nopObserver) CommitReady(context.Context, string, string, time.Duration) {}
func (nopObserver) Released(context.Context, string, string, error)            {}
func (nopObserver) Extended(context.Context, string, string, error)            {}

// commitReady reports the wait of each item of a group its leader just took.
func (l *Leaser) commitReady(group []*commitItem) {
	now := l.now()
	for _, g := range group {
		l.observer.CommitReady(g.ctx, g.lease.stream, g.lease.kind, now.Sub(g.parked))
	}
}
