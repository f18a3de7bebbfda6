package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seqlease/seqlease/store"
)

var _ store.Appender = (*Store)(nil)

// Append implements store.Appender in one statement (appendEntries): the
// stream's counter row is bumped and the committed entries inserted
// together, so a failed or rolled-back call appends nothing and leaves no
// hole. In a caller's transaction (InTx) the counter row stays locked
// until that transaction ends: every other lease and append of the stream
// waits for it.
func (s *Store) Append(ctx context.Context, stream string, reqs []store.AppendRequest, p *store.AppendParams) ([]store.Entry, error) {
	if err := store.ValidateAppend(stream, reqs, p); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	if p == nil {
		p = &store.AppendParams{}
	}
	ops := make([]string, len(reqs))
	kinds := make([]string, len(reqs))
	payloads := make([][]byte, len(reqs))
	tokens := make([]pgtype.UUID, len(reqs))
	for i, r := range reqs {
		ops[i], kinds[i], payloads[i] = r.OperationID, r.Kind, r.Payload
		tokens[i] = pgtype.UUID{Bytes: store.NewToken(), Valid: true}
	}
	h, tracks := s.hist()
	seen, err := h.stream(stream)
	if err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	var base, xid int64
	var at time.Time
	err = s.db.QueryRow(ctx, s.q.appendEntries, stream, len(reqs), p.Now, p.Owner, ops, kinds, payloads, tokens).Scan(&base, &at, &xid)
	if err != nil {
		return nil, interpretError("append", err)
	}
	if tracks {
		if err := h.numbers(stream, seen, base+1, base+int64(len(reqs))); err != nil {
			return nil, fmt.Errorf("append: %w", err)
		}
	}
	out := make([]store.Entry, len(reqs))
	numbers := make([]int64, len(reqs))
	for i, r := range reqs {
		numbers[i] = base + int64(i) + 1
		out[i] = store.Entry{
			Stream: stream, Number: numbers[i], State: store.Committed, Token: tokens[i].Bytes,
			Owner: p.Owner, OperationID: r.OperationID, Kind: r.Kind,
			LeasedAt: at, ExpiresAt: at, ResolvedAt: at, Payload: r.Payload,
		}
	}
	s.notes.sawXact(xid)
	if err := s.notes.resolved(ctx, stream, 0, numbers...); err != nil {
		return nil, noticeFailed("append", err)
	}
	return out, nil
}
