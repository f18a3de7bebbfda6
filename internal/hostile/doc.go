// Package hostile holds the hostile-input tests of seqlease (no code of its
// own): names with quotes, semicolons and NUL bytes, very long and invalid
// UTF-8 text in every text field, schema names that try SQL injection,
// negative, zero and enormous durations, NaN shares, and payloads at their
// limit and one byte over, against the memory and the PostgreSQL backend and
// the packages above them. Each bad input must get a typed error (errors.Is
// against the package sentinels) and change nothing: the test compares the
// whole ledger and leases (memory: every read; PostgreSQL: a dump of every
// table of the schema) before and after. Inputs that are odd but valid
// (quotes, semicolons, SQL text in a name) must round-trip unchanged.
//
// See docs/internals/reliability.md for what was tried and found.
package hostile
