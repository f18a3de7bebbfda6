package seqleasetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seqlease/seqlease/store"
)

// TB is what the Require helpers and Drain need of a test: *testing.T,
// *testing.B and *testing.F satisfy it. They report a failure with Fatalf
// and return; a TB whose Fatalf does not stop the test (one that records
// failures, to test a helper) sees them return normally.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// CheckTimeout bounds the reads a Require helper makes.
const CheckTimeout = 30 * time.Second

// maxListed is how many unresolved entries a failure message describes.
const maxListed = 5

// RequireCommitted fails tb unless entry n of stream is committed (a filled
// gap counts) and, when payload is given, carries exactly that payload (at
// most one payload). The failure says what the entry is instead.
func (s *Stack) RequireCommitted(tb TB, stream string, n int64, payload ...[]byte) {
	tb.Helper()
	const op = "RequireCommitted"
	if len(payload) > 1 {
		tb.Fatalf("seqleasetest: %s %s/%d: %d payloads given, at most one", op, stream, n, len(payload))
		return
	}
	e, ok := s.entry(tb, op, stream, n)
	if !ok {
		return
	}
	if e.State != store.Committed {
		tb.Fatalf("seqleasetest: %s %s/%d: the entry is %s, want committed", op, stream, n, describe(e))
		return
	}
	if len(payload) == 1 && !bytes.Equal(e.Payload, payload[0]) {
		tb.Fatalf("seqleasetest: %s %s/%d: the payload is %s, want %s", op, stream, n, quote(e.Payload), quote(payload[0]))
	}
}

// RequireGap fails tb unless entry n of stream is a gap (not filled) and,
// when reason is given, has that gap reason (at most one reason):
// store.ReasonReleased and store.ReasonExpired are the store's,
// store.ReasonRecovered and recovery.ReasonRecoveryFailed the cleanup
// loop's. The failure says what the entry is instead.
func (s *Stack) RequireGap(tb TB, stream string, n int64, reason ...string) {
	tb.Helper()
	const op = "RequireGap"
	if len(reason) > 1 {
		tb.Fatalf("seqleasetest: %s %s/%d: %d reasons given, at most one", op, stream, n, len(reason))
		return
	}
	e, ok := s.entry(tb, op, stream, n)
	if !ok {
		return
	}
	if e.State != store.Gap {
		tb.Fatalf("seqleasetest: %s %s/%d: the entry is %s, want a gap", op, stream, n, describe(e))
		return
	}
	if len(reason) == 1 && e.GapReason != reason[0] {
		tb.Fatalf("seqleasetest: %s %s/%d: the entry is %s, want reason %q", op, stream, n, describe(e), reason[0])
	}
}

// RequireWatermark fails tb unless the watermark of stream (every entry up
// to it is resolved) is exactly w, as the store says. The failure gives the
// watermark found and the unresolved entries that hold it.
func (s *Stack) RequireWatermark(tb TB, stream string, w int64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CheckTimeout)
	defer cancel()
	snap, err := s.Store.Snapshot(ctx, stream, 0)
	if err != nil {
		tb.Fatalf("seqleasetest: RequireWatermark %s: %v", stream, err)
		return
	}
	if snap.Watermark != w {
		tb.Fatalf("seqleasetest: RequireWatermark %s: the watermark is %d, want %d; last number %d%s",
			stream, snap.Watermark, w, snap.Known, s.unresolved(ctx, stream, snap.Unresolved))
	}
}

// RequireAllResolved fails tb unless every entry of stream is resolved
// (committed or gap; a stream with no entries passes). The failure lists
// the unresolved entries: number, holder and expiry.
func (s *Stack) RequireAllResolved(tb TB, stream string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CheckTimeout)
	defer cancel()
	snap, err := s.Store.Snapshot(ctx, stream, 0)
	if err != nil {
		tb.Fatalf("seqleasetest: RequireAllResolved %s: %v", stream, err)
		return
	}
	if len(snap.Unresolved) > 0 {
		tb.Fatalf("seqleasetest: RequireAllResolved %s: %d of %d entries unresolved (watermark %d)%s",
			stream, len(snap.Unresolved), snap.Known, snap.Watermark, s.unresolved(ctx, stream, snap.Unresolved))
	}
}

