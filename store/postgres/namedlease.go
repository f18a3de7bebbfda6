package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
)

// leaseQueries are the named-lease statements of one schema (the package
// doc, Named leases, tells the tables and the notices they send).
type leaseQueries struct {
	get, acquireOne, acquire, acquireWait, renew, releaseOne, release string
	forceRelease, cleanup, checkFence, checkFenceTx, listAll          string
	listByOwner, historyAll, historyByName, trimHistory, announce     string
	listWaiters, listWaitersByName                                    string
	historyAllNewest, historyByNameNewest                             string
}

// leaseSQL caches the statements per schema name.
var leaseSQL sync.Map // schema -> *leaseQueries

// leaseColumns are the columns scanLease reads after the backend's now.
const leaseColumns = `l.owner, l.fence, l.acquired_at, l.renewed_at, l.expires_at, l.renewals,
	l.max_renewals, l.ended_at, l.end_reason`

func leaseQueriesFor(schema string) *leaseQueries {
	if q, ok := leaseSQL.Load(schema); ok {
		return q.(*leaseQueries)
	}
	s := pgx.Identifier{schema}.Sanitize()
	q := &leaseQueries{
		// The holding of a name and the backend's now, in one round trip,
		// whether the name exists or not.
		get: `
SELECT x.t, ` + leaseColumns + `
FROM (SELECT ` + nowf(2) + ` AS t) x LEFT JOIN {s}.leases l ON l.name = $1`,

		// The statements that take arrays read them through a subquery
		// PostgreSQL does not flatten (OFFSET 0), and filter on the
		// ordinality (always true), so that the planner keeps one generic
		// plan that probes leases by primary key for each name
		// (docs/internals/leases.md, Coalescing, says why).
		acquire:     acquireSQL(false),
		acquireWait: acquireSQL(true),

		// The acquire of one name that does not wait ($1, the owner $2,
		// the TTL $3 and MaxRenewals $4): the statement of acquireSQL
		// without arrays and without the mark, for the most common call,
		// alone (it costs a tenth less). It returns the same columns, in
		// one row: granted, held (the holder), or neither (read again).
		acquireOne: `
WITH x AS (SELECT ` + nowf(5) + ` AS t),
o AS (
	SELECT l.owner, l.fence, l.expires_at, l.ended_at, l.ended_at IS NULL AND l.expires_at > x.t AS held,
		l.max_renewals > 0 AND l.renewals >= l.max_renewals AS maxed
	FROM {s}.leases l, x WHERE l.name = $1
), up AS (
	INSERT INTO {s}.leases AS l (name, owner, fence, acquired_at, renewed_at, expires_at, renewals, max_renewals)
	SELECT $1, $2, 1, x.t, x.t, x.t + $3::bigint * interval '1 microsecond', 0, $4 FROM x
	WHERE NOT EXISTS (SELECT 1 FROM o WHERE o.held)
	ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, fence = l.fence + 1,
		(acquired_at, renewed_at, expires_at) = (SELECT y.t, y.t, y.t + $3::bigint * interval '1 microsecond'
			FROM (SELECT ` + nowf(5) + ` AS t) y),
		renewals = 0, max_renewals = EXCLUDED.max_renewals, ended_at = NULL, end_reason = NULL
	WHERE (l.fence, l.expires_at, l.ended_at IS NULL) = (SELECT o.fence, o.expires_at, o.ended_at IS NULL FROM o)
		AND (l.ended_at IS NOT NULL OR l.expires_at <= ` + nowf(5) + `)
	RETURNING l.fence, l.acquired_at, l.expires_at
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at, reason)
	SELECT $1, o.owner, o.fence, 'expired', o.expires_at, o.expires_at, CASE WHEN o.maxed THEN 'max-renewals' ELSE 'lost' END
	FROM up, o WHERE $6::boolean AND o.ended_at IS NULL
	UNION ALL
	SELECT $1, $2, up.fence, 'acquired', up.acquired_at, up.expires_at, NULL FROM up WHERE $6::boolean
)
SELECT 1::bigint, NULL::text, x.t, up.fence, up.acquired_at, up.expires_at, o.owner, o.fence, o.expires_at, false, false
FROM x LEFT JOIN up ON true LEFT JOIN o ON o.held`,

		// Fenced by the exact holding (name, fence, owner); the clock in the
		// WHERE clause is read again after a row lock wait, and the new
		// expiry is stamped from one reading, capped just below the old
		// expiry: the WHERE clause saw the clock before it when it decided.
		renew: `
WITH u AS (
	UPDATE {s}.leases
	SET (renewed_at, expires_at) = (SELECT y.t, y.t + $5::bigint * interval '1 microsecond'
		FROM (SELECT LEAST(` + nowf(4) + `, expires_at - interval '1 microsecond') AS t) y),
		renewals = renewals + 1
	WHERE name = $1 AND fence = $2 AND owner = $3 AND ended_at IS NULL
		AND expires_at > ` + nowf(4) + `
		AND (max_renewals = 0 OR renewals < max_renewals)
	RETURNING acquired_at, renewed_at, expires_at, renewals, max_renewals
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at, reason)
	SELECT $1, $3, $2, 'renewed', u.renewed_at, u.expires_at, 'renewed' FROM u WHERE $6::boolean
)
SELECT acquired_at, renewed_at, expires_at, renewals, max_renewals FROM u`,

		// The releases of distinct names, fenced by the exact holdings;
		// the NOTIFY only for names a waiter wants. It returns the
		// ordinals of the released items (u returns them: nothing joins
		// the items against the items). With $7, its transaction commits
		// without waiting for the WAL flush (see ReleaseLeases).
		release: `
WITH r AS (
	SELECT r.* FROM (SELECT $1::text[] AS a, $2::bigint[] AS b, $3::text[] AS c OFFSET 0) p
	CROSS JOIN unnest(p.a, p.b, p.c) WITH ORDINALITY AS r(name, fence, owner, i)
	WHERE r.i >= 1 AND r.i <= cardinality(p.a)
), u AS (
	UPDATE {s}.leases l SET ended_at = ` + nowf(4) + `, end_reason = 'released'
	FROM r WHERE l.name = r.name AND l.fence = r.fence AND l.owner = r.owner AND l.ended_at IS NULL
	RETURNING r.i, l.name, l.owner, l.fence, l.ended_at, l.expires_at, l.wanted_until > l.ended_at AS wanted
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at, reason)
	SELECT u.name, u.owner, u.fence, 'released', u.ended_at, u.expires_at, 'released' FROM u WHERE $5::boolean
), c AS (
	SELECT set_config('synchronous_commit', 'off', true) WHERE $7::boolean
)
SELECT u.i FROM u
	LEFT JOIN LATERAL (SELECT pg_notify($6, 'l' || chr(9) || u.name) WHERE u.wanted) n ON true
	LEFT JOIN c ON true`,

		// The release of one holding ($1, $2, $3): the release statement
		// without arrays, for a call alone. It returns 1 if it released.
		releaseOne: `
WITH u AS (
	UPDATE {s}.leases SET ended_at = ` + nowf(4) + `, end_reason = 'released'
	WHERE name = $1 AND fence = $2 AND owner = $3 AND ended_at IS NULL
	RETURNING name, owner, fence, ended_at, expires_at, wanted_until > ended_at AS wanted
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at, reason)
	SELECT u.name, u.owner, u.fence, 'released', u.ended_at, u.expires_at, 'released' FROM u WHERE $5::boolean
), c AS (
	SELECT set_config('synchronous_commit', 'off', true) WHERE $7::boolean
)
SELECT 1::bigint FROM u
	LEFT JOIN LATERAL (SELECT pg_notify($6, 'l' || chr(9) || u.name) WHERE u.wanted) n ON true
	LEFT JOIN c ON true`,

		// The clock is read per row, after its lock.
		forceRelease: `
WITH u AS (
	UPDATE {s}.leases l SET ended_at = ` + nowf(2) + `, end_reason = 'force-released'
	WHERE l.owner = $1 AND l.ended_at IS NULL AND l.expires_at > ` + nowf(2) + `
		AND ($7::text = '' OR l.name = $7) AND ($8::bigint = 0 OR l.fence = $8)
	RETURNING l.name, l.ended_at AS now, ` + leaseColumns + `
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at, reason, actor, comment)
	SELECT u.name, u.owner, u.fence, 'force-released', u.ended_at, u.expires_at, 'force-released',
		NULLIF($5::text, ''), NULLIF($6::text, '')
	FROM u WHERE $3::boolean
)
SELECT u.name, u.now, u.owner, u.fence, u.acquired_at, u.renewed_at, u.expires_at, u.renewals,
	u.max_renewals, u.ended_at, u.end_reason
FROM u, LATERAL pg_notify($4, 'l' || chr(9) || u.name) n ORDER BY u.name`,

		// Bounded and skipping rows other cleaners (or deciders) hold.
		cleanup: `
WITH x AS (SELECT ` + nowf(1) + ` AS t),
c AS (
	SELECT l.name FROM {s}.leases l, x
	WHERE l.ended_at IS NULL AND l.expires_at <= x.t
	ORDER BY l.acquired_at, l.name LIMIT $2
	FOR UPDATE OF l SKIP LOCKED
), u AS (
	UPDATE {s}.leases l SET ended_at = x.t, end_reason = 'expired' FROM c, x
	WHERE l.name = c.name AND l.ended_at IS NULL AND l.expires_at <= x.t
	RETURNING l.name, l.owner, l.fence, l.expires_at, l.max_renewals > 0 AND l.renewals >= l.max_renewals AS maxed
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at, reason)
	SELECT u.name, u.owner, u.fence, 'expired', u.expires_at, u.expires_at,
		CASE WHEN u.maxed THEN 'max-renewals' ELSE 'expired' END
	FROM u WHERE $3::boolean
), w AS (
	-- the waiters whose announcements ran out (bounded like the holdings)
	DELETE FROM {s}.lease_waiters d USING (
		SELECT w.name, w.waiter FROM {s}.lease_waiters w, x WHERE w.until <= x.t LIMIT $2
	) k WHERE d.name = k.name AND d.waiter = k.waiter
)
SELECT count(*) FROM u, LATERAL pg_notify($4, 'l' || chr(9) || u.name) n`,

		checkFence: `
SELECT l.fence, l.end_reason, l.expires_at > ` + nowf(2) + `
FROM {s}.leases l WHERE l.name = $1`,

		// In the caller's transaction: FOR SHARE holds off every change of
		// the row (a takeover, a renewal, a release) until it ends.
		checkFenceTx: `
SELECT l.fence, l.end_reason, l.expires_at > clock_timestamp()
FROM {s}.leases l WHERE l.name = $1 FOR SHARE`,

		listAll: `
SELECT l.name, x.t, ` + leaseColumns + `
FROM {s}.leases l, (SELECT ` + nowf(1) + ` AS t) x
WHERE l.ended_at IS NULL AND (l.expires_at > x.t OR $5::boolean)
	AND l.acquired_at <= x.t - $2::bigint * interval '1 microsecond' AND l.name > $3
ORDER BY l.name LIMIT $4`,

		listByOwner: `
SELECT l.name, x.t, ` + leaseColumns + `
FROM {s}.leases l, (SELECT ` + nowf(1) + ` AS t) x
WHERE l.owner = $6 AND l.ended_at IS NULL AND (l.expires_at > x.t OR $5::boolean)
	AND l.acquired_at <= x.t - $2::bigint * interval '1 microsecond' AND l.name > $3
ORDER BY l.name LIMIT $4`,

		historyAll: `
SELECT id, name, owner, fence, event, at, expires_at, reason, actor, comment FROM {s}.lease_history
WHERE id > $1 AND id < $3 ORDER BY id LIMIT $2`,

		historyByName: `
SELECT id, name, owner, fence, event, at, expires_at, reason, actor, comment FROM {s}.lease_history
WHERE name = $4 AND id > $1 AND id < $3 ORDER BY id LIMIT $2`,

		// Newest first: the primary key and lease_history_name (name, id)
		// are read backwards.
		historyAllNewest: `
SELECT id, name, owner, fence, event, at, expires_at, reason, actor, comment FROM {s}.lease_history
WHERE id > $1 AND id < $3 ORDER BY id DESC LIMIT $2`,

		historyByNameNewest: `
SELECT id, name, owner, fence, event, at, expires_at, reason, actor, comment FROM {s}.lease_history
WHERE name = $4 AND id > $1 AND id < $3 ORDER BY id DESC LIMIT $2`,

		trimHistory: `
WITH d AS (SELECT id FROM {s}.lease_history WHERE at < $1 ORDER BY at LIMIT $2)
DELETE FROM {s}.lease_history h USING d WHERE h.id = d.id`,

		// The notice, and the row operators read (ListLeaseWaiters): kept
		// for $6 microseconds, or deleted by a withdrawal ($4 = 0).
		announce: `
WITH d AS (
	DELETE FROM {s}.lease_waiters WHERE name = $2 AND waiter = $3 AND $4::bigint = 0
), u AS (
	INSERT INTO {s}.lease_waiters AS w (name, waiter, since, fence, until)
	SELECT $2, $3, timestamptz 'epoch' + $4::bigint * interval '1 microsecond', $5::bigint,
		clock_timestamp() + $6::bigint * interval '1 microsecond'
	WHERE $4::bigint <> 0
	ON CONFLICT (name, waiter) DO UPDATE SET since = EXCLUDED.since, fence = EXCLUDED.fence, until = EXCLUDED.until
)
SELECT pg_notify($1, 'w' || chr(9) || $2 || chr(9) || $3 || chr(9) || $4::bigint || chr(9) || $5::bigint)`,

		// The waiters not run out, leaving out those that hold the name
		// with a larger fence than they announced (they got their turn).
		listWaiters: `
SELECT w.name, w.waiter, w.since, w.fence FROM {s}.lease_waiters w, (SELECT ` + nowf(1) + ` AS t) x
WHERE w.until > x.t AND NOT EXISTS (
	SELECT 1 FROM {s}.leases l WHERE l.name = w.name AND l.owner = w.waiter AND l.fence > w.fence)
ORDER BY w.name, w.since, w.waiter LIMIT $2`,

		listWaitersByName: `
SELECT w.name, w.waiter, w.since, w.fence FROM {s}.lease_waiters w, (SELECT ` + nowf(1) + ` AS t) x
WHERE w.name = $3 AND w.until > x.t AND NOT EXISTS (
	SELECT 1 FROM {s}.leases l WHERE l.name = w.name AND l.owner = w.waiter AND l.fence > w.fence)
ORDER BY w.name, w.since, w.waiter LIMIT $2`,
	}
	for _, p := range []*string{&q.get, &q.acquireOne, &q.acquire, &q.acquireWait, &q.renew, &q.releaseOne, &q.release, &q.forceRelease, &q.cleanup,
		&q.checkFence, &q.checkFenceTx, &q.listAll, &q.listByOwner, &q.historyAll, &q.historyByName,
		&q.trimHistory, &q.announce, &q.listWaiters, &q.listWaitersByName, &q.historyAllNewest, &q.historyByNameNewest} {
		*p = strings.ReplaceAll(*p, "{s}", s)
	}
	actual, _ := leaseSQL.LoadOrStore(schema, q)
	return actual.(*leaseQueries)
}

