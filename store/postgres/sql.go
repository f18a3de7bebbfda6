package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds the statements of a Store with the schema quoted in.
type queries struct {
	lease, leaseMulti, commit, release, extend   string
	resolveExpired, notices                      string
	probe, samePayload                           string
	listExpired, listExpiredStream               string
	read, streamExists, stats, now               string
	snapshot, readResolved, lowPoint             string
	summarize                                    string
	listGaps, listGapHistory, countGaps, fillGap string
	findCommitted                                string
	fillProbe, trim, recoverExpired              string
	resolveExpiredBatch, streams                 string
	recoverExpiredBatch, probeBatch              string

	// the resolving statements that also record a pending hook per entry
	// they resolve (hooks.go)
	resolveExpiredHook, resolveExpiredBatchHook string
	recoverExpiredHook, recoverExpiredBatchHook string
	claimHooks, ackHook, retryHook, addHooks    string
	hookStats                                   string
	appendEntries, xactID, confirm              string

	// parked work (parked.go)
	recordFailure, listParked, listParkedStream string
	countParked, unpark, parkedProbe            string
}

// entryColumns is the column list scanEntry reads.
const entryColumns = `stream, number, state, token, owner, operation_id, kind, leased_at,
	expires_at, renewals, resolved_at, payload, gap_reason, recovered_as, filled_at, filled_by,
	recovered_from, recovery_type,
	CASE WHEN state = 'leased' THEN COALESCE(recovery_attempts, 0) ELSE 0 END,
	CASE WHEN state = 'leased' THEN COALESCE(last_error, '') ELSE '' END,
	CASE WHEN state = 'leased' THEN parked_at END`

// nowExpr is the backend's clock at the statement: the pinned time when the
// caller passes one (tests do), clock_timestamp() otherwise. clock_timestamp,
// not now(): inside a long transaction now() is the transaction's start.
const nowExpr = `COALESCE($%d::timestamptz, clock_timestamp())`

func buildQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	q := queries{
		// The upsert of the stream row and the insert of the entries are one
		// statement, so one transaction: if it fails, the counter rolls back
		// with it and no number is lost (dense, I1). The row lock on the
		// stream row orders concurrent leasers. The leased-at time is read
		// after that lock (the CTE n depends on s). The tokens come from the
		// caller, and the numbers are base+1..base+len, so the statement
		// returns one row (base, leased-at) however many it leases: the
		// insert runs to completion whether or not the result reads it.
		lease: `
WITH s AS (
	INSERT INTO {s}.streams AS s (name, last_number) VALUES ($1, $2)
	ON CONFLICT (name) DO UPDATE SET last_number = s.last_number + EXCLUDED.last_number
	RETURNING s.last_number
), n AS (
	SELECT s.last_number - $2 AS base, ` + nowf(3) + ` AS t FROM s
), i AS (
	INSERT INTO {s}.entries (stream, number, state, token, owner, operation_id, kind, leased_at, expires_at)
	SELECT $1, n.base + r.ord, 'leased', r.token, $4, r.op, r.kind, n.t, n.t + r.ttl * interval '1 microsecond'
	FROM n, unnest($5::text[], $6::text[], $7::bigint[], $8::uuid[]) WITH ORDINALITY AS r(op, kind, ttl, token, ord)
)
SELECT n.base, n.t FROM n`,

		// lease for several streams in one statement: the items (one row
		// per number, $1..$5) are counted per stream (c), each stream's
		// counter row is bumped once by its count, in stream order (s: every
		// statement takes the rows it locks in the same order, so two
		// statements cannot deadlock), and the numbers of a stream's block
		// go to its items in item order. The leased-at time is read once
		// every counter row is locked (t reads all of s).
		leaseMulti: `
WITH r AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::uuid[])
		WITH ORDINALITY AS r(stream, op, kind, ttl, token, ord)
), c AS (
	SELECT stream, count(*) AS n FROM r GROUP BY stream
), s AS (
	INSERT INTO {s}.streams AS s (name, last_number)
	SELECT stream, n FROM c ORDER BY stream COLLATE "C"
	ON CONFLICT (name) DO UPDATE SET last_number = s.last_number + EXCLUDED.last_number
	RETURNING s.name, s.last_number
), t AS (
	SELECT max(` + nowf(7) + `) AS t FROM s
), n AS (
	SELECT r.*, s.last_number - c.n + row_number() OVER (PARTITION BY r.stream ORDER BY r.ord) AS number, t.t
	FROM r JOIN c ON c.stream = r.stream JOIN s ON s.name = r.stream, t
), i AS (
	INSERT INTO {s}.entries (stream, number, state, token, owner, operation_id, kind, leased_at, expires_at)
	SELECT n.stream, n.number, 'leased', n.token, $6, n.op, n.kind, n.t, n.t + n.ttl * interval '1 microsecond'
	FROM n
)
SELECT n.number, n.t FROM n ORDER BY n.ord`,

		// The conditional writes below are the moment of decision: the row
		// lock orders a commit against a concurrent expiry resolution, and
		// the clock is read in the WHERE clause, which PostgreSQL evaluates
		// again on the newest row version after waiting for a lock.
		// A commit first locks its leased row (l), then reads the clock
		// once (c, read after the lock: c scans l), and that one reading
		// both decides (expires_at > c.t) and is recorded as resolved_at:
		// the recorded time is the decision's, so resolved_at < expires_at
		// can be checked from the ledger alone (the auditor does, I3).
		// Nothing can change the locked row between the reading and the
		// write.
		// Resolutions send no NOTIFY here: PostgreSQL serializes the
		// commits of every notifying transaction in the cluster, WAL flush
		// included. The Store notices them to the other processes after the
		// commit (notice.go). An ordered commit ($6) also requires that no
		// earlier number is still leased (I4); the check reads the partial
		// index of unresolved entries.
		commit: `
WITH l AS (
	SELECT 1 FROM {s}.entries
	WHERE stream = $1 AND number = $2 AND token = $3::uuid AND state = 'leased'
	FOR UPDATE
), c AS MATERIALIZED (
	SELECT ` + nowf(5) + ` AS t FROM l
)
UPDATE {s}.entries
SET state = 'committed', payload = $4, resolved_at = c.t
FROM c
WHERE stream = $1 AND number = $2 AND token = $3::uuid AND state = 'leased'
	AND expires_at > c.t
	AND NOT ($6::boolean AND EXISTS (
		SELECT 1 FROM {s}.entries o WHERE o.stream = $1 AND o.state = 'leased' AND o.number < $2))
RETURNING resolved_at, pg_current_xact_id()::text::bigint`,

		release: `
UPDATE {s}.entries
SET state = 'gap', gap_reason = 'released', resolved_at = ` + nowf(4) + `
WHERE stream = $1 AND number = $2 AND token = $3::uuid AND state = 'leased'
RETURNING pg_current_xact_id()::text::bigint`,

		extend: `
UPDATE {s}.entries
SET expires_at = ` + nowf(4) + ` + $5 * interval '1 microsecond', renewals = renewals + 1
WHERE stream = $1 AND number = $2 AND token = $3::uuid AND state = 'leased'
	AND expires_at > ` + nowf(4) + `
RETURNING expires_at - $5 * interval '1 microsecond', expires_at`,

		resolveExpired: `
UPDATE {s}.entries
SET state = 'gap', gap_reason = $3, recovered_as = NULLIF($4, 0), resolved_at = ` + nowf(5) + `
WHERE stream = $1 AND number = $2 AND state = 'leased' AND expires_at <= ` + nowf(5),

		// Many expired entries of a stream become gaps in one statement:
		// one round trip and one WAL flush for the cleanup loop's batches.
		resolveExpiredBatch: `
WITH u AS (
	UPDATE {s}.entries
	SET state = 'gap', gap_reason = $3, resolved_at = ` + nowf(4) + `
	WHERE stream = $1 AND number = ANY($2::bigint[]) AND state = 'leased'
		-- the batch's range, so that even a generic plan reads only that
		-- slice of the stream's unresolved entries, not all of them
		AND number BETWEEN $5 AND $6
		AND expires_at <= ` + nowf(4) + `
	RETURNING ` + hookSource + `
){hook}
SELECT u.number FROM u ORDER BY u.number`,

		// One statement, so one transaction, moves expired work to a new
		// number: old locks the expired entry (re-checked after any wait
		// for its lock, like the conditional writes), s takes the next
		// number (the stream row's lock, as Lease), ins appends the new
		// committed entry with the recovery metadata, gap resolves the old
		// entry pointing at it.
		recoverExpired: `
WITH old AS (
	SELECT operation_id, kind FROM {s}.entries
	WHERE stream = $1 AND number = $2 AND state = 'leased' AND expires_at <= ` + nowf(7) + `
	FOR UPDATE
), s AS (
	UPDATE {s}.streams st SET last_number = st.last_number + 1
	FROM old WHERE st.name = $1
	RETURNING st.last_number
), ins AS (
	INSERT INTO {s}.entries (stream, number, state, token, owner, operation_id, kind,
		leased_at, expires_at, resolved_at, payload, recovered_from, recovery_type)
	SELECT $1, s.last_number, 'committed', gen_random_uuid(), $3, old.operation_id, old.kind,
		n.t, n.t, n.t, $4, $2, $5
	FROM s, old, (SELECT ` + nowf(7) + ` AS t) n
	RETURNING number
), gap AS (
	UPDATE {s}.entries e
	SET state = 'gap', gap_reason = $6, recovered_as = ins.number, resolved_at = ` + nowf(7) + `
	FROM ins WHERE e.stream = $1 AND e.number = $2
	RETURNING ` + hookSourceE + `
){hook}
SELECT ins.number, pg_current_xact_id()::text::bigint FROM ins, gap`,

		// recoverExpired for several entries of a stream in one statement,
		// so one transaction and one WAL flush: old locks the expired
		// entries among the requested ones through the primary key (in
		// number order, re-checked after any wait for a lock; a join with
		// the items here gets a nested-loop generic plan once the prepared
		// statement goes generic), s takes a block of as many numbers (the
		// stream row's lock), num gives them out in the old numbers' order
		// with the items' work, ins appends the new committed entries, gap
		// resolves the old ones pointing at them. Each move is whole: its
		// new entry and its gap commit together with the others or not at
		// all.
		recoverExpiredBatch: `
WITH old AS (
	SELECT e.number, e.operation_id, e.kind FROM {s}.entries e
	WHERE e.stream = $1 AND e.number = ANY($2::bigint[]) AND e.state = 'leased'
		AND e.expires_at <= ` + nowf(7) + `
	ORDER BY e.number
	FOR UPDATE
), k AS (
	SELECT count(*) AS n FROM old
), s AS (
	UPDATE {s}.streams st SET last_number = st.last_number + k.n
	FROM k WHERE st.name = $1 AND k.n > 0
	RETURNING st.last_number - k.n AS base
), num AS (
	SELECT old.*, r.payload, r.rtype, s.base + row_number() OVER (ORDER BY old.number) AS moved
	FROM old JOIN unnest($2::bigint[], $3::bytea[], $4::text[]) AS r(number, payload, rtype)
		ON r.number = old.number, s
), ins AS (
	INSERT INTO {s}.entries (stream, number, state, token, owner, operation_id, kind,
		leased_at, expires_at, resolved_at, payload, recovered_from, recovery_type)
	SELECT $1, num.moved, 'committed', gen_random_uuid(), $5, num.operation_id, num.kind,
		n.t, n.t, n.t, num.payload, num.number, num.rtype
	FROM num, (SELECT ` + nowf(7) + ` AS t) n
	RETURNING number, recovered_from
), gap AS (
	UPDATE {s}.entries e
	SET state = 'gap', gap_reason = $6, recovered_as = ins.number, resolved_at = ` + nowf(7) + `
	FROM ins WHERE e.stream = $1 AND e.number = ins.recovered_from
	RETURNING e.recovered_as, ` + hookSourceE + `
){hook}
SELECT gap.number, gap.recovered_as FROM gap ORDER BY gap.number`,

		// Append is Lease's statement inserting committed entries: the
		// counter row and the entries commit or abort together (dense,
		// I1), and no other transaction ever sees the entries leased. It
		// also returns the transaction's id (tx.go), which the insert
		// assigned already.
		appendEntries: `
WITH s AS (
	INSERT INTO {s}.streams AS s (name, last_number) VALUES ($1, $2)
	ON CONFLICT (name) DO UPDATE SET last_number = s.last_number + EXCLUDED.last_number
	RETURNING s.last_number
), n AS (
	SELECT s.last_number - $2 AS base, ` + nowf(3) + ` AS t FROM s
), i AS (
	INSERT INTO {s}.entries (stream, number, state, token, owner, operation_id, kind,
		leased_at, expires_at, resolved_at, payload)
	SELECT $1, n.base + r.ord, 'committed', r.token, $4, r.op, r.kind, n.t, n.t, n.t, r.payload
	FROM n, unnest($5::text[], $6::text[], $7::bytea[], $8::uuid[]) WITH ORDINALITY AS r(op, kind, payload, token, ord)
)
SELECT n.base, n.t, pg_current_xact_id()::text::bigint FROM n`,

		// The id of the caller's transaction, for a resolution whose
		// statement did not return it (tx.go).
		xactID: `SELECT pg_current_xact_id()::text::bigint`,

		// confirm judges what Stores in callers' transactions handed over
		// (tx.go), one row per check: the fate of its transaction ($1),
		// whether that transaction's end is visible to this statement's
		// snapshot (a commit is marked in the commit log a moment before
		// it becomes visible), and, only for a transaction committed and
		// visible, whether what it claimed holds now: every number in
		// [$3, $4] is resolved, or, with $5, every number up to $4 is (an
		// ordered commit of $4). A range with $4 < $3 claims nothing
		// checkable (a stream to re-read). A savepoint rolled back inside
		// a committed transaction fails its check; for a range, the last
		// column then lists the numbers of it that are resolved (the
		// ranges of several calls are merged). Resolutions are final, so
		// a check that holds states a fact, whoever made it true. An id
		// at or above the snapshot's xmax is still running as far as this
		// statement can tell, and is not passed to pg_xact_status, which
		// fails the whole statement for an id from its future (as after a
		// failover to a replica that lagged).
		confirm: `
WITH r AS (
	SELECT r.*, x.xid, CASE WHEN x.xid >= pg_snapshot_xmax(pg_current_snapshot()) THEN 'in progress'
		ELSE pg_xact_status(x.xid) END AS status,
		pg_visible_in_snapshot(x.xid, pg_current_snapshot()) AS visible
	FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::boolean[])
		WITH ORDINALITY AS r(x, stream, lo, hi, thru, ord),
		LATERAL (SELECT r.x::text::xid8 AS xid) x
), c AS (
	SELECT r.*, r.status = 'committed' AND r.visible AS ended, CASE
		WHEN r.status IS DISTINCT FROM 'committed' OR NOT r.visible THEN false
		WHEN r.hi < r.lo THEN true
		WHEN r.thru THEN
			EXISTS (SELECT 1 FROM {s}.streams s WHERE s.name = r.stream AND s.last_number >= r.hi)
			AND NOT EXISTS (SELECT 1 FROM {s}.entries e
				WHERE e.stream = r.stream AND e.state = 'leased' AND e.number <= r.hi)
		ELSE (SELECT count(*) FROM {s}.entries e
			WHERE e.stream = r.stream AND e.number BETWEEN r.lo AND r.hi AND e.state <> 'leased') = r.hi - r.lo + 1
		END AS holds
	FROM r
)
SELECT c.ord, COALESCE(c.status, 'unknown'), c.visible, c.holds, CASE
	WHEN c.ended AND NOT c.holds AND NOT c.thru AND c.hi >= c.lo THEN
		(SELECT array_agg(e.number ORDER BY e.number) FROM {s}.entries e
		WHERE e.stream = c.stream AND e.number BETWEEN c.lo AND c.hi AND e.state <> 'leased')
	END
FROM c ORDER BY c.ord`,

		// probeBatch explains the items recoverExpiredBatch did not move.
		probeBatch: `
SELECT number, state, gap_reason, filled_at IS NOT NULL
FROM {s}.entries WHERE stream = $1 AND number = ANY($2::bigint[])`,

		// probe explains a refused conditional write, in a new statement so
		// it sees the row as the write's decision left it.
		probe: `
SELECT state, token, gap_reason, resolved_at, filled_at IS NOT NULL,
	expires_at <= ` + nowf(3) + `,
	EXISTS (SELECT 1 FROM {s}.entries o WHERE o.stream = $1 AND o.state = 'leased' AND o.number < $2)
FROM {s}.entries WHERE stream = $1 AND number = $2`,

		// samePayload tells a holder's retry of a commit that took effect
		// (the same payload) from a commit of another payload.
		samePayload: `
SELECT COALESCE(payload, ''::bytea) = COALESCE($3::bytea, ''::bytea)
FROM {s}.entries WHERE stream = $1 AND number = $2`,

		listExpired: `
SELECT ` + entryColumns + ` FROM {s}.entries
WHERE state = 'leased' AND expires_at <= ` + nowf(1) + ` AND (stream, number) > ($2, $3)
ORDER BY stream, number LIMIT $4`,

		listExpiredStream: `
SELECT ` + entryColumns + ` FROM {s}.entries
WHERE state = 'leased' AND expires_at <= ` + nowf(1) + ` AND stream = $2 AND number > $3
ORDER BY number LIMIT $4`,

		read: `
SELECT ` + entryColumns + ` FROM {s}.entries
WHERE stream = $1 AND number > $2 ORDER BY number LIMIT $3`,

		streamExists: `SELECT true FROM {s}.streams WHERE name = $1`,

		// One statement, one snapshot.
		stats: `
SELECT s.last_number,
	(SELECT count(*) FROM {s}.entries e WHERE e.stream = s.name AND e.state = 'leased'),
	o.number, o.leased_at, s.low_point
FROM {s}.streams s
LEFT JOIN LATERAL (
	SELECT number, leased_at FROM {s}.entries e
	WHERE e.stream = s.name AND e.state = 'leased' ORDER BY number LIMIT 1
) o ON true
WHERE s.name = $1`,

		now: `SELECT clock_timestamp()`,

		// The barrier's starting point, one snapshot: the last number and
		// the first $2 unresolved numbers, from the partial index.
		snapshot: `
SELECT s.last_number, ARRAY(
	SELECT e.number FROM {s}.entries e
	WHERE e.stream = s.name AND e.state = 'leased' ORDER BY e.number LIMIT $2)
FROM {s}.streams s WHERE s.name = $1`,

		// Entries after $2 up to the watermark, in one snapshot: below the
		// stream's first unresolved number, wherever $2 is (a $2 above it
		// reads nothing), from the partial index; nothing when $2 reaches
		// below the low point (lowPoint then says why).
		readResolved: `
SELECT ` + entryColumns + ` FROM {s}.entries
WHERE stream = $1 AND number > $2
	AND number < COALESCE((SELECT min(number) FROM {s}.entries
		WHERE stream = $1 AND state = 'leased'), 9223372036854775807)
	AND $2::bigint >= (SELECT low_point - 1 FROM {s}.streams WHERE name = $1)
ORDER BY number LIMIT $3`,

		lowPoint: `SELECT low_point FROM {s}.streams WHERE name = $1`,

		streams: `SELECT name FROM {s}.streams WHERE name > $1 ORDER BY name LIMIT $2`,

		// The notices of resolutions that committed (notice.go), on the
		// schema's channel ($1), in a transaction that does not wait for
		// its WAL flush ($3; not in a caller's transaction).
		notices: `
WITH c AS (
	SELECT set_config('synchronous_commit', 'off', true) WHERE $3::boolean
)
SELECT count(pg_notify($1, p)) FROM unnest($2::text[]) AS p LEFT JOIN c ON true`,

		listGaps:       listGapsSQL, // gap.go and trim.go
		listGapHistory: listGapHistorySQL,
		countGaps:      countGapsSQL,
		findCommitted:  findCommittedSQL,
		fillGap:        fillGapSQL,
		fillProbe:      fillProbeSQL,
		trim:           trimSQL,

		claimHooks: claimHooksSQL, // hooks.go
		ackHook:    ackHookSQL,
		retryHook:  retryHookSQL,
		addHooks:   addHooksSQL,
		hookStats:  hookStatsSQL,
	}
	// The hooked variants: the same statement with one more CTE that
	// records a pending hook for each entry it resolved.
	q.resolveExpiredHook = `
WITH u AS (` + strings.TrimSpace(q.resolveExpired) + `
	RETURNING ` + hookSource + `
), h AS (` + hookInsert("u") + `)
SELECT u.number FROM u`
	q.resolveExpiredBatchHook = strings.Replace(q.resolveExpiredBatch, "{hook}", ", h AS ("+hookInsert("u")+")", 1)
	q.recoverExpiredHook = strings.Replace(q.recoverExpired, "{hook}", ", h AS ("+hookInsert("gap")+")", 1)
	q.recoverExpiredBatchHook = strings.Replace(q.recoverExpiredBatch, "{hook}", ", h AS ("+hookInsert("gap")+")", 1)
	for _, p := range []*string{&q.resolveExpiredBatch, &q.recoverExpired, &q.recoverExpiredBatch} {
		*p = strings.Replace(*p, "{hook}", "", 1)
	}
	for _, p := range []*string{&q.lease, &q.leaseMulti, &q.commit, &q.release, &q.extend, &q.resolveExpired,
		&q.probe, &q.samePayload, &q.listExpired, &q.listExpiredStream, &q.read, &q.streamExists, &q.stats,
		&q.snapshot, &q.readResolved, &q.lowPoint, &q.listGaps, &q.listGapHistory, &q.countGaps, &q.findCommitted,
		&q.fillGap, &q.fillProbe, &q.trim, &q.recoverExpired, &q.resolveExpiredBatch, &q.streams,
		&q.recoverExpiredBatch, &q.probeBatch, &q.appendEntries, &q.confirm, &q.resolveExpiredHook,
		&q.resolveExpiredBatchHook, &q.recoverExpiredHook, &q.recoverExpiredBatchHook, &q.claimHooks,
		&q.ackHook, &q.retryHook, &q.addHooks, &q.hookStats} {
		*p = strings.ReplaceAll(*p, "{s}", s)
	}
	q.recordFailure, q.listParked, q.listParkedStream = recordFailureSQL, listParkedSQL, listParkedStreamSQL
	q.countParked, q.unpark, q.parkedProbe = countParkedSQL, unparkSQL, parkedProbeSQL
	q.summarize = summarizeSQL
	for _, p := range []*string{&q.recordFailure, &q.listParked, &q.listParkedStream, &q.countParked,
		&q.unpark, &q.parkedProbe, &q.summarize} {
		*p = strings.ReplaceAll(*p, "{s}", s)
	}
	return q
}

// nowf returns nowExpr for parameter n.
func nowf(n int) string { return fmt.Sprintf(nowExpr, n) }
