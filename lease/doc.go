// Package lease provides named leases: TTL leases on a name, for leader
// election and mutual exclusion (one cleaner per stream, a fan-out cursor,
// a schema migration, one reply per inbox message, a periodic job). At most
// one holder holds a name at any instant of the backend's clock, and every
// change of holder gets a larger fencing token (invariant I8).
//
// A Manager acquires leases for one owner (this process) on a Store
// (store/memory, store/postgres): TryAcquire returns at once, with a
// *HeldError telling who holds the name; Acquire waits; AcquireAll takes
// several in sorted order, all or nothing; Hold and Run keep a lease renewed
// in the background (the runner). Each holding is a *Lease: Renew, Release,
// Check, and Done/Context/Err like an etcd Session.
//
// # A lease's life
//
//	                 TryAcquire / Acquire (name free)
//	                          |
//	                          v             Renew / keep-alive
//	                     +---------+ <------------------------+
//	                     |  held   |  (expiry += TTL, fence   |
//	                     +---------+   unchanged)  -----------+
//	                          |
//	  +----------------+------+-------+-----------------+------------------+
//	  | Release/Close  | local        | renewals failed | ForceRelease     |
//	  | (or Stop)      | deadline     | until the local | (an operator,    |
//	  |                | passed, no   | deadline; or    | a crashed        |
//	  |                | keep-alive;  | superseded;     | agent's owner)   |
//	  |                | or backend   | or MaxRenewals  |                  |
//	  v                | says expired v                 v                  |
//	released           v            lost           force-released          |
//	(ErrReleased)   expired       (ErrLost,        (ErrForceReleased)      |
//	                (ErrExpired)   ErrMaxRenewals)                         |
//
// Every end state frees the name in the backend (at once, or at the
// expiry), and the next holder gets the next fence. Done closes and Context
// is cancelled, with Err as the cause, on every transition to an end state;
// the subscribers (Subscribe) see one Acquired event, Renewed events, and
// exactly one end event per lease, in order.
//
// # Two clocks
//
// The backend's clock decides: a grant and a renewal return the backend's now
// and the new expiry (PostgreSQL's clock_timestamp(), read by the deciding
// statement). The holder only keeps a conservative local deadline on its
// monotonic clock: the start of the last successful attempt + TTL - a safety
// margin. The attempt started before the backend stamped it, so the local
// deadline always comes first, by at least the margin: a holder stops (its
// Context ends) before the backend could give the name to anyone else, even
// if its wall clock is wrong or it cannot reach the backend at all.
//
// # The runner
//
// KeepAlive (or Hold, or AcquireOpts.KeepAlive) renews at RenewShare (0.6) of
// the TTL plus a random jitter (up to 1 s, at most a tenth of the TTL), on
// monotonic timers. The share and the jitter are the lease's own
// (AcquireOpts.RenewShare, MaxJitter; the Config's by default), so one
// Manager serves leases of any cadence; RenewWith changes a lease's TTL,
// and the loop reschedules by it. A failed renewal is retried with exponential backoff
// until the local deadline, never pausing past a last attempt a round trip
// before it (lastTry), so a backend back before then keeps the lease; a
// refusal ends the lease at once. TryRenewNow
// renews on demand. Renewals of a lease take turns, and every one (Renew,
// TryRenewNow, the loop's) is bounded by its context, the local deadline
// and the end of the lease, also while it waits for its turn: a backend
// call that hangs, or a Renew of the holder's hung in one, never holds the
// loop, Release or Stop past the lease's end. Release and Close stop the
// loop and release. A
// backend notice that the name was freed (a force-release) makes the loop
// renew at once, so the holder learns it lost the name without waiting.
//
// # Fencing
//
// A lease can be lost while its holder is paused (GC, a stopped VM, a slow
// network) and the holder may not notice before it writes. Pass Fence to the
// systems the lease guards and have them refuse writes with an older fence.
// On PostgreSQL, postgres.CheckFence does it inside the caller's transaction:
// it fails unless the fence still holds, unexpired by clock_timestamp(), and
// locks the lease's row until the transaction ends, so no new holder can
// take over in between.
//
// # Waiting and fairness
//
// A try-acquire of a held name only reads (no WAL write on PostgreSQL).
// Blocking acquires of one process queue per name; only the first tries, so
// they get the name in the order they asked. A release in this process hands
// the name to the next waiter at once; a release elsewhere wakes it through
// the backend's notice (PostgreSQL NOTIFY, on a listening connection of its
// own), and a jittered poll (PollInterval, and the holder's expiry) covers
// lost notices. When the backend's watch cannot hear (store/postgres: a
// LISTEN that failed its self-check, as through a transaction-mode
// pooler), it polls the Manager (store.Poller) every few tens of
// milliseconds and the first waiters try again each time. A release sends that notice only when a waiter wants the
// name: the first waiter of a Manager that finds the name held, other than
// by a lease of its own Manager (whose release wakes it in process), marks
// it wanted for a while (longer than its pause before it tries again), in
// the same statement that finds it held, so a release either sees the mark
// or came first, and the waiter then takes the name.
// A release nobody waits for sends nothing (a NOTIFY makes PostgreSQL
// commit notifying transactions one at a time, cluster-wide).
//
// Across processes the hand-off is roughly first come, first served (see
// docs/internals/leases.md): the first waiter of each process that finds the name held
// announces itself to the others (a notice, no table write) with the time
// it asked by the backend's clock; when the name may be free, a first
// waiter that knows of an older waiter elsewhere holds back for
// HandoffGrace so that one takes it. One process alone never announces. A
// waiter whose process died costs at most one grace, and its announcement
// expires. A waiter that gives up withdraws its announcement in the
// background; a withdrawal that arrives late never hides the process's next
// waiter (it announces again). Per-process FIFO queues merged by their first waiters' times
// give a global FIFO, to within the precision of those times (about a
// round trip). TryAcquire does not queue: it takes a free name at once.
//
// # Coalescing
//
// Concurrent acquires of a Manager share backend calls, and so do its
// concurrent releases (see docs/internals/leases.md): on PostgreSQL, the acquires that
// queue while one statement runs go in the next one, each with the outcome
// it would have had alone, so many goroutines cost a few statements and
// commits per round rather than one each. A call that finds nothing in
// flight goes at once, alone; bad input never joins a batch; a caller whose
// context ends returns at once without failing the others, the one that
// leads a shared call too (the call goes on in a goroutine the Manager
// waits for, and a grant nobody waits for any more is released). The
// memory backend answers in process and is called directly.
//
// Three refinements keep the statements few and full when many goroutines
// take turns. A leader whose batch the callers answered a moment before are
// about to join (they were woken together, and call again at once) waits
// for them, briefly and with a bound, rather than go alone and split them
// in two statements. While the Manager's callers keep coming back at once
// (goroutines acquiring and releasing in a loop), a leader also waits for
// the statements still out, of either kind: every caller then goes in one
// statement per round (measured: fewer, fuller statements, which do not
// contend with each other for the same pages and WAL flushes). And once
// PostgreSQL has decided an acquire statement, before its commit is
// durable (the rows come ahead of the commit; see store/postgres), the
// next batch may be sent: no caller learns its outcome before its commit
// returns. Waiting changes when an item is decided, never how.
//
// # Lifecycle and failures
//
// New gives a working Manager; Start adds the notice watch and the
// maintenance loop (CleanupExpired and the history retention, every
// CleanupInterval), and Stop waits for the acquire attempts in flight,
// releases every lease this process holds, then stops and waits for every
// goroutine, the subscriptions' included (a subscriber gets ReleaseTimeout
// to receive what is queued; the rest is dropped): once it returns, the
// Manager holds nothing in the backend but leases whose release failed.
// Stop is safe before Start and twice. A Release ends the lease
// locally (Done, Context) before it frees the name in the backend, so a
// holder's Context never overlaps the next holder's.
// On PostgreSQL a release commits without waiting for its WAL flush: after
// a crash of the database, a release of its last moments may be undone,
// and the holding then stands until its expiry, as if its holder had
// crashed; no acquire can have relied on it (an acquire commits durably,
// and the WAL is flushed in order).
// A lost connection makes renewals fail and retry until the local deadline,
// then the lease ends with ErrLost and the Context is cancelled before the
// backend's expiry.
//
// A renewal can fail with its outcome unknown (ErrOutcomeUnknown): its
// statement may have been sent and its answer lost (the connection, or a
// context that ended meanwhile), so the backend may have moved the expiry
// a full TTL past what the holder was told. While the lease is held this
// changes nothing (a later renewal or a Release settles it). A lease that
// ends otherwise with such a renewal behind it, or whose renewal lands
// after it ended (its local deadline passed while the statement was out),
// is released by the library in the background, fenced by its token: the
// same release the keep-alive sends when it gives a lease up
// (releaseAfterEnd). Until then the lease stays among the Manager's live
// leases, so Stop releases it, or waits for that release. A renewal that
// certainly did not run (refused, or not sent: the store's error matches
// store.ErrNotSent) releases nothing: the holding then expires within the
// safety margin of the local deadline.
//
// # Acquires of unknown outcome
//
// An acquire can fail after the backend granted the name: its answer lost
// with the connection, or its context ended while the statement ran (the
// database may even run it later). Its error then matches
// ErrOutcomeUnknown: any failure of the backend call that is not a
// refusal (*HeldError, a read-only server), bad input, or a call not sent
// (store.ErrNotSent). Such a grant would block the name for its TTL,
// for this Manager too, since nobody holds a Lease of it. So the Manager
// looks for it (orphan.go): at once, then with pauses doubling from
// PollInterval until the TTL asked for has passed; whenever a blocking
// acquire of the name finds it held by this Manager's Owner; and once more
// in Stop. It reads the name's holding, and releases it, fenced by its
// token, only if nothing else can explain it: held by this Owner, never
// renewed, acquired after the first such acquire was sent (by the
// backend's clock: its now when read, less the local time elapsed since
// the send, so to within the read's own return trip), not the holding of
// a live Lease of this Manager, and no acquire attempt of the name in
// flight here (one that was granted but has not answered yet: it counts
// until its Lease is registered). A blocking acquire that finds its own
// lost grant so released tries again at once.
//
// The Owner names the holder to the backend, so give every Manager its own
// (the default is). Two Managers configured with one Owner string are one
// holder to the backend: ForceRelease and ListByOwner cannot tell them
// apart, and one that lost an acquire's answer may take the other's
// holding of that name for its lost grant, if the other acquired it after
// the lost acquire was sent (or within a round trip before) and has not
// renewed it yet; older or renewed holdings are never taken.
//
// # Stuck holdings
//
// A Monitor (Manager.NewMonitor) lists the live holdings every Interval
// under its own internal/lifecycle Life, and reports those acquired more
// than StuckAfter ago, renewals notwithstanding: a log line, a LongHeld
// event through the Manager's relay, the counts to its MonitorObserver.
// With ForceRelease it force-releases each one, fenced by its token
// (ForceReleaseLeases with Name and Fence), so a holding that changed
// hands meanwhile is never touched, and the history records MonitorActor
// and why; a lease of its own Manager ends at once, another process's
// holder learns it at its next renewal (ErrForceReleased). A failed check backs off; Stop waits for the check in progress.
//
// # Configuration at run time
//
// On a store that keeps the settings table (store.Settings), Start reads
// it before it returns, and the Manager re-reads it whenever the watch
// reports a change (store.SettingsSink) or a reset (settings.go). The
// values in force live behind one atomic pointer (conf), read where a
// default is taken: an acquire's TTL, renewals, timeout and whether it
// blocks, the keep-alive's
// share (taken at acquire), the history switch, the maintenance loop's pace. For each field,
// a non-zero Config value wins, else the table's, else the default. A
// table value is checked with New's own checks against this Manager's
// Config; one it refuses is logged and the value in force kept. Holdings
// already granted keep their TTL and MaxRenewals; a change applies to the
// acquires and renewals after it.
//
// Bad input fails with an error matching
// ErrInvalidArgument and changes nothing. No PostgreSQL advisory locks are
// used: they do not survive transaction-mode poolers.
package lease
