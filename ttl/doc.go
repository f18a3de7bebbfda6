// Package ttl chooses lease durations: an adaptive policy that lengthens
// the TTL under load, and a TTL boost a whole fleet of processes shares
// through the database.
//
// # Policy
//
// A Policy hands out a TTL between Min and Max. Its Signal reports the
// load, 0 (idle) to 1 (saturated): the TTL grows with it from Min to Max,
// so that work slowed by a busy database or a busy pool still finishes
// inside its lease instead of expiring and being recovered, which would
// add to the load. Its Boost, when set, multiplies the result, which stays
// at most Max:
//
//	ttl = min(Max, (Min + load × (Max − Min)) × boost)
//
// sequence.Config.TTLPolicy and lease.Config.TTLPolicy take a Policy: it
// chooses the TTL of every lease whose call names none. The package has no
// dependency but package store, so both can use it without a cycle; it is
// not in package recovery, which is about what happens after an expiry,
// while a Policy decides before one.
//
// # Fleet boost
//
// When the cleanup loop finds a mass expiry it enters cascade mode, and
// the leases taken meanwhile should live longer, or they expire in turn
// while the database works through the backlog. A boost in one process
// protects that process only; Fleet keeps the boost in the settings table
// (the store.SettingTTLBoost row, "2 until 2026-01-02T15:04:05Z") so that
// every process of the fleet follows it:
//
//	cleanup (cascade) ── Raise ──▶ settings: ttl.boost = "2 until T"
//	                                  │  notice on the schema's channel,
//	                                  ▼  or the next poll
//	every Fleet: Factor() = 2 until T, then 1 ◀── Policy.Boost
//
// The end T is on the database's clock: a Fleet converts it into a
// deadline on its own clock when it reads the row (the remaining time, as
// the database counts it), so skewed clocks do not stretch or cut a boost.
// The boost ends by itself at T: a process that crashed in cascade mode
// leaves nothing on. An operator may set or delete the row (seqlease
// config set ttl.boost "3 until ...", config unset ttl.boost).
//
// # Failure handling
//
// A Fleet that cannot read the table keeps the boost it knew, which ends
// at its deadline anyway, and logs; it tries again at the next poll or
// notice. A Raise that fails is returned to the caller (the cleanup loop
// logs it and goes on with its in-process boost). On the memory backend
// the settings live in the Store, so every Fleet on one Store shares them,
// the in-process equivalent of a fleet on one schema.
package ttl
