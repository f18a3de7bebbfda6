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
// monotonic timers. A failed renewal is retried with exponential backoff
// until the local deadline; a refusal ends the lease at once. TryRenewNow
// renews on demand; Release and Close stop the loop and release. A
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
// lost notices.
//
// Across processes the hand-off is roughly first come, first served (see
// fair.go): the first waiter of each process that finds the name held
// announces itself to the others (a notice, no table write) with the time
// it asked by the backend's clock; when the name may be free, a first
// waiter that knows of an older waiter elsewhere holds back for
// HandoffGrace so that one takes it. One process alone never announces. A
// waiter whose process died costs at most one grace, and its announcement
// expires. Per-process FIFO queues merged by their first waiters' times
// give a global FIFO, to within the precision of those times (about a
// round trip). TryAcquire does not queue: it takes a free name at once.
//
// # Lifecycle and failures
//
// New gives a working Manager; Start adds the notice watch and the
// maintenance loop (CleanupExpired and the history retention, every
// CleanupInterval), and Stop releases every lease this process holds, then
// stops and waits for every goroutine, the subscriptions' included (a
// subscriber gets ReleaseTimeout to receive what is queued; the rest is
// dropped). Stop is safe before Start and twice. A Release ends the lease
// locally (Done, Context) before it frees the name in the backend, so a
// holder's Context never overlaps the next holder's.
// A lost connection makes renewals fail and retry until the local deadline,
// then the lease ends with ErrLost and the Context is cancelled before the
// backend's expiry. Bad input fails with an error matching
// ErrInvalidArgument and changes nothing. No PostgreSQL advisory locks are
// used: they do not survive transaction-mode poolers.
package lease
