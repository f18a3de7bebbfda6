// Package seqlease is the way in to seqlease: parallel work, results in one
// strict order, and no work lost or stalled by a crashed worker.
//
// Open a deployment on PostgreSQL (OpenMemory in one process, for tests
// and demos), with the schema named once:
//
//	db, err := seqlease.Open(ctx, pool, &seqlease.Options{Migrate: true})
//	if err != nil { ... }
//	defer db.Close()
//
// Open checks that the schema holds the migrations this build needs (or
// applies them, with Options.Migrate), then builds and starts the parts:
// the store, the barrier, the sequence leaser, the named-lease Manager and
// the cleanup loop that resolves the leases of crashed workers. Close stops
// them in order.
//
// Workers lease numbers of a stream, do the work in parallel, and commit;
// each commit waits until every earlier number is resolved, so results
// become visible in sequence order:
//
//	l, err := db.Lease(ctx, "orders", nil)
//	result := work(l.Context())      // ends if the lease is lost
//	err = l.Commit(ctx, result)      // waits for 1..n-1, then commits
//
// Readers read in order, never past the watermark, from a saved
// checkpoint:
//
//	for e, err := range db.Entries(ctx, "orders", &barrier.ReadOpts{Reader: "projection", Follow: true}) { ... }
//
// Inside a transaction of the application's, Tx appends (the outbox
// write), saves a reader's checkpoint with the writes that applied the
// entries (exactly once), and checks a named lease's fencing token, all
// committing or rolling back with the application's rows:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// the application's writes, then:
//		_, err := db.Tx(tx).Append(ctx, "outbox", nil, message)
//		return err
//	})
//
// Named leases (db.Leases()) elect leaders and guard mutual exclusion, with
// fencing tokens; the gaps a crashed or released number left are listed
// and filled through db.Gaps(). The parts are in their own packages
// (sequence, barrier, lease, gap, recovery, cleanup, metrics) and work
// alone too, for advanced wiring.
package seqlease
