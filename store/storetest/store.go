package storetest

import (
	"context"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Store is the whole storage contract for streams and entries, as the
// conformance suite exercises it. Consumers declare the subsets they need
// (sequence.Store); a backend satisfies them all by satisfying this one.
//
// Every method validates its input first (store.Validate*): bad input returns
// an error matching store.ErrInvalidArgument and its specific sentinel, and
// changes nothing. A cancelled context returns an error matching ctx.Err()
// and changes nothing the caller was told about.
type Store interface {
	// InboxStore: the inbox records of consumers (inbox.go).
	InboxStore

	// Lease hands out len(reqs) consecutive numbers of stream, in one
	// atomic step (one statement on PostgreSQL), creating the stream on first
	// use. Entry i of the result has number base+i for the request reqs[i],
	// state leased, a fresh token, LeasedAt = the backend's now and
	// ExpiresAt = LeasedAt + reqs[i].TTL. A failed call hands out nothing:
	// numbers stay dense (I1).
	Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error)

	// Commit resolves a leased entry as committed with p.Payload, if token
	// holds it and now < ExpiresAt by the backend's clock (I3). It returns
	// the resolution time. Repeating a commit that already took effect with
	// the same token returns the original resolution time and nil, without
	// writing (I7). Otherwise it fails and changes nothing:
	// ErrNotFound (number never handed out), ErrTokenMismatch,
	// ErrExpired (expired, or gapped because it expired), ErrReleased,
	// ErrGap (gapped for another reason).
	Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error)

	// Release turns a leased entry into a gap with reason "released" if
	// token holds it; a release after expiry is accepted as long as nothing
	// resolved the entry first. Repeating a release that took effect returns
	// nil. Failures change nothing: ErrNotFound, ErrTokenMismatch,
	// ErrCommitted, ErrExpired (already gapped because it expired), ErrGap.
	Release(ctx context.Context, stream string, number int64, token store.Token, p *store.ReleaseParams) error

	// Extend sets the expiry of a live lease held by token to now + p.TTL
	// and counts a renewal, returning the backend's now and the new expiry.
	// Failures change nothing: ErrNotFound, ErrTokenMismatch, ErrExpired
	// (now >= ExpiresAt, even if not yet resolved), ErrCommitted,
	// ErrReleased, ErrGap, ErrInvalidTTL.
	Extend(ctx context.Context, stream string, number int64, token store.Token, p *store.ExtendParams) (now, expiresAt time.Time, err error)

	// ResolveExpired turns an expired leased entry (now >= ExpiresAt) into a
	// gap with p.Reason (default "expired") and p.RecoveredAs. It races
	// Commit on one conditional write: exactly one of them wins. Failures
	// change nothing: ErrNotFound, ErrNotExpired (still live), ErrCommitted,
	// ErrReleased, ErrExpired (already gapped because it expired), ErrGap.
	ResolveExpired(ctx context.Context, stream string, number int64, p *store.ResolveExpiredParams) error

	// ListExpired returns leased entries with now >= ExpiresAt, ordered by
	// (stream, number), after the cursor in p, at most p.Limit of them.
	ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error)

	// Read returns up to limit entries of stream with numbers > after, in
	// increasing order, whatever their state, payloads included. limit 0
	// means store.DefaultListLimit. ErrStreamNotFound for an unknown stream.
	// When after+1 is below the stream's low point (Trim removed what the
	// caller asks for) it fails with a *store.TrimmedError, which matches
	// store.ErrTrimmed and carries the low point.
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)

	// Stats describes stream at one instant (one snapshot).
	// ErrStreamNotFound for an unknown stream.
	Stats(ctx context.Context, stream string) (store.StreamStats, error)

	// Streams lists stream names greater than after, in byte order, at
	// most limit of them (0: store.DefaultListLimit).
	Streams(ctx context.Context, after string, limit int) ([]string, error)

	// Now returns the backend's clock.
	Now(ctx context.Context) (time.Time, error)

	// CommitBatch commits items (ascending numbers) in order, each exactly
	// as Commit would with the batch's Ordered flag; with Ordered, an item
	// counts the batch's earlier items as resolved exactly when they
	// succeeded. On PostgreSQL the batch is one transaction. A non-nil
	// error means every item's outcome is unknown.
	CommitBatch(ctx context.Context, stream string, items []store.CommitItem, p *store.CommitBatchParams) ([]store.CommitResult, error)

	// ResolveExpiredBatch is ResolveExpired for several numbers of one
	// stream at once (on PostgreSQL, one statement). It returns, ascending,
	// the numbers it resolved; numbers that were not leased and expired (or
	// do not exist) are left alone and not returned. p.RecoveredAs must be 0.
	ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error)

	// RecoverExpired moves the work of an expired leased entry to a new
	// number in one atomic step: it appends a committed entry (the stream's
	// next number) with p.Payload, the old entry's operation id and kind,
	// RecoveredFrom = number and p.RecoveryType, and turns the old entry into
	// a gap with p.Reason (default "recovered") and RecoveredAs = the new
	// number. Both happen or neither. It returns the new number. Refusals
	// change nothing and are those of ResolveExpired; in particular a
	// second run after a success finds the old entry a gap (ErrGap), so it
	// never makes a second copy.
	RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error)

	// RecoverExpiredBatch is RecoverExpired for several entries of one
	// stream at once, in one transaction (on PostgreSQL, one statement):
	// items (numbers ascending and distinct) whose entries are leased and
	// expired move, each as RecoverExpired would (the new entry and the
	// old entry's gap together), to consecutive new numbers in the order of
	// the items. Result i is item i's: the new number, or the refusal
	// RecoverExpired would give (such an item changes nothing). A non-nil
	// error means no item's outcome is known.
	RecoverExpiredBatch(ctx context.Context, stream string, items []store.RecoverItem, p *store.RecoverBatchParams) ([]store.RecoverResult, error)

	// Snapshot describes stream's resolution at one instant, listing at
	// most limit unresolved numbers (0: store.MaxListLimit); see
	// store.Snapshot. An unknown stream has the zero snapshot.
	Snapshot(ctx context.Context, stream string, limit int) (store.Snapshot, error)

	// ReadResolved is Read that stops before the first unresolved entry:
	// it never returns an entry past the watermark. ErrStreamNotFound for an
	// unknown stream, *store.TrimmedError below the low point.
	ReadResolved(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)

	// Watch reports every resolution that takes effect (Commit, CommitBatch
	// items, Release, ResolveExpired, and the capabilities' commits) to
	// sink, until ctx ends, one by one (sink.Resolved) or, after ordered
	// commits, as every number up to one (sink.ResolvedThrough); it never
	// reports a number that did not resolve, may report one more than
	// once, and reports the resolutions of a stream in the order they took
	// effect. It calls sink.Reset when it starts listening and whenever it
	// may have missed some. It returns ctx's error.
	Watch(ctx context.Context, sink store.Sink) error

	// ListGaps returns the open gaps of stream (state gap) with numbers >
	// p.After, in increasing order, at most p.Limit of them (0: the
	// default), only those with reason p.Reason if it is set; with
	// p.IncludeFilled also the gaps filled since (committed, FilledAt set).
	// ErrStreamNotFound for an unknown stream.
	ListGaps(ctx context.Context, stream string, p *store.ListGapsParams) ([]store.Entry, error)

	// CountGaps returns the number of open gaps of stream (filled ones do not
	// count). ErrStreamNotFound for an unknown stream.
	CountGaps(ctx context.Context, stream string) (int64, error)

	// FillGap turns an open gap into a committed entry holding p.Payload,
	// with FilledAt = now and FilledBy = p.FilledBy (required). GapReason,
	// RecoveredAs, ResolvedAt and the rest are kept: the watermark does not
	// move. It is one conditional write, so of concurrent fills of one gap
	// exactly one succeeds. It is not idempotent: repeating a fill that took
	// effect fails with ErrNotGap. Failures change nothing: ErrNotFound
	// (never handed out, or an unknown stream), ErrNotGap (leased,
	// committed, or already filled), a *store.TrimmedError (below the low
	// point).
	FillGap(ctx context.Context, stream string, number int64, p *store.FillParams) error

	// Trim deletes the resolved entries of stream below min(below,
	// watermark+1) and raises the stream's low point to that bound; it never
	// lowers it, never removes an unresolved entry and never trims past the
	// watermark. It returns the low point after the call. below < 1 is
	// ErrInvalidNumber; ErrStreamNotFound for an unknown stream.
	Trim(ctx context.Context, stream string, below int64) (lowPoint int64, err error)

	// Checkpoint returns the position reader saved for stream (the last
	// number it processed), 0 when none was saved.
	Checkpoint(ctx context.Context, reader, stream string) (int64, error)

	// SaveCheckpoint sets reader's position in stream. It moves forward
	// only (a lower position fails with a *store.CheckpointError matching
	// store.ErrCheckpointBackwards) and never past the stream's watermark
	// (store.ErrCheckpointAhead: a reader only processes resolved
	// entries); saving the saved position again succeeds without writing.
	// Concurrent saves serialize: none is lost, none moves it back.
	// Refusals change nothing.
	SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error

	// DeleteCheckpoint removes reader's checkpoint of stream, so that a
	// later save may start anywhere up to the watermark;
	// store.ErrCheckpointNotFound when there is none.
	DeleteCheckpoint(ctx context.Context, reader, stream string) error

	// ListCheckpoints returns the checkpoints p selects, in (reader,
	// stream) byte order after its cursor, at most p.Limit of them, each
	// with its stream's watermark read in the same snapshot.
	ListCheckpoints(ctx context.Context, p *store.ListCheckpointsParams) ([]store.Checkpoint, error)
}
