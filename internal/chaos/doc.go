// Package chaos injects faults into seqlease on PostgreSQL and checks that
// the invariants survive them: the fault tests of `make test` and the soak
// of `make soak`. It holds the helpers (a harness of worker processes, a
// throwaway cluster, a protocol-aware TCP proxy, a checker of the
// named-lease history) and, in its tests, the faults.
//
// # Worker processes
//
// The harness (Harness) re-executes the running test binary as worker
// processes (TestWorker, which calls RunWorker when EnvWorker holds its
// WorkerConfig). Each worker has its own pool, whose connections carry an
// application_name of its own, a barrier, a sequence.Leaser, a
// lease.Manager and a cleanup loop (with the Retry step on a table of
// recorded results, and stream leases on that Manager, whose history the
// checks read). Goroutines lease, work, and commit in order through Commit
// or CommitTx (whose function writes a side row in the committing
// transaction); a commit whose outcome is unknown is retried with the same
// handle (I7). With Contend, a worker also campaigns for the named lease
// SingletonLease and writes rows guarded by its fence (postgres.CheckFence).
// A worker reports each acknowledged commit and its counts on standard
// output, one line each, and stops gracefully when its standard input
// closes: it must then exit 0 (no error, no data race, no leaked
// goroutine).
//
//	parent (test)                               worker process (xN)
//	  Spawn ──exec test binary, EnvWorker──────>  RunWorker: pool, barrier, leaser,
//	  read lines <──"chaos ack|stats|held|late"─    lease manager, cleanup, load
//	  Kill / Pause / Resume (signals)
//	  Terminate (pg_terminate_backend by application_name)
//	  Shutdown (close stdin) ──────────────────>  finish, stop, exit 0
//	  Drain (cleanup here), Verify
//
// # What is checked
//
// Verify (and, while workers run, Audit) runs audit.Stream on every stream
// with Ordered (I4), Acknowledged (I6: every commit a worker acknowledged
// is committed with its payload), Observed (I5: what a reader following the
// streams in this process yielded) and, mid-run, MaxUnresolved (I6); it
// checks the side rows against the ledger (exactly one per holder's
// CommitTx commit, none for a commit that did not happen, in number order),
// the fenced writes (a fence never goes back) and the named-lease history
// (I8, CheckLeaseHistory: no grant before the previous holding ended, fences
// increasing, renewals only while held).
//
// The fault tests check after every fault, while the load goes on, that the
// pipeline made progress and then that Audit finds nothing, with
// WorkerConfig.ResolveBound as the bound of MaxUnresolved: the workers'
// stream-lease TTL, cleanup interval with its jitter and backoff cap, and
// CycleAllowance for the cycle that resolves the lease. At the end they
// stop the workers, Drain and Verify.
//
// # The faults
//
//	kill -9           Proc.Kill at random moments; WorkerConfig.Die makes a
//	                  worker SIGKILL itself at an exact point of an operation
//	                  (Phases; "batch" is while a batch of commits of both
//	                  streams is in flight); every worker at once
//	connections       Harness.Terminate: every connection of the workers and
//	                  the reader, the LISTEN ones, or the busy ones
//	restart           Cluster: a cluster the test owns (initdb as the
//	                  postgres OS user), stopped fast or immediate and
//	                  started again, also after a 3 s outage
//	pause             SIGSTOP of a holder past its TTL, then SIGCONT
//	                  (WorkerConfig.Hold)
//	clock skew        sequence.Config.Now and lease.Config.Now ±10 min
//	lost reply        Proxy: a commit's request dropped before the server,
//	                  or its reply dropped after the server finished it;
//	                  pg_terminate_backend inside a commit's transaction
//
// # The soak
//
// TestSoak runs for the duration SEQLEASE_SOAK names (e.g. 10m), as `make
// soak` sets it, and for 15 s in `make test`: worker processes under all
// the faults above but the restart and the proxy, at random, with audits
// and progress checks every 30 s (every third of the run if it is shorter),
// then a report of the verdict and the load held.
package chaos