// acquireSQL returns the acquires of distinct names ($1), in one
// statement. r reads each name's holding in the statement's snapshot (o_*).
// For the names it shows free, u replaces a holding that ended or expired,
// and n inserts the first holding of a name that has none. u compares the
// row it locks with the snapshot (fence, expiry, ended or not): a row that
// changed in between (a takeover, a late renewal, a release) is left alone,
// and so is a name n finds inserted meanwhile (ON CONFLICT DO NOTHING); the
// caller reads those again; so the holding recorded as expired is exactly
// the one replaced. u reads the clock for the new holding when it writes
// the row, after the snapshot: a decision that a holding ended or expired
// stays true while u waits for the row (a holding that ended or expired
// comes back only through a new holding, which changes the row, and then u
// re-checks it against the snapshot and leaves it). For the names the
// snapshot shows held, nothing is written, except, with mark, the wanted
// mark of a waiting acquire ($5 > 0) whose mark would run out within $5:
// mark re-checks, on the row it locks, that the holding is still live, so
// a release either committed before (mark updates nothing, and the caller
// reads again) or sees the mark and notifies. Without mark (no acquire of
// the statement waits) the mark is a CTE of no rows, and the statement has
// no UPDATE to set up: a try-acquire costs a little less. $7 turns the
// history on.
//
// The updates return the ordinal (i) of their item, and the result is a
// union of the outcomes (granted by u, by n, held, marked), one row each,
// which the caller sorts by item (by name for n, which cannot return i).
// The caller sends the names sorted, so that u locks rows in name order; a
// deadlock that happens anyway is retried one name per statement (rounds).
func acquireSQL(mark bool) string {
	m := `SELECT NULL::bigint AS i, NULL::text AS owner, NULL::bigint AS fence, NULL::timestamptz AS expires_at WHERE false`
	if mark {
		m = `
	UPDATE {s}.leases l SET wanted_until = x.t + 2 * r.wait * interval '1 microsecond'
	FROM r, x
	WHERE l.name = r.name AND r.held AND r.wait > 0
		AND (l.wanted_until IS NULL OR l.wanted_until < x.t + r.wait * interval '1 microsecond')
		AND l.ended_at IS NULL AND l.expires_at > ` + nowf(6) + `
	RETURNING r.i, l.owner, l.fence, l.expires_at`
	}
	return `WITH x AS (SELECT ` + nowf(6) + ` AS t),
r AS (
	SELECT r.name, r.owner, r.ttl, r.max_renewals, r.wait, r.i, l.owner AS o_owner, l.fence AS o_fence,
		l.expires_at AS o_expires, l.ended_at AS o_ended, l.wanted_until AS o_wanted,
		l.max_renewals > 0 AND l.renewals >= l.max_renewals AS o_maxed,
		l.ended_at IS NULL AND l.expires_at > x.t AS held
	FROM (SELECT $1::text[] AS a, $2::text[] AS b, $3::bigint[] AS c, $4::integer[] AS d, $5::bigint[] AS e OFFSET 0) p
	CROSS JOIN unnest(p.a, p.b, p.c, p.d, p.e) WITH ORDINALITY AS r(name, owner, ttl, max_renewals, wait, i)
	CROSS JOIN x LEFT JOIN {s}.leases l ON l.name = r.name
	WHERE r.i >= 1 AND r.i <= cardinality(p.a)
), u AS (
	UPDATE {s}.leases l SET owner = r.owner, fence = l.fence + 1,
		(acquired_at, renewed_at, expires_at) = (SELECT y.t, y.t, y.t + r.ttl * interval '1 microsecond'
			FROM (SELECT ` + nowf(6) + ` AS t) y),
		renewals = 0, max_renewals = r.max_renewals, ended_at = NULL, end_reason = NULL
	FROM r
	WHERE l.name = r.name AND NOT r.held
		AND (l.fence, l.expires_at, l.ended_at IS NULL) = (r.o_fence, r.o_expires, r.o_ended IS NULL)
		AND (l.ended_at IS NOT NULL OR l.expires_at <= ` + nowf(6) + `)
	RETURNING r.i, l.name, l.owner, l.fence, l.acquired_at, l.expires_at, r.o_owner, r.o_fence, r.o_expires,
		r.o_ended IS NULL AS o_live, r.o_maxed
), n AS (
	INSERT INTO {s}.leases (name, owner, fence, acquired_at, renewed_at, expires_at, renewals, max_renewals)
	SELECT r.name, r.owner, 1, x.t, x.t, x.t + r.ttl * interval '1 microsecond', 0, r.max_renewals
	FROM r, x WHERE r.o_fence IS NULL
	ON CONFLICT (name) DO NOTHING
	RETURNING name, owner, fence, acquired_at, expires_at
), mark AS (` + m + `
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at, reason)
	SELECT u.name, u.o_owner, u.o_fence, 'expired', u.o_expires, u.o_expires,
		CASE WHEN u.o_maxed THEN 'max-renewals' ELSE 'lost' END
	FROM u WHERE $7::boolean AND u.o_live
	UNION ALL
	SELECT u.name, u.owner, u.fence, 'acquired', u.acquired_at, u.expires_at, NULL FROM u WHERE $7::boolean
	UNION ALL
	SELECT n.name, n.owner, n.fence, 'acquired', n.acquired_at, n.expires_at, NULL FROM n WHERE $7::boolean
)
SELECT u.i, NULL::text, NULL::timestamptz, u.fence, u.acquired_at, u.expires_at, NULL::text, NULL::bigint,
	NULL::timestamptz, false, false
FROM u
UNION ALL
SELECT NULL, n.name, NULL, n.fence, n.acquired_at, n.expires_at, NULL, NULL, NULL, false, false
FROM n
UNION ALL
SELECT r.i, NULL, x.t, NULL, NULL, NULL, r.o_owner, r.o_fence, r.o_expires, false,
	r.wait > 0 AND (r.o_wanted IS NULL OR r.o_wanted < x.t + r.wait * interval '1 microsecond')
FROM r, x WHERE r.held
UNION ALL
SELECT m.i, NULL, NULL, NULL, NULL, NULL, m.owner, m.fence, m.expires_at, true, false
FROM mark m`
}

