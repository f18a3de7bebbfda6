package main

import (
	"fmt"

	"github.com/seqlease/seqlease/cleanup"
)

// sectionNotes are printed under a section's table of figures: how its
// figures are made, and what bounds them.
var sectionNotes = map[string]string{
	secLimit: "pgbench (`-M prepared`, `-j` up to the CPU count, `-T` the window plus 50 ms a client in whole seconds " +
		"rounded down, as pgbench counts its connecting in `-T` but not in its tps) runs each script of bench/pgbench on a freshly migrated " +
		"schema of seqlease's own tables: (a) the lease statement's work (bump the stream's counter row, insert the " +
		"entry), (b) that lease and then the commit's conditional write as two transactions, without the ordering check " +
		"and without NOTIFY, (c) a named lease taken with one guarded upsert and released with one fenced update, " +
		"(d) script (b) with each client on a stream of its own ('pgbench-' || client_id), (d+notify) script (d) with " +
		"one `pg_notify` in the commit's transaction (nobody listens), (e) script (b) with the entry numbered by " +
		"`nextval` of a plain sequence (created in the fresh schema) instead of a counter row, one stream. " +
		"Every client of (a), (b) and (e) leases on the same stream, as the seqlease workers on one stream do, so the " +
		"counter row of (a) and (b) is hot; (e) has no counter row to wait on, and no density.",
	secStreams: "Workers loop on one stream of a fresh schema (pool of workers + 4 connections, TTL 1 min). " +
		"Lease coalescing is on (the default) everywhere; group commit is off with `MaxGroup: 1`. " +
		"The raw pgx loop runs exactly the statements of script (b). Every seqlease resolution is also noticed to the " +
		"barriers of other processes, after its commit, in a NOTIFY statement of its own that does not wait for its WAL " +
		"flush (one for everything resolved meanwhile): PostgreSQL serializes the commits of all notifying " +
		"transactions (async.c takes a cluster-wide lock before the commit and holds it until the commit, WAL flush " +
		"included, is done), so the resolving transactions send none.",
	secMany: "One process, one Leaser (coalescing and group commit on), w workers over s streams of a fresh schema: " +
		"worker i's k-th lease and commit are on stream (i + k·w) mod s, so with s <= w each stream has w/s workers " +
		"(worker i on stream i mod s), and with s > w worker i takes streams i, i+w, i+2w, ... in turn and every " +
		"stream gets work. Every row has a pool of 24 connections (the barrier's listener takes one): the Leaser " +
		"batches across streams (concurrent leases of any streams share one statement, ready commits of any streams " +
		"share one transaction, and the resolutions' notices go out after the commit), so a waiting worker holds no " +
		"connection. After the window, every stream must have no number unresolved and at least as many resolved " +
		"numbers as the loop counted. The limits to compare with are pgbench (d), each client on its own stream, " +
		"and (e), one stream numbered by a plain sequence.",
	secApp: "16 workers, each in a loop of application transactions (`pgx.BeginFunc` on a pool of 24 connections): " +
		"insert a business row into a table of its own (identity key, stream name, the payload), then what the row " +
		"adds, then commit. Worker i works on stream i mod s. Append and Lease + Complete run through " +
		"`Leaser.InTx(Store.InTx(tx))`; a barrier's Watch of the root Store runs, to which the transactions hand " +
		"what they resolved (it notices what committed, asking `pg_xact_status` for many transactions in one " +
		"statement), except in the no-Watch row, where the notice is a NOTIFY inside the transaction. The raw row " +
		"sends the Append statement's SQL for one number straight through pgx, no library. After the window the " +
		"business rows and the entries must be as many, and no number unresolved. Over 1 stream every transaction " +
		"waits for the counter row the one before it holds until its commit.",
	secNamed: "Each goroutine acquires and releases its own name (`TryAcquire` / pglock's `FailIfLocked`), or all 16 " +
		"contend for one name with blocking acquires; TTL 1 min, no keep-alive, pglock's heartbeats off. " +
		"seqlease's acquire reads before it writes (so a held name costs no write) and its release NOTIFYs only " +
		"when a waiter in another process marked the name wanted; the raw-notify rows show what that notice alone costs the raw loop. The WAL rows divide " +
		"the server's WAL growth during 500 failed tries by 500; other sessions' writes count too, so the target " +
		"uses the smallest run. " +
		"The 16 goroutines of one Manager share statements (lease/coalesce.go): a round of 16 cycles is about one " +
		"acquire statement, its WAL flush and one release statement, in sequence (traced: ~470 µs until the " +
		"acquire's rows, ~200 µs flush, ~375 µs release, ~140 µs for the goroutines to come back); the CPU is half " +
		"idle. What bounds it is that sequence: an acquire must be durable before its caller may act on it; " +
		"committing acquires without the flush (unsafe) measured 1.25x more, the history off 1.2x more, the CHECK " +
		"constraints dropped 3-5% more.",
	secMemory: "The in-memory backend with a started barrier. The bare ordered ticket is a mutex, a counter and a " +
		"channel per ticket that must wait: the least an in-process ordered commit can cost. Allocations are the " +
		"process's heap allocations in the window divided by the operations. The in-flight rows keep k leases " +
		"outstanding (lease one at the back, commit the one at the front) on one goroutine. Without retention " +
		"(Trim) the ledger grows for the whole run, as it does in a pipeline that never trims. What bounds lease + " +
		"ordered commit against the ticket (pprof, `-only 'mem/ordered/w=8' -memd 5s -cpuprofile`): per operation " +
		"it reads the clock three times (the store's clock at the lease and at the commit, which decide expiry, and " +
		"the Leaser's monotonic clock for the local deadline), draws a random holder token (crypto/rand) and " +
		"allocates the Lease handle; the clock reads alone were 16% of the CPU on these machines (about 55 ns " +
		"each), the token 5%. How fast the clock is varies between machines more than the ticket's cost does, so " +
		"this ratio moves between machines with the same code (0.33-0.37x at dfe9bdc on 2026-11-25 06:23, " +
		"0.25-0.28x for the same commit on another machine at 09:50, alternating with the newer code).",
	secCleanup: fmt.Sprintf("n leases of one stream with a 1 µs TTL, then one timed `cleanup.Service.RunOnce` (the gap "+
		"step; nothing to recover), on a fresh schema. Cascade pacing (a pause of %v after every %d resolutions, a "+
		"deliberate throttle) is off except in the row that says so. The time is PostgreSQL's (the client's CPU is "+
		"about a fifth of the wall time): each statement of 1,000 gaps takes ~11 ms wherever it falls in the stream "+
		"(EXPLAIN ANALYZE: 5 WAL records a gap, heap and four index entries), so 100,000 costs 10 times 10,000 "+
		"plus what a larger table costs the server (its backends write dirty buffers once the updated rows outgrow "+
		"clean shared_buffers): 11-13x between runs.", cleanup.DefaultCascadeDelay, cleanup.DefaultCascadeBatch),
	secWake: "Lease n-1 and n, park the ordered commit of n at the barrier, commit n-1. The latency runs from the " +
		"moment the store call committing n-1 returned (durable and acknowledged) to the moment the commit of n " +
		"reached the store (woken, and on its way). Group commit is off so that n cannot ride along with n-1. " +
		"In-process, the committing Leaser wakes the waiter itself; across pools the waiter's barrier hears " +
		"PostgreSQL's NOTIFY. A waiter woken before the committer had its reply counts as 0.",
}
