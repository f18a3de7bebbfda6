// Package cleanup is the loop that resolves expired leases, so that a crashed,
// stalled or partitioned worker never holds its stream's barrier for longer
// than its TTL plus one cleanup interval plus one cycle (I6).
//
// # A cycle
//
//	     ┌────────────── every Interval (jittered), and at Start ─────────────┐
//	     v                                                                    │
//	ListExpired (database clock, pages of BatchSize, in (stream, number) order)
//	     │
//	     ├─ more than CascadeThreshold? ──> cascade mode: batches of CascadeBatch
//	     │                                  with CascadeDelay between, and the
//	     │                                  Leaser's default TTL boosted
//	     v
//	per stream: lead it (Elector: one cleaner per stream across processes)
//	     │
//	     v
//	per expired entry, in number order:
//	     ├─ hooks (concurrently, with a timeout; never block the resolution)
//	     └─ probe the load ─> select steps ─> recovery pipeline
//	              (partial work / retry / gap; see package recovery)
//
// Walking a stream in number order, by one cleaner at a time, is what gives
// recovered work new numbers in the order of the originals. When no step
// resolves an entry (the database is down), the entry stays expired, the
// rest of that stream waits for the next cycle (to keep the order), and the
// loop backs off exponentially (up to MaxBackoff) before it tries again. A
// cancelled context ends the loop and is not an error.
//
// # Cascade mode
//
// A mass expiry (a node died holding a thousand leases, a database pause)
// finds more expired leases in one scan than CascadeThreshold. The cycle then
// works in bounded batches with a pause between them, so that recovery does
// not starve the live workers of the database, and it raises the Leaser's
// default lease duration by CascadeTTLFactor (capped at its maximum), so that
// leases granted during the overload do not expire in it too. The mode ends,
// and the boost with it, when a scan comes up short: the backlog drained.
//
// # Observing
//
// Config.Observer is told what each entry and each cycle came to, when
// cascade mode starts and ends, and which hooks failed. An Observer that
// also implements StepObserver is told every recovery step tried (feed a
// recovery.RateFilter from it), and one that implements Tracer follows each
// cycle and each recovery with the context it runs under (spans). The
// metrics package's CleanupObserver implements all three.
//
// # Lifecycle
//
// Start runs the loop in the background and returns; Stop cancels it and
// waits for the loop and every hook it started. Stop is safe before Start and
// twice. RunOnce runs one cycle in the caller's goroutine, for tests and
// operator tools.
package cleanup
