package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/store"
)

var _ store.StreamSummarizer = (*Store)(nil)

// SummarizeStreams implements store.StreamSummarizer: each stream's
// summary under its lock.
func (s *Store) SummarizeStreams(ctx context.Context, names []string, p *store.SummaryParams) ([]store.StreamSummary, error) {
	sum, err := store.ValidateSummary(names, p)
	if err != nil {
		return nil, fmt.Errorf("summarize streams: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("summarize streams: %w", store.NotSent(err))
	}
	var pinned *time.Time
	if p != nil {
		pinned = p.Now
	}
	now := s.clock(pinned)
	var out []store.StreamSummary
	for _, name := range names {
		if st := s.lookup(name); st != nil {
			out = append(out, st.summary(sum, now))
		}
	}
	return out, nil
}

// summary reads the stream's summary at now.
func (st *stream) summary(sum store.Summary, now time.Time) store.StreamSummary {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := store.StreamSummary{StreamStats: st.stats(), OpenGaps: st.gaps}
	for n := st.firstUnresolved; n <= st.last && out.Expired < int64(sum.ExpiredLimit); n++ {
		if e := st.at(n); e.slot.state == stateLeased && !now.Before(e.time(tExpires)) {
			out.Expired++
		}
	}
	for _, r := range st.records {
		if !r.parkedAt.IsZero() {
			out.Parked++
		}
	}
	if sum.Step > 0 {
		out.Throughput = st.throughput(sum, now)
	}
	return out
}

// throughput counts the resolutions of the window ending at now as
// store.Throughput describes: the same probes, stride and samples as the
// PostgreSQL statement. st.mu must be held.
func (st *stream) throughput(sum store.Summary, now time.Time) store.Throughput {
	t := store.Throughput{Since: now.Add(-sum.Window()), Step: sum.Step, Counts: make([]int64, sum.Buckets)}
	resolvedAt := func(n int64) (time.Time, bool) {
		e := st.at(n)
		return e.time(tResolved), e.slot.state.resolved()
	}
	lo := st.low - 1
	for d := int64(0); d <= st.last-st.low; d = 2*d + 1 {
		if at, ok := resolvedAt(st.last - d); ok && !at.After(t.Since) {
			lo = st.last - d
			break
		}
		if d > (st.last-st.low-1)/2 { // 2d+1 would pass the low point, or overflow
			break
		}
	}
	t.From = lo + 1
	t.Stride = max(1, (st.last-lo+int64(sum.Samples)-1)/int64(sum.Samples))
	for n := st.last; n > lo; n -= t.Stride {
		if at, ok := resolvedAt(n); ok && !at.After(now) {
			if b := store.Bucket(t.Since, at, t.Step); b >= 0 {
				t.Counts[b] += t.Stride
			}
		}
	}
	return t
}
