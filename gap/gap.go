package gap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Store is what Gaps needs of a backend (store/memory, store/postgres).
type Store interface {
	ListGaps(ctx context.Context, stream string, p *store.ListGapsParams) ([]store.Entry, error)
	CountGaps(ctx context.Context, stream string) (int64, error)
	FillGap(ctx context.Context, stream string, number int64, p *store.FillParams) error
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
}

// Errors of this package. Errors from the backend keep their store
// sentinels: store.ErrNotFound for a number never handed out,
// store.ErrStreamNotFound, store.ErrTrimmed, store.ErrInvalidArgument.
var (
	// ErrNotGap reports a number that is not a gap (leased or committed) or,
	// from Fill, a gap that was already filled. It is store.ErrNotGap.
	ErrNotGap = store.ErrNotGap

	// ErrNoPolicy reports a Fill without a FillPolicy: filling must be
	// explicit.
	ErrNoPolicy = errors.New("gap: no fill policy")

	// ErrFillRefused reports a Fill its policy refused. ErrRecovered matches
	// it too.
	ErrFillRefused = errors.New("gap: fill refused by policy")

	// ErrRecovered reports a Fill of a gap whose work was recovered under
	// another number: filling it would do the work twice. No policy can
	// allow it. It matches ErrFillRefused.
	ErrRecovered error = &refusal{"gap: work recovered under another number; filling would duplicate it"}
)

// refusal is a refusal to fill that is not the policy's: it matches
// ErrFillRefused.
type refusal struct{ msg string }

func (e *refusal) Error() string { return e.msg }

// Is makes a refusal match ErrFillRefused.
func (e *refusal) Is(target error) bool { return target == ErrFillRefused }

// Gap is the record of a gap: a number that was never committed by its
// holder, and possibly filled since.
type Gap struct {
	Stream      string
	Number      int64
	OperationID string // the operation id of the lost lease
	Kind        string // the kind of work of the lost lease
	Reason      string // why it is a gap: store.ReasonReleased, store.ReasonExpired, or a recovery's reason
	// OriginalExpiry is when the lost lease expired or would have.
	OriginalExpiry time.Time
	// CreatedAt is when the number became a gap (its resolution).
	CreatedAt time.Time
	// RecoveredAs is the number the work moved to; 0 if it did not move.
	RecoveredAs int64
	// FilledAt is when the gap was filled; zero while it is open.
	FilledAt time.Time
	FilledBy string // who filled it; empty while open
}

// FromEntry returns the gap record of e: an open gap, or a filled one
// (committed with FilledAt set). Any other entry is ErrNotGap.
func FromEntry(e store.Entry) (Gap, error) {
	if e.State != store.Gap && e.FilledAt.IsZero() {
		return Gap{}, fmt.Errorf("%w: %s/%d is %s", ErrNotGap, e.Stream, e.Number, e.State) // a stored name: valid
	}
	return Gap{
		Stream:         e.Stream,
		Number:         e.Number,
		OperationID:    e.OperationID,
		Kind:           e.Kind,
		Reason:         e.GapReason,
		OriginalExpiry: e.ExpiresAt,
		CreatedAt:      e.ResolvedAt,
		RecoveredAs:    e.RecoveredAs,
		FilledAt:       e.FilledAt,
		FilledBy:       e.FilledBy,
	}, nil
}

// Filled reports whether the gap was filled.
func (g Gap) Filled() bool { return !g.FilledAt.IsZero() }

// DefaultMaxPayload is the default of Config.MaxPayload: 1 MiB, the same as
// sequence.DefaultMaxPayload.
const DefaultMaxPayload = 1 << 20

// Config configures Gaps. A nil *Config means the defaults; so does the
// zero value of each field.
type Config struct {
	// MaxPayload is the largest payload Fill accepts, in bytes. Keep it
	// the Leaser's (sequence.Config.MaxPayload) so a filled entry is no
	// larger than a committed one could be. Default: DefaultMaxPayload.
	MaxPayload int
	// Observer is told of every gap filled (the metrics package provides
	// one). Optional.
	Observer Observer
}

// Observer is told of gaps filled, for metrics. Its method must not block.
type Observer interface {
	// Filled reports that g was filled (g as it was before the fill).
	Filled(ctx context.Context, g Gap)
}

// Gaps finds, counts and fills the gaps of streams. It is safe for
// concurrent use.
type Gaps struct {
	store      Store
	maxPayload int
	observer   Observer
}

// New returns Gaps on s. It returns an error naming the field when cfg is
// invalid.
func New(s Store, cfg *Config) (*Gaps, error) {
	if s == nil {
		return nil, errors.New("gap: nil Store")
	}
	g := &Gaps{store: s, maxPayload: DefaultMaxPayload}
	if cfg != nil {
		g.observer = cfg.Observer
		switch {
		case cfg.MaxPayload < 0:
			return nil, fmt.Errorf("gap: Config.MaxPayload %d must not be negative: %w", cfg.MaxPayload, store.ErrInvalidArgument)
		case cfg.MaxPayload > 0:
			g.maxPayload = cfg.MaxPayload
		}
	}
	return g, nil
}