// lq returns the named-lease statements of s's schema (its NOTIFY channel
// is the schema's name).
func (s *Store) lq() *leaseQueries { return leaseQueriesFor(s.channel) }

// scanLease scans a row of the get statement (now, leaseColumns) into l;
// found is false when the name has no row.
func scanLease(row pgx.Row, l *store.NamedLease, extra ...any) (found bool, err error) {
	var (
		owner               *string
		fence               *int64
		acquired, renewed   *time.Time
		expires, ended      *time.Time
		renewals, maxRenews *int32
		reason              *string
	)
	dest := append(extra, &l.AsOf, &owner, &fence, &acquired, &renewed, &expires, &renewals, &maxRenews, &ended, &reason)
	if err := row.Scan(dest...); err != nil {
		return false, err
	}
	if fence == nil {
		return false, nil
	}
	l.Owner, l.Fence, l.AcquiredAt, l.RenewedAt, l.ExpiresAt = *owner, *fence, *acquired, *renewed, *expires
	l.Renewals, l.MaxRenewals = int(*renewals), int(*maxRenews)
	if ended != nil {
		l.EndedAt, l.EndReason = *ended, store.LeaseEventKind(*reason)
	}
	return true, nil
}

// getLease reads the holding of name and the backend's now.
func (s *Store) getLease(ctx context.Context, name string, now *time.Time) (store.NamedLease, bool, error) {
	l := store.NamedLease{Name: name}
	found, err := scanLease(s.db.QueryRow(ctx, s.lq().get, name, now), &l)
	return l, found, err
}