// Drain waits until the watermark of stream reaches the last number handed
// out when Drain was called, that is until every entry the stream had then
// is resolved: the work in flight has committed, been released or been
// cleaned up. It fails tb when ctx ends first, saying where the watermark
// stopped and which entries hold it. A stream with no entries is drained.
func (s *Stack) Drain(ctx context.Context, tb TB, stream string) {
	tb.Helper()
	// The reads have their own bound: ctx bounds the wait, and a failure
	// must still be able to say where the watermark stopped.
	rctx, cancel := context.WithTimeout(context.Background(), CheckTimeout)
	defer cancel()
	stats, err := s.Store.Stats(rctx, stream)
	if errors.Is(err, store.ErrStreamNotFound) {
		return
	}
	if err != nil {
		tb.Fatalf("seqleasetest: Drain %s: %v", stream, err)
		return
	}
	last := stats.NextNumber - 1
	if err := s.Barrier.WaitFor(ctx, stream, last+1); err != nil {
		snap, serr := s.Store.Snapshot(rctx, stream, 0)
		if serr != nil {
			tb.Fatalf("seqleasetest: Drain %s: the watermark did not reach %d: %v (reading the stream: %v)", stream, last, err, serr)
			return
		}
		tb.Fatalf("seqleasetest: Drain %s: the watermark is %d, not the last number %d: %v%s",
			stream, snap.Watermark, last, err, s.unresolved(rctx, stream, snap.Unresolved))
	}
}

// entry reads entry n of stream; on failure it fails tb, saying why.
func (s *Stack) entry(tb TB, op, stream string, n int64) (store.Entry, bool) {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("seqleasetest: %s %s/%d: numbers start at 1", op, stream, n)
		return store.Entry{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), CheckTimeout)
	defer cancel()
	es, err := s.Store.Read(ctx, stream, n-1, 1)
	switch {
	case errors.Is(err, store.ErrStreamNotFound):
		tb.Fatalf("seqleasetest: %s %s/%d: the stream has no entries", op, stream, n)
		return store.Entry{}, false
	case err != nil:
		tb.Fatalf("seqleasetest: %s %s/%d: %v", op, stream, n, err)
		return store.Entry{}, false
	case len(es) == 0 || es[0].Number != n:
		last := "no entries"
		if stats, err := s.Store.Stats(ctx, stream); err == nil {
			last = fmt.Sprintf("%d entries", stats.NextNumber-1)
		}
		tb.Fatalf("seqleasetest: %s %s/%d: no such entry: the stream has %s", op, stream, n, last)
		return store.Entry{}, false
	}
	return es[0], true
}

// unresolved describes the first of the unresolved numbers of stream, for a
// failure message: "; unresolved: 3 (leased by ... until ...), ...".
func (s *Stack) unresolved(ctx context.Context, stream string, numbers []int64) string {
	if len(numbers) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("; unresolved: ")
	for i, n := range numbers[:min(len(numbers), maxListed)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d", n)
		if es, err := s.Store.Read(ctx, stream, n-1, 1); err == nil && len(es) == 1 {
			fmt.Fprintf(&b, " (%s)", describe(es[0]))
		}
	}
	if len(numbers) > maxListed {
		fmt.Fprintf(&b, ", and %d more", len(numbers)-maxListed)
	}
	return b.String()
}

// describe says what an entry is, for a failure message.
func describe(e store.Entry) string {
	switch {
	case e.State == store.Leased:
		return fmt.Sprintf("leased by %q until %s", e.Owner, e.ExpiresAt.UTC().Format(time.RFC3339Nano))
	case e.State == store.Gap && e.RecoveredAs != 0:
		return fmt.Sprintf("a gap (reason %q, recovered as %d)", e.GapReason, e.RecoveredAs)
	case e.State == store.Gap:
		return fmt.Sprintf("a gap (reason %q)", e.GapReason)
	case !e.FilledAt.IsZero():
		return fmt.Sprintf("committed, a filled gap (reason %q), with payload %s", e.GapReason, quote(e.Payload))
	case e.RecoveredFrom != 0:
		return fmt.Sprintf("committed, recovered from %d (%s), with payload %s", e.RecoveredFrom, e.RecoveryType, quote(e.Payload))
	}
	return fmt.Sprintf("committed with payload %s", quote(e.Payload))
}

// quote shows a payload in a message: quoted, and cut after 64 bytes.
func quote(p []byte) string {
	if p == nil {
		return "nil"
	}
	const limit = 64
	if len(p) > limit {
		return fmt.Sprintf("%q... (%d bytes)", p[:limit], len(p))
	}
	return fmt.Sprintf("%q", p)
}
