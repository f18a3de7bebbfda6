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
// No resolving statement sends NOTIFY: PostgreSQL serializes the commits
// of every transaction that issued one, cluster-wide, through each
// commit's WAL flush. The Store collects what committed and notices it to
// the other processes' listeners after the commit, in one statement with
// synchronous_commit off: a record per stream for all collected since the
// last, "t<TAB>stream<TAB>n" (every number up to n resolved, after an
// ordered commit of n) or "r<TAB>stream<TAB>list" (numbers and ranges),
// packed into as few notices as fit, each headed by the Store's id. A
// goroutine of the running Watch sends them; without a Watch the resolving
// call does, before it returns. The Store's own Watch hears of its
// resolutions in process and skips its own notices (notice.go).
//
// # Standbys
//
// A Standby (standby.go) reads a schema on a hot standby for ordered
// readers: a barrier.Source that sends the standby only reads (it refuses
// LISTEN, NOTIFY and writes), wakes its barrier by polling the standby
// and, given the primary's Store, on the primary's notices once the
// standby has replayed past them, and keeps checkpoints on the primary.
// Resolved entries never change, so what it reads is the primary's
// sequence, as far as the standby has replayed it.
//
// # Listening
//
// Watch and WatchLeases LISTEN on the schema's channel, each on a
// connection of its own (out of the pool, or dialled with
// Config.ListenDSN), and prove that it hears: a self-check notice sent
// through the DB, which they must hear within Config.ListenCheckTimeout.
// A listener that does not (a LISTEN through a transaction-mode pooler
// hears nothing, without an error) logs ListenDeafMessage at ERROR level,
// counts in ListenHealth, and polls its sink (store.Poller, else Reset)
// every Config.DeafPollInterval until a later check hears (listen.go).
// Behind such a pooler, pgx's cached prepared statements fail too:
// interpretError turns those errors into a *PoolerError (ErrPooler) that
// names the setting, default_query_exec_mode=simple_protocol.
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
// streams. What such a transaction resolved is noticed once it commits:
// while the root Store's Watch runs, the Store in the transaction hands
// its resolutions over with the transaction's id, and the Watch asks
// PostgreSQL (pg_xact_status) in one read-only statement for all the
// transactions it awaits, noticing what committed and still holds (not
// what a rolled-back savepoint undid) and dropping what aborted; without
// a Watch, the notices go in the transaction, which serializes the
// commits of the notifying transactions cluster-wide. The Watch keeps one
// claim per transaction and stream (merged ranges), bounded in count and
// age; what it awaits survives a stop, for the next Watch. A notice
// missed anyway is made up for by the barrier's safety poll. Watch and
// WatchLeases fail there with store.ErrUnsupported.
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
// loop over the stream's unresolved entries, which made a batch of 500 moves
// 50 times slower.
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
// # Lost history
//
// A server that lost committed transactions (an asynchronous standby
// promoted) hands out numbers and fences again. The Store remembers, in
// the process, the highest number, watermark and fence it saw of each
// stream and name, checks every answer that hands one out against the
// marks noted before its statement, and refuses an answer that goes back
// with a *store.HistoryLostError (store.ErrHistoryLost): the stream or
// name stays refused until AcceptHistory or AcceptLeaseHistory; the
// finding is logged at ERROR and counted (HistoryHealth, for metrics).
// A process started after the loss cannot tell (history.go).
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
// counts against PostgreSQL's max_connections, not MaxConns.
//
// # Named leases
//
// Two more tables hold named leases (package lease): leases, one row per
// name with its current or last holding and a fence that only grows, and
// lease_history, the audit trail (namedlease.go). Acquires of several names
// run in one statement that reads before it writes: a held name costs no
// write (a waiting acquire only marks it wanted, now and then), a free one
// is taken by a conditional update (or insert, for a name never held)
// compared with the statement's snapshot. Releases of several names run in
// one statement too, which commits without waiting for its WAL flush. Both
// statements are linear in their items (no part joins the items against
// the items) and take rows in name order. An acquire batch may ask for its
// rows ahead of its commit (decided.go: a Flush request before the Sync),
// so that the caller can send its next batch while this one's WAL flush
// runs; the outcomes count only once the commit returned
// (store.EarlyAcquirer).
// CheckFence guards a write in the caller's transaction with the lease's
// fencing token. Ends of holdings are announced on the schema's channel
// with the payload "l<TAB>name" (a release only when the name is wanted),
// and the blocked acquires of package lease announce themselves there too
// ("w<TAB>name<TAB>waiter<TAB>since<TAB>fence": a NOTIFY, no table write).
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