// maxLeaseStatement is the most acquires or releases one statement of
// AcquireLeases or ReleaseLeases carries; more take more statements.
const maxLeaseStatement = 100

// AcquireLease starts a new holding of name for owner if the name is free:
// never acquired, or its last holding ended or expired. Otherwise it fails
// with a *store.HeldError, having written nothing (but the wanted mark,
// p.Wait): one statement reads before it writes (see the acquire query).
func (s *Store) AcquireLease(ctx context.Context, name, owner string, p *store.AcquireLeaseParams) (store.NamedLease, error) {
	if err := store.ValidateAcquireLease(name, owner, p); err != nil {
		return store.NamedLease{}, fmt.Errorf("acquire lease: %w", err)
	}
	r := s.AcquireLeases(ctx, []store.AcquireLeaseRequest{{Name: name, Owner: owner, TTL: p.TTL, MaxRenewals: p.MaxRenewals, Wait: p.Wait}},
		&store.LeaseBatchParams{NoHistory: p.NoHistory, Now: p.Now})
	return r[0].Lease, r[0].Err
}

// AcquireLeases runs the acquires of reqs, each with the outcome
// AcquireLease would have, in as few statements as it can: one for up to
// maxLeaseStatement distinct names (a name asked for twice is decided
// again in a later statement, after the first). A request with bad input
// fails alone. An acquire that lost a race to a concurrent change of its
// row is read again, in the next statement.
func (s *Store) AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult {
	return s.AcquireLeasesEarly(ctx, reqs, p, nil)
}

// AcquireLeasesEarly implements store.EarlyAcquirer: AcquireLeases whose
// first statement, when decided is not nil, asks for its rows before its
// commit (see queryDecided), and calls decided between the two.
func (s *Store) AcquireLeasesEarly(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams, decided func()) []store.AcquireLeaseResult {
	if p == nil {
		p = &store.LeaseBatchParams{}
	}
	out := make([]store.AcquireLeaseResult, len(reqs))
	h, _ := s.hist()
	var todo []int
	for i, r := range reqs {
		if err := store.ValidateAcquireLeaseRequest(r); err != nil {
			out[i].Err = fmt.Errorf("acquire lease: %w", err)
			continue
		}
		if _, err := h.name(r.Name); err != nil {
			out[i].Err = fmt.Errorf("acquire lease: %w", err)
			continue
		}
		todo = append(todo, i)
	}
	if decided != nil {
		decided = sync.OnceFunc(decided)
	}
	rounds(todo, func(i int) string { return reqs[i].Name }, func(round []int) ([]int, error) {
		return s.acquireRound(ctx, reqs, round, p, decided, out)
	}, func(i int, err error) {
		if err == nil {
			err = fmt.Errorf("%s kept changing under concurrent writers", store.QuoteInput(reqs[i].Name))
		}
		out[i].Err = interpretError("acquire lease", err)
	})
	return out
}

// maxLeaseAttempts bounds the statements that try one acquire or release
// whose row changed under each of them (an acquire that saw the name free
// but found another acquirer had taken it first; a release whose holding
// was renewed meanwhile). Each try reads a new snapshot, so losing again
// takes yet another change of the row in between: when a handful of
// goroutines acquire and release one name in a tight loop, three tries
// were seen to lose in a row about once in 4,000 acquires.
const maxLeaseAttempts = 8

// rounds runs the items of todo through run, in statements of distinct
// names (name(i)) of at most maxLeaseStatement items; run returns the items
// to try again. An item tried maxLeaseAttempts times, or every item left when
// run fails, is given up (fail, with run's error or nil). A deadlock or
// serialization failure of a statement of several items is retried with
// one item per statement: a statement of several rows may meet a
// concurrent one in a lock order that neither would alone.
func rounds(todo []int, name func(int) string, run func(round []int) (retry []int, err error), fail func(i int, err error)) {
	tries := map[int]int{}
	size := maxLeaseStatement
	for len(todo) > 0 {
		round, rest := nextRound(todo, name, size)
		retry, err := run(round)
		switch {
		case err != nil && isConflict(err) && len(round) > 1:
			size, retry = 1, round
		case err != nil:
			for _, i := range todo {
				fail(i, err)
			}
			return
		}
		var again []int
		for _, i := range retry {
			if tries[i]++; tries[i] == maxLeaseAttempts {
				fail(i, nil)
				continue
			}
			again = append(again, i)
		}
		todo = append(again, rest...)
	}
}

