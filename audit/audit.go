package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Source is what the auditor reads: store/memory and store/postgres.
type Source interface {
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
	Stats(ctx context.Context, stream string) (store.StreamStats, error)
}

// Options select the checks beyond I1 and I2. A nil *Options runs those two.
type Options struct {
	// Ordered checks I4: the stream was written with ordered commits only.
	Ordered bool
	// Observed is what a reader yielded, in order (committed entries only,
	// unless ObservedGaps); it must be exactly the committed sequence (I5).
	// Nil skips the check; an empty, non-nil slice asserts nothing was read.
	Observed []int64
	// ObservedGaps says Observed includes gaps (barrier.ReadOpts.IncludeGaps).
	ObservedGaps bool
	// Acknowledged maps numbers whose commit returned success to their
	// payloads; each must be committed with it (I6). A nil payload only
	// checks the state.
	Acknowledged map[int64][]byte
	// MaxUnresolved, if positive, is how long past its expiry a lease may
	// stay unresolved (TTL is already behind it: use the cleanup interval
	// plus one cycle); older ones are reported (I6). Now is the instant to
	// judge by, on the backend's clock.
	MaxUnresolved time.Duration
	Now           time.Time
}

// Violation is one broken promise.
type Violation struct {
	Invariant string // "I1", "I2", ...
	Number    int64  // the entry concerned; 0 for the stream as a whole
	Detail    string
}

func (v Violation) String() string {
	if v.Number == 0 {
		return v.Invariant + ": " + v.Detail
	}
	return fmt.Sprintf("%s: entry %d: %s", v.Invariant, v.Number, v.Detail)
}

// Report is the outcome of an audit.
type Report struct {
	Stream                          string
	LowPoint, Last                  int64 // the entries read are LowPoint..Last
	Committed, Gaps, Leased, Filled int
	Recovered                       int // committed entries carrying moved work
	Checks                          []string
	Violations                      []Violation
}

// OK reports whether no violation was found.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Err returns nil for a clean report, else an error listing the violations.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	lines := make([]string, len(r.Violations))
	for i, v := range r.Violations {
		lines[i] = v.String()
	}
	return fmt.Errorf("audit: %s: %d violations:\n  %s", r.Stream, len(r.Violations), strings.Join(lines, "\n  "))
}

func (r *Report) add(inv string, n int64, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Invariant: inv, Number: n, Detail: fmt.Sprintf(format, args...)})
}

// Stream reads every entry of stream from src and checks it. It fails only
// when reading fails; what it finds is in the Report.
func Stream(ctx context.Context, src Source, stream string, opts *Options) (*Report, error) {
	stats, err := src.Stats(ctx, stream)
	if err != nil && !errors.Is(err, store.ErrStreamNotFound) {
		return nil, fmt.Errorf("audit: %s: stats: %w", store.QuoteInput(stream), err)
	}
	low := max(stats.LowPoint, 1)
	var es []store.Entry
	for after := low - 1; ; {
		page, err := src.Read(ctx, stream, after, store.MaxListLimit)
		if err != nil && !errors.Is(err, store.ErrStreamNotFound) {
			return nil, fmt.Errorf("audit: %s: read after %d: %w", store.QuoteInput(stream), after, err)
		}
		es = append(es, page...)
		if len(page) < store.MaxListLimit {
			break
		}
		after = page[len(page)-1].Number
	}
	r := Check(stream, low, es, opts)
	// Entries leased while the auditor read are fine; fewer than the
	// stream had handed out when it began are not.
	if last := stats.NextNumber - 1; r.Last < last {
		r.add("I1", 0, "the stream handed out up to %d but only %d..%d exist", last, low, r.Last)
	}
	return r, nil
}

