package barrier

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/seqlease/seqlease/store"
)

// DefaultPageSize is the number of entries the reader fetches per round trip.
const DefaultPageSize = 500

// The pauses of a follower between failed reads: exponential from
// RetryInitialInterval up to RetryMaxInterval, with jitter, for as long
// as the failures last. A pause ends early when the barrier hears that the
// stream's watermark moved.
const (
	RetryInitialInterval = 100 * time.Millisecond
	RetryMaxInterval     = 5 * time.Second
)

// ReadOpts are the options of Entries. A nil *ReadOpts means the defaults.
type ReadOpts struct {
	// After is the position to read from, exclusive: the reader yields
	// numbers After+1, After+2, ... Zero replays the stream from the start;
	// a checkpoint (the last number a consumer processed) resumes after it.
	// It must be 0 when Reader is set.
	After int64
	// Reader names a reader whose saved checkpoint (the Source's
	// Checkpoint, see Checkpoints) is where reading starts: after it, or
	// from the start when it saved none. Reading never saves it: the
	// consumer saves its position itself, in its own transaction for an
	// exactly-once projection. Default: none; read after After.
	Reader string
	// IncludeGaps yields gaps as well as committed entries. Default: only
	// committed entries (including filled gaps, which are committed).
	IncludeGaps bool
	// Follow keeps reading as the stream grows, blocking at the watermark,
	// until ctx ends. A failed read is retried with backoff (from
	// RetryInitialInterval up to RetryMaxInterval, logged at warn level),
	// or at once when the barrier hears of a new resolution on the stream
	// (the backend is back), and the reader resumes exactly where it was.
	// Default: stop at the watermark.
	Follow bool
	// StopOnError ends a follower at the first failed read, yielding the
	// error, as a reader that does not follow always does. Default: a
	// follower retries.
	StopOnError bool
	// SaveEvery has the reader save Reader's checkpoint itself, outside any
	// transaction, for consumers whose side effects are not in the
	// database (a broker, an index): after every SaveEvery entries the loop
	// body returned from (skipped gaps count), when it catches up with the
	// watermark, and when it ends (a break saves up to the entry before
	// the one it broke on). That is at-least-once: after a crash, the
	// entries since the last save are read again. A failed save is logged
	// and the next one covers it. It needs Reader, and a Source that
	// implements CheckpointSaver. Default: 0, the reader saves nothing;
	// the consumer saves, in its own transaction for exactly-once. A save
	// refused with store.ErrReadOnly (a store on a standby with nowhere to
	// save) ends the iteration with that error.
	SaveEvery int
	// PageSize is how many entries one read fetches. Default:
	// DefaultPageSize; at most store.MaxListLimit.
	PageSize int
}

// Checkpoints is what a reader with ReadOpts.Reader needs of the Source:
// the reader's saved position. store/memory and store/postgres have it;
// Entries checks for it with a type assertion.
type Checkpoints interface {
	// Checkpoint returns the position reader saved for stream, 0 if none.
	Checkpoint(ctx context.Context, reader, stream string) (int64, error)
}

// CheckpointSaver is what a reader with ReadOpts.SaveEvery needs of the
// Source on top of Checkpoints. store/memory and store/postgres have it.
type CheckpointSaver interface {
	// SaveCheckpoint sets reader's position in stream (forward only, up
	// to the watermark).
	SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error
}

// SaveTimeout bounds the save a reader with ReadOpts.SaveEvery makes as it
// ends, when its context may already be done.
const SaveTimeout = 5 * time.Second

// Errors of the reader's options.
var (
	// ErrAfterWithReader reports ReadOpts with both After and Reader set:
	// the reader would not know where to start. It matches
	// store.ErrInvalidArgument.
	ErrAfterWithReader = fmt.Errorf("barrier: After and Reader are both set: %w", store.ErrInvalidArgument)
	// ErrSaveWithoutReader reports ReadOpts.SaveEvery without a Reader
	// whose checkpoint to save. It matches store.ErrInvalidArgument.
	ErrSaveWithoutReader = fmt.Errorf("barrier: SaveEvery needs a Reader: %w", store.ErrInvalidArgument)
	// ErrNoCheckpoints reports ReadOpts.Reader on a Source that keeps no
	// checkpoints (it does not implement Checkpoints, or CheckpointSaver
	// for SaveEvery).
	ErrNoCheckpoints = errors.New("barrier: the source keeps no checkpoints")
)

