// Package seqleasetest helps test code built on seqlease: a ready stack on
// the memory backend (or any other), a clock that expires leases without
// sleeping, one cleanup cycle on demand, and assertions on streams whose
// failures say what was found instead.
//
// # The stack
//
// Setup builds a Stack and stops it when the test ends:
//
//	st := seqleasetest.Setup(t, nil)          // memory, on a Clock at DefaultStart
//	pipeline := mypipeline.New(st.Leaser, st.Barrier)
//
//	st := seqleasetest.Setup(t, &seqleasetest.Config{Store: pgStore}) // any backend
//
// A Stack holds the Store, a started Barrier, a Leaser that commits through
// it, and a cleanup Service that is not started: a test decides when a
// cycle runs (RunCleanup), so what it checks afterwards does not depend on
// a timer. The configurations of each part may be given (Config.Leaser,
// Config.Cleanup, with trackers and hooks); the stack wires the parts
// together. New builds the same without a testing.TB, for Examples and
// helpers of your own.
//
// # Time
//
// On the memory backend the store's clock stands for the database's, and
// it alone decides expiry. Setup's memory store and the Leaser read the
// stack's Clock, which moves only by Advance and Set, so a test expires a
// lease by moving the clock past its TTL:
//
//	lease, _ := st.Leaser.Lease(ctx, "orders", &sequence.LeaseOpts{TTL: time.Minute})
//	st.Clock.Advance(2 * time.Minute) // the worker "crashed"; its lease is over
//	res, err := st.RunCleanup(ctx)    // one cycle: a gap, or the work recovered
//	st.RequireGap(t, "orders", lease.Number(), store.ReasonExpired)
//
// Timers are not faked: a Leaser's keep-alive and the cleanup loop's pauses
// run on real time, which a test that calls RunCleanup never waits for.
// PostgreSQL's clock cannot be moved; Expire makes one lease expire now on
// any backend, by renewing it with the store's clock pinned (the store's
// parameters allow that for tests), so the same test runs on both.
//
// # Assertions
//
// RequireCommitted, RequireGap, RequireWatermark and RequireAllResolved
// read the store, the source of truth, not the barrier's view of it. They
// take a TB, which *testing.T satisfies, report with Fatalf and name what
// they found ("the entry is a gap (reason "expired"), want committed"; the
// unresolved entries, with their holders and expiries, that hold a
// watermark back). Drain waits, bounded by its context, until every number
// handed out so far is resolved, and fails the same way when it is not.
// They use only the Stack's Store (and Drain its Barrier), so a literal
// &Stack{Store: st} over a stack your own code wired serves as well.
package seqleasetest
