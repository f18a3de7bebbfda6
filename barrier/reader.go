package barrier

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/seqlease/seqlease/store"
)

// DefaultPageSize is the number of entries the reader fetches per round trip.
const DefaultPageSize = 500

// ReadOpts are the options of Entries. A nil *ReadOpts means the defaults.
type ReadOpts struct {
	// After is the position to read from, exclusive: the reader yields
	// numbers After+1, After+2, ... Zero replays the stream from the start;
	// a checkpoint (the last number a consumer processed) resumes after it.
	After int64
	// IncludeGaps yields gaps as well as committed entries. Default: only
	// committed entries (including filled gaps, which are committed).
	IncludeGaps bool
	// Follow keeps reading as the stream grows, blocking at the watermark,
	// until ctx ends. Default: stop at the watermark.
	Follow bool
	// PageSize is how many entries one read fetches. Default:
	// DefaultPageSize; at most store.MaxListLimit.
	PageSize int
}

// Entries yields the resolved entries of stream in strictly increasing order
// of number, each once, never past the watermark (I5): committed entries with
// their payloads and, if asked, gaps. Replaying from 0, resuming from a
// checkpoint and following live all yield the same sequence.
//
// Iteration stops at the first error, which is yielded with a zero Entry:
// store.ErrInvalidNumber for a negative After and store.ErrInvalidCount for
// a PageSize outside 0..store.MaxListLimit (both match
// store.ErrInvalidArgument, and nothing is read), store.ErrTrimmed (wrapped
// in *store.TrimmedError) when After is below the stream's retention low
// point, the context's error when a follower's ctx ends. A stream that does not exist yet is empty (and a follower waits for
// it).
func (b *Barrier) Entries(ctx context.Context, stream string, opts *ReadOpts) iter.Seq2[store.Entry, error] {
	if opts == nil {
		opts = &ReadOpts{}
	}
	return func(yield func(store.Entry, error) bool) {
		if opts.After < 0 {
			yield(store.Entry{}, fmt.Errorf("barrier: read %s: %w: after %d", stream, store.ErrInvalidNumber, opts.After))
			return
		}
		if opts.PageSize < 0 || opts.PageSize > store.MaxListLimit {
			yield(store.Entry{}, fmt.Errorf("barrier: read %s: %w: page size %d, must be 0..%d",
				stream, store.ErrInvalidCount, opts.PageSize, store.MaxListLimit))
			return
		}
		page := cmp.Or(opts.PageSize, DefaultPageSize)
		after := opts.After
		for {
			entries, err := b.src.ReadResolved(ctx, stream, after, page)
			if err != nil && !errors.Is(err, store.ErrStreamNotFound) {
				yield(store.Entry{}, fmt.Errorf("barrier: read %s: %w", stream, err))
				return
			}
			for _, e := range entries {
				after = e.Number
				if e.State == store.Gap && !opts.IncludeGaps {
					continue
				}
				if !yield(e, nil) {
					return
				}
			}
			if len(entries) == page {
				continue
			}
			if !opts.Follow {
				return
			}
			// Everything up to the watermark was read: wait for after+1.
			if err := b.WaitFor(ctx, stream, after+2); err != nil {
				if ctx.Err() != nil {
					err = context.Cause(ctx) // the follower's own end, said once
				}
				yield(store.Entry{}, fmt.Errorf("barrier: follow %s: %w", stream, err))
				return
			}
		}
	}
}
