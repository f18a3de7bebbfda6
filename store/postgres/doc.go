// Package postgres is the PostgreSQL backend of seqlease, on pgx/v5: the
// durable coordinator shared by every process and machine of a pipeline.
//
// # Tables
//
// Two tables in the configured schema (default "seqlease"), created by the
// migrations package:
//
//	streams (name PK, last_number, created_at)
//	entries (stream, number) PK, state, token, owner, operation_id, kind,
//	        leased_at, expires_at, renewals, resolved_at, payload,
//	        gap_reason, recovered_as
//
// with two partial indexes over unresolved entries only, (stream, number)
// and (expires_at), both WHERE state = 'leased', so the hot reads (the oldest
// unresolved number, the in-flight count, the expired scan) never touch the
// resolved history however long it grows.
//
// # Dense numbers
//
// A sequence (nextval) would leave a hole whenever a leasing transaction
// aborts, and a reader could only guess about a hole with a timeout. Instead
// one statement increments the stream's counter row and inserts the leased
// entries: they commit or abort together, so every number handed out has an
// entry and no other number exists. Leasing n numbers costs the same single
// statement, and the counter row's lock is taken once per batch.
//
// # Decisions at the row lock
//
// Commit, Release, Extend and ResolveExpired are single conditional UPDATEs.
// Their WHERE clause reads clock_timestamp() (the statement's clock, never the
// transaction's), and PostgreSQL re-evaluates it on the newest row version
// after waiting for a row lock, so a commit and an expiry resolution racing on
// one entry are decided by whoever takes the lock first: exactly one wins. A
// refused write is explained by a second, read-only statement; the fast path
// is one round trip.
//
// # Named leases
//
// Two more tables hold named leases (package lease): leases, one row per
// name with its current or last holding and a fence that only grows, and
// lease_history, the audit trail (namedlease.go). An acquire of a held name
// is a plain read; a free one is decided by one pipelined batch that locks
// the row and runs a conditional upsert. CheckFence guards a write in the
// caller's transaction with the lease's fencing token. Ends of holdings are
// announced on the schema's channel with the payload "l<TAB>name".
//
// # Errors
//
// Driver errors are mapped to the sentinels of package store in one place
// (interpretError). Every statement is parameterised; the schema name is
// validated and quoted with pgx.Identifier when the Store is built.
package postgres
