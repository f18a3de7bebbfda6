// Package gap is the user-facing view of gaps: the numbers of a stream that
// will never be committed by their holders, how to find and count them, and
// the one controlled way to fill one afterwards.
//
// # What a gap is
//
// Every number a stream hands out resolves exactly once (I2): committed, or a
// gap. A number becomes a gap when
//
//   - its holder releases it (reason "released": the work was given up);
//   - its lease expires and the cleanup loop recovers the work under a new
//     number (RecoveredAs names that number; the reason says how);
//   - its lease expires and there is nothing to recover (reason "expired").
//
// Making a gap resolves the number, so the barrier lets the commits and the
// readers behind it go on: a crashed worker never blocks a stream for longer
// than its lease. The gap stays on record with what is known of the lost
// work: the operation id and kind of the lease, the reason, the original
// expiry, when it became a gap (CreatedAt) and, if the work moved,
// RecoveredAs.
//
// # States
//
//	leased ──Release / expiry──> gap (open) ──Fill (policy agrees)──> filled
//	  │                             │                                (committed,
//	  └──Commit──> committed        └── never filled: stays a gap     FilledAt, FilledBy)
//
// An open gap is final for the barrier; filling it does not move the
// watermark and does not notify waiters, since the number was resolved
// already. A reader that passed the gap has seen it as a gap and will not
// see it again (I5): a fill serves the readers still behind it, replays
// among them, and the record of the stream.
//
// # Fill policy
//
// A fill writes a payload that no worker produced under that number, so it
// is never automatic. Fill needs a FillPolicy in its options; without one it
// refuses (ErrNoPolicy), and when the policy says no it refuses with
// ErrFillRefused. The policy sees the whole Gap (reason, kind, operation id,
// expiry) and may consult anything else, such as an operator's approval or
// the downstream system. FillReasons is the common policy: fill only gaps
// with given reasons. NeverFill refuses everything, for configurations that
// want to say so explicitly.
//
// A fill is recorded: the entry becomes committed with the filler's payload,
// FilledAt and FilledBy, and keeps its gap reason, so List with
// IncludeFilled and Get still show it as a filled gap.
//
// # Why a recovered gap is never filled
//
// A gap with RecoveredAs != 0 lost nothing: its work was committed again
// under the number RecoveredAs names. Filling it would apply that work a
// second time, once under each number, which is exactly the duplicate the
// recovery was careful to avoid. Fill therefore refuses such gaps with
// ErrRecovered whatever the policy says; the check is in Fill itself, not in
// a policy that could be replaced.
//
// # Failure handling
//
// Filling is a single conditional write in the backend: of concurrent fills
// of one gap exactly one succeeds, and the others get ErrNotGap. Fill is not
// idempotent: an operator's fill whose outcome is unknown (a lost
// connection) is checked with Get, which shows FilledBy and FilledAt when it
// took effect. Numbers below the stream's low point were trimmed; asking for
// them returns an error matching store.ErrTrimmed.
package gap