// nextRound splits todo into the first items of distinct names, at most max
// of them, and the rest, both in order.
func nextRound(todo []int, name func(int) string, max int) (round, rest []int) {
	seen := make(map[string]bool, min(len(todo), max))
	for _, i := range todo {
		if n := name(i); len(round) < max && !seen[n] {
			seen[n] = true
			round = append(round, i)
		} else {
			rest = append(rest, i)
		}
	}
	return round, rest
}

// isConflict reports a deadlock or a serialization failure.
func isConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// acquireRound runs one acquire statement for the items round of reqs
// (distinct names) and sets their outcomes in out, except for those it
// returns: their rows changed under the statement, and they must be read
// again. With decided, the statement's rows come before its commit (see
// queryDecided), and decided is called between the two.
func (s *Store) acquireRound(ctx context.Context, reqs []store.AcquireLeaseRequest, round []int, p *store.LeaseBatchParams, decided func(), out []store.AcquireLeaseResult) ([]int, error) {
	// In name order: the statement locks the rows it replaces in the order
	// of its items, and every batch, here and in other processes, locks
	// them in the same order (see acquireSQL).
	round = slices.SortedFunc(slices.Values(round), func(a, b int) int { return strings.Compare(reqs[a].Name, reqs[b].Name) })
	n := len(round)
	h, tracks := s.hist()
	seen := make([]seenName, n) // the fence marks before the statement
	for k, i := range round {
		seen[k], _ = h.name(reqs[i].Name)
	}
	names, owners := make([]string, n), make([]string, n)
	ttls, waits := make([]int64, n), make([]int64, n)
	maxRenewals := make([]int32, n)
	for k, i := range round {
		r := reqs[i]
		names[k], owners[k], ttls[k], waits[k], maxRenewals[k] = r.Name, r.Owner, r.TTL.Microseconds(), r.Wait.Microseconds(), int32(r.MaxRenewals)
	}
	sql, args := s.lq().acquire, []any{names, owners, ttls, maxRenewals, waits, p.Now, !p.NoHistory}
	switch {
	case slices.ContainsFunc(waits, func(w int64) bool { return w > 0 }):
		sql = s.lq().acquireWait
	case n == 1:
		sql, args = s.lq().acquireOne, []any{names[0], owners[0], ttls[0], maxRenewals[0], p.Now, !p.NoHistory}
	}
	var rows pgx.Rows
	var commit func() error
	var err error
	if decided != nil {
		rows, commit, err = s.queryDecided(ctx, sql, args...)
	} else {
		rows, err = s.db.Query(ctx, sql, args...)
	}
	if err != nil {
		return nil, err
	}
	res, err := scanAcquires(rows, n, names)
	if commit != nil {
		if err == nil {
			decided()
		}
		if cerr := commit(); err == nil {
			err = cerr
		}
	}
	if err != nil { // the statement, or its commit, failed: nothing happened
		return nil, err
	}
	var retry []int
	for k, i := range round {
		r, o := reqs[i], res[k]
		if tracks && (o.granted || o.held) {
			got := o.holderFence
			if o.granted {
				got = o.fence
			}
			if err := h.fence(r.Name, seen[k], got, o.granted); err != nil {
				out[i].Err = fmt.Errorf("acquire lease: %w", err)
				continue
			}
		}
		switch {
		case o.granted:
			out[i].Lease = store.NamedLease{Name: r.Name, Owner: r.Owner, Fence: o.fence, AcquiredAt: o.acquired,
				RenewedAt: o.acquired, ExpiresAt: o.expires, MaxRenewals: r.MaxRenewals, AsOf: o.acquired}
		case o.held && (o.marked || !o.needMark):
			out[i].Err = fmt.Errorf("acquire lease: %w", &store.HeldError{Name: r.Name, Owner: o.holder, Fence: o.holderFence,
				ExpiresAt: o.holderExpires, AsOf: o.now})
		default:
			// Lost a race to a concurrent change of the row (a first
			// insert, a takeover; or a release before the mark): read it.
			retry = append(retry, i)
		}
	}
	return retry, nil
}

// acquireOutcome is what an acquire statement returned for one item.
type acquireOutcome struct {
	granted, held, marked, needMark bool
	fence                           int64 // granted: the new holding's
	acquired, expires               time.Time
	now                             time.Time // held: when it was seen held
	holder                          string    // held: the holder, as marked if marked
	holderFence                     int64
	holderExpires                   time.Time
}

// scanAcquires reads the rows of an acquire statement for the n items
// names (in order) and closes them: one row per outcome, in any order,
// naming its item by ordinal or, for a first holding, by name. A held item
// may have two rows: held in the snapshot, and marked (whose holder, read
// on the locked row, wins).
func scanAcquires(rows pgx.Rows, n int, names []string) ([]acquireOutcome, error) {
	defer rows.Close()
	res := make([]acquireOutcome, n)
	var byName map[string]int
	for rows.Next() {
		var (
			k                      *int64
			name, holder           *string
			now, acquired, expires *time.Time
			fence, holderFence     *int64
			holderExpires          *time.Time
			marked, needMark       bool
		)
		if err := rows.Scan(&k, &name, &now, &fence, &acquired, &expires, &holder, &holderFence, &holderExpires, &marked, &needMark); err != nil {
			return nil, err
		}
		var j int
		switch {
		case k != nil:
			j = int(*k) - 1
		case name != nil:
			if byName == nil {
				byName = make(map[string]int, n)
				for j, nm := range names {
					byName[nm] = j
				}
			}
			var ok bool
			if j, ok = byName[*name]; !ok {
				return nil, fmt.Errorf("postgres: acquire returned an unknown name %s", store.QuoteInput(*name))
			}
		default:
			return nil, errors.New("postgres: acquire returned a row without its item")
		}
		if j < 0 || j >= n {
			return nil, fmt.Errorf("postgres: acquire returned item %d of %d", j+1, n)
		}
		o := &res[j]
		switch {
		case fence != nil:
			o.granted, o.fence, o.acquired, o.expires = true, *fence, *acquired, *expires
		case marked:
			o.marked, o.holder, o.holderFence, o.holderExpires = true, *holder, *holderFence, *holderExpires
		case holderFence != nil:
			o.held, o.now, o.needMark = true, *now, needMark
			if !o.marked {
				o.holder, o.holderFence, o.holderExpires = *holder, *holderFence, *holderExpires
			}
		}
	}
	return res, rows.Err()
}

