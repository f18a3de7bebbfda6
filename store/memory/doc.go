// Package memory is the embedded, in-process backend of seqlease: the default
// for single-process pipelines, demos and fast tests. It keeps the semantics of
// the PostgreSQL backend exactly (the conformance suite in store/storetest
// runs against both) but nothing survives the process.
//
// # Layout
//
// Streams live in a sync.Map, so looking one up takes no lock shared between
// streams. Each stream has its own mutex guarding its ledger: the retained
// entries in fixed-size chunks indexed by number (numbers are dense, so
// number n is slot n-base), so leasing appends without ever copying what is
// already there and a trim drops whole chunks. A cursor, the first
// unresolved number, only moves forward over resolved entries; the watermark
// is that cursor minus one, and advancing it costs amortised O(1) per
// resolution. A count of open gaps is kept as gaps are made, filled and
// trimmed, so counting them reads no entry.
//
// Named leases (namedlease.go) follow the same rule: each name has a row
// with a mutex of its own; the indexes of live holdings and the audit
// history have short critical sections of their own. The history is kept in
// record order plus an index by time, so a retention trim costs what it
// deletes.
//
// # Watching
//
// Watch registers a sink that every resolution calls synchronously, under
// the stream's lock, so a stream's resolutions reach it in order. The sinks
// are a copy-on-write slice read without a lock on the hot path.
//
// # Time
//
// The store's clock (Config.Now, time.Now by default) plays the role of the
// database clock, truncated to microseconds like PostgreSQL's. Every call may
// pin it with the Now field of its parameters.
package memory
