// Package recovery decides what becomes of an expired lease: its work is
// recovered under a new number, or the number becomes a gap.
//
// # Steps and the pipeline
//
// A Step looks at one expired entry and either recovers it or declines. A
// Pipeline runs steps in order and stops at the first that succeeds:
//
//	expired entry ──> PartialWork ──declined──> Retry ──declined──> Gap
//	                      │                      │                  │
//	                  recovered              recovered           resolved
//	             (new number, the       (new number, the      (gap "expired")
//	              partial work)          completed result)
//
// The built-in steps:
//
//   - PartialWork asks the caller's WorkTracker for recoverable partial work
//     of the operation (say, a where-clause already evaluated). If there is
//     some, the work moves to a new number, committed with the recovery
//     metadata (original number and operation id, time, type
//     "partial-work"), and the original number becomes a gap with
//     RecoveredAs pointing at it.
//   - Retry asks the caller's OperationTracker for a result that was
//     computed but never committed, and commits it under a new number the
//     same way (type "retry").
//   - Gap resolves the number as a gap with reason "expired". It is always
//     possible, so a pipeline that ends with it never leaves a number
//     blocking the barrier.
//
// Moving work is one atomic store operation (RecoverExpired): the new
// committed entry and the old entry's gap happen together or not at all, on
// PostgreSQL in one statement. A crash in between cannot leave a second copy
// or a lost one, and running the pipeline again on an entry whose work
// already moved is refused by the store (the entry is a gap by then).
//
// # Choosing steps by load
//
// Recovering work costs more than declaring a gap: the trackers are the
// caller's, and possibly remote. Under load the cleanup loop does less: a
// LoadProbe classifies the load as Low, Medium or High from Signals (the
// expired backlog of this scan, the connection pool's saturation, the
// latency of recent cycles), and a Selector maps the level, and the work's
// kind, to the steps to run. The defaults (ThresholdProbe, StepSelector):
//
//	Low     partial work, retry, gap
//	Medium  partial work, gap
//	High    gap
//
// Both are interfaces; the Func adapters make any function one. A
// RateFilter wraps a Selector and skips a step whose recent success rate for
// a kind fell below a threshold (never the last step, the fallback).
package recovery
