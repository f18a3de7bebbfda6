// Package audit checks a stream's ledger against the invariants of seqlease
// (docs/guarantees.md, I1-I6) and reports every violation precisely: which
// invariant, which number, what was wrong. It reads through the same Read
// call both backends offer, so one auditor serves memory and PostgreSQL,
// tests and operators (`seqlease audit`).
//
// # What is checked
//
//	I1 dense      the entries are exactly LowPoint..N, each number once, and N
//	              is the stream's last handed-out number
//	I2 once       every entry is leased, committed or a gap, with the fields
//	              its state requires; a filled gap says who filled it and
//	              when and keeps its reason; a gap whose work moved names a
//	              later committed entry that came from it, and no number's
//	              work moved twice
//	I3 expiry     every entry its holder committed was committed before its
//	              lease expired: a commit records the backend's clock
//	              reading that decided it, so resolved_at < expires_at; an
//	              entry born committed (appended, or moved work) has
//	              leased_at = expires_at = resolved_at; a filled gap is not
//	              held to it
//	I4 ordered    (Options.Ordered) no entry committed before an earlier
//	              number resolved, by the backend's resolution times; work
//	              moved by the cleanup loop is committed at the end of the
//	              stream without waiting and is not held to this
//	I5 reader     (Options.Observed) what a reader yielded is exactly the
//	              committed sequence, in order, each once
//	I6 no loss    (Options.Acknowledged) every commit that returned success
//	              is committed with its payload; (Options.MaxUnresolved) no
//	              lease stays unresolved longer than that past its expiry
//
// I3's other half (no commit with a foreign token), I7 (retry with the same
// token) and I8 (named leases) are properties of operations, not of a
// ledger at rest; the conformance suite and the fault tests check them.
//
// The auditor reads the ledger in pages, one statement each, while writers
// may run; a ledger that changes under it can only show entries resolving
// (never the reverse), so a clean report is sound for the prefix it read.
package audit
