// Package batch is the one batching engine of seqlease: concurrent calls of
// one kind share one backend call. Every batch in the library goes through
// it: the sequence Leaser's leases (across streams) and group commits
// (across streams), and the named-lease Manager's acquires and releases.
//
// # Leading
//
// A call that finds no backend call of its kind being sent takes the lead:
// it sends the queued calls (its own first, at most Config.MaxBatch of
// them, by Config.Size) in one, gives every caller its own result when the
// backend call returns, and hands the lead to the first caller queued by
// then, which sends the next batch, and so on. No caller serves others for
// longer than one backend call. (Several leaders sending at once were
// measured: more, smaller batches, fewer calls a second.)
//
//	Do ─────> queued ──lead──> leading ──send──> in flight ──> done
//	            │   (first queued,  │ (waits for a   │   (results
//	            │    lead free,     │  wave, takes   │    set; the
//	            │    < MaxInFlight) │  the queue)    │    lead moves
//	   ctx ends │                   │ ctx ends       │    on)
//	            v                   v                v
//	         removed           lead handed on    abandoned: its
//	                                             result goes to
//	                                             Config.Orphans
//
// # Early hand-off
//
// A backend that can says when it has decided a batch but not yet made it
// durable (the decided function of SendFunc): the commit of a PostgreSQL
// statement waits for its WAL flush. The leader then hands the lead on at
// once, so the next batch is decided while this one's commit is flushed,
// rather than after. At most Config.MaxInFlight backend calls are out at a
// time (one being decided, one committing); the callers of a batch get
// their results only when its backend call has returned, durable.
//
// # Waves
//
// The callers a batch just answered tend to call again at once, all
// together (a commit after a lease, a release after an acquire), and the
// first of them to arrive would otherwise find the lead free and go alone,
// splitting them in two backend calls. So a leader whose batch is not yet
// joined by the callers answered just before (within waveWindow) waits for
// them, for at most a quarter of a backend call. And while the callers do
// come back at once (goroutines that take turns in a loop: most of those
// answered call again within waveWindow), a leader also waits for the
// callers of the backend calls still out, of any kind sharing the Wave, to
// come back, for at most about one backend call: every caller then goes in
// one backend call per round, rather than in two half-full ones that
// overlap. (Two calls at once are slower than one of both: they contend for
// the same pages and each waits for its own WAL flush. Measured with 16
// goroutines of named leases: 14k cycles a second in rounds, 12k in two
// overlapping halves.) A Wave is shared by the Batchers whose callers
// alternate between them.
//
// Waiting is safe: a leader waits only for events that happen without it
// (a backend call returns; a woken caller calls), never for another
// leader, and always with a bound; and a caller's context ends its wait.
//
// # Outcomes
//
// Each request's result is the one a call of its own would have had: the
// backend decides the requests of a batch independently, and a consumer
// checks bad input before it queues a request, so one caller's bad input
// never fails the others. Waiting changes when a request is decided, never
// how. A call alone runs under its caller's context; a call shared with
// others runs under the leader's context without its cancellation, bounded
// by Config.Timeout, so one caller's context cannot fail the others.
//
// # Giving up
//
// A caller whose context ends returns at once: a queued call is removed (a
// leader that waits hands the lead on first); a call already sent is
// abandoned, and its result, when the backend call returns, goes to
// Config.Orphans (the Leaser releases numbers leased for nobody, the
// Manager releases grants). A leader whose batch is sent stays until it
// returns, unless Config.Async: then a batch of several is sent by a
// goroutine of the Batcher when the leader's context can end, so that the
// leader can give up like the others, and Close waits for those
// goroutines.
package batch
