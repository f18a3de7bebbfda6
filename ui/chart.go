package ui

import (
	"fmt"
	"slices"
	"strings"
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

// chart is a stream's throughput over the last ChartWindow, as the
// store counted it (store.Throughput): the numbers resolved (committed or
// made gaps) in each of chartBuckets intervals, oldest first, drawn as one
// SVG path of bars (one attribute to escape, not five per bar: the streams
// page draws a chart per row). Estimated says the store sampled every
// Stride-th number, so the counts are estimates.
type chart struct {
	Path      string // the bars, in the SVG's units: "M0 36h9v-12h-9z..."
	Title     string // the counts in words, for the tooltip and screen readers
	Total     int64
	Estimated bool
	Width     int
	Height    int
}

// newChart lays t out; no bars without counts.
func newChart(t store.Throughput) chart {
	c := chart{Width: chartWidth, Height: chartHeight, Total: t.Total(), Estimated: t.Estimated()}
	if len(t.Counts) == 0 {
		return c
	}
	var title, path strings.Builder
	if c.Estimated {
		title.WriteString("about ")
	}
	n := len(t.Counts)
	fmt.Fprintf(&title, "%d resolved in the last %s; per %s, oldest first:", c.Total,
		dur(time.Duration(n)*t.Step), dur(t.Step))
	peak := max(1, slices.Max(t.Counts))
	w := chartWidth / n
	for i, count := range t.Counts {
		fmt.Fprintf(&title, " %d", count)
		if count == 0 {
			continue
		}
		ht := max(int(count*chartHeight/peak), 1)
		fmt.Fprintf(&path, "M%d %dh%dv%dh%dz", i*w, chartHeight, w-barGap, -ht, barGap-w)
	}
	c.Title, c.Path = title.String(), path.String()
	return c
}
