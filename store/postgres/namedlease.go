package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
)

// Named leases live in two tables of the schema: leases (one row per name,
// its current or last holding) and lease_history (the audit trail). Every
// decision is one conditional write whose WHERE clause reads the clock;
// refusals are explained by a read. Acquiring a held name reads before it
// writes: a plain SELECT finds the holder, so contention costs no write and
// no WAL flush (a refused INSERT ... ON CONFLICT DO UPDATE would still lock
// the row, take a transaction id and flush a commit record).
//
// Ends of holdings are announced on the schema's NOTIFY channel, the one the
// barrier listens to, with the payload "l<TAB>name"; blocked acquires
// announce themselves with "w<TAB>name<TAB>waiter<TAB>since<TAB>fence"
// (since in Unix microseconds by the database's clock, 0 to withdraw). Names
// and owners hold no control characters, so the tabs are unambiguous. Both
// are ignored by listeners of resolutions, whose payloads start with "r".
// A NOTIFY takes a transaction id, but a transaction that wrote nothing else
// commits without waiting for a WAL flush.

// leaseQueries are the named-lease statements of one schema.
type leaseQueries struct {
	get, lockRow, acquire, renew, release, forceRelease, cleanup string
	checkFence, checkFenceTx, listAll, listByOwner               string
	historyAll, historyByName, trimHistory, announce, listenTo   string
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

		// The decision, sent only when a plain read found the name free: a
		// pipelined batch, one round trip and one implicit transaction.
		// lockRow locks the row, so the decide statement that follows sees
		// it as its upsert will: old is the holding it replaces, recorded as
		// expired if nobody had ended it. The upsert inserts the name's first
		// holding, or replaces one that ended or expired. When it replaces,
		// it compares the row it locked with old (the fence, and whether it
		// had ended): a row that changed after the statement's snapshot (its
		// first insert was not yet committed when lockRow ran, so nothing was
		// locked) is left alone, and the caller reads again. The clock of the
		// decision and of the new holding is read after the row lock (a
		// reading taken before a lock wait could predate a release the
		// upsert then sees). When the name turned out held (a lost race), the
		// statement returns no grant and the holder it saw. $6 turns the
		// history on.
		lockRow: `SELECT 1 FROM {s}.leases WHERE name = $1 FOR UPDATE`,
		acquire: `
WITH x AS (SELECT ` + nowf(3) + ` AS t),
old AS (SELECT owner, fence, expires_at, ended_at FROM {s}.leases WHERE name = $1),
up AS (
	INSERT INTO {s}.leases AS l (name, owner, fence, acquired_at, renewed_at, expires_at, renewals, max_renewals)
	SELECT $1, $2, 1, x.t, x.t, x.t + $4::bigint * interval '1 microsecond', 0, $5 FROM x
	ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, fence = l.fence + 1,
		(acquired_at, renewed_at, expires_at) = (SELECT y.t, y.t, y.t + $4::bigint * interval '1 microsecond'
			FROM (SELECT ` + nowf(3) + ` AS t) y),
		renewals = 0, max_renewals = EXCLUDED.max_renewals, ended_at = NULL, end_reason = NULL
	WHERE l.fence = (SELECT fence FROM old) AND (l.ended_at IS NULL) = (SELECT ended_at IS NULL FROM old)
		AND (l.ended_at IS NOT NULL OR l.expires_at <= ` + nowf(3) + `)
	RETURNING l.fence, l.acquired_at, l.expires_at
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at)
	SELECT $1, o.owner, o.fence, 'expired', o.expires_at, o.expires_at FROM up, old o
	WHERE $6::boolean AND o.ended_at IS NULL
	UNION ALL
	SELECT $1, $2, up.fence, 'acquired', up.acquired_at, up.expires_at FROM up WHERE $6::boolean
)
SELECT x.t, up.fence, up.acquired_at, up.expires_at, o.owner, o.fence, o.expires_at,
	o.ended_at IS NULL AND o.expires_at > x.t
FROM x LEFT JOIN up ON true LEFT JOIN old o ON true`,

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
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at)
	SELECT $1, $3, $2, 'renewed', u.renewed_at, u.expires_at FROM u WHERE $6::boolean
)
SELECT acquired_at, renewed_at, expires_at, renewals, max_renewals FROM u`,

		release: `
