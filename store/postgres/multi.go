package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seqlease/seqlease/store"
)

// The capabilities of the PostgreSQL backend (store/capability.go).
var (
	_ store.MultiLeaser         = (*Store)(nil)
	_ store.MultiCommitter      = (*Store)(nil)
	_ store.TxCommitter[pgx.Tx] = (*Store)(nil)
	_ store.EarlyAcquirer       = (*Store)(nil)
)

// LeaseMulti implements store.MultiLeaser in one statement (leaseMulti):
// every stream's counter row is bumped once, in stream order, and the
// entries of all the items are inserted with it, so the statement leases
// every valid item or none (numbers stay dense).
func (s *Store) LeaseMulti(ctx context.Context, items []store.StreamLeases, p *store.LeaseParams) []store.LeaseResult {
	out := make([]store.LeaseResult, len(items))
	errs, err := store.ValidateLeaseMulti(items, p)
	if err != nil {
		for i := range out {
			out[i].Err = fmt.Errorf("lease: %w", err)
		}
		return out
	}
	if p == nil {
		p = &store.LeaseParams{}
	}
	h, tracks := s.hist()
	seen := map[string]seenStream{}
	var valid []int
	for i := range items {
		if errs[i] != nil {
			out[i].Err = fmt.Errorf("lease: %w", errs[i])
			continue
		}
		m, err := h.stream(items[i].Stream)
		if err != nil {
			out[i].Err = fmt.Errorf("lease: %w", err)
			continue
		}
		seen[items[i].Stream] = m
		valid = append(valid, i)
	}
	if len(valid) == 0 {
		return out
	}
	if oneStream(items, valid) { // the statement of one stream is simpler, and faster
		return s.leaseOneStream(ctx, items, valid, p, out)
	}
	var streams, ops, kinds []string
	var ttls []int64
	var tokens []pgtype.UUID
	for _, i := range valid {
		for _, r := range items[i].Requests {
			streams = append(streams, items[i].Stream)
			ops, kinds = append(ops, r.OperationID), append(kinds, r.Kind)
			ttls = append(ttls, r.TTL.Microseconds())
			tokens = append(tokens, pgtype.UUID{Bytes: store.NewToken(), Valid: true})
		}
	}
	numbers, leasedAt, err := s.leaseRows(ctx, streams, ops, kinds, ttls, tokens, p)
	if err != nil {
		for _, i := range valid {
			out[i].Err = interpretError("lease", err)
		}
		return out
	}
	k := 0
	for _, i := range valid {
		if tracks {
			n := int64(len(items[i].Requests))
			lo, hi := slices.Min(numbers[k:k+int(n)]), slices.Max(numbers[k:k+int(n)])
			if err := h.numbers(items[i].Stream, seen[items[i].Stream], lo, hi); err != nil {
				out[i].Err = fmt.Errorf("lease: %w", err)
				k += int(n)
				continue
			}
		}
		es := make([]store.Entry, len(items[i].Requests))
		for j, r := range items[i].Requests {
			es[j] = store.Entry{
				Stream: items[i].Stream, Number: numbers[k], State: store.Leased, Token: tokens[k].Bytes,
				Owner: p.Owner, OperationID: r.OperationID, Kind: r.Kind,
				// the statement's arithmetic: whole microseconds
				LeasedAt: leasedAt, ExpiresAt: leasedAt.Add(time.Duration(ttls[k]) * time.Microsecond),
			}
			k++
		}
		out[i].Entries = es
	}
	return out
}

// oneStream reports whether the items of valid are all of one stream.
func oneStream(items []store.StreamLeases, valid []int) bool {
	for _, i := range valid[1:] {
		if items[i].Stream != items[valid[0]].Stream {
			return false
		}
	}
	return true
}

// leaseOneStream leases the items of valid, all of one stream, in one Lease
// statement, and gives each its block of the numbers.
func (s *Store) leaseOneStream(ctx context.Context, items []store.StreamLeases, valid []int, p *store.LeaseParams, out []store.LeaseResult) []store.LeaseResult {
	var reqs []store.LeaseRequest
	for _, i := range valid {
		reqs = append(reqs, items[i].Requests...)
	}
	entries, err := s.Lease(ctx, items[valid[0]].Stream, reqs, p)
	for _, i := range valid {
		if err != nil {
			out[i].Err = err
			continue
		}
		n := len(items[i].Requests)
		out[i].Entries, entries = entries[:n:n], entries[n:]
	}
	return out
}

