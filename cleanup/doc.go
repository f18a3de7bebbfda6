// Package cleanup is the loop that resolves expired leases, so that a crashed,
// stalled or partitioned worker never holds its stream's barrier for long
// (invariant I6), and so that recovered work gets new numbers in the order
// of the originals.
//
// # A cycle
//
//	     ┌──── every Interval (+0..10% jitter), at Start; a failed listing: with backoff ───┐
//	     v                                                                                  │
//	ListExpired (database clock; pages of BatchSize, up to ScanLimit held at once)          │
//	     │                                                                                  │
//	     ├─ Pipeline.Level(backlog of the scan, pool saturation, last cycle) ─> level       │
//	     ├─ more than Cascade.Threshold? ─> cascade mode (below)                            │
//	     v                                                                                  │
//	per stream: lead it (Elector; default: named lease seqlease/cleanup/<stream>)           │
//	     │   another cleaner leads it ─> skip: it cleans the stream                         │
//	     v                                                                                  │
//	Snapshot of the stream's leased numbers; per expired entry, in number order:            │
//	     ├─ an earlier number still leased, not expired? ─> stop: the rest waits for it ────┤
//	     ├─ Pipeline.Select(level, kind) ─> steps ─> plan (trackers) ─> batch of writes     │
//	     │      gaps: ResolveExpiredBatch; moves: RecoverExpiredBatch (one transaction)     │
//	     │      MoveTx runs in the moves' transaction; both write durable hook records      │
//	     ├─ a step failed? ─> stop the stream: the entry stays expired (its work is kept);  │
//	     │      retried next cycle; only the pipeline's MaxAttempts, if set, gaps/parks it │
//	     └─ resolved by this cleaner ─> hooks (queued, Hooks.Concurrency at a time)         │
//	                                                                                        │
//	a stream that waits behind a live lease is walked again when that lease ────────────────┘
//	resolves (Config.Barrier) or expires (a timer at its expiry by the database clock)
//
// # Configuration
//
// The loop itself is configured by Config; what becomes of each expired
// lease is the recovery Pipeline's business (Config.Pipeline, built by
// recovery.New: the steps by load and kind, the trackers they ask, the
// attempt limit). Without one, every expired lease becomes a gap. Two
// optional sub-configs gather the rest: Config.Cascade (CascadeConfig,
// below) and Config.Hooks (HooksConfig, below).
//
// The interval may come from the store's settings table instead
// (store.Settings, key cleanup.interval), so a fleet agrees on it and an
// operator retunes it without a redeploy: a Service whose Config.Interval
// is zero reads the table in Start and again whenever the store's watch
// (WatchLeases, a store.SettingsSink) announces a change or reconnects; the
// loop then reschedules its next full cycle an interval after the start of
// the last one. A watch rather than a read per cycle, because a cycle may
// be as far as a day away: a change must not wait for it. A value New would
// refuse is logged and the interval in force kept. An explicit
// Config.Interval wins and opens no watch.
//
// # Order
//
// Each stream is walked in number order by one cleaner at a time, and the
// walk stops at the first number that is still leased and was not expired
// when listed (a live lease): expired entries behind it wait. So a later
// number whose shorter lease expired first never has its work moved before
// an earlier one's: recovered work gets new numbers in the order of the
// originals, across scans too. Waiting costs nothing: the watermark cannot
// pass the live earlier number anyway. The loop walks a waiting stream again
// as soon as the blocking lease resolves (Config.Barrier, a started
// *barrier.Barrier) or at its expiry, whichever comes first, and at the next
// cycle in any case.
//
// # One cleaner per stream
//
// The default Elector takes the named lease LeaseName(stream)
// ("seqlease/cleanup/<stream>", or a hashed form for very long names) on the
// shared store, with package lease: one cleaner walks a stream at a time
// across every process. The lease is taken per walk, kept alive while it
// runs and released when the cycle is done with the stream; a cleaner that
// dies holds its streams for at most LeaseTTL. The walk runs under the
// lease's context and checks it before every tracker call and every write:
// when the lease is lost the walk stops at once. The exactly-once and order
// guarantees do not rest on the lease but on the store's conditional writes
// (an entry is resolved once, whoever writes) and on every cleaner walking
// in number order; the lease keeps cleaners from doing work twice (tracker
// calls, hooks) and from racing each other. Writes are therefore not fenced:
// a deposed cleaner's late write is refused or is one the new cleaner would
// have made.
//
// # Failures
//
// A step that fails (a tracker or the database erred), unlike one that
// declines, stops the pipeline and the walk of its stream for the cycle: the
// entry stays expired, so recoverable work is not turned into a gap by a
// passing failure, and the entries after it wait (order). The stream is
// walked again at the next regular cycle, and the failure delays no other
// stream: the loop backs off exponentially (up to MaxBackoff) only when a
// cycle cannot list the expired leases at all (the store is unreachable).
// The same holds for a stream whose lease or snapshot failed. While it backs
// off, it reads the store's clock as often as its first pause (1 s): when
// the store answers again after it did not (an outage ended, a failover
// promoted a standby), a cycle runs at once, so the leases that expired
// during the outage do not wait for the end of a pause that grew meanwhile.
// A store that answers that probe but fails the listing (overloaded) keeps
// the backoff.
//
// A failing entry is never given up by default: its stream waits until the
// recovery succeeds, its watermark lag grows, and every failure is logged
// and reported (Observer.Handled, StepObserver: the metrics' failure
// results and RecoveryFailureRate alert). On a store that is a
// store.Parker (both built-in backends) each failure is also counted on
// the entry, with its error, so a restart forgets no attempt and operators
// see why. With an attempt limit set (recovery.Config.MaxAttempts), the
// MaxAttempts-th failure declares the entry a gap with reason
// recovery.ReasonRecoveryFailed (the stream goes on, and the work is
// lost), or, with recovery.Config.OnExhausted set to ExhaustedPark, parks
// it:
//
//	expired ──fail──> expired, attempts n ──...──> parked (attempts = MaxAttempts)
//	   ^                                             │   the loop skips it: no call,
//	   └──────────── UnparkEntry (attempts 0) ───────┤   no failure counted; its
//	                                                 │   stream waits behind it
//	              RecoverExpired (operator's work) ──┤
//	              ResolveExpired (given up: a gap) ──┘──> resolved
//
// A parked entry is never resolved by the loop: an operator chooses
// (the CLI's parked, unpark, fill-parked and give-up commands). A write whose reply was lost is read back: a move that
// committed is reported as the move it was. A cancelled context ends the
// loop and is not an error.
//
// # Cascade mode
//
// A mass expiry (a node died holding thousands of leases, a database pause)
// finds more expired leases in one scan than Cascade.Threshold. The cycle
// then writes at most Cascade.Batch resolutions per statement and pauses
// Cascade.Delay after each Cascade.Batch of them, so that recovery does not
// crowd the live workers off the database, and it raises the Leaser's
// default lease duration by Cascade.TTLFactor (capped at the Leaser's
// maximum), so that leases granted during the overload do not expire in it
// too. The mode ends, and the boost with it, when the cycle ends, whatever
// ends it (the backlog drained, a failure, Stop); entering and leaving are
// logged and reported (Observer.Cascade).
//
// The boost is process-local: it changes the default TTL of Cascade.Booster,
// the Leaser of this process, and no other. Another process's Leaser is
// boosted only while that process's own cleanup loop is in cascade mode
// (every loop lists the whole backlog, so each enters the mode on it, but
// at its own times), and a process that runs no cleanup loop is never
// boosted. Leases asked for with an explicit TTL are not boosted. The next
// cycle enters the mode again, and boosts again, while the backlog lasts.
//
// # Hooks
//
// Hooks (HooksConfig.BestEffort) release what an expired operation held.
// They run once per expired entry, after this Service resolved it (not for
// entries resolved by someone else, nor for entries left expired), from a
// queue of at most Hooks.Queue hooks served by at most Hooks.Concurrency
// goroutines, each bounded by Hooks.Timeout; a failure is logged and
// reported and never delays a resolution. Stop lets the queued and running
// hooks finish for up to Hooks.Grace, then cancels those still running and
// drops those still queued. A hook dropped (the queue full, the grace period
// over) is logged and reported with ErrHookDropped. Hooks are best effort: a
// crash between a resolution and its hooks skips them.
//
// # Durable hooks
//
// HooksConfig.Durable is a hook that survives a crash: delivered at least
// once. The statement that resolves an entry (a gap or a move, batched or
// not) also records a pending hook for it (store.HookQueue; on PostgreSQL
// a row of pending_hooks), so the record commits with the resolution. A
// deliverer owned by the Service claims due records, runs the hook and
// deletes a record only after the hook returned nil:
//
//	resolution + record ──(one transaction)──> pending ──claim──> running
//	                                             ^  ^                │
//	       claim lapsed (the deliverer died) ────┘  └── failed: backoff
//	                                                                 │
//	                                             deleted <── returned nil
//
// A record a crashed process left is delivered by any Service with a
// durable hook on the store once its claim (Hooks.Timeout + QueryTimeout)
// lapses; a hook may thus run more than once, so it must be idempotent,
// keyed by stream and number. Entries a custom step resolved with its own
// write get their record right after the step, in a write of its own
// (store.HookQueue.AddHooks). PendingHooks counts the records (a
// HookStatsObserver is told at most once per Hooks.Poll by the loop, and
// after each DeliverHooks), DeliverHooks delivers the
// due ones in the caller's goroutine. In memory the records live as long
// as the store.
//
// # The application's writes with the moves
//
// Config.MoveTx, a MoveTxFunc[T], runs inside the transaction that moves a
// batch of expired work (store.TxRecoverer[T]; T is pgx.Tx on PostgreSQL),
// with the moves: the writes the holders would have made with
// sequence.CommitTx commit with the moves or not at all. It is generic, as
// sequence.CommitTx is, so that this package does not depend on the
// driver; New refuses one the store cannot run. If it fails, the batch
// rolls back and its entries stay expired: a failed recovery of the first
// of them (the pipeline's attempt limit applies). The transaction, the
// function included, has its own bound, Config.MoveTxTimeout (default
// QueryTimeout): a batch that outlives it fails the same way. A custom step that calls
// RecoverExpired itself moves in its own transaction, without MoveTx.
//
// # Observing
//
// Config.Observer is told what each entry and each cycle came to, when
// cascade mode starts and ends, and which hooks failed. An Observer that
// also implements StepObserver is told every recovery step tried, one that
// implements Tracer follows each cycle and each recovery with the context
// it runs under (spans), and one that implements lease.Observer is told
// what the default elector's stream leases do (kind "cleanup"). The metrics
// package's CleanupObserver implements all four, and ExpiryObserver. The
// pipeline's rate filter (recovery.Config.MinStepSuccessRate) is fed from
// the same reports.
//
// Leases that expire often mean a TTL too short for the work: every
// ExpiryWindow the Service compares the expired leases it resolved on a
// stream with the numbers handed out on it meanwhile (the store's Stats
// after the cycle), tells an ExpiryObserver the share, and logs a warning,
// at most every 10 minutes, when it is above Config.ExpiryWarnShare (5%,
// the figure of the metrics package's expiration rate alert).
//
// # Lifecycle
//
// Start runs the loop (and the durable hooks' deliverer) in the background
// and returns; Stop cancels them, lets the hooks finish for up to
// HookGrace, cancels the rest, and waits for every goroutine it started.
// Stop is safe before Start, twice, and from a hook (it then does not wait
// for the hook that called it). RunOnce
// runs one full cycle in the caller's goroutine, for tests and operator
// tools. Status tells, at once, whether the loop runs and when its last
// full pass over the expired leases ended (a health check reads it: package
// health).
package cleanup
