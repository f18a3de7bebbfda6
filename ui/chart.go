package ui

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/seqlease/seqlease/store"
)

// chartBuckets is the number of bars of a throughput chart.
const chartBuckets = 20

// Sizes of the chart's SVG, in its own units.
const (
	chartWidth  = 200
	chartHeight = 36
	barGap      = 1
)

// chart is a stream's throughput over the last ChartWindow: how many of
// its most recent ChartSample numbers were resolved (committed or made
// gaps) in each of chartBuckets intervals, oldest first. The store keeps
// no counters, so the chart is computed from the entries' ResolvedAt;
// Partial says the sample was full and its oldest number was resolved
// inside the window, so older resolutions may be missing: the figures
// are then lower bounds.
type chart struct {
	Bars    []bar
	Total   int
	Partial bool
	Width   int
	Height  int
}

// bar is one interval of a chart, laid out for the SVG.
type bar struct {
	Count      int
	X, Y, W, H int
	Title      string // "3 resolved 1m30s to 1m0s ago"
}

// throughput reads the resolution times of the stream's most recent
// numbers (not the entries: a page of streams would otherwise hold every
// sampled payload at once) and buckets them by time.
func (h *Handler) throughput(ctx context.Context, st store.StreamStats, now time.Time) (chart, error) {
	c := chart{Width: chartWidth, Height: chartHeight}
	window, sample := h.cfg.ChartWindow, int64(h.cfg.ChartSample)
	counts := make([]int, chartBuckets)
	after := max(st.NextNumber-1-sample, st.LowPoint-1, 0)
	var es []store.Resolution
	if st.NextNumber > 1 {
		var err error
		es, err = h.cfg.Store.ReadResolutions(ctx, st.Stream, after, int(sample))
		var te *store.TrimmedError
		if errors.As(err, &te) {
			es, err = nil, nil // trimmed since Stats: no chart this time
		}
		if err != nil {
			return chart{}, err
		}
	}
	step := window / chartBuckets
	for _, e := range es {
		if e.ResolvedAt.IsZero() {
			continue
		}
		ago := now.Sub(e.ResolvedAt)
		if ago < 0 || ago >= window {
			continue
		}
		counts[chartBuckets-1-int(ago/step)]++
		c.Total++
	}
	if int64(len(es)) == sample && len(es) > 0 {
		first := es[0]
		c.Partial = first.ResolvedAt.IsZero() || now.Sub(first.ResolvedAt) < window
	}
	peak := 1
	for _, n := range counts {
		peak = max(peak, n)
	}
	w := chartWidth / chartBuckets
	for i, n := range counts {
		ht := n * chartHeight / peak
		if n > 0 {
			ht = max(ht, 1)
		}
		c.Bars = append(c.Bars, bar{Count: n, X: i * w, Y: chartHeight - ht, W: w - barGap, H: ht,
			Title: strconv.Itoa(n) + " resolved " + dur(time.Duration(chartBuckets-i)*step) + " to " +
				dur(time.Duration(chartBuckets-1-i)*step) + " ago"})
	}
	return c, nil
}
