// Package barrier knows, for each stream, its watermark W: the largest w such
// that every entry 1..w is resolved (committed or a gap). WaitFor(n) blocks
// until W >= n-1, which is the moment an ordered commit of n may go ahead,
// and the ordered reader (Entries) yields resolved entries in order up to W,
// following the stream as it grows.
//
// # Knowing W without asking
//
// The barrier keeps, per stream it has been asked about, what it knows:
//
//	W ─────────────┐  every number up to W is resolved
//	               v
//	 1 2 3 4 5 6 7 8 [9] 10 11 [12] 13 14 ... Known | 15 16 17 ...
//	                  ^          ^                        ^
//	   unresolved at the snapshot (Snapshot.Unresolved)   numbers above Known:
//	                                                      unresolved until heard of
//
// A snapshot (one statement) gives W, Known and the numbers in (W, Known]
// that were unresolved. From then on, every resolution the backend reports
// (store.Sink: PostgreSQL LISTEN/NOTIFY, noticed by the resolving Store after
// the commit; the memory backend's direct calls) and every resolution this
// process makes itself is added to the picture, and W advances over every
// number known to be resolved. Each advance is O(1) per number, with no
// query. A report that every number up to n is resolved (ResolvedThrough,
// after an ordered commit of n) moves W to n at once.
//
// Everything the barrier records is a fact: a snapshot is true at its
// instant, a reported resolution is true forever (resolutions are final).
// Missing a notification (a listener that reconnected, a process that
// crashed between a commit and its notice) can therefore only make W lag,
// never run ahead. To
// bound the lag the barrier re-reads a snapshot whenever the backend says it
// may have missed something (Sink.Reset, after a reconnect), when a waiter
// arrives on a stream whose snapshot predates the last reset, when the
// watermark reaches the end of a snapshot that was cut at
// Config.SnapshotLimit, and on a slow safety poll (Config.PollInterval) for
// streams that have waiters. W never goes back: a snapshot older than what
// the barrier heard is merged, not trusted blindly.
//
// # Waking
//
// Waiters sit in a min-heap per stream keyed by the watermark they need. An
// advance pops exactly the waiters whose turn came: waking costs O(woken ·
// log waiting), not O(waiting), so a thousand workers parked behind one slow
// entry are not all woken by every unrelated resolution.
//
// # The hot path
//
// An in-process store reports a resolution under its own lock, and an
// ordered commit asks whether its turn came just before it commits, so the
// common calls avoid what they can: W is mirrored in an atomic, so Reached,
// and Ready when the turn has come, read it without the stream's lock (a
// reached W is a fact forever, even on a stream being evicted); the
// lifecycle state is an atomic, so waits take no barrier-wide lock; the
// stream looked up last is kept in an atomic pointer while it is not
// evicted, which spares the map lookup; and the resolution of the number
// right after W moves W without a trip through the set of heard numbers.
//
// # Memory
//
// A stream's state lives while it is used. On each safety poll the refresher
// drops the streams that had no waiter, no snapshot being read and no
// Watermark call during a whole poll interval; a dropped stream that is used
// again starts from a fresh snapshot, so nothing is lost (the backend keeps
// every resolution) and W still never goes back for any caller. Memory is
// thus bounded by the streams in use, not by every stream ever seen. A waiter
// that races the eviction finds the stream marked evicted under its lock and
// enqueues on a fresh one.
//
// # Readers
//
// Entries reads a stream in order up to W, a page per round trip, and with
// ReadOpts.Follow waits at W (WaitFor) for the stream to grow. Its position
// is the last number it passed, kept by the iteration itself: a read that
// failed is repeated from that position, so a follower that retries (with
// exponential backoff, warning each time) yields no entry twice and skips
// none. A pause ends early when the barrier hears that the stream's
// watermark moved (a resolution, a snapshot after the watch reconnected):
// the backend answers again, so after an outage (a failover) the follower
// reads at once rather than at the end of a pause that grew meanwhile. Only errors that retrying cannot cure end a follower: bad options,
// ErrTrimmed (the reader fell below the retention low point), a stopped
// barrier, its context's end; ReadOpts.StopOnError restores ending on the
// first failed read, which a reader that does not follow always does.
//
//	        ReadResolved ok                        page full: read on
//	  +--------------------------+           +------------------------+
//	  v                          |           v                        |
//	reading --(failed)--> pause (backoff) --> reading --(short page)--> waiting at W
//	  ^                                                                  |
//	  +------------------------- WaitFor(position+2) --------------------+
//
// ReadOpts.Reader names a reader: reading starts after the checkpoint it
// saved (the Source's Checkpoints). The consumer saves its position
// (store/memory and store/postgres SaveCheckpoint), on PostgreSQL in the
// transaction that applies what it read, so that its writes and its
// checkpoint commit together and a restart resumes exactly after the last
// applied entry. For a consumer whose side effects are elsewhere,
// ReadOpts.SaveEvery has the reader save it (CheckpointSaver) after every
// n entries the loop body returned from, when it catches up and when it
// ends: at-least-once.
//
// # Lifecycle
//
// Start runs two goroutines: the backend's Watch, and the refresher that
// serves resets and the safety poll. Stop cancels both and waits for them. It
// is safe to call Stop before Start, and twice. Waits need a running barrier:
// before Start and after Stop they fail with ErrNotStarted and ErrStopped.
package barrier