// entry reads the entry of number: store.ErrNotFound if it was never handed
// out.
func (x *Gaps) entry(ctx context.Context, stream string, number int64) (store.Entry, error) {
	if number < 1 {
		return store.Entry{}, fmt.Errorf("%w: %d", store.ErrInvalidNumber, number)
	}
	es, err := x.store.Read(ctx, stream, number-1, 1)
	if err != nil {
		return store.Entry{}, err
	}
	if len(es) == 0 || es[0].Number != number {
		return store.Entry{}, fmt.Errorf("%w: number %d", store.ErrNotFound, number)
	}
	return es[0], nil
}

// Get returns the gap record of number, open or filled. It fails with
// ErrNotGap when the number is leased or was committed by its holder, and
// with store.ErrNotFound when it was never handed out.
func (x *Gaps) Get(ctx context.Context, stream string, number int64) (Gap, error) {
	e, err := x.entry(ctx, stream, number)
	if err != nil {
		return Gap{}, fmt.Errorf("gap: get %s/%d: %w", store.QuoteInput(stream), number, err)
	}
	g, err := FromEntry(e)
	if err != nil {
		return Gap{}, fmt.Errorf("gap: get: %w", err)
	}
	return g, nil
}

// IsGap reports whether number is an open gap: resolved as a gap and not
// filled (a filled gap is committed, and readers treat it as such). It fails
// with store.ErrNotFound when the number was never handed out.
func (x *Gaps) IsGap(ctx context.Context, stream string, number int64) (bool, error) {
	e, err := x.entry(ctx, stream, number)
	if err != nil {
		return false, fmt.Errorf("gap: is gap %s/%d: %w", store.QuoteInput(stream), number, err)
	}
	return e.State == store.Gap, nil
}

// ListOpts select the gaps List returns. A nil *ListOpts means the defaults.
type ListOpts struct {
	// After lists only numbers above it, for paging: pass the last number of
	// the previous page. Default: 0, from the start.
	After int64
	// Limit is the most gaps returned, at most store.MaxListLimit.
	// Default: store.DefaultListLimit.
	Limit int
	// Reason lists only gaps with this reason. Default: any reason.
	Reason string
	// IncludeFilled lists filled gaps too. Default: open gaps only.
	IncludeFilled bool
}

// List returns the gaps of stream in increasing number order.
func (x *Gaps) List(ctx context.Context, stream string, opts *ListOpts) ([]Gap, error) {
	if opts == nil {
		opts = &ListOpts{}
	}
	es, err := x.store.ListGaps(ctx, stream, &store.ListGapsParams{
		After: opts.After, Limit: opts.Limit, Reason: opts.Reason, IncludeFilled: opts.IncludeFilled,
	})
	if err != nil {
		return nil, fmt.Errorf("gap: list %s: %w", store.QuoteInput(stream), err)
	}
	out := make([]Gap, 0, len(es))
	for _, e := range es {
		g, err := FromEntry(e)
		if err != nil {
			return nil, fmt.Errorf("gap: list %s: backend returned a non-gap: %w", store.QuoteInput(stream), err)
		}
		out = append(out, g)
	}
	return out, nil
}

// Count returns the number of open gaps of stream (filled ones do not
// count).
func (x *Gaps) Count(ctx context.Context, stream string) (int64, error) {
	n, err := x.store.CountGaps(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("gap: count %s: %w", store.QuoteInput(stream), err)
	}
	return n, nil
}

// FillOpts are the options of Fill. FilledBy and Policy are required.
type FillOpts struct {
	// FilledBy records who fills the gap (an operator, a tool).
	FilledBy string
	// Policy decides whether this gap may be filled.
	Policy FillPolicy
	// Operation is the operation that wants to fill the gap, for a
	// RequestPolicy. Optional; its texts are checked as the store's.
	Operation Operation
}

// Operation is the operation that wants to fill a gap: its id and kind of
// work, as the caller names them.
type Operation struct {
	ID   string
	Kind string
}

// FillRequest is what a RequestPolicy decides on: the gap, and the fill
// that wants it.
type FillRequest struct {
	Gap       Gap
	Operation Operation // FillOpts.Operation
	FilledBy  string
	Payload   []byte // the payload to commit: the policy must not change it
}

// RequestPolicy is a FillPolicy that sees the operation that wants to fill
// the gap, not only the gap: Fill calls CanFill instead of CanBeFilled when
// the policy has it.
type RequestPolicy interface {
	FillPolicy
	CanFill(ctx context.Context, r FillRequest) (bool, error)
}

// RequestPolicyFunc adapts a function to a RequestPolicy. Its CanBeFilled
// passes a FillRequest with only the gap.
type RequestPolicyFunc func(ctx context.Context, r FillRequest) (bool, error)

// CanBeFilled implements FillPolicy.
func (f RequestPolicyFunc) CanBeFilled(ctx context.Context, g Gap) (bool, error) {
	return f(ctx, FillRequest{Gap: g})
}

// CanFill calls f.
func (f RequestPolicyFunc) CanFill(ctx context.Context, r FillRequest) (bool, error) {
	return f(ctx, r)
}