// RenewLease moves the expiry of a live holding to now + p.TTL and counts a
// renewal, in one conditional write fenced by (name, owner, fence).
func (s *Store) RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error) {
	if err := store.ValidateRenewLease(name, owner, fence, p); err != nil {
		return store.NamedLease{}, fmt.Errorf("renew lease: %w", err)
	}
	for range maxAttempts {
		l := store.NamedLease{Name: name, Owner: owner, Fence: fence}
		var renewals, maxRenewals int32
		err := s.db.QueryRow(ctx, s.lq().renew, name, fence, owner, p.Now, p.TTL.Microseconds(), !p.NoHistory).
			Scan(&l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &renewals, &maxRenewals)
		if err == nil {
			l.Renewals, l.MaxRenewals, l.AsOf = int(renewals), int(maxRenewals), l.RenewedAt
			return l, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.NamedLease{}, interpretError("renew lease", err)
		}
		cur, found, err := s.getLease(ctx, name, p.Now)
		if err != nil {
			return store.NamedLease{}, interpretError("renew lease", err)
		}
		if err := refusal(cur, found, owner, fence); err != nil {
			return store.NamedLease{}, fmt.Errorf("renew lease: %w", err)
		}
		if !cur.EndedAt.IsZero() {
			return store.NamedLease{}, fmt.Errorf("renew lease: %w", store.EndError(cur.EndReason))
		}
		if !cur.AsOf.Before(cur.ExpiresAt) {
			return store.NamedLease{}, fmt.Errorf("renew lease: %w", store.ErrExpired)
		}
		if cur.MaxRenewals > 0 && cur.Renewals >= cur.MaxRenewals {
			return store.NamedLease{}, fmt.Errorf("renew lease: %w: %d of %d", store.ErrMaxRenewals, cur.Renewals, cur.MaxRenewals)
		}
	}
	return store.NamedLease{}, fmt.Errorf("renew lease: %s kept changing under concurrent writers", store.QuoteInput(name))
}

// refusal explains why (owner, fence) is not the current holding cur, or
// returns nil if it is.
func refusal(cur store.NamedLease, found bool, owner string, fence int64) error {
	switch {
	case !found:
		return fmt.Errorf("%w: %w: %s", store.ErrNotHolder, store.ErrLeaseNotFound, store.QuoteInput(cur.Name))
	case fence < cur.Fence:
		return fmt.Errorf("%w: fence %d was superseded by %d", store.ErrNotHolder, fence, cur.Fence)
	case fence > cur.Fence:
		return fmt.Errorf("%w: fence %d was never issued", store.ErrNotHolder, fence)
	case owner != cur.Owner:
		return fmt.Errorf("%w: held by another owner", store.ErrNotHolder)
	}
	return nil
}

// ReleaseLease ends the holding (name, owner, fence), and announces it if
// a waiter wants the name. A holding that already ended by expiry or
// force-release, or was superseded, is left alone and nil returned; one its
// holder released already gets store.ErrReleased.
func (s *Store) ReleaseLease(ctx context.Context, name, owner string, fence int64, p *store.LeaseOpParams) error {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	return s.ReleaseLeases(ctx, []store.LeaseHolding{{Name: name, Owner: owner, Fence: fence}},
		&store.LeaseBatchParams{NoHistory: p.NoHistory, Now: p.Now})[0]
}

// ReleaseLeases runs the releases of reqs, each with the outcome
// ReleaseLease would have, in one statement for up to maxLeaseStatement
// distinct names (a holding named twice is released by the first). A
// request with bad input fails alone; a holding the statement did not
// release is read to tell why (or released again, if it changed under the
// statement).
//
// The statement commits without waiting for its WAL flush
// (synchronous_commit off for its transaction alone; not when the Store
// runs in the caller's transaction, which commits as its caller chooses).
// A release lost to a crash of the database within the next few hundred
// milliseconds leaves its holding to expire, as if its holder had crashed;
// no acquire can have relied on it: an acquire commits durably, and the
// flush of its commit record flushes every earlier one.
func (s *Store) ReleaseLeases(ctx context.Context, reqs []store.LeaseHolding, p *store.LeaseBatchParams) []error {
	if p == nil {
		p = &store.LeaseBatchParams{}
	}
	out := make([]error, len(reqs))
	var todo []int
	for i, r := range reqs {
		if err := store.ValidateHoldingOf(r.Name, r.Owner, r.Fence); err != nil {
			out[i] = fmt.Errorf("release lease: %w", err)
			continue
		}
		todo = append(todo, i)
	}
	rounds(todo, func(i int) string { return reqs[i].Name }, func(round []int) ([]int, error) {
		return s.releaseRound(ctx, reqs, round, p, out)
	}, func(i int, err error) {
		if err == nil {
			err = fmt.Errorf("%s kept changing under concurrent writers", store.QuoteInput(reqs[i].Name))
		}
		out[i] = interpretError("release lease", err)
	})
	return out
}