// leaseRows runs leaseMulti and returns the numbers, in the order of the
// arrays, and the leased-at time.
func (s *Store) leaseRows(ctx context.Context, streams, ops, kinds []string, ttls []int64, tokens []pgtype.UUID, p *store.LeaseParams) ([]int64, time.Time, error) {
	rows, err := s.db.Query(ctx, s.q.leaseMulti, streams, ops, kinds, ttls, tokens, p.Owner, p.Now)
	if err != nil {
		return nil, time.Time{}, err
	}
	numbers := make([]int64, 0, len(streams))
	var number int64
	var leasedAt time.Time
	_, err = pgx.ForEachRow(rows, []any{&number, &leasedAt}, func() error {
		numbers = append(numbers, number)
		return nil
	})
	switch {
	case err != nil:
		return nil, time.Time{}, err
	case len(numbers) != len(streams):
		return nil, time.Time{}, fmt.Errorf("%d numbers for %d requests", len(numbers), len(streams))
	}
	return numbers, leasedAt, nil
}

// CommitMulti implements store.MultiCommitter: the conditional writes of
// the valid items (each Commit's statement) are pipelined in one batch,
// which PostgreSQL runs as one implicit transaction, so the items cost one
// round trip and one WAL flush. With p.Ordered each write checks that no
// earlier number of its stream is still leased, which counts the batch's
// earlier items exactly when they succeeded. The refused items are
// explained after the commit.
func (s *Store) CommitMulti(ctx context.Context, items []store.StreamCommit, p *store.CommitMultiParams) ([]store.CommitResult, error) {
	out, send, err := s.commitValid(items)
	if err != nil || len(send) == 0 {
		return out, err
	}
	if p == nil {
		p = &store.CommitMultiParams{}
	}
	if len(send) == 1 { // one statement, no pipeline
		it := items[send[0]]
		t, err := s.Commit(ctx, it.Stream, it.Number, it.Token, &store.CommitParams{Payload: it.Payload, Ordered: it.Ordered, Now: p.Now})
		if err != nil && !isOutcome(err) {
			return nil, err
		}
		out[send[0]] = store.CommitResult{ResolvedAt: t, Err: err}
		return out, nil
	}
	b := &pgx.Batch{}
	for _, i := range send {
		it := items[i]
		b.Queue(s.q.commit, it.Stream, it.Number, uuid(it.Token), it.Payload, p.Now, it.Ordered)
	}
	br := s.db.SendBatch(ctx, b)
	var refused []int
	var xid int64
	for _, i := range send {
		err := br.QueryRow().Scan(&out[i].ResolvedAt, &xid)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			refused = append(refused, i)
		case err != nil:
			_ = br.Close()
			return nil, interpretError("commit multi", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, interpretError("commit multi", err)
	}
	s.notes.sawXact(xid)
	if err := s.noticeCommits(ctx, items, send, refused); err != nil {
		return nil, noticeFailed("commit multi", err)
	}
	for _, i := range refused {
		it := items[i]
		out[i].ResolvedAt, out[i].Err = s.explainCommitItem(ctx, it, p)
	}
	return out, nil
}

// commitValid validates a batch of commits: out holds the refusals of the
// items with bad input, send the indexes of the others.
func (s *Store) commitValid(items []store.StreamCommit) (out []store.CommitResult, send []int, err error) {
	errs, err := store.ValidateCommitMulti(items)
	if err != nil {
		return nil, nil, fmt.Errorf("commit multi: %w", err)
	}
	out = make([]store.CommitResult, len(items))
	for i := range items {
		if errs[i] != nil {
			out[i].Err = fmt.Errorf("commit: %w", errs[i])
			continue
		}
		send = append(send, i)
	}
	return out, send, nil
}

// noticeCommits notices the items of send that committed (not in
// refused): per stream, every number up to its highest ordered commit,
// and each unordered one above it.
// An error is that of a statement in the caller's transaction (InTx).
func (s *Store) noticeCommits(ctx context.Context, items []store.StreamCommit, send, refused []int) error {
	through := map[string]int64{}
	var committed []int
	for _, i := range send {
		if len(refused) > 0 && refused[0] == i {
			refused = refused[1:]
			continue
		}
		committed = append(committed, i)
		if it := items[i]; it.Ordered {
			through[it.Stream] = max(through[it.Stream], it.Number)
		}
	}
	var rs []resolution
	for _, i := range committed {
		if it := items[i]; !it.Ordered && it.Number > through[it.Stream] {
			rs = append(rs, resolution{stream: it.Stream, numbers: []int64{it.Number}})
		}
	}
	for stream, n := range through {
		rs = append(rs, resolution{stream: stream, through: n})
	}
	s.notes.add(rs...)
	return s.notes.flush(ctx)
}

// explainCommitItem explains a refused item of a batch after its
// transaction ended. An entry that changed in between (it resolved
// concurrently) is committed again alone.
func (s *Store) explainCommitItem(ctx context.Context, it store.StreamCommit, p *store.CommitMultiParams) (time.Time, error) {
	t, err := s.explainCommit(ctx, s.db, it.Stream, it.Number, it.Token, it.Payload, p.Now, it.Ordered)
	switch {
	case errors.Is(err, errChanged):
		return s.Commit(ctx, it.Stream, it.Number, it.Token, &store.CommitParams{Payload: it.Payload, Ordered: it.Ordered, Now: p.Now})
	case err == nil:
		// a repeat of a commit that took effect
		if nerr := s.committed(ctx, it.Stream, it.Number, false); nerr != nil {
			return time.Time{}, noticeFailed("commit", nerr)
		}
	}
	return t, err
}

// CommitTx implements store.TxCommitter for pgx.Tx: the items commit in
// one interactive transaction, each item's conditional write and function
// in a savepoint of its own, so that a failing function rolls back its own
// item only.
func (s *Store) CommitTx(ctx context.Context, items []store.TxCommit[pgx.Tx], p *store.CommitMultiParams) ([]store.CommitResult, error) {
	plain := make([]store.StreamCommit, len(items))
	for i, it := range items {
		plain[i] = it.StreamCommit
	}
	out, send, err := s.commitValid(plain)
	if err != nil || len(send) == 0 {
		return out, err
	}
	if p == nil {
		p = &store.CommitMultiParams{}
	}
	var committed []int
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		committed = committed[:0]
		for _, i := range send {
			ok, err := s.commitInTx(ctx, tx, items[i], p, &out[i])
			if err != nil {
				return err
			}
			if ok {
				committed = append(committed, i)
			}
		}
		return nil
	})
	if err != nil {
		return nil, interpretError("commit tx", err)
	}
	var refused []int
	for _, i := range send {
		if !slices.Contains(committed, i) {
			refused = append(refused, i)
		}
	}
	if err := s.noticeCommits(ctx, plain, send, refused); err != nil {
		return nil, noticeFailed("commit tx", err)
	}
	return out, nil
}

