package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

// inboxQueries are the statements of inbox records (migration 000004).
type inboxQueries struct {
	mark, received, count, countAll, purge string
}

func buildInboxQueries(schema string) inboxQueries {
	s := pgx.Identifier{schema}.Sanitize()
	q := inboxQueries{
		// The primary key decides: a pair already committed conflicts and
		// the statement writes nothing (no WAL, no flush to wait for). A
		// pair inserted by a transaction still open makes the insert wait
		// for it, then conflict if it committed or insert if it rolled
		// back. Under REPEATABLE READ or SERIALIZABLE, a conflict with a
		// row the snapshot cannot see is a serialization failure (40001),
		// which the caller retries as any other.
		mark: `
INSERT INTO {s}.inbox (received_at, consumer, message_id)
VALUES (` + nowf(3) + `, $1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING`,

		received: `SELECT received_at FROM {s}.inbox WHERE consumer = $1 AND message_id = $2`,
		count:    `SELECT count(*) FROM {s}.inbox WHERE consumer = $1`,
		countAll: `SELECT count(*) FROM {s}.inbox`,

		// The oldest records below the cutoff, by the index on received_at,
		// at most $3 of them; with a consumer ($2 <> '') only its own. Rows
		// are never updated, so a ctid names a row until it is deleted.
		// SKIP LOCKED: concurrent purges take different rows, so a batch is
		// short only when no other row below the cutoff is left (but those
		// another purge is deleting); without it, a purge whose rows were
		// deleted under it would come back short while rows remain.
		purge: `
WITH old AS (
	SELECT ctid FROM {s}.inbox
	WHERE received_at < COALESCE($1::timestamptz, ` + nowf(5) + ` - $4 * interval '1 microsecond')
		AND ($2 = '' OR consumer = $2)
	ORDER BY received_at
	LIMIT $3
	FOR UPDATE SKIP LOCKED
)
DELETE FROM {s}.inbox i USING old WHERE i.ctid = old.ctid`,
	}
	for _, p := range []*string{&q.mark, &q.received, &q.count, &q.countAll, &q.purge} {
		*p = strings.ReplaceAll(*p, "{s}", s)
	}
	return q
}

// MarkReceived implements the inbox contract's MarkReceived in one INSERT.
// On a Store over a pgx.Tx it runs in that transaction, with the
// message's effect: the record commits or rolls back with it.
func (s *Store) MarkReceived(ctx context.Context, consumer, messageID string, p *store.ReceiveParams) (bool, error) {
	if err := store.ValidateReceive(consumer, messageID); err != nil {
		return false, fmt.Errorf("mark received: %w", err)
	}
	var now *time.Time
	if p != nil {
		now = p.Now
	}
	tag, err := s.db.Exec(ctx, s.inq.mark, consumer, messageID, now)
	if err != nil {
		return false, interpretError("mark received", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Received implements the inbox contract's Received.
func (s *Store) Received(ctx context.Context, consumer, messageID string) (time.Time, bool, error) {
	if err := store.ValidateReceive(consumer, messageID); err != nil {
		return time.Time{}, false, fmt.Errorf("received: %w", err)
	}
	var at time.Time
	err := s.db.QueryRow(ctx, s.inq.received, consumer, messageID).Scan(&at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, interpretError("received", err)
	}
	return at, true, nil
}

// CountReceived implements the inbox contract's CountReceived: a count(*),
// which reads every record it counts.
func (s *Store) CountReceived(ctx context.Context, consumer string) (int64, error) {
	var n int64
	var err error
	if consumer == "" {
		err = s.db.QueryRow(ctx, s.inq.countAll).Scan(&n)
	} else {
		if err := store.ValidateConsumer(consumer); err != nil {
			return 0, fmt.Errorf("count received: %w", err)
		}
		err = s.db.QueryRow(ctx, s.inq.count, consumer).Scan(&n)
	}
	if err != nil {
		return 0, interpretError("count received", err)
	}
	return n, nil
}

// PurgeReceived implements the inbox contract's PurgeReceived in one
// DELETE of at most the limit's rows, the oldest first.
func (s *Store) PurgeReceived(ctx context.Context, p *store.PurgeReceivedParams) (int64, error) {
	limit, err := store.ValidatePurgeReceived(p)
	if err != nil {
		return 0, fmt.Errorf("purge received: %w", err)
	}
	if p == nil {
		p = &store.PurgeReceivedParams{}
	}
	var before *time.Time
	if !p.Before.IsZero() {
		before = &p.Before
	}
	tag, err := s.db.Exec(ctx, s.inq.purge, before, p.Consumer, limit, p.OlderThan.Microseconds(), p.Now)
	if err != nil {
		return 0, interpretError("purge received", err)
	}
	return tag.RowsAffected(), nil
}
