// Package health is a health check that an application mounts: a
// Checker is an http.Handler (GET or HEAD: 200 when healthy, 503 when not,
// the report as JSON) and its Check method is a plain function for other
// transports (gRPC health, a CLI, a liveness file).
//
//	checker, err := health.New(&health.Config{
//		Database:    st,      // *postgres.Store: reachable and writable
//		Listen:      st,      // its watches hear the other processes
//		History:     st,      // no stream refused for lost history
//		Cleanup:     cleaner, // *cleanup.Service: runs, and passes
//		Streams:     st,      // each stream's watermark
//		Checkpoints: st,      // each reader's checkpoint
//	})
//	mux.Handle("GET /healthz", checker)
//
// # What it checks
//
// Each check runs only when its source is set in Config, and says why it
// fails, per component, with the figures it judged (Component.Observed)
// and the thresholds it applied:
//
//	database  Ping: one statement that would write but matches nothing
//	          (store/postgres): fails on an unreachable server, a hot
//	          standby, a read-only session, a schema not migrated
//	listen    the watches' LISTEN self-checks (store.ListenChecker): fails
//	          when none runs, when one is deaf (its own notice never came
//	          back: a transaction-mode pooler), or when one has not heard
//	          for ListenGrace (connecting, reconnecting)
//	history   the store's findings of lost history (store/postgres, after
//	          an asynchronous failover): fails while a stream or named
//	          lease is refused with store.ErrHistoryLost, naming them
//	cleanup   the loop's Status: fails when it is not running, or when no
//	          full pass over the expired leases ended for CleanupStale
//	          (default three intervals)
//	stream    per stream, by the backend's clock: fails when the entry
//	          that holds the watermark was leased more than MaxStall ago,
//	          or when more than MaxLag numbers were handed out beyond it
//	reader    per reader and stream (checkpoints): fails when the reader
//	          is more than MaxReaderLag behind the watermark, or behind
//	          and its checkpoint has not moved for MaxReaderStall
//	streams   the stream listing (readers: the checkpoint listing): it
//	readers   failed, timed out, or stopped at MaxStreams (MaxCheckpoints),
//	          then healthy, saying so
//
// The watermark, not the highest number, is what readers and ordered
// commits wait for, so the stream check measures what holds it: the age
// of the oldest unresolved entry and the count handed out beyond it. A
// high-water-mark check (Marten's async daemon check: a projection more
// than N events behind the store's highest sequence) cannot tell a reader
// that is slow from one that waits, rightly, behind an unresolved number,
// nor a busy stream from a stuck one; here the stream check says which
// entry holds the watermark and for how long, and the reader check
// compares each reader with the watermark, not the high-water mark, and
// tells a reader that lags but moves from one that stopped.
//
// # Running
//
// Check runs the checks side by side, each under its own Config.Timeout
// (default 2 s), and returns once every one has returned: it starts
// goroutines and waits for all of them, leaving none behind. A check that
// times out fails, saying so. The database, stream and reader checks cost
// queries (one, one per stream, one per page of checkpoints); the listen
// and cleanup checks read in-process state only. Nothing is cached: each
// probe checks afresh, so give probes an interval of seconds, not
// milliseconds. The streams and checkpoints are bounded (MaxStreams,
// MaxCheckpoints) so that a report stays cheap with many streams; name the
// ones that matter in StreamNames and Readers.
//
// Ages are taken by the backend's clock for entries and checkpoints (the
// database decides, as for expiry) and by the process's clock for the
// cleanup loop and the listeners, which record their own instants.
package health