// Check audits the entries of stream, which should be its whole ledger from
// low (its LowPoint; 1 if never trimmed) on, in any order.
func Check(stream string, low int64, es []store.Entry, opts *Options) *Report {
	if opts == nil {
		opts = &Options{}
	}
	r := &Report{Stream: stream, LowPoint: low, Last: low - 1}
	byNumber := make(map[int64]store.Entry, len(es))
	for _, e := range es {
		if _, dup := byNumber[e.Number]; dup {
			r.add("I1", e.Number, "appears twice")
			continue
		}
		byNumber[e.Number] = e
		r.Last = max(r.Last, e.Number)
	}
	r.Checks = append(r.Checks, "I1 dense", "I2 resolved once", "I3 committed before expiry")
	for n := low; n <= r.Last; n++ {
		e, ok := byNumber[n]
		if !ok {
			r.add("I1", n, "missing: a hole in %d..%d", low, r.Last)
			continue
		}
		checkEntry(r, e, byNumber)
	}
	for n := range byNumber {
		if n < low {
			r.add("I1", n, "below the low point %d", low)
		}
	}
	if opts.Ordered {
		r.Checks = append(r.Checks, "I4 ordered commits")
		checkOrdered(r, low, byNumber)
	}
	if opts.Observed != nil {
		r.Checks = append(r.Checks, "I5 reader saw the committed sequence")
		checkObserved(r, low, byNumber, opts)
	}
	if opts.Acknowledged != nil {
		r.Checks = append(r.Checks, "I6 acknowledged commits present")
		for n, payload := range opts.Acknowledged {
			e, ok := byNumber[n]
			switch {
			case !ok:
				r.add("I6", n, "acknowledged commit missing")
			case e.State != store.Committed || !e.FilledAt.IsZero():
				r.add("I6", n, "acknowledged commit is %s", describe(e))
			case payload != nil && !bytes.Equal(payload, e.Payload):
				r.add("I6", n, "acknowledged payload %q, ledger has %q", payload, e.Payload)
			}
		}
	}
	if opts.MaxUnresolved > 0 {
		r.Checks = append(r.Checks, fmt.Sprintf("I6 nothing unresolved %v past its expiry", opts.MaxUnresolved))
		for n := low; n <= r.Last; n++ {
			e, ok := byNumber[n]
			if ok && e.State == store.Leased && opts.Now.Sub(e.ExpiresAt) > opts.MaxUnresolved {
				r.add("I6", n, "unresolved %v after its expiry at %v", opts.Now.Sub(e.ExpiresAt), e.ExpiresAt)
			}
		}
	}
	return r
}

func describe(e store.Entry) string {
	switch {
	case !e.FilledAt.IsZero():
		return "a filled gap"
	case e.State == store.Gap:
		return "a gap (" + e.GapReason + ")"
	}
	return string(e.State)
}

// checkEntry checks one entry's fields against its state (I2).
func checkEntry(r *Report, e store.Entry, all map[int64]store.Entry) {
	n := e.Number
	switch e.State {
	case store.Leased:
		r.Leased++
		if !e.ResolvedAt.IsZero() || e.GapReason != "" || e.Payload != nil {
			r.add("I2", n, "leased but carries resolution fields")
		}
	case store.Committed:
		r.Committed++
		if e.ResolvedAt.IsZero() {
			r.add("I2", n, "committed without a resolution time")
		}
		if !e.FilledAt.IsZero() {
			r.Filled++
			if e.FilledBy == "" || e.GapReason == "" {
				r.add("I2", n, "filled without the filler or the original gap reason")
			}
			if e.RecoveredAs != 0 {
				r.add("I2", n, "filled although its work moved to %d", e.RecoveredAs)
			}
		} else if e.GapReason != "" {
			r.add("I2", n, "committed with a gap reason but not filled")
		}
		if e.RecoveredFrom != 0 {
			r.Recovered++
			checkMoved(r, e, all)
		}
		checkDecided(r, e)
	case store.Gap:
		r.Gaps++
		if e.ResolvedAt.IsZero() || e.GapReason == "" {
			r.add("I2", n, "gap without a resolution time or reason")
		}
		if e.Payload != nil {
			r.add("I2", n, "gap with a payload")
		}
		if m := e.RecoveredAs; m != 0 {
			to, ok := all[m]
			switch {
			case m <= n:
				r.add("I2", n, "work moved backwards, to %d", m)
			case !ok:
				r.add("I2", n, "work moved to %d, which is not in the ledger", m)
			case to.RecoveredFrom != n:
				r.add("I2", n, "work moved to %d, which says it came from %d", m, to.RecoveredFrom)
			}
		}
	default:
		r.add("I2", n, "unknown state %q", e.State)
	}
}

