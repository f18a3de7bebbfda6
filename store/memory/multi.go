package memory

import (
	"context"
	"fmt"

	"github.com/seqlease/seqlease/store"
)

// LeaseMulti implements store.MultiLeaser: each item is leased as Lease
// would, under its stream's lock, one stream at a time (nothing is held
// across streams, so nothing can deadlock).
func (s *Store) LeaseMulti(ctx context.Context, items []store.StreamLeases, p *store.LeaseParams) []store.LeaseResult {
	out := make([]store.LeaseResult, len(items))
	errs, err := store.ValidateLeaseMulti(items, p)
	for i := range out {
		switch {
		case err != nil:
			out[i].Err = fmt.Errorf("lease: %w", err)
		case errs[i] != nil:
			out[i].Err = fmt.Errorf("lease: %w", errs[i])
		default:
			out[i].Entries, out[i].Err = s.Lease(ctx, items[i].Stream, items[i].Requests, p)
		}
	}
	return out
}

// CommitMulti implements store.MultiCommitter: each item is committed as
// Commit would, in order, so that an ordered item sees the earlier items
// of its stream that succeeded. Nothing spans the items: the memory
// backend has no transactions, and needs none, since no call fails half
// way.
func (s *Store) CommitMulti(ctx context.Context, items []store.StreamCommit, p *store.CommitMultiParams) ([]store.CommitResult, error) {
	if p == nil {
		p = &store.CommitMultiParams{}
	}
	errs, err := store.ValidateCommitMulti(items)
	if err != nil {
		return nil, fmt.Errorf("commit multi: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("commit multi: %w", store.NotSent(err))
	}
	out := make([]store.CommitResult, len(items))
	for i, it := range items {
		if errs[i] != nil {
			out[i].Err = fmt.Errorf("commit: %w", errs[i])
			continue
		}
		out[i].ResolvedAt, out[i].Err = s.Commit(ctx, it.Stream, it.Number, it.Token, &store.CommitParams{Payload: it.Payload, Ordered: it.Ordered, Now: p.Now})
	}
	return out, nil
}

var _ store.Appender = (*Store)(nil)

// Append implements store.Appender: under the stream's lock, each request
// takes the next number and commits at once, so no other call sees the
// entries leased.
func (s *Store) Append(ctx context.Context, name string, reqs []store.AppendRequest, p *store.AppendParams) ([]store.Entry, error) {
	if err := store.ValidateAppend(name, reqs, p); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("append: %w", store.NotSent(err))
	}
	if p == nil {
		p = &store.AppendParams{}
	}
	st := s.streamFor(name)
	out := make([]store.Entry, len(reqs))
	for i := range out {
		out[i].Token = store.NewToken() // outside the lock: it reads randomness
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.clock(p.Now)
	for i, r := range reqs {
		n := st.last + 1
		e := st.add(out[i].Token, p.Owner, r.OperationID, r.Kind, now, now)
		st.unresolved++
		if r.Payload != nil {
			e.setPayload(r.Payload)
		}
		s.resolve(name, st, e, n, stateCommitted, now)
		out[i] = store.Entry{
			Stream: name, Number: n, State: store.Committed, Token: out[i].Token,
			Owner: p.Owner, OperationID: r.OperationID, Kind: r.Kind,
			LeasedAt: now, ExpiresAt: now, ResolvedAt: now, Payload: r.Payload,
		}
	}
	return out, nil
}
