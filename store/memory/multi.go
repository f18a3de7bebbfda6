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
		return nil, fmt.Errorf("commit multi: %w", err)
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
