// Package model holds the model-based randomized test of seqlease (tests
// only, no code of its own): seeded schedules of concurrent operations run
// against both backends, with the library's own components, and every
// outcome is checked against a simple sequential model of the semantics.
//
// # The system under test
//
// Two processes on one store: on PostgreSQL, a fresh migrated schema that
// each process reaches through a pool of its own; on memory, one store
// whose clock only the schedule moves (memory.Config{Now}), shared by both.
// Each process has a barrier.Barrier, a sequence.Leaser (on the store
// through a cutter: it batches leases and commits across streams on both
// backends, memory too, and can lose the connection of a batch), a
// gap.Gaps and a cleanup.Service (default lease elector, so the two cleaners take turns
// per stream through named leases; a WorkTracker and an OperationTracker
// that answer from the schedule; a load probe the schedule sets; small
// batches and windows). Stream "o" gets ordered commits only, stream "u"
// both kinds; named leases "x" and "y" are taken by owners "p", "q", "r".
//
// # Schedules
//
// A schedule (schedule_test.go) is a list of rounds of one to three steps,
// generated from a seed; the steps of a round run concurrently, rounds one
// after another:
//
//	lease, lease-n       Leaser.Lease / LeaseN, TTL in ticks, with what the
//	                     trackers will know of the operation (partial work,
//	                     a completed result, failures first)
//	complete, commit     Lease.Complete (unordered), Lease.Commit (ordered:
//	                     it waits for its turn; see below)
//	release, extend      Lease.Release, Lease.Extend (which may shorten)
//	foreign              a store Commit of a handle's number with a foreign token
//	crash                the holder stops: no later step uses the handle
//	advance              time passes: the memory clock moves, or a sleep on
//	                     PostgreSQL (a stalled holder then acts past its TTL)
//	cleanup              Service.RunOnce at a low, medium or high load level
//	fill                 gap.Gaps.Fill under FillReasons(released, recovery-failed)
//	trim                 Trim below the reader's position
//	read                 the reader catches up (barrier.Entries, gaps included)
//	acquire, renew,      the store's named leases; an acquire of a name whose
//	release-name         holder expired is a steal
//	cut                  the process's next batch of commits (CommitMulti)
//	                     loses its connection, before the backend took it or
//	                     after: its callers get an unknown outcome
//
// One round in four, when a process has the handles for it, is three
// commits of that process on both streams (mostly Complete on "u", which
// never waits): with each batch of commits taking a millisecond, the later
// two share a batch across streams. The log counts those batches, and the
// batches cut.
// A tick is a second of the memory clock and 20 ms on PostgreSQL. An ordered
// commit still waiting when the rest of its round is done is cancelled,
// unless the backend's watermark says its turn came: then the barrier must
// wake it within 10 s (liveness). A commit whose batch was cut is retried
// with its handle once the round's steps are done, and the retry's outcome
// is the step's: it must report success exactly when the cut attempt had
// committed, or commit now (I7). A step that names a handle or holding
// that does not exist (a failed lease, a removed step) is skipped.
//
// # The model and the check of a round
//
// The model (ledger_test.go) is a ledger per stream and the current holding
// per name, as slices and maps, changed one operation at a time by the
// rules of DESIGN.md and the storage contract. Time is a window: the
// backend's clock read before and after the round (one instant on memory).
// An outcome that depends on expiry is allowed if some instant of the
// window allows it; times the backend returns (LeasedAt, the extension's
// now, AcquiredAt, RenewedAt, AsOf) are held to exactly.
//
// After each round (check_test.go):
//
//   - some interleaving of the round's actions explains every outcome and
//     ends in the state the backend shows: every retained entry (state,
//     token, expiry, payload, gap reason, recovery links, filler), the
//     stats (next number, watermark, low point, unresolved) and each named
//     lease. A step is one action; a cleanup cycle is one action per
//     tracker call (the entry must not be live), per resolution it wrote
//     (the entry and every earlier unresolved one expired: order), per
//     refusal; the search memoizes states so commuting orders are tried
//     once. A cancelled ordered commit counts as committed when the
//     backend shows it committed (I7), as nothing otherwise;
//   - the cycle against the trackers' answers: the pipeline of the load
//     level, in order; work found is moved with its recovery type, never
//     made a gap; a failed tracker leaves the entry, or after
//     MaxRecoveryAttempts failures makes it a recovery-failed gap; writes in
//     number order per stream;
//   - timestamps: what the round resolved, leased or filled has its time in
//     the window; commits before the expiry, expiry gaps at or after it (I3);
//   - liveness: a cycle leaves no entry that expired before the round
//     began, unless a live earlier lease or a failed recovery holds its
//     stream back, or the other process's cleaner led it (I6);
//   - each process's barrier watermark never goes back nor passes the
//     ledger's (I5);
//   - audit.Check on the entries read: I1, I2, I4 on "o", I5 on what the
//     reader yielded, I6 on every acknowledged commit.
//
// After the schedule every lease expires, cleanup cycles run until nothing
// is leased (I6), the reader catches up, audit.Stream audits each stream
// and the history of the named leases is checked for I8: per name,
// strictly increasing fences and no holding granted before the previous
// one ended or expired. The model itself checks I8 at every acquire.
//
// # Failures and shrinking
//
// A failure prints the seed, the round and what each of its steps
// returned, then a schedule shrunk by delta debugging (shrink_test.go):
// chunks of rounds, then single steps, then rounds split into sequential
// steps are removed while the schedule still fails the same way, each try
// on a fresh store (three tries, for races). TestModelFindsBugs proves the
// checker can fail: stores with a bug put in (a commit after the expiry, a
// released number missing from reads, an acquire that takes a live
// holder's name, an expired scan that lists live leases or none) are found
// and shrunk to two or three steps, which fail on PostgreSQL too.
// TestExtendAfterLocalDeadline keeps what it found fixed.
//
// # Running it
//
//	go test -run 'TestModel$' ./internal/model/          200 memory and 30 PostgreSQL schedules
//	SEQLEASE_MODEL_DURATION=10m go test -timeout 40m ...   each backend for 10 minutes (soak)
//	SEQLEASE_MODEL_SEEDS=500                               schedules per backend
//	SEQLEASE_MODEL_SEED=123                                one seed, as a failure prints it
//	SEQLEASE_MODEL_BACKEND=memory|postgres                 one backend
//	SEQLEASE_MODEL_STEPS=300                               steps per schedule (default 100)
//
// Seeds are random unless set; the log tells which ran. See
// docs/internals/reliability.md for what the test found.
package model
