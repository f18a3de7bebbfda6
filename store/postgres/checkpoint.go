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

// checkpointQueries are the statements of reader checkpoints, per schema.
type checkpointQueries struct {
	get, save, list, del string
}

// watermarkOf is the watermark of the stream named by expr, from one
// snapshot: one below its oldest leased number (the partial index
// entries_unresolved), else its last number, else 0 (no such stream).
func watermarkOf(expr string) string {
	return `COALESCE(
	(SELECT min(e.number) - 1 FROM {s}.entries e WHERE e.stream = ` + expr + ` AND e.state = 'leased'),
	(SELECT st.last_number FROM {s}.streams st WHERE st.name = ` + expr + `),
	0)`
}

// buildCheckpointQueries returns the statements of reader checkpoints for
// schema; New builds them once.
func buildCheckpointQueries(schema string) *checkpointQueries {
	s := pgx.Identifier{schema}.Sanitize()
	q := &checkpointQueries{
		get: `SELECT position FROM {s}.checkpoints WHERE reader = $1 AND stream = $2`,

		// One statement: the watermark w, then an upsert that writes only
		// forward and only up to w. ON CONFLICT DO UPDATE locks the row even
		// when its WHERE refuses, and after waiting for a concurrent saver
		// judges the newest version of the row: concurrent saves serialize
		// on the row lock, and none moves the position back. A refusal
		// writes nothing; the caller reads the row to explain it. The
		// watermark only grows, so a w read from this snapshot stays a true
		// bound whenever the transaction commits.
		save: `
WITH w AS (
	SELECT ` + watermarkOf("$2") + ` AS watermark
), up AS (
	INSERT INTO {s}.checkpoints AS c (reader, stream, position, updated_at)
	SELECT $1, $2, $3, ` + nowf(4) + ` FROM w WHERE $3 <= w.watermark
	ON CONFLICT (reader, stream) DO UPDATE
		SET position = EXCLUDED.position, updated_at = EXCLUDED.updated_at
		WHERE c.position < EXCLUDED.position
	RETURNING c.position
)
SELECT EXISTS (SELECT 1 FROM up), w.watermark FROM w`,

		// A page of checkpoints, each with its stream's watermark from the
		// same snapshot (so the position is never above it).
		list: `
SELECT c.reader, c.stream, c.position, c.updated_at, ` + watermarkOf("c.stream") + `
FROM {s}.checkpoints c
WHERE ($1::text = '' OR c.reader = $1) AND ($2::text = '' OR c.stream = $2)
	AND (c.reader, c.stream) > ($3::text, $4::text)
ORDER BY c.reader, c.stream LIMIT $5`,

		del: `DELETE FROM {s}.checkpoints WHERE reader = $1 AND stream = $2`,
	}
	for _, p := range []*string{&q.get, &q.save, &q.list, &q.del} {
		*p = strings.ReplaceAll(*p, "{s}", s)
	}
	return q
}

// cq returns the checkpoint statements of s's schema (its channel is the
// schema's name).
func (s *Store) cq() *checkpointQueries { return s.ckq }

// Checkpoint returns the position reader saved for stream, 0 if none.
func (s *Store) Checkpoint(ctx context.Context, reader, stream string) (int64, error) {
	if err := store.ValidateCheckpointKey(reader, stream); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	pos, _, err := s.savedPosition(ctx, reader, stream)
	if err != nil {
		return 0, interpretError("checkpoint", err)
	}
	return pos, nil
}

func (s *Store) savedPosition(ctx context.Context, reader, stream string) (pos int64, exists bool, err error) {
	err = s.db.QueryRow(ctx, s.cq().get, reader, stream).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return pos, err == nil, err
}

// SaveCheckpoint sets reader's position in stream in one statement: forward
// only, never past the watermark; saving the saved position again is a
// no-op success. On a Store over a transaction (New with a pgx.Tx) the save
// commits or rolls back with the transaction, and holds the checkpoint's
// row lock until then: a concurrent saver waits for it.
func (s *Store) SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error {
	if err := store.ValidateSaveCheckpoint(reader, stream, position); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	var now *time.Time
	if p != nil {
		now = p.Now
	}
	for range maxAttempts {
		var written bool
		var watermark int64
		if err := s.db.QueryRow(ctx, s.cq().save, reader, stream, position, now).Scan(&written, &watermark); err != nil {
			return interpretError("save checkpoint", err)
		}
		if written {
			return nil
		}
		// Refused: ahead of w, or the saved position is at or above the
		// asked one. Read which (the row is locked in a transaction, and
		// positions only grow outside one, unless deleted meanwhile).
		cur, exists, err := s.savedPosition(ctx, reader, stream)
		if err != nil {
			return interpretError("save checkpoint", err)
		}
		write, err := store.SaveDecision(reader, stream, position, cur, exists, watermark)
		if err != nil {
			return fmt.Errorf("save checkpoint: %w", err)
		}
		if !write {
			return nil // a repeat of the saved position
		}
		// deleted (or deleted and saved lower) between the two statements: again
	}
	return fmt.Errorf("save checkpoint: reader %s, stream %s kept changing under concurrent writers", store.QuoteInput(reader), store.QuoteInput(stream))
}

// DeleteCheckpoint removes reader's checkpoint of stream;
// store.ErrCheckpointNotFound if it has none.
func (s *Store) DeleteCheckpoint(ctx context.Context, reader, stream string) error {
	if err := store.ValidateCheckpointKey(reader, stream); err != nil {
		return fmt.Errorf("delete checkpoint: %w", err)
	}
	tag, err := s.db.Exec(ctx, s.cq().del, reader, stream)
	if err != nil {
		return interpretError("delete checkpoint", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete checkpoint: %w: reader %s, stream %s", store.ErrCheckpointNotFound, store.QuoteInput(reader), store.QuoteInput(stream))
	}
	return nil
}

// ListCheckpoints returns the checkpoints p selects in (reader, stream)
// byte order, each with its stream's watermark, in one statement.
func (s *Store) ListCheckpoints(ctx context.Context, p *store.ListCheckpointsParams) ([]store.Checkpoint, error) {
	limit, err := store.ValidateListCheckpoints(p)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	if p == nil {
		p = &store.ListCheckpointsParams{}
	}
	rows, err := s.db.Query(ctx, s.cq().list, p.Reader, p.Stream, p.AfterReader, p.AfterStream, limit)
	if err != nil {
		return nil, interpretError("list checkpoints", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Checkpoint, error) {
		var c store.Checkpoint
		err := row.Scan(&c.Reader, &c.Stream, &c.Position, &c.UpdatedAt, &c.Watermark)
		return c, err
	})
	if err != nil {
		return nil, interpretError("list checkpoints", err)
	}
	return out, nil
}
