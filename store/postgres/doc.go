// Package postgres is the PostgreSQL backend of seqlease, on pgx/v5: the
// durable coordinator shared by every process and machine of a pipeline.
//
// # Tables
//
// Two tables in the configured schema (default "seqlease"), created by the
// migrations package:
//
//	streams (name PK, last_number, created_at)
//	entries (stream, number) PK, state, token, owner, operation_id, kind,
//	        leased_at, expires_at, renewals, resolved_at, payload,
//	        gap_reason, recovered_as
//
// with two partial indexes over unresolved entries only, (stream, number)
// and (expires_at), both WHERE state = 'leased', so the hot reads (the oldest
// unresolved number, the in-flight count, the expired scan) never touch the
// resolved history however long it grows.
//
// # Dense numbers
//
// A sequence (nextval) would leave a hole whenever a leasing transaction
// aborts, and a reader could only guess about a hole with a timeout. Instead
// one statement increments the stream's counter row and inserts the leased
// entries: they commit or abort together, so every number handed out has an
// entry and no other number exists. Leasing n numbers costs the same single
// statement, and the counter row's lock is taken once per batch.
//
// # Decisions at the row lock
//
// Commit, Release, Extend and ResolveExpired are single conditional UPDATEs.
// Their WHERE clause reads clock_timestamp() (the statement's clock, never the
// transaction's), and PostgreSQL re-evaluates it on the newest row version
// after waiting for a row lock, so a commit and an expiry resolution racing on
// one entry are decided by whoever takes the lock first: exactly one wins. A
// refused write is explained by a second, read-only statement; the fast path
// is one round trip. A commit locks its leased row first and then reads the
// clock once: that one reading decides (it is before expires_at) and is
// recorded as resolved_at, so every commit by a holder shows
// resolved_at < expires_at in the ledger, which the auditor checks (I3).
//
// # Many streams at once
//
// LeaseMulti leases for many streams in one statement: each stream's
// counter row bumped once by its count, the rows locked in stream-name
// order, so that two statements never deadlock on them. CommitMulti
// pipelines the conditional writes of many streams' commits in one batch,
// which PostgreSQL runs as one implicit transaction: one round trip, one
// WAL flush. CommitTx does the same in an interactive transaction, the
// caller's function of each item in a savepoint of its own. These are the
// backend's capabilities (store/capability.go) the sequence Leaser batches
// with (multi.go).
//
// # Notices
//
// The barriers of other processes learn of a resolution from a NOTIFY on
// the schema's channel. The resolving transaction does not send it:
// PostgreSQL serializes the commits of every transaction that issued
// NOTIFY, across the cluster, holding a lock through each commit's WAL
// flush, so resolving transactions that notified would all wait for each
// other. Instead the Store collects the resolutions that committed and
// notices them in a transaction of its own, after the commit, with
// synchronous_commit off (a notice is worth nothing after a crash, so its
// commit need not wait for a flush, and holds that lock for microseconds):
// one statement for everything collected since the last one, each notice
// packing the records of as many streams as fit in a payload (notice.go).
//
// A payload is lines separated by newlines (stream names hold no control
// characters): the sending Store's id (16 hex digits), then records of
// fields separated by tabs:
//
//	t <stream> <n>        every number of the stream up to n is resolved: an
//	                      ordered commit of n succeeded
//	r <stream> <numbers>  these numbers are resolved: a comma-separated
//	                      list of numbers n and ranges a-b (a < b)
//	s <stream>            something was resolved that the Store could no
//	                      longer list: re-read
//
// The Store's own Watch hears of its resolutions at once, in process, as
// they commit, and skips the notices that carry its own id. Who sends:
// while a Watch of the Store runs, a goroutine of the Watch sends what was
// collected as soon as the previous statement returned, so that resolving
// calls do not wait for it. Without a Watch, the resolving call sends
// before it returns. A Store in a caller's transaction hears nothing in
// process (the transaction may yet roll back): see In the application's
// transaction. A statement that fails puts its notices back, to go with
// the next one. A notice lost for good (the process crashed between the
// commit and the notice) only delays the other processes' wake-ups until
// their safety poll re-reads the stream; a listener that reconnects
// re-reads everything it may have missed.
//
// # Standbys
//
// A Standby (standby.go) reads a schema on a hot standby for ordered
// readers. A resolved entry never changes (I2), and a standby replays the
// primary's write-ahead log in order, so a reader that reads a standby,
// bounded by the watermark as replayed there, yields the primary's
// resolved sequence exactly, only later: ReadResolved stops, in one
// snapshot of the standby, below the first number that is leased (or not
// yet there) as replayed, whatever the barrier believes.
//
// A standby refuses what a Store does besides reading: LISTEN ("cannot
// execute LISTEN during recovery"), NOTIFY (which is not replicated
// anyway), and every write. A Standby therefore sends nothing but reads to
// its DB, and hears of resolutions in two ways:
//
//	poll:   every PollInterval  ───────────────────────────> sink.Reset (re-read the standby)
//	notice: LISTEN on the primary ─> pg_current_wal_lsn() on the primary = target
//	        ─> every ReplayPollInterval, on the standby:
//	           pg_last_wal_replay_lsn() >= target? ─(yes)─> deliver the notice's records
//	                                               ─(not within replayWaitMax)─> drop them
//
// A notice is delivered only once the standby has replayed the WAL up to
// where the primary was when the notice arrived, which is past the commit
// of everything the notice reports: the barrier over a Standby never
// believes a number resolved before the standby shows it (and if it did,
// ReadResolved would still stop at what the standby shows).
//
// Writes go to StandbyConfig.Primary, when given: SaveCheckpoint and
// DeleteCheckpoint, which a reader with ReadOpts.SaveEvery makes. Without
// it they fail with store.ErrReadOnly, having sent nothing.
//
// # Listening
//
// Watch and WatchLeases (and a Standby's Watch, on the primary) hear the
// other processes through LISTEN on the schema's channel, each on a
// connection of its own: one taken out of the DB (a pool), or dialled with
// Config.ListenDSN. One loop runs them all (listener.go); each watch only
// says how to read a payload and what its sink re-reads on a reset.
//
// A LISTEN through a transaction-mode pooler (PgBouncer's pool_mode =
// transaction) succeeds and then hears nothing, without an error: the
// pooler lends the server session that ran it to other clients between
// transactions. So each listening connection proves that it hears. Once
// it listens (at the start and after every reconnect) it resets its sink,
// which re-reads what notices it may have missed, and sends a self-check
// notice, "c<TAB><32 hex digits>" with a token of its own, on the channel
// through the DB like any notice, and waits up to Config.ListenCheckTimeout
// to hear it. The other listeners ignore it (no Store id, no lease record).
//
//	          LISTEN, send the self-check
//	connect ──────────────────────────────> checking ──(heard)──> hearing
//	   ^                                       │                   │
//	   │                                       (not heard in time) │
//	   │ after Config.DeafRecheckInterval      v                   │
//	   └─────────────────────────────────── deaf                   │
//	   └───────────────── (connection lost: backoff) ──────────────┘
//
// A deaf listener logs ListenDeafMessage at ERROR level (what to do:
// ListenDSN), counts in ListenHealth (metrics exports it), and has its sink
// polled every Config.DeafPollInterval until a later check hears:
// store.Poller's Poll if the sink has it, else Reset, which make the
// barrier re-read the watermarks of the streams with waiters and the lease
// Manager retry its blocked acquires, as notices would have had them do.
// After Config.DeafRecheckInterval it reconnects and checks again; it
// polls through the reconnect. Notices that do arrive are delivered as
// ever. A lost connection is dialled again with exponential backoff (up
// to a 30 s pause). Behind such a pooler, pgx's cached prepared statements
// fail too: interpretError turns those errors into a *PoolerError
// (ErrPooler) that names the setting, default_query_exec_mode=simple_protocol.
//
// # In the application's transaction
//
// InTx binds a Store to a pgx.Tx the application owns (tx.go): its leases,
// commits and appends commit or roll back with the application's rows,
// and a rollback leaves no hole, since the counter's increment rolls back
// with the entries. Append is the outbox write: one statement takes the
// next numbers and inserts them committed. Mind the counter row: a
// transaction that leased or appended holds the stream's counter row
// locked until it ends, and every other lease of that stream waits for
// it; keep such transactions short, or spread the writers over more
// streams. Watch and WatchLeases fail there with store.ErrUnsupported.
//
// Notices of what such a Store resolved cannot be sent after the commit
// by the Store, which does not see the commit, and notifying inside the
// transaction would serialize the commits of every notifying transaction
// in the cluster (docs/internals/architecture.md has the measurement). So,
// while a Watch of the root Store runs, the Store in the transaction hands
// what it resolved to the root, with the transaction's id
// (pg_current_xact_id(), returned by the resolving statement itself where
// it can). The root keeps one claim per transaction and stream, however
// many calls handed over: the highest "every number up to n" and the
// numbers as merged ranges, beyond maxClaimRanges a re-read of the stream
// (notice "s", always correct). The root's Watch then asks, in one
// read-only statement for every transaction awaited (confirm), each one's
// fate (pg_xact_status): for a transaction that committed (and whose
// commit its snapshot sees), whether what was handed over holds now (a
// savepoint rolled back inside a committed transaction undid its part,
// and that part is not noticed: of a range, the statement lists the
// numbers that are resolved); those resolutions are noticed as the root's
// own, in process and to the other processes. An aborted transaction's
// are dropped. A transaction still running is asked about again later,
// backing off from confirmFirst to confirmMax, and the statements are at
// least confirmGap apart; an id the server cannot judge yet (at or above
// its snapshot's xmax, as after a failover to a replica that lagged)
// counts as still running, so that it never fails the statement for the
// others. A transaction awaited longer than maxAwaitAge is dropped with a
// warning, and beyond maxAwaited transactions a hand-over is refused,
// counted and warned about.
//
// When the Watch stops, what is awaited stays for the next Watch. Without
// a running Watch (or beyond maxAwaited) the Store notifies in the
// transaction, and includes what it handed over before, so that a Watch
// stopping mid-transaction loses nothing of a transaction that resolves
// more afterwards. A statement the Store runs in the caller's transaction
// for its notices (that NOTIFY, or the query of the transaction's id)
// that fails aborts the transaction: the call returns the error (see
// noticeFailed). A notice missed anyway (the Watch stopped for good
// before the transaction ended; the transaction was awaited too long)
// only delays the other processes' wake-ups until their barrier's safety
// poll re-reads the stream.
//
// # Moving expired work
//
// RecoverExpired is one statement: it locks the expired entry, takes the
// stream's next number, appends the committed entry carrying the work and
// turns the old entry into a gap pointing at it, so a crash cannot leave one
// half. RecoverExpiredBatch does the same for many entries of a stream in
// one statement (one WAL flush), the new numbers in the old numbers' order;
// the cleanup loop uses it. Statements that take arrays lock rows through
// the primary key with number = ANY($n): once a prepared statement goes
// generic (after five runs), a join with unnest($n) is planned as a nested
// loop over the stream's unresolved entries, which made a batch of moves
// much slower (docs/internals/architecture.md has the figure).
//
// RecoverExpiredTx runs the same statement in an interactive transaction
// followed by the caller's function (store.TxRecoverer[pgx.Tx]): the
// application's writes for the moved work commit with the moves or not at
// all.
//
// # Pending hooks
//
// Another table, pending_hooks (migration 000005), holds the records of
// the cleanup loop's durable hooks (store.HookQueue). A resolving call
// asked to record them (the Hook field of its params) runs a variant of its
// statement with one more data-modifying CTE that inserts a record for each
// entry the statement resolved, copied from the row it updated: the record
// commits with the resolution or not at all, and the hot statements without
// hooks are unchanged. ClaimHooks takes due records with FOR UPDATE SKIP
// LOCKED and makes them due again only when the claim ends (a visibility
// timeout), so a deliverer that dies mid-delivery leaves its records to the
// next; AckHook and RetryHook are fenced by the claim's attempt number.
//
// # Parked work
//
// The recovery record of an expired entry (store.Parker) lives on its row:
// recovery_attempts, last_error and parked_at (migration 000006), NULL for
// the entries that never failed, so they cost those rows nothing. One
// UPDATE counts a failure and parks at the limit; a partial index holds the
// parked, leased rows, so ListParked and CountParked read only them. The
// entry listings show the record while the entry is leased.
//
// # Lost history
//
// A server that lost committed transactions (an asynchronous standby
// promoted before it received them) answers as if they never happened: a
// stream's counter is back where it was, and the next lease hands out
// numbers that were already handed out and perhaps committed; a named
// lease's fence is back, and the next acquire issues a fence that was
// already issued. Nothing in PostgreSQL tells: the promoted standby has
// the same system identifier as the old primary, and its timeline moved
// on just as it does after a failover that lost nothing.
//
// So the Store remembers, per stream, the highest number it saw exist
// (handed out by a lease, an append or a recovery, read as resolved, or a
// stream's counter) and the highest watermark it read, and per named
// lease the highest fence it saw (granted, or a holder's) (history.go). It notes the
// marks before it sends a statement and checks the answer against them:
// a statement that starts after a number was answered must answer above
// it, whatever ran concurrently, unless the server lost it. Comparing
// with the marks at the start, not at the answer, keeps concurrent
// statements of this process, whose answers may come back in any order,
// from looking like a loss.
//
// An answer of a write (a lease, an append, a recovery, an acquire: they
// reach the primary) that goes back is refused (the numbers or the fence
// are not handed out; the entries the statement made on the new server
// stay leased by nobody and expire like an abandoned lease), the finding
// is logged at ERROR level and counted (HistoryHealth: once per refusal),
// and every later lease of the stream, or acquire of the name, fails with
// the same *store.HistoryLostError until AcceptHistory or
// AcceptLeaseHistory. A read (Snapshot) that goes back refuses nothing:
// reads may be sent to a replica that is behind (a pooler that balances
// reads, a wrapper of the application's), which is no loss; it is logged
// at WARN and counted once until a read comes back level. A Store in a
// caller's transaction refuses what its root refuses but records and
// checks nothing: its statements may roll back, and a rolled-back number
// is rightly handed out again. A Standby's Store checks nothing either.
//
// Accepting a stream or name bumps the history's epoch and starts its
// mark afresh at that epoch; an answer to a statement sent with an older
// mark is not checked, for it may belong to the history just accepted.
// AcceptHistory also tells the Store's running watches (store.Forgetter:
// the barrier) to drop what they know of the stream, whose watermark may
// now be lower.
//
// The marks live in the process, about 100 bytes per stream and name, at
// most Config.HistoryLimit of each (two generations: marks, in history.go); a stream
// or name unused for long is forgotten, and its next answer starts a new
// mark. A process started after the loss has no marks and cannot tell; a
// process that saw only some of the lost numbers tells only when the
// server answers at or below those.
//
// # Pool saturation
//
// PoolSaturation (on the Store, or on any pool's statistics) is the share
// of the pool's connections in use, the cleanup loop's default
// pool-saturation signal for its load probe.
//
// # Waiting for a connection
//
// pgxpool waits for a free connection as long as the statement's context
// allows, so with every connection held elsewhere a call without a
// deadline would wait forever, saying nothing. A Store on a pool takes its
// connections itself, in one place (acquire.go): each wait is bounded by
// Config.AcquireTimeout (DefaultAcquireTimeout, 5 s), then the statement
// runs on the connection with the caller's context alone. A wait that ends
// unserved fails the call with a *PoolExhaustedError (ErrPoolExhausted)
// carrying the pool's MaxConns and the connections in use, before the
// statement was sent: the step changed nothing, and a commit may be
// retried with its token as after any failure (I7 needs no help). The
// caller's context ending first is the caller's error. New warns, without
// refusing, when the pool is smaller than MinPoolConns: the Leaser's lease
// statement and commit transaction, a Watch's notice sender, a cleanup
// loop and one worker's own transaction. A Watch's LISTEN connection is
// taken out of the pool (Hijack), which opens another in its place, so it
// counts against PostgreSQL's max_connections, not MaxConns. Statements
// on a caller's transaction (InTx, New on a pgx.Tx) take no connection and
// are not affected.
//
// # Named leases
//
// Two more tables hold named leases (package lease): leases, one row per
// name with its current or last holding and a fence that only grows, and
// lease_history, the audit trail (namedlease.go), whose records say why
// (reason) and, for a force-release, who and why (actor, comment; migration
// 000007). A third, lease_waiters, shows operators who waits for a name: the
// announcement a blocked acquire sends other processes (AnnounceLeaseWaiter)
// upserts its row, a withdrawal deletes it, and a row not refreshed within
// store.LeaseWaiterTTL is dead (CleanupExpiredLeases deletes it); the
// acquires write nothing more for it. Every decision is one
// conditional write whose WHERE clause reads the clock. Acquires of
// several names run in one statement that reads before it writes: a held
// name costs no write, no transaction id and no WAL flush (a refused
// INSERT ... ON CONFLICT DO UPDATE would still lock the row, take a
// transaction id and flush a commit record; a waiting acquire only marks
// the name wanted, now and then), and a free one is taken by a
// conditional update (or insert, for a name never held) compared with the
// statement's snapshot. Releases of several names run in one statement
// too, which commits without waiting for its WAL flush (see
// ReleaseLeases). Both statements are linear in their items (no part
// joins the items against the items) and take rows in name order.
// CheckFence guards a write in the caller's transaction with the lease's
// fencing token.
//
// Ends of holdings are announced on the schema's channel, the one the
// barrier listens to, with the payload "l<TAB>name": always by
// force-releases and the expiry cleanup, and by a release only when a
// blocked acquire marked the name wanted (wanted_until, see
// store.AcquireLeaseParams.Wait): a NOTIFY serializes the commits of
// every notifying transaction in the cluster (see Notices), so a release
// nobody waits for sends none. Blocked acquires announce themselves with
// "w<TAB>name<TAB>waiter<TAB>since<TAB>fence" (since in Unix microseconds
// by the database's clock, 0 to withdraw): a NOTIFY and no table write,
// whose transaction commits without waiting for a WAL flush. Names and
// owners hold no control characters, so the tabs are unambiguous; the
// listeners of resolutions ignore both kinds by their first field.
// docs/internals/leases.md tells how package lease uses them. A change to
// the settings table (settings.go, migration 000008: the defaults a fleet
// shares, store.Settings) sends "g<TAB>key" from the same statement; the
// lease watch tells a sink that is a store.SettingsSink, which re-reads
// the table.
//
// # Rows before the commit
//
// A statement of the extended protocol runs in an implicit transaction
// that commits at the Sync that follows it; PostgreSQL sends nothing
// before it flushes its output, at that Sync, after the commit (and a
// durable commit waits for its WAL flush). An acquire batch may ask for
// its rows ahead of its commit (decided.go: queryDecided sends a Flush
// request between the statement and the Sync): the server then sends the
// rows as soon as the statement has run, and commits after. The caller
// learns what the statement decided a WAL flush earlier, and may send its
// next statement (on another connection) while this one commits; nothing
// it read is final until the commit returns nil (store.EarlyAcquirer).
// The statement holds its row locks until it commits, so a statement that
// follows and touches the same rows waits for it, as it would for any
// other.
//
// # Inbox records
//
// The inbox table (migration 000004) holds (consumer, message_id) PK and
// received_at, indexed for retention (inbox.go). MarkReceived is one INSERT
// ... ON CONFLICT DO NOTHING: on a Store built over the caller's pgx.Tx it
// is part of that transaction, so the record commits or rolls back with
// the message's effect, and a second insert of the same pair waits for the
// transaction that holds the first. A duplicate takes no transaction id and
// writes no WAL. PurgeReceived deletes the oldest records below the cutoff,
// at most its limit per statement.
//
// # Errors
//
// Driver errors are mapped to the sentinels of package store in one place
// (interpretError). Every statement is parameterised; the schema name is
// validated and quoted with pgx.Identifier when the Store is built.
package postgres
