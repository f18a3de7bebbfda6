// Package store is the storage contract of seqlease: the vocabulary (Entry,
// State, Token, the request and parameter types), the sentinel errors and the
// input validation that every backend shares.
//
// The interfaces themselves are small and belong to the packages that consume
// them (sequence.Store, storetest.Store), in the manner of raft's LogStore and
// StableStore. Backends live below this package: store/memory, the embedded
// default, and store/postgres, the shared coordinator between processes.
// store/storetest is the conformance suite both must pass.
//
// # Capabilities
//
// What a backend can do beyond the contract is an optional interface of this
// package that the consumer checks with a type assertion, as io.Copy checks
// io.WriterTo (capability.go):
//
//	capability      store/memory  store/postgres  used by
//	InProcess       yes           -               sequence, lease: no batching, no round trip to save
//	OneByOne        yes           -               sequence: a lease and a commit that allocate nothing for the call
//	MultiLeaser     yes           yes             sequence: concurrent leases of many streams in one statement
//	MultiCommitter  yes           yes             sequence: ready commits of many streams in one transaction
//	TxCommitter[T]  -             yes (pgx.Tx)    sequence.CommitTx: the caller's writes in the committing transaction
//	EarlyAcquirer   -             yes             lease: the next acquire batch is sent while this one's commit is flushed
//	TxRecoverer[T]  -             yes (pgx.Tx)    cleanup's MoveTx: the application's writes in the transaction that moves expired work
//	HookQueue       yes           yes             cleanup's DurableHook: hook records written with the resolution, delivered at least once
//	Appender        yes           yes             sequence.Leaser.Append: entries born committed, in one statement
//	Parker          yes           yes             cleanup: failed recoveries counted on the entry; parked entries left to an operator
//	CommitFinder    yes           yes             ui: a gap's operation committed again under a later number
//	ListenChecker   -             yes             metrics: the seqlease.listen.deaf gauge and deaf checks counter
//	HistoryChecker  -             yes             metrics: the seqlease.history.lost counter and the HistoryLost alert
//
// The conformance suite checks each capability on every backend that has
// it. A type that embeds a backend to wrap some of its calls also gets the
// backend's capabilities, whose methods bypass the wrapper: it must wrap
// them too, or embed the consumer's interface (sequence.Store, say)
// instead of the backend, which hides them.
//
// # Streams and entries
//
// A stream is a named, dense sequence of entries numbered 1..N. Every number
// handed out has an entry; a number never handed out does not exist (I1). An
// entry is born leased and resolves exactly once (I2):
//
//	         Lease
//	           |
//	           v
//	      +---------+  Commit (token, before expiry)   +-----------+
//	      | leased  | -------------------------------> | committed |
//	      +---------+                                  +-----------+
//	        |     |
//	Release |     | ResolveExpired (at or after expiry)
//	(token) v     v
//	      +---------+
//	      |   gap   |  reason: released | expired | ...
//	      +---------+
//
// Extend moves the expiry of a leased entry forward while it is still live.
// A gap may later be filled (FillGap): it becomes committed, with the filler
// and the time recorded and its gap reason kept, so replays show it as
// filled. Trim removes resolved entries below a point (never past the
// watermark) and raises the stream's low point; reads below it fail with
// ErrTrimmed.
//
// # Reader checkpoints
//
// A reader (a projection, a relay) may keep a named position per stream: the
// last number it processed (Checkpoint, checkpoint.go). A save moves it
// forward only (ErrCheckpointBackwards) and never past the watermark
// (ErrCheckpointAhead: a reader only processes resolved entries); saving
// the same position again is a no-op success, so a retry is harmless.
// Refusals are *CheckpointError values and change nothing. On PostgreSQL a
// save can run in the reader's own transaction, so that its writes and its
// checkpoint commit together. A listing gives each checkpoint with its
// stream's watermark, read in one snapshot: the reader's lag.
//
// # Ordered commits and notifications
//
// An ordered commit of n (CommitParams.Ordered, CommitBatchParams.Ordered)
// is refused with ErrNotReady while any number below n is unresolved: the
// store itself enforces I4. Every resolution is reported to the backend's
// watchers (Watch, a Sink), after it took effect, which is how the barrier
// learns of resolutions made by other processes: one by one, or, after an
// ordered commit of n, as every number up to n (Sink.ResolvedThrough).
// A backend whose watch finds that it cannot hear the other processes
// (PostgreSQL: a LISTEN through a transaction-mode pooler) polls its sink
// instead, with Poll when the sink is a Poller, else with Reset.
//
// # Time
//
// The backend's clock decides expiry: PostgreSQL's clock_timestamp() at the
// statement, the memory backend's injected clock. A lease is live while
// now < ExpiresAt; at now == ExpiresAt it has expired (I3). Every operation
// takes an optional Now in its parameters to pin the backend's clock, which
// tests use to hit deadlines exactly; production leaves it nil. Times are kept
// at microsecond precision, PostgreSQL's.
//
// # Inbox records
//
// An inbox consumer takes messages from a broker that redelivers
// (at-least-once) and applies each message's effect once. A record is the
// pair (consumer, message id) and the time it was received, by the
// backend's clock (inbox.go, docs/inbox.md):
//
//	MarkReceived (consumer, id)
//	    |
//	    +-- no record:  write one, first = true   -> apply the effect
//	    +-- a record:   write nothing, first = false -> a duplicate: skip
//	    |
//	    v
//	PurgeReceived (received before a cutoff, in batches): the record goes,
//	and a later delivery of the same id would count as first again
//
// On PostgreSQL the record is written in the application's transaction
// with the effect (a postgres.Store over the pgx.Tx), so both commit or
// neither: a rollback removes both, and a concurrent MarkReceived of the
// same pair in another transaction waits for that transaction, then
// reports first = false if it committed, first = true if it rolled back.
// The memory backend decides at once.
//
// # Fencing and retries
//
// Commit, Release and Extend are fenced by the holder's Token: any other token
// gets ErrTokenMismatch and changes nothing. Commit and Release are idempotent
// for their holder: repeating one that already took effect reports success
// again without a second write, so a caller whose first attempt had an unknown
// outcome (a lost connection) retries with the same token and learns the truth
// (I7).
//
// # Named leases
//
// Named leases (namedlease.go) are TTL leases on a name, for leader
// election and mutual exclusion (package lease builds on them). Every change
// of holder of a name gets a larger fencing token (Fence); renewals keep it.
// At most one unexpired holding per name exists at any instant of the
// backend's clock (I8).
//
//	          AcquireLease (free: never held, ended, or expired)
//	              |
//	              v
//	         +---------+  RenewLease (owner, fence, now < ExpiresAt,
//	         |  held   |  renewals < MaxRenewals): ExpiresAt = now + TTL
//	         +---------+
//	ReleaseLease |  |  | ForceReleaseLeases (owner)
//	             |  |  +------------------------------+
//	             v  | now >= ExpiresAt                 v
//	      +----------+   |                    +----------------+
//	      | released |   v                    | force-released |
//	      +----------+ +---------+            +----------------+
//	                   | expired |  (CleanupExpiredLeases marks it;
//	                   +---------+   an acquire may take it over first)
//
// Every end state is free: the next AcquireLease starts a new holding with
// Fence+1. The row of a name is kept after its holding ends, so the fence
// counter survives release, expiry and cleanup.
//
// The watchers (WatchLeases) hear of every end by ForceReleaseLeases and
// CleanupExpiredLeases, but of a ReleaseLease only while the name is wanted:
// a waiting acquire (AcquireLeaseParams.Wait) that finds the name held marks
// it wanted for a while, atomically with finding it held, so a release
// either sees the mark or happened first (and the acquire takes the name).
// A release nobody waits for sends no notice. AcquireLeases and
// ReleaseLeases run several acquires or releases at once, each with the
// outcome the single call would have.
package store
