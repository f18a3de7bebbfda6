// Package memory is the embedded, in-process backend of seqlease: the default
// for single-process pipelines, demos and fast tests. It keeps the semantics of
// the PostgreSQL backend exactly (the conformance suite in store/storetest
// runs against both) but nothing survives the process.
//
// # Layout
//
// Streams live in a sync.Map, so looking one up takes no lock shared between
// streams; the stream looked up last is also kept in an atomic pointer, so
// the usual caller, working on one stream, skips the map (streams are never
// removed, so it cannot go stale). Each stream has its own mutex guarding
// its ledger: the retained entries in fixed-size chunks indexed by number
// (numbers are dense, so number n is slot n-base), so leasing appends
// without ever copying what is already there and a trim drops whole chunks.
// A cursor, the first unresolved number, only moves forward over resolved
// entries; the watermark is that cursor minus one, and advancing it costs
// amortised O(1) per resolution. A count of open gaps is kept as gaps are
// made, filled and trimmed, so counting them reads no entry.
//
// A ledger slot holds no pointer, so the garbage collector never scans the
// slots however long the ledger grows (a ledger that nobody trims grows for
// the life of the process, and every GC cycle would scan all of it):
//
//	chunk: slots [256]slot  token, times as microseconds + location index,
//	       │                text indexes, payload position, state, counters
//	       ├ texts []string  owners, kinds, operation ids, reasons (shared
//	       │                 with the caller; a field's repeat is stored once)
//	       ├ zones []*time.Location  the distinct locations of its times
//	       ├ small []byte    payloads of up to 4 KiB, back to back, copied in
//	       └ large [][]byte  larger payloads, one copy each
//
// Every entry reads back exactly as written, times in their own location.
// A payload that a fill replaces, and what a partly trimmed chunk's cleared
// slots referred to, stay until the chunk goes.
//
// The sequence Leaser leases and commits one number at a time on this store
// through calls that do what Lease and Commit do with nothing to allocate
// for the call (no request or result slice, no parameter struct), handed to
// it through package internal/inproc for a *Store exactly, never for a type
// that embeds one to wrap its calls. With the payload copied into its
// chunk, a lease and an ordered commit through the Leaser allocate only the
// Lease handle.
//
// Named leases (namedlease.go) follow the same rule: each name has a row
// with a mutex of its own; the indexes of live holdings and the audit
// history have short critical sections of their own. The history is kept in
// record order plus an index by time, so a retention trim costs what it
// deletes.
//
// Inbox records (inbox.go) are a map per consumer under one mutex:
// MarkReceived decides at once (there are no transactions to wait for);
// PurgeReceived reads every record of the consumers it purges.
//
// # Watching
//
// Watch registers a sink that every resolution calls synchronously, under
// the stream's lock, so a stream's resolutions reach it in order. The sinks
// are a copy-on-write slice read without a lock on the hot path.
//
// # Parked work
//
// The recovery records of expired entries (store.Parker) are few: each
// stream keeps them in a map by number, apart from the ledger's slots, and
// drops one when its entry resolves.
//
// # Time
//
// The store's clock (Config.Now, time.Now by default) plays the role of the
// database clock, truncated to microseconds like PostgreSQL's. Every call may
// pin it with the Now field of its parameters.
package memory