// checkDecided checks I3 on a committed entry: its resolution time is the
// instant the backend decided the commit, so a commit by the lease's holder
// has resolved_at < expires_at. An entry born committed (appended, or the
// cleanup loop's copy of moved work) has a lease of no length
// (leased_at = expires_at) and is committed at that instant. A filled gap
// is not a commit by a holder: its resolution time is the gap's, which came
// at or after the expiry, and it is not held to this.
func checkDecided(r *Report, e store.Entry) {
	switch {
	case !e.FilledAt.IsZero():
	case !e.LeasedAt.IsZero() && e.ExpiresAt.Equal(e.LeasedAt):
		if !e.ResolvedAt.Equal(e.LeasedAt) {
			r.add("I3", e.Number, "born committed at %v but recorded as committed at %v", e.LeasedAt, e.ResolvedAt)
		}
	case !e.ResolvedAt.Before(e.ExpiresAt):
		r.add("I3", e.Number, "committed at %v, not before its expiry at %v", e.ResolvedAt, e.ExpiresAt)
	}
}

// checkMoved checks a committed entry that carries moved work: it names a
// gap before it whose RecoveredAs points back.
func checkMoved(r *Report, e store.Entry, all map[int64]store.Entry) {
	from, ok := all[e.RecoveredFrom]
	switch {
	case e.RecoveredFrom >= e.Number:
		r.add("I2", e.Number, "recovered from %d, not an earlier number", e.RecoveredFrom)
	case !ok:
		return // trimmed, or below what was read: nothing to compare
	case from.State != store.Gap:
		r.add("I2", e.Number, "recovered from %d, which is %s, not a gap", e.RecoveredFrom, describe(from))
	case from.RecoveredAs != e.Number:
		// A second copy: two entries claim the work of one number.
		r.add("I2", e.Number, "recovered from %d, whose work moved to %d: a second copy", e.RecoveredFrom, from.RecoveredAs)
	}
	if e.RecoveryType == "" {
		r.add("I2", e.Number, "recovered without a recovery type")
	}
}

// checkOrdered checks I4: every committed entry resolved no earlier than
// every entry before it, by the backend's clock. Entries carrying moved work
// are committed by the cleanup loop without waiting (their numbers are new,
// at the end of the stream), and filled gaps were resolved as gaps first:
// both are skipped as subjects but count as resolutions before later ones.
func checkOrdered(r *Report, low int64, all map[int64]store.Entry) {
	var latest time.Time
	var latestN int64
	for n := low; n <= r.Last; n++ {
		e, ok := all[n]
		if !ok || !e.State.Resolved() {
			// A number after an unresolved one cannot have committed in
			// order; the next resolved ones are checked against it below.
			if ok {
				latest, latestN = farFuture, n
			}
			continue
		}
		if e.State == store.Committed && e.FilledAt.IsZero() && e.RecoveredFrom == 0 && e.ResolvedAt.Before(latest) {
			if latest == farFuture {
				r.add("I4", n, "committed while %d is still unresolved", latestN)
			} else {
				r.add("I4", n, "committed at %v, before %d resolved at %v", e.ResolvedAt, latestN, latest)
			}
		}
		if latest != farFuture && e.ResolvedAt.After(latest) {
			latest, latestN = e.ResolvedAt, n
		}
	}
}

var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// checkObserved checks I5: the reader's sequence is a prefix of the resolved
// ledger's committed (or all, with gaps) numbers, strictly increasing, each
// once, never past an unresolved entry.
func checkObserved(r *Report, low int64, all map[int64]store.Entry, opts *Options) {
	var want []int64
	for n := low; n <= r.Last; n++ {
		e, ok := all[n]
		if !ok || !e.State.Resolved() {
			break // the watermark: a reader never passes it
		}
		if e.State == store.Committed || opts.ObservedGaps {
			want = append(want, n)
		}
	}
	for i, n := range opts.Observed {
		switch {
		case i > 0 && n <= opts.Observed[i-1]:
			r.add("I5", n, "read after %d: not strictly increasing", opts.Observed[i-1])
			return
		case i >= len(want):
			r.add("I5", n, "read past the watermark or beyond the committed sequence")
			return
		case n != want[i]:
			r.add("I5", want[i], "reader skipped it (read %d instead)", n)
			return
		}
	}
}
