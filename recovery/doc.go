// Package recovery decides what becomes of an expired lease: its work is
// recovered under a new number, or the number becomes a gap.
//
// # Steps
//
// A Step looks at one expired entry and recovers it, declines (it has
// nothing to recover), or fails (it could not decide). Steps run in order
// (Steps.Run): a decline passes the entry to the next step, a success ends
// the run, and a failure ends it too, leaving the entry expired:
//
//	expired entry ──> PartialWork ──declined──> Retry ──declined──> Gap
//	                      │    │                  │    │              │
//	                  recovered failed        recovered failed     resolved
//	             (new number, the  │      (new number, the │     (gap "expired")
//	              partial work)    │       completed result)│
//	                               └────────────┬───────────┘
//	                         stop: the entry stays expired and is tried
//	                         again later (its work is not lost to a
//	                         passing failure)
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
//     possible while the database answers.
//
// Moving work is one atomic store operation (RecoverExpired, or
// RecoverExpiredBatch for many entries of a stream): the new committed
// entry and the old entry's gap happen together or not at all, on
// PostgreSQL in one statement. A crash in between cannot leave a second
// copy or a lost one, and running a step again on an entry whose work
// already moved is refused by the store (the entry is a gap by then). A
// move whose reply was lost is read back and reported as the move it was;
// an entry found resolved by someone else is reported as such
// (Result.Elsewhere).
//
// PartialWork and Retry are WorkFinders: their decision (the tracker call)
// can be taken apart from their write, so the cleanup loop plans a run of
// entries (Steps.Plan) and writes their moves in one transaction. Custom
// steps (NewStep) run whole (Steps.Run).
//
// # Choosing steps by load
//
// Recovering work costs more than declaring a gap: the trackers are the
// caller's, and possibly remote. Under load the cleanup loop does less: a
// LoadProbe classifies the load as Low, Medium or High from Signals (the
// expired backlog of the scan, the connection pool's saturation, the latency
// of the last cycle), and a Selector maps the level, and the work's kind, to
// the steps to run. The defaults (DefaultProbe(), StepSelector):
//
//	Low     partial work, retry, gap     backlog < 1,000, pool < 70%, cycle < 5 s
//	Medium  partial work, gap            backlog < 10,000, pool < 90%, cycle < 20 s
//	High    gap                          otherwise
//
// Both are interfaces; the Func adapters make any function one. A
// RateFilter wraps a Selector and skips a step whose recent success rate for
// a kind fell below a threshold (never the last step, the fallback);
// Config.MinStepSuccessRate sets one up.
//
// # The pipeline
//
// A Pipeline, built by New from a Config, puts the parts together for the
// cleanup loop: the steps (by default Gap, plus PartialWork and Retry when
// their trackers are given), the probe, the optional rate filter, and how
// many failed attempts make an entry's work given up (Config.MaxAttempts;
// by default never) and whether it then becomes a gap or is parked for an
// operator to decide (Config.OnExhausted). The cleanup loop builds the default one itself, so a
// caller with no trackers configures nothing here:
//
//	p, err := recovery.New(st, &recovery.Config{WorkTracker: work, OperationTracker: ops})
//	...
//	sv, err := cleanup.New(st, &cleanup.Config{Pipeline: p})
package recovery