// commitInTx commits one item of CommitTx in a savepoint of tx and runs its
// function, setting its result; it reports whether the item committed. An
// error fails the whole transaction.
func (s *Store) commitInTx(ctx context.Context, tx pgx.Tx, it store.TxCommit[pgx.Tx], p *store.CommitMultiParams, out *store.CommitResult) (bool, error) {
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return false, err
	}
	var xid int64
	err = sp.QueryRow(ctx, s.q.commit, it.Stream, it.Number, uuid(it.Token), it.Payload, p.Now, it.Ordered).Scan(&out.ResolvedAt, &xid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if err := sp.Rollback(ctx); err != nil {
			return false, err
		}
		out.ResolvedAt, out.Err = s.explainCommit(ctx, tx, it.Stream, it.Number, it.Token, it.Payload, p.Now, it.Ordered)
		if errors.Is(out.Err, errChanged) {
			out.Err = fmt.Errorf("commit: %w: entry %d changed concurrently", store.ErrNotReady, it.Number)
		}
		return false, nil
	case err != nil:
		return false, err
	}
	s.notes.sawXact(xid)
	if it.Func != nil {
		if ferr := it.Func(ctx, sp); ferr != nil {
			if err := sp.Rollback(ctx); err != nil {
				return false, err
			}
			*out = store.CommitResult{Err: ferr}
			return false, nil
		}
	}
	return true, sp.Commit(ctx)
}

// CommitBatch commits items of one stream in order, each exactly as Commit
// would, in one transaction and one round trip (CommitMulti).
//
// An error return means the outcome of every item is unknown (the
// connection failed): retry each with its token to learn it (I7).
func (s *Store) CommitBatch(ctx context.Context, stream string, items []store.CommitItem, p *store.CommitBatchParams) ([]store.CommitResult, error) {
	if err := store.ValidateBatch(stream, items); err != nil {
		return nil, fmt.Errorf("commit batch: %w", err)
	}
	if p == nil {
		p = &store.CommitBatchParams{}
	}
	multi := make([]store.StreamCommit, len(items))
	for i, it := range items {
		multi[i] = store.StreamCommit{Stream: stream, Number: it.Number, Token: it.Token, Payload: it.Payload, Ordered: p.Ordered}
	}
	return s.CommitMulti(ctx, multi, &store.CommitMultiParams{Now: p.Now})
}