// allows asks policy about r.
func allows(ctx context.Context, policy FillPolicy, r FillRequest) (bool, error) {
	if rp, ok := policy.(RequestPolicy); ok {
		return rp.CanFill(ctx, r)
	}
	return policy.CanBeFilled(ctx, r.Gap)
}

// Fill commits payload under the open gap number, if the policy agrees, and
// records FilledBy and the time. It refuses, changing nothing, with
//
//   - ErrNoPolicy when opts or opts.Policy is nil;
//   - store.ErrInvalidArgument for an empty or invalid FilledBy, an invalid
//     Operation, or a bad stream or number; store.ErrPayloadTooLarge above
//     Config.MaxPayload;
//   - ErrNotGap when the number is leased, committed or already filled;
//   - ErrRecovered when the gap's work was recovered under another number,
//     whatever the policy says;
//   - ErrFillRefused when the policy says no, or the policy's error.
//
// Of concurrent fills of one gap exactly one succeeds; the others get
// ErrNotGap. Fill is not idempotent: after an error of unknown outcome,
// Get tells whether the fill took effect (FilledBy, FilledAt).
func (x *Gaps) Fill(ctx context.Context, stream string, number int64, payload []byte, opts *FillOpts) error {
	if opts == nil || opts.Policy == nil {
		return fmt.Errorf("gap: fill %s/%d: %w", store.QuoteInput(stream), number, ErrNoPolicy)
	}
	p := &store.FillParams{Payload: payload, FilledBy: opts.FilledBy}
	if err := store.ValidateFill(stream, number, p); err != nil {
		return fmt.Errorf("gap: fill %s/%d: %w", store.QuoteInput(stream), number, err)
	}
	if err := store.ValidateText("operation id", opts.Operation.ID); err != nil {
		return fmt.Errorf("gap: fill %s/%d: FillOpts.Operation: %w", store.QuoteInput(stream), number, err)
	}
	if err := store.ValidateText("operation kind", opts.Operation.Kind); err != nil {
		return fmt.Errorf("gap: fill %s/%d: FillOpts.Operation: %w", store.QuoteInput(stream), number, err)
	}
	if len(payload) > x.maxPayload {
		return fmt.Errorf("gap: fill %s/%d: %w: %d bytes, limit %d",
			store.QuoteInput(stream), number, store.ErrPayloadTooLarge, len(payload), x.maxPayload)
	}
	e, err := x.entry(ctx, stream, number)
	if err != nil {
		return fmt.Errorf("gap: fill %s/%d: %w", store.QuoteInput(stream), number, err)
	}
	g, err := FromEntry(e)
	switch {
	case err != nil:
		return fmt.Errorf("gap: fill: %w", err)
	case g.Filled():
		return fmt.Errorf("gap: fill %s/%d: %w: filled by %s", store.QuoteInput(stream), number, ErrNotGap, store.QuoteInput(g.FilledBy))
	case g.RecoveredAs != 0:
		return fmt.Errorf("gap: fill %s/%d: %w (as %d)", store.QuoteInput(stream), number, ErrRecovered, g.RecoveredAs)
	}
	ok, err := allows(ctx, opts.Policy, FillRequest{Gap: g, Operation: opts.Operation, FilledBy: opts.FilledBy, Payload: payload})
	switch {
	case err != nil:
		return fmt.Errorf("gap: fill %s/%d: policy: %w", store.QuoteInput(stream), number, err)
	case !ok:
		return fmt.Errorf("gap: fill %s/%d: %w", store.QuoteInput(stream), number, ErrFillRefused)
	}
	// RecoveredAs never changes once a gap exists, so the check above
	// still holds; the store's conditional write settles races between fills.
	if err := x.store.FillGap(ctx, stream, number, p); err != nil {
		return fmt.Errorf("gap: %s/%d: %w", store.QuoteInput(stream), number, err)
	}
	if x.observer != nil {
		x.observer.Filled(ctx, g)
	}
	return nil
}

// FillPolicy decides whether a gap may be filled. Fill consults it for open
// gaps whose work was not recovered elsewhere, and fills only when it
// returns true. An error refuses the fill and is returned to the caller.
type FillPolicy interface {
	CanBeFilled(ctx context.Context, g Gap) (bool, error)
}

// FillPolicyFunc adapts a function to FillPolicy.
type FillPolicyFunc func(ctx context.Context, g Gap) (bool, error)

// CanBeFilled calls f.
func (f FillPolicyFunc) CanBeFilled(ctx context.Context, g Gap) (bool, error) { return f(ctx, g) }

// NeverFill is the policy that refuses every fill.
var NeverFill FillPolicy = FillPolicyFunc(func(context.Context, Gap) (bool, error) { return false, nil })

// FillReasons returns the policy that fills only gaps whose reason is one of
// reasons, and never a gap whose work was recovered elsewhere. With no
// reasons it fills nothing.
func FillReasons(reasons ...string) FillPolicy {
	reasons = slices.Clone(reasons)
	return FillPolicyFunc(func(_ context.Context, g Gap) (bool, error) {
		return g.RecoveredAs == 0 && slices.Contains(reasons, g.Reason), nil
	})
}
