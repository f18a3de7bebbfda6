// Package storetest is the conformance suite of the storage contract: the
// Store interface in this package, whose method comments are the
// specification, checked against the invariants of docs/guarantees.md (I1
// dense, I2 resolve once, I3 no commit at or after expiry nor with a
// foreign token, I4 ordered commit, I5 never past the watermark, I6 nothing
// unresolved trimmed, I7 idempotent retries).
//
// A backend runs it from its own tests:
//
//	func TestConformanceMemory(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Store { return memory.New(nil) })
//	}
//
// # Shape
//
// Run groups the subtests by concept, one file each: Lease, Commit, Release,
// Extend, ResolveExpired and ListExpired (expire.go), Read, Stats, BadInput,
// Concurrency, Ordered and CommitBatch (ordered.go), Snapshot, ReadResolved
// and Watch (watch.go), Gaps (gap.go), Trim (trim.go), RecoverExpired
// (recover.go), RecoverExpiredBatch (recoverbatch.go), Inbox (inbox.go:
// the inbox records of consumers, InboxStore) and Checkpoints
// (checkpoint.go). Every leaf subtest is parallel and calls newStore for a
// fresh, isolated store: the listings across all streams (ListExpired without
// a Stream filter) count on it. Stream names are unique per subtest all the
// same, and derived from the subtest's name, so a shared database shows who
// wrote what. BadInput is the exception to parallelism: its cases run in
// sequence against one store and one fixture, each checking that it changed
// nothing.
//
// RunNamedLeases is the suite of named leases (package lease), against the
// NamedLeaseStore interface, in the files namedlease*.go: acquire, renew,
// release, force-release, cleanup, listings, fencing, history, watch,
// concurrency (racing acquirers; a renewal racing a takeover at the expiry)
// and a bad-input table of typed errors that change nothing.
//
// # Time
//
// The suite never sleeps. Each subtest takes a base time from the backend's
// clock (Store.Now, truncated to microseconds) and pins the clock of every
// call that depends on expiry through the Now field of its parameters, as an
// offset from that base. Deadlines are hit exactly: a lease is live at
// ExpiresAt-1µs and expired at ExpiresAt.
//
// # Decisions the contract leaves implicit
//
//   - A pinned Now is the backend's now for that call: it becomes LeasedAt,
//     the resolution time returned by Commit and recorded by Commit, Release
//     and ResolveExpired, and the now returned by Extend.
//   - ListExpired orders stream names by their bytes (Go's string order,
//     COLLATE "C" on PostgreSQL), the order its cursor is defined in.
//   - A foreign token gets ErrTokenMismatch whatever the entry's state: the
//     fence is checked before the state.
//   - Expiry instants keep microseconds: the sub-microsecond part of a TTL
//     is dropped (ExpiresAt = now + TTL truncated to the microsecond).
//   - Extend sets the expiry to now + TTL even when that shortens it.
//   - Commit, Release, Extend and ResolveExpired on a stream that does not
//     exist report ErrNotFound (the number was never handed out), and do
//     not create it. ListExpired filtered on such a stream returns nothing.
//   - With a Stream filter, a cursor in an earlier stream starts the stream
//     from its beginning and a cursor in a later one leaves nothing.
//   - A nil and an empty payload are the same payload, and each reads back
//     as it was given: nil as nil, []byte{} as empty and not nil.
//   - A cancelled context is not bad input: its error matches
//     context.Canceled and not store.ErrInvalidArgument.
package storetest