// Entries yields the resolved entries of stream in strictly increasing order
// of number, each once, never past the watermark (I5): committed entries with
// their payloads and, if asked, gaps. Replaying from 0, resuming from a
// checkpoint and following live all yield the same sequence.
//
// Iteration stops at the first error it does not retry, which is yielded
// with a zero Entry: store.ErrInvalidNumber for a negative After,
// store.ErrInvalidCount for a PageSize outside 0..store.MaxListLimit or a
// negative SaveEvery, store.ErrInvalidReader for a bad Reader name,
// ErrAfterWithReader and ErrSaveWithoutReader (all match
// store.ErrInvalidArgument, and nothing is read), ErrNoCheckpoints,
// store.ErrTrimmed (wrapped in *store.TrimmedError) when the start is below
// the stream's retention low point, store.ErrReadOnly when SaveEvery's
// save is refused by a read-only source, the context's error when ctx
// ends, and ErrStopped when the barrier stops under a follower. Any other
// failed read
// ends a reader that does not follow (or has StopOnError); a follower
// retries it. A stream that does not exist yet is empty (and a follower
// waits for it).
func (b *Barrier) Entries(ctx context.Context, stream string, opts *ReadOpts) iter.Seq2[store.Entry, error] {
	if opts == nil {
		opts = &ReadOpts{}
	}
	return func(yield func(store.Entry, error) bool) {
		if err := checkReadOpts(stream, opts); err != nil {
			yield(store.Entry{}, err)
			return
		}
		r := &reader{b: b, stream: stream, opts: opts}
		after, err := r.start(ctx)
		if err != nil {
			yield(store.Entry{}, err)
			return
		}
		r.passed, r.saved = after, after
		defer r.saveOnExit(ctx)
		page := cmp.Or(opts.PageSize, DefaultPageSize)
		for {
			entries, err := b.src.ReadResolved(ctx, stream, after, page)
			if err != nil && !errors.Is(err, store.ErrStreamNotFound) {
				err = fmt.Errorf("barrier: read %s: %w", store.QuoteInput(stream), err)
				if r.retry(ctx, after, err) {
					continue
				}
				yield(store.Entry{}, r.final(ctx, err))
				return
			}
			r.ok()
			for _, e := range entries {
				after = e.Number
				if e.State == store.Gap && !opts.IncludeGaps {
					if err := r.pass(ctx, e.Number); err != nil {
						yield(store.Entry{}, err)
						return
					}
					continue
				}
				if !yield(e, nil) {
					return
				}
				if err := r.pass(ctx, e.Number); err != nil {
					yield(store.Entry{}, err)
					return
				}
			}
			if len(entries) == page {
				continue
			}
			if !opts.Follow {
				return
			}
			// caught up: the lag shows 0 while it waits
			if err := r.save(ctx); err != nil {
				yield(store.Entry{}, err)
				return
			}
			// Everything up to the watermark was read: wait for after+1.
			if err := b.WaitFor(ctx, stream, after+2); err != nil {
				yield(store.Entry{}, fmt.Errorf("barrier: follow %s: %w", store.QuoteInput(stream), cause(ctx, err)))
				return
			}
		}
	}
}

// checkReadOpts checks opts before anything is read.
func checkReadOpts(stream string, opts *ReadOpts) error {
	switch {
	case opts.After < 0:
		return fmt.Errorf("barrier: read %s: %w: after %d", store.QuoteInput(stream), store.ErrInvalidNumber, opts.After)
	case opts.PageSize < 0 || opts.PageSize > store.MaxListLimit:
		return fmt.Errorf("barrier: read %s: %w: page size %d, must be 0..%d",
			store.QuoteInput(stream), store.ErrInvalidCount, opts.PageSize, store.MaxListLimit)
	case opts.SaveEvery < 0:
		return fmt.Errorf("barrier: read %s: %w: save every %d", store.QuoteInput(stream), store.ErrInvalidCount, opts.SaveEvery)
	case opts.SaveEvery > 0 && opts.Reader == "":
		return fmt.Errorf("barrier: read %s: %w", store.QuoteInput(stream), ErrSaveWithoutReader)
	case opts.Reader == "":
		return nil
	case opts.After != 0:
		return fmt.Errorf("barrier: read %s: %w (after %d, reader %s)", store.QuoteInput(stream), ErrAfterWithReader, opts.After, store.QuoteInput(opts.Reader))
	}
	if err := store.ValidateReader(opts.Reader); err != nil {
		return fmt.Errorf("barrier: read %s: %w", store.QuoteInput(stream), err)
	}
	return nil
}

// reader is the state of one Entries iteration beyond its position: the
// retries of a follower, and the saves of SaveEvery.
type reader struct {
	b      *Barrier
	stream string
	opts   *ReadOpts
	bo     *backoff.ExponentialBackOff // made on the first failure
	fails  int                         // consecutive failed reads
	saver  CheckpointSaver             // with SaveEvery
	passed int64                       // every entry up to it was handled by the loop body (or skipped)
	saved  int64                       // the checkpoint as this reader last saved (or found) it
}

// pass notes that the loop body returned from the entry number (or that
// it was skipped), and saves every SaveEvery of them. An error ends the
// iteration (see save).
func (r *reader) pass(ctx context.Context, number int64) error {
	r.passed = number
	if r.saver != nil && r.passed-r.saved >= int64(r.opts.SaveEvery) {
		return r.save(ctx)
	}
	return nil
}