// releaseRound runs one release statement for the items round of reqs
// (distinct names), and explains those it did not release in out, except
// those it returns: still live holdings of the caller, which changed under
// the statement and must be released again.
func (s *Store) releaseRound(ctx context.Context, reqs []store.LeaseHolding, round []int, p *store.LeaseBatchParams, out []error) ([]int, error) {
	// In name order, as the acquires lock rows (see acquireRound).
	round = slices.SortedFunc(slices.Values(round), func(a, b int) int { return strings.Compare(reqs[a].Name, reqs[b].Name) })
	n := len(round)
	names, owners := make([]string, n), make([]string, n)
	fences := make([]int64, n)
	for k, i := range round {
		names[k], owners[k], fences[k] = reqs[i].Name, reqs[i].Owner, reqs[i].Fence
	}
	_, inTx := s.db.(pgx.Tx) // the caller's transaction commits as it chooses
	var rows pgx.Rows
	var err error
	if n == 1 {
		rows, err = s.db.Query(ctx, s.lq().releaseOne, names[0], fences[0], owners[0], p.Now, !p.NoHistory, s.channel, !inTx)
	} else {
		rows, err = s.db.Query(ctx, s.lq().release, names, fences, owners, p.Now, !p.NoHistory, s.channel, !inTx)
	}
	if err != nil {
		return nil, err
	}
	released := make([]bool, n)
	var k int64
	_, err = pgx.ForEachRow(rows, []any{&k}, func() error {
		released[k-1] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	var retry []int
	for k, i := range round {
		if released[k] {
			continue
		}
		r := reqs[i]
		cur, found, err := s.getLease(ctx, r.Name, p.Now)
		if err != nil {
			out[i] = interpretError("release lease", err)
			continue
		}
		switch err := refusal(cur, found, r.Owner, r.Fence); {
		case found && r.Fence < cur.Fence: // superseded: that holding is long over
		case err != nil:
			out[i] = fmt.Errorf("release lease: %w", err)
		case cur.EndReason == store.LeaseReleased:
			out[i] = fmt.Errorf("release lease: %w", store.ErrReleased)
		case !cur.EndedAt.IsZero():
		default:
			retry = append(retry, i)
		}
	}
	return retry, nil
}

// ForceReleaseLeases ends every live holding of owner (a crashed agent's) and
// returns them, by name.
func (s *Store) ForceReleaseLeases(ctx context.Context, owner string, p *store.LeaseOpParams) ([]store.NamedLease, error) {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateForceRelease(owner, p); err != nil {
		return nil, fmt.Errorf("force release leases: %w", err)
	}
	rows, err := s.db.Query(ctx, s.lq().forceRelease, owner, p.Now, !p.NoHistory, s.channel, p.Actor, p.Reason, p.Name, p.Fence)
	if err != nil {
		return nil, interpretError("force release leases", err)
	}
	out, err := collectLeases(rows)
	if err != nil {
		return nil, interpretError("force release leases", err)
	}
	return out, nil
}

// collectLeases scans rows of (name, now, leaseColumns).
func collectLeases(rows pgx.Rows) ([]store.NamedLease, error) {
	defer rows.Close()
	var out []store.NamedLease
	for rows.Next() {
		var l store.NamedLease
		if _, err := scanLease(rows, &l, &l.Name); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// CleanupExpiredLeases marks up to p.Limit expired holdings ended (reason
// expired), oldest first, skipping rows locked by others, and returns how
// many it marked.
func (s *Store) CleanupExpiredLeases(ctx context.Context, p *store.CleanupLeasesParams) (int, error) {
	if p == nil {
		p = &store.CleanupLeasesParams{}
	}
	limit, err := store.ListLimit(p.Limit)
	if err != nil {
		return 0, fmt.Errorf("cleanup expired leases: %w", err)
	}
	var n int
	if err := s.db.QueryRow(ctx, s.lq().cleanup, p.Now, limit, !p.NoHistory, s.channel).Scan(&n); err != nil {
		return 0, interpretError("cleanup expired leases", err)
	}
	return n, nil
}

// GetLease returns the current or last holding of name; store.ErrLeaseNotFound
// if it was never acquired.
func (s *Store) GetLease(ctx context.Context, name string, p *store.LeaseOpParams) (store.NamedLease, error) {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateLeaseName(name); err != nil {
		return store.NamedLease{}, fmt.Errorf("get lease: %w", err)
	}
	l, found, err := s.getLease(ctx, name, p.Now)
	switch {
	case err != nil:
		return store.NamedLease{}, interpretError("get lease", err)
	case !found:
		return store.NamedLease{}, fmt.Errorf("get lease: %w: %s", store.ErrLeaseNotFound, store.QuoteInput(name))
	}
	return l, nil
}

// CheckLeaseFence reports whether fence is the live holding of name: nil, or
// a *store.FenceError saying why not. It only reads; to guard a write, use
// CheckFence inside the writing transaction.
func (s *Store) CheckLeaseFence(ctx context.Context, name string, fence int64, p *store.LeaseOpParams) error {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	return checkFence(ctx, s.db, s.lq().checkFence, name, fence, p.Now)
}

// CheckFence checks, inside the caller's transaction tx, that fence is still
// the live holding of the named lease name in schema (unexpired by
// clock_timestamp(), not ended), and locks the lease's row FOR SHARE, so no
// other holder can take the name over, and the holding cannot be renewed or
// released, until tx ends. A deposed holder gets a *store.FenceError
// (matching store.ErrStaleFence) and should roll back. Take schema from
// where the Store's is set, or call the Store's CheckFence, which uses it:
//
//	const schema = "seqlease" // as in postgres.Config{Schema: schema}
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := postgres.CheckFence(ctx, tx, schema, "cursor/orders", l.Fence()); err != nil {
//			return err // deposed: write nothing
//		}
//		_, err := tx.Exec(ctx, "UPDATE cursors SET pos = $1 WHERE name = 'orders'", pos)
//		return err
//	})
//
// Keep such transactions short: while one runs, the holder's renewals wait
// for it.
func CheckFence(ctx context.Context, tx pgx.Tx, schema, name string, fence int64) error {
	if err := migrations.ValidateSchema(schema); err != nil {
		return fmt.Errorf("check fence: %w", err) // matches store.ErrInvalidArgument
	}
	return checkFence(ctx, tx, leaseQueriesFor(schema).checkFenceTx, name, fence)
}

// CheckFence is the package-level CheckFence in s's schema.
func (s *Store) CheckFence(ctx context.Context, tx pgx.Tx, name string, fence int64) error {
	return checkFence(ctx, tx, s.lq().checkFenceTx, name, fence)
}

// checkFence runs sql ($1 the name, then extra) and judges fence by its row.
func checkFence(ctx context.Context, q querier, sql, name string, fence int64, extra ...any) error {
	if err := store.ValidateLeaseName(name); err != nil {
		return fmt.Errorf("check fence: %w", err)
	}
	if fence < 1 {
		return fmt.Errorf("check fence: %w: %d", store.ErrInvalidFence, fence)
	}
	args := append([]any{name}, extra...)
	var current int64
	var reason *string
	var unexpired bool
	err := q.QueryRow(ctx, sql, args...).Scan(&current, &reason, &unexpired)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &store.FenceError{Name: name, Fence: fence, Reason: "not found"}
	case err != nil:
		return interpretError("check fence", err)
	}
	var end store.LeaseEventKind
	if reason != nil {
		end = store.LeaseEventKind(*reason)
	}
	return store.FenceVerdict(name, fence, current, end, unexpired)
}

// ListLeases returns the live holdings (not ended, unexpired at now) that p
// selects, by name.
func (s *Store) ListLeases(ctx context.Context, p *store.ListLeasesParams) ([]store.NamedLease, error) {
	if p == nil {
		p = &store.ListLeasesParams{}
	}
	limit, err := store.ValidateListLeases(p)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	args := []any{p.Now, p.HeldFor.Microseconds(), p.AfterName, limit, p.Expired}
	sql := s.lq().listAll
	if p.Owner != "" {
		sql = s.lq().listByOwner
		args = append(args, p.Owner)
	}
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError("list leases", err)
	}
	out, err := collectLeases(rows)
	if err != nil {
		return nil, interpretError("list leases", err)
	}
	return out, nil
}

// LeaseHistory returns events of the audit history in ID order: of name, or
// of every name if name is empty.
func (s *Store) LeaseHistory(ctx context.Context, name string, p *store.LeaseHistoryParams) ([]store.LeaseEvent, error) {
	if p == nil {
		p = &store.LeaseHistoryParams{}
	}
	if name != "" {
		if err := store.ValidateLeaseName(name); err != nil {
			return nil, fmt.Errorf("lease history: %w", err)
		}
	}
	limit, err := store.ListLimit(p.Limit)
	if err != nil {
		return nil, fmt.Errorf("lease history: %w", err)
	}
	after, before, err := store.HistoryBounds(p)
	if err != nil {
		return nil, fmt.Errorf("lease history: %w", err)
	}
	q := s.lq()
	var rows pgx.Rows
	switch {
	case name == "" && p.Newest:
		rows, err = s.db.Query(ctx, q.historyAllNewest, after, limit, before)
	case name == "":
		rows, err = s.db.Query(ctx, q.historyAll, after, limit, before)
	case p.Newest:
		rows, err = s.db.Query(ctx, q.historyByNameNewest, after, limit, before, name)
	default:
		rows, err = s.db.Query(ctx, q.historyByName, after, limit, before, name)
	}
	if err != nil {
		return nil, interpretError("lease history", err)
	}
	var out []store.LeaseEvent
	var e store.LeaseEvent
	var reason, actor, comment *string
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &e.Name, &e.Owner, &e.Fence, &e.Kind, &e.At, &e.ExpiresAt, &reason, &actor, &comment}, func() error {
		e.Reason, e.Actor, e.Comment = store.DefaultLeaseReason(e.Kind), "", ""
		if reason != nil {
			e.Reason = store.LeaseReason(*reason)
		}
		if actor != nil {
			e.Actor = *actor
		}
		if comment != nil {
			e.Comment = *comment
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, interpretError("lease history", err)
	}
	return out, nil
}

// TrimLeaseHistory deletes up to limit events (0: store.DefaultListLimit)
// that happened before before, oldest first, and returns how many.
func (s *Store) TrimLeaseHistory(ctx context.Context, before time.Time, limit int) (int64, error) {
	limit, err := store.ListLimit(limit)
	if err != nil {
		return 0, fmt.Errorf("trim lease history: %w", err)
	}
	tag, err := s.db.Exec(ctx, s.lq().trimHistory, before, limit)
	if err != nil {
		return 0, interpretError("trim lease history", err)
	}
	return tag.RowsAffected(), nil
}

// AnnounceLeaseWaiter tells every listener that w.Waiter waits for w.Name,
// or withdraws when w.Since is zero (a NOTIFY), and keeps it in
// lease_waiters for store.LeaseWaiterTTL (a withdrawal deletes it), for
// ListLeaseWaiters.
func (s *Store) AnnounceLeaseWaiter(ctx context.Context, w store.LeaseWaiter) error {
	if err := store.ValidateLeaseWaiter(w); err != nil {
		return fmt.Errorf("announce lease waiter: %w", err)
	}
	var since int64
	if !w.Since.IsZero() {
		since = max(w.Since.UnixMicro(), 1)
	}
	if _, err := s.db.Exec(ctx, s.lq().announce, s.channel, w.Name, w.Waiter, since, w.Fence, store.LeaseWaiterTTL.Microseconds()); err != nil {
		return interpretError("announce lease waiter", err)
	}
	return nil
}

// parseWaiter parses the payload of an announcement after "w<TAB>". Any
// session may NOTIFY on the channel, so it accepts exactly what
// AnnounceLeaseWaiter sends: a valid lease name and owner, then since (in
// microseconds; 0: withdrawn) and fence as PostgreSQL prints a bigint >= 0,
// separated by tabs.
func parseWaiter(rest string) (store.LeaseWaiter, bool) {
	f := strings.Split(rest, "\t")
	if len(f) != 4 || store.ValidateLeaseName(f[0]) != nil || store.ValidateLeaseOwner(f[1]) != nil {
		return store.LeaseWaiter{}, false
	}
	since, ok1 := parseBigint(f[2])
	fence, ok2 := parseBigint(f[3])
	if !ok1 || !ok2 {
		return store.LeaseWaiter{}, false
	}
	w := store.LeaseWaiter{Name: f[0], Waiter: f[1], Fence: fence}
	if since != 0 {
		w.Since = time.UnixMicro(since)
	}
	return w, true
}

// WatchLeases reports the ends of holdings and the waiters' announcements to
// sink until ctx ends, from LISTEN on a connection of its own (not the
// barrier's): taken out of the pool, or dialled with Config.ListenDSN. It
// calls sink.Reset each time it starts listening, so the receiver re-checks
// what it may have missed. Each time, it proves that the LISTEN hears (see
// Listening in the package doc): when it does not, it logs an ERROR and
// polls sink (store.Poller, else Reset) every Config.DeafPollInterval until
// a later check hears. Connection errors are retried with exponential
// backoff (up to a 30 s pause). It needs a DB that can hand out a
// connection (*pgxpool.Pool) or Config.ListenDSN.
func (s *Store) WatchLeases(ctx context.Context, sink store.LeaseSink) error {
	if s.notes.inTx() {
		return s.errInTx("watch leases")
	}
	l, err := s.listener("watch leases", listenerLeases, sink, func(payload string) {
		kind, rest, _ := strings.Cut(payload, "\t")
		switch kind {
		case "l":
			sink.Freed(rest)
		case "w":
			if w, ok := parseWaiter(rest); ok {
				sink.Wanted(w)
			}
		case "g":
			if ss, ok := sink.(store.SettingsSink); ok {
				ss.SettingsChanged()
			}
		}
	})
	if err != nil {
		return err
	}
	return l.run(ctx)
}

// ListLeaseWaiters returns the waiters announced within
// store.LeaseWaiterTTL before now and not withdrawn (of p.Name, or of every
// name), by name, then by the time they asked; a waiter that holds the name
// with a larger fence than it announced got its turn and is left out.
func (s *Store) ListLeaseWaiters(ctx context.Context, p *store.ListLeaseWaitersParams) ([]store.LeaseWaiter, error) {
	if p == nil {
		p = &store.ListLeaseWaitersParams{}
	}
	limit, err := store.ValidateListLeaseWaiters(p)
	if err != nil {
		return nil, fmt.Errorf("list lease waiters: %w", err)
	}
	var rows pgx.Rows
	if p.Name == "" {
		rows, err = s.db.Query(ctx, s.lq().listWaiters, p.Now, limit)
	} else {
		rows, err = s.db.Query(ctx, s.lq().listWaitersByName, p.Now, limit, p.Name)
	}
	if err != nil {
		return nil, interpretError("list lease waiters", err)
	}
	var out []store.LeaseWaiter
	var w store.LeaseWaiter
	_, err = pgx.ForEachRow(rows, []any{&w.Name, &w.Waiter, &w.Since, &w.Fence}, func() error {
		out = append(out, w)
		return nil
	})
	if err != nil {
		return nil, interpretError("list lease waiters", err)
	}
	return out, nil
}
