// Package sequence hands out the numbers of a named stream under TTL leases
// and resolves them: the Leaser and the Lease handle.
//
// A worker leases the next number of a stream, does its work, and then
// commits the result under that number, or releases the number if it gives
// the work up. Numbers are dense (every number handed out has an entry; none
// is skipped) and every entry resolves exactly once, as committed or as a gap.
// The backend's clock (PostgreSQL's, in production) decides when a lease
// expires; an expired lease can no longer commit, and the cleanup loop turns
// it into a gap or recovers its work under a new number.
//
// # A lease's life
//
//	Lease ──> held ──Commit──> committed
//	           │ ╲
//	           │  ╲ Extend (while live: moves the expiry)
//	           │
//	           ├──Release──> gap "released"
//	           └──expiry───> (the cleanup loop resolves it)
//
// # Time on this side of the wire
//
// The handle knows two clocks. ExpiresAt is the database's verdict, the only
// one that counts. Remaining and IsExpired are the holder's own estimate on
// the local monotonic clock: they count the TTL from the moment the lease
// request was sent, which is earlier than the moment the database stamped,
// so the holder believes its lease over a little before the database does,
// never after. A holder whose wall clock is wrong is therefore still safe.
//
// # Batching
//
// On a backend with a round trip to save, the Leaser batches across streams
// through the library's batching engine (batching.go): concurrent Lease
// calls share one statement (store.MultiLeaser), and the commits that are
// ready at the same time share one transaction (store.MultiCommitter): a
// run of consecutive numbers of a stream whose turn came (group commit),
// the runs of other streams, and Complete calls. Each item keeps its own
// checks and its own outcome, exactly as if it had gone alone; a commit
// whose batch failed as a whole (a lost connection) returns an error whose
// outcome is unknown, and a retry on the same handle tells (I7). On a
// backend that answers in process (store.InProcess) every call goes alone.
//
// # Waiting for the turn
//
// An ordered commit whose turn has not come yields once (the holder of the
// number before it is often about to commit), then parks at the barrier,
// which wakes it when its turn comes. While it waits, its local deadline
// must still end it: rather than arming a timer per waiting lease (which
// cost more than the rest of the wait), the commits of a stream that wait
// without grouping share one timer, armed for the earliest deadline among
// them and re-armed when it fires; a lease whose own timer is armed (Done,
// Context, KeepAlive) is left to it. On a store with calls for one number
// (store.OneByOne: a *memory.Store), a Lease and an
// ungrouped Commit that need not park allocate nothing but the Lease handle.
//
// # Appending
//
// Append (tx.go) writes entries born committed, one round trip for any
// number of them (store.Appender): the outbox write, with no lease to
// hold, expire or recover. It is not an ordered commit; readers still
// stop at the watermark. Each call goes alone: pass many payloads in one
// call to amortise the round trip.
//
// # The application's own transaction
//
// InTx (tx.go) returns a Leaser whose calls run in a transaction the
// application owns, through a store bound to it (postgres.Store.InTx):
// the application's rows and the stream's entries commit or roll back
// together, and a rollback leaves no hole. Its calls go alone (one
// transaction is one connection); it tells the barrier nothing, since
// nothing is committed when a call returns (the store notices the
// resolutions once the transaction commits); its ordered Commit asks the
// store first, which sees the transaction's own earlier resolutions, and
// when refused waits for the barrier or a short pause and asks again,
// until the lease's local deadline; KeepAlive is refused
// (store.ErrUnsupported). Use InTx when the application's transaction
// should lease, append or commit; CommitTx when a lease held outside
// should commit together with writes made in the committing transaction;
// Append for outbox entries with no work between lease and commit.
//
// # Observing
//
// Config.Observer is told of every lease, commit (with its wait for earlier
// numbers), release and extension, and may carry a span through each call's
// context; metrics.Metrics.Leaser provides one. Without it the Leaser
// records nothing.
//
// # Errors
//
// Every error is errors.Is-able against the sentinels re-exported here (the
// same values as package store's). Bad input (empty or over-long stream
// names, durations out of range, oversized payloads, zero tokens) matches
// ErrInvalidArgument and changes nothing. Commit and Release are idempotent
// for their holder: after a lost connection, retry the same call on the same
// handle and it reports whether the first attempt took effect. The same
// call means the same payload: a commit repeated with another payload than
// the one committed is a caller's bug, and fails with ErrPayloadMismatch,
// changing nothing.
package sequence