// save saves the position passed, if SaveEvery asks for saves and it moved.
// A failed save is logged, and the next one covers it; but a save refused
// with store.ErrReadOnly will never succeed, and is returned to end the
// iteration.
func (r *reader) save(ctx context.Context) error {
	if r.saver == nil || r.passed == r.saved {
		return nil
	}
	if err := r.saver.SaveCheckpoint(ctx, r.opts.Reader, r.stream, r.passed, nil); err != nil {
		if errors.Is(err, store.ErrReadOnly) {
			r.saver = nil // nothing more to save on exit
			return fmt.Errorf("barrier: read %s as %s: %w", store.QuoteInput(r.stream), store.QuoteInput(r.opts.Reader), err)
		}
		if ctx.Err() == nil {
			r.b.logger.Warn("barrier: save checkpoint failed", slog.String("stream", r.stream),
				slog.String("reader", r.opts.Reader), slog.Int64("position", r.passed), slog.Any("error", err))
		}
		return nil
	}
	r.saved = r.passed
	return nil
}

// saveOnExit saves what was passed when the iteration ends, even after ctx
// ended (bounded by SaveTimeout).
func (r *reader) saveOnExit(ctx context.Context) {
	if r.saver == nil || r.passed == r.saved {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), SaveTimeout)
	defer cancel()
	_ = r.save(sctx) // a failure is logged
}

// start returns the position to read after: After, or the reader's saved
// checkpoint.
func (r *reader) start(ctx context.Context) (int64, error) {
	if r.opts.Reader == "" {
		return r.opts.After, nil
	}
	cp, ok := r.b.src.(Checkpoints)
	if !ok {
		return 0, fmt.Errorf("barrier: read %s as %s: %w", store.QuoteInput(r.stream), store.QuoteInput(r.opts.Reader), ErrNoCheckpoints)
	}
	if r.opts.SaveEvery > 0 {
		if r.saver, ok = r.b.src.(CheckpointSaver); !ok {
			return 0, fmt.Errorf("barrier: read %s as %s: %w (SaveEvery)", store.QuoteInput(r.stream), store.QuoteInput(r.opts.Reader), ErrNoCheckpoints)
		}
	}
	for {
		pos, err := cp.Checkpoint(ctx, r.opts.Reader, r.stream)
		if err == nil {
			r.ok()
			return pos, nil
		}
		err = fmt.Errorf("barrier: read %s: checkpoint of %s: %w", store.QuoteInput(r.stream), store.QuoteInput(r.opts.Reader), err)
		if !r.retry(ctx, 0, err) {
			return 0, r.final(ctx, err)
		}
	}
}

// retry reports whether a follower should read again after err, having
// waited its backoff pause; false for a reader that does not follow (or
// stops on errors), an error retrying cannot cure, or when ctx ends.
func (r *reader) retry(ctx context.Context, after int64, err error) bool {
	if !r.opts.Follow || r.opts.StopOnError || ctx.Err() != nil || permanent(err) {
		return false
	}
	if r.bo == nil {
		r.bo = backoff.NewExponentialBackOff(backoff.WithInitialInterval(r.b.retryPauses[0]),
			backoff.WithMaxInterval(r.b.retryPauses[1]), backoff.WithMaxElapsedTime(0))
	}
	r.fails++
	pause := r.bo.NextBackOff()
	// The pause grows while the backend is away (up to RetryMaxInterval),
	// but the barrier hearing of a resolution on this stream means it
	// answers again: retry then, not at the end of a pause that grew
	// during the outage (a failover).
	moved, withdraw := r.b.progress(r.stream, after)
	defer withdraw()
	r.b.logger.Warn("barrier: read failed, retrying", slog.String("stream", r.stream),
		slog.String("reader", r.opts.Reader), slog.Int64("after", after), slog.Int("attempt", r.fails),
		slog.Duration("pause", pause), slog.Any("error", err))
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-moved:
		return true
	case <-ctx.Done():
		return false
	}
}

// ok notes a successful read: the next failure starts a fresh backoff.
func (r *reader) ok() {
	if r.fails > 0 {
		r.fails = 0
		r.bo.Reset()
	}
}

// final returns the error that ends the iteration after a failed read:
// err, or the context's cause, said once, when ctx ended.
func (r *reader) final(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("barrier: read %s: %w", store.QuoteInput(r.stream), context.Cause(ctx))
	}
	return err
}

// cause returns the context's cause when ctx ended (the follower's own
// end), else err.
func cause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// permanent reports whether retrying a read that failed with err cannot
// help: bad input, trimmed entries, a stopped barrier.
func permanent(err error) bool {
	return errors.Is(err, store.ErrInvalidArgument) || errors.Is(err, store.ErrTrimmed) ||
		errors.Is(err, ErrStopped) || errors.Is(err, ErrNotStarted)
}