WITH u AS (
	UPDATE {s}.leases SET ended_at = ` + nowf(4) + `, end_reason = 'released'
	WHERE name = $1 AND fence = $2 AND owner = $3 AND ended_at IS NULL
	RETURNING ended_at, expires_at
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at)
	SELECT $1, $3, $2, 'released', u.ended_at, u.expires_at FROM u WHERE $5::boolean
)
SELECT count(*) FROM u, LATERAL pg_notify($6, 'l' || chr(9) || $1) n`,

		// The clock is read per row, after its lock.
		forceRelease: `
WITH u AS (
	UPDATE {s}.leases l SET ended_at = ` + nowf(2) + `, end_reason = 'force-released'
	WHERE l.owner = $1 AND l.ended_at IS NULL AND l.expires_at > ` + nowf(2) + `
	RETURNING l.name, l.ended_at AS now, ` + leaseColumns + `
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at)
	SELECT u.name, u.owner, u.fence, 'force-released', u.ended_at, u.expires_at FROM u WHERE $3::boolean
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
	RETURNING l.name, l.owner, l.fence, l.expires_at
), h AS (
	INSERT INTO {s}.lease_history (name, owner, fence, event, at, expires_at)
	SELECT u.name, u.owner, u.fence, 'expired', u.expires_at, u.expires_at FROM u WHERE $3::boolean
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
WHERE l.ended_at IS NULL AND l.expires_at > x.t
	AND l.acquired_at <= x.t - $2::bigint * interval '1 microsecond' AND l.name > $3
ORDER BY l.name LIMIT $4`,

		listByOwner: `
SELECT l.name, x.t, ` + leaseColumns + `
FROM {s}.leases l, (SELECT ` + nowf(1) + ` AS t) x
WHERE l.owner = $5 AND l.ended_at IS NULL AND l.expires_at > x.t
	AND l.acquired_at <= x.t - $2::bigint * interval '1 microsecond' AND l.name > $3
ORDER BY l.name LIMIT $4`,

		historyAll: `
SELECT id, name, owner, fence, event, at, expires_at FROM {s}.lease_history
WHERE id > $1 ORDER BY id LIMIT $2`,

		historyByName: `
SELECT id, name, owner, fence, event, at, expires_at FROM {s}.lease_history
WHERE name = $3 AND id > $1 ORDER BY id LIMIT $2`,

		trimHistory: `
WITH d AS (SELECT id FROM {s}.lease_history WHERE at < $1 ORDER BY at LIMIT $2)
DELETE FROM {s}.lease_history h USING d WHERE h.id = d.id`,

		announce: `SELECT pg_notify($1, 'w' || chr(9) || $2 || chr(9) || $3 || chr(9) || $4::bigint || chr(9) || $5::bigint)`,

		listenTo: `LISTEN ` + s,
	}
	for _, p := range []*string{&q.get, &q.lockRow, &q.acquire, &q.renew, &q.release, &q.forceRelease, &q.cleanup,
		&q.checkFence, &q.checkFenceTx, &q.listAll, &q.listByOwner, &q.historyAll, &q.historyByName,
		&q.trimHistory} {
		*p = strings.ReplaceAll(*p, "{s}", s)
	}
	actual, _ := leaseSQL.LoadOrStore(schema, q)
	return actual.(*leaseQueries)
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

// AcquireLease starts a new holding of name for owner if the name is free:
// never acquired, or its last holding ended or expired. Otherwise it fails
// with a *store.HeldError, having only read: a plain SELECT finds the
// holder. When the read finds the name free, one pipelined batch locks the
// row and decides with a conditional upsert, so two racing acquirers cannot
// both win, and the loser learns who won.
func (s *Store) AcquireLease(ctx context.Context, name, owner string, p *store.AcquireLeaseParams) (store.NamedLease, error) {
	if err := store.ValidateAcquireLease(name, owner, p); err != nil {
		return store.NamedLease{}, fmt.Errorf("acquire lease: %w", err)
	}
	for range maxAttempts {
		cur, _, err := s.getLease(ctx, name, p.Now)
		if err != nil {
			return store.NamedLease{}, interpretError("acquire lease", err)
		}
		if cur.Held() {
			return store.NamedLease{}, fmt.Errorf("acquire lease: %w", heldError(cur))
		}
		l, held, err := s.decide(ctx, name, owner, p)
		switch {
		case err != nil:
			return store.NamedLease{}, interpretError("acquire lease", err)
		case held != nil:
			return store.NamedLease{}, fmt.Errorf("acquire lease: %w", held)
		case l.Fence != 0:
			return l, nil
		}
		// Lost a race to a first holding inserted concurrently: read it.
	}
	return store.NamedLease{}, fmt.Errorf("acquire lease: %q kept changing under concurrent writers", name)
}

func heldError(cur store.NamedLease) *store.HeldError {
	return &store.HeldError{Name: cur.Name, Owner: cur.Owner, Fence: cur.Fence, ExpiresAt: cur.ExpiresAt, AsOf: cur.AsOf}
}

// decide runs the lock and the conditional upsert in one batch. It returns
// the grant, or the holder that won, or neither when the row changed after
// the statement's snapshot (its first holding was being inserted
// concurrently): the caller reads again.
func (s *Store) decide(ctx context.Context, name, owner string, p *store.AcquireLeaseParams) (store.NamedLease, *store.HeldError, error) {
	b := &pgx.Batch{}
	b.Queue(s.lq().lockRow, name)
	b.Queue(s.lq().acquire, name, owner, p.Now, p.TTL.Microseconds(), p.MaxRenewals, !p.NoHistory)
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return store.NamedLease{}, nil, err
	}
	var (
		now               time.Time
		fence             *int64
		acquired, expires *time.Time
		holder            *string
		holderFence       *int64
		holderExpires     *time.Time
		holderLive        *bool
	)
	if err := br.QueryRow().Scan(&now, &fence, &acquired, &expires, &holder, &holderFence, &holderExpires, &holderLive); err != nil {
		return store.NamedLease{}, nil, err
	}
	if err := br.Close(); err != nil {
		return store.NamedLease{}, nil, err
	}
	switch {
	case fence != nil:
		return store.NamedLease{Name: name, Owner: owner, Fence: *fence, AcquiredAt: *acquired, RenewedAt: *acquired,
			ExpiresAt: *expires, MaxRenewals: p.MaxRenewals, AsOf: *acquired}, nil, nil
	case holderLive != nil && *holderLive:
		return store.NamedLease{}, &store.HeldError{Name: name, Owner: *holder, Fence: *holderFence, ExpiresAt: *holderExpires, AsOf: now}, nil
	}
	return store.NamedLease{}, nil, nil
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
	return store.NamedLease{}, fmt.Errorf("renew lease: %q kept changing under concurrent writers", name)
}

// refusal explains why (owner, fence) is not the current holding cur, or
// returns nil if it is.
func refusal(cur store.NamedLease, found bool, owner string, fence int64) error {
	switch {
	case !found:
		return fmt.Errorf("%w: %w: %q", store.ErrNotHolder, store.ErrLeaseNotFound, cur.Name)
	case fence < cur.Fence:
		return fmt.Errorf("%w: fence %d was superseded by %d", store.ErrNotHolder, fence, cur.Fence)
	case fence > cur.Fence:
		return fmt.Errorf("%w: fence %d was never issued", store.ErrNotHolder, fence)
	case owner != cur.Owner:
		return fmt.Errorf("%w: held by another owner", store.ErrNotHolder)
	}
	return nil
}

// ReleaseLease ends the holding (name, owner, fence) and announces it. A
// holding that already ended by expiry or force-release, or was superseded,
// is left alone and nil returned; one its holder released already gets
// store.ErrReleased.
func (s *Store) ReleaseLease(ctx context.Context, name, owner string, fence int64, p *store.LeaseOpParams) error {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateHoldingOf(name, owner, fence); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	for range maxAttempts {
		var released int
		err := s.db.QueryRow(ctx, s.lq().release, name, fence, owner, p.Now, !p.NoHistory, s.channel).Scan(&released)
		if err != nil {
			return interpretError("release lease", err)
		}
		if released == 1 {
			return nil
		}
		cur, found, err := s.getLease(ctx, name, p.Now)
		if err != nil {
			return interpretError("release lease", err)
		}
		switch err := refusal(cur, found, owner, fence); {
		case found && fence < cur.Fence:
			return nil // superseded: that holding is long over
		case err != nil:
			return fmt.Errorf("release lease: %w", err)
		case cur.EndReason == store.LeaseReleased:
			return fmt.Errorf("release lease: %w", store.ErrReleased)
		case !cur.EndedAt.IsZero():
			return nil
		}
	}
	return fmt.Errorf("release lease: %q kept changing under concurrent writers", name)
}

// ForceReleaseLeases ends every live holding of owner (a crashed agent's) and
// returns them, by name.
func (s *Store) ForceReleaseLeases(ctx context.Context, owner string, p *store.LeaseOpParams) ([]store.NamedLease, error) {
	if p == nil {
		p = &store.LeaseOpParams{}
	}
	if err := store.ValidateLeaseOwner(owner); err != nil {
		return nil, fmt.Errorf("force release leases: %w", err)
	}
	rows, err := s.db.Query(ctx, s.lq().forceRelease, owner, p.Now, !p.NoHistory, s.channel)
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
		return store.NamedLease{}, fmt.Errorf("get lease: %w: %q", store.ErrLeaseNotFound, name)
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
// (matching store.ErrStaleFence) and should roll back:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := postgres.CheckFence(ctx, tx, "seqlease", "cursor/orders", l.Fence()); err != nil {
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
		return fmt.Errorf("check fence: %w: %w", store.ErrInvalidArgument, err)
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
	args := []any{p.Now, p.HeldFor.Microseconds(), p.AfterName, limit}
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
	var rows pgx.Rows
	if name == "" {
		rows, err = s.db.Query(ctx, s.lq().historyAll, p.AfterID, limit)
	} else {
		rows, err = s.db.Query(ctx, s.lq().historyByName, p.AfterID, limit, name)
	}
	if err != nil {
		return nil, interpretError("lease history", err)
	}
	var out []store.LeaseEvent
	var e store.LeaseEvent
	_, err = pgx.ForEachRow(rows, []any{&e.ID, &e.Name, &e.Owner, &e.Fence, &e.Kind, &e.At, &e.ExpiresAt}, func() error {
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
// or withdraws when w.Since is zero (a NOTIFY; it writes no table).
func (s *Store) AnnounceLeaseWaiter(ctx context.Context, w store.LeaseWaiter) error {
	if err := store.ValidateLeaseWaiter(w); err != nil {
		return fmt.Errorf("announce lease waiter: %w", err)
	}
	var since int64
	if !w.Since.IsZero() {
		since = max(w.Since.UnixMicro(), 1)
	}
	if _, err := s.db.Exec(ctx, s.lq().announce, s.channel, w.Name, w.Waiter, since, w.Fence); err != nil {
		return interpretError("announce lease waiter", err)
	}
	return nil
}

// parseWaiter parses the payload of an announcement after "w<TAB>".
func parseWaiter(rest string) (store.LeaseWaiter, bool) {
	f := strings.Split(rest, "\t")
	if len(f) != 4 {
		return store.LeaseWaiter{}, false
	}
	since, err1 := strconv.ParseInt(f[2], 10, 64)
	fence, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return store.LeaseWaiter{}, false
	}
	w := store.LeaseWaiter{Name: f[0], Waiter: f[1], Fence: fence}
	if since != 0 {
		w.Since = time.UnixMicro(since)
	}
	return w, true
}

// WatchLeases reports the ends of holdings and the waiters' announcements to
// sink until ctx ends, from LISTEN on a connection of its own taken out of
// the pool (not the barrier's). It calls sink.Reset each time it starts
// listening, so the receiver re-checks what it may have missed. Connection
// errors are retried with exponential backoff (up to a 30 s pause). It needs
// a DB that can hand out a connection (*pgxpool.Pool).
func (s *Store) WatchLeases(ctx context.Context, sink store.LeaseSink) error {
	pool, ok := s.db.(interface {
		Acquire(ctx context.Context) (*pgxpool.Conn, error)
	})
	if !ok {
		return fmt.Errorf("watch leases: %w: the DB is a %T, not a pool", store.ErrUnsupported, s.db)
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 30 * time.Second
	bo.MaxElapsedTime = 0
	for {
		err := s.listenLeases(ctx, pool, sink, bo.Reset)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pause := bo.NextBackOff()
		s.logger.WarnContext(ctx, "postgres: lease listener lost, reconnecting", slog.Any("error", err), slog.Duration("pause", pause))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (s *Store) listenLeases(ctx context.Context, pool interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}, sink store.LeaseSink, connected func()) error {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // a listening connection must not go back to the pool
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, s.lq().listenTo); err != nil {
		return err
	}
	connected()
	sink.Reset()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		kind, rest, _ := strings.Cut(n.Payload, "\t")
		switch kind {
		case "l":
			sink.Freed(rest)
		case "w":
			if w, ok := parseWaiter(rest); ok {
				sink.Wanted(w)
			}
		}
	}
}
