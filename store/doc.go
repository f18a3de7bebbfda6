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
//	InProcess       answers in process: batching saves nothing (memory)
//	OneByOne        a lease and a commit of one number that allocate nothing (memory)
//	MultiLeaser     leases of many streams in one statement (memory, PostgreSQL)
//	MultiCommitter  commits of many streams in one transaction (memory, PostgreSQL)
//	TxCommitter[T]  the caller's function in the committing transaction (PostgreSQL, pgx.Tx)
//	EarlyAcquirer   an acquire batch decided before it is durable (PostgreSQL)
//	TxRecoverer[T]  the caller's function in the transaction that moves expired work (PostgreSQL, pgx.Tx)
//	HookQueue       records of hooks to deliver, written with the resolutions (memory, PostgreSQL)
//	Appender        entries born committed, numbers and payloads in one step (memory, PostgreSQL)
//	ListenChecker   whether the watches hear the other processes: a self-check (PostgreSQL)
//	HistoryChecker  whether the database went back on history it showed (PostgreSQL, after an asynchronous failover)
//
// The conformance suite checks each capability on every backend that has
// it. A wrapper that embeds a backend gets its capabilities too: it must
// wrap them as well, or embed the consumer's interface instead.
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
// (at-least-once) and applies each message's effect once: MarkReceived
// records (consumer, message id) and reports whether this is the first
// receipt; PurgeReceived deletes the records past retention in bounded
// batches. On PostgreSQL the record is written in the application's
// transaction with the effect (a postgres.Store over the pgx.Tx), so both
// commit or neither, and a concurrent receipt of the same message waits for
// that transaction (inbox.go, docs/inbox.md).
//
// # Fencing and retries
//
// Commit, Release and Extend are fenced by the holder's Token: any other token
// gets ErrTokenMismatch and changes nothing. Commit and Release are idempotent
// for their holder: repeating one that already took effect reports success
// again without a second write, so a caller whose first attempt had an unknown
// outcome (a lost connection) retries with the same token and learns the truth
// (I7).
package store
