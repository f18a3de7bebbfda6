package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// The progress line: every -progress (1 s by default) the run prints to
// stderr how many events the projector applied, the rate over the last
// interval and overall, and an estimate of the time left. A run shorter than
// progressQuiet prints none: `make demo` and the tests stay quiet.
//
// Its figures come from the projector's count, which is in memory in every
// mode (with -procs the parent projects, so it knows what the worker
// processes got done), plus one Stats and one CountGaps query per line for
// the watermark, the numbers in flight and the gaps: nothing per event.

// progressQuiet is how long a run goes before its first progress line.
const progressQuiet = 5 * time.Second

// progressSmoothing is the weight of the last interval's rate in the rate
// the time left is estimated from; the rest is the estimate before it.
const progressSmoothing = 0.3

// meter turns samples of the applied count into a progress line's figures.
type meter struct {
	total    int64
	start    time.Time
	lastAt   time.Time
	last     int64
	smoothed float64 // events/s; 0 before the first sample
}

// progressFigures are one progress line's figures from the projector's
// count.
type progressFigures struct {
	elapsed         time.Duration
	applied, total  int64
	recent, overall float64       // events/s over the last interval, and since the start
	left            time.Duration // estimated; -1 when unknown (nothing applied lately)
}

func newMeter(start time.Time, total int64) *meter {
	return &meter{total: total, start: start, lastAt: start}
}

// sample records applied events at now and returns the figures.
func (m *meter) sample(now time.Time, applied int64) progressFigures {
	f := progressFigures{elapsed: now.Sub(m.start), applied: applied, total: m.total, left: -1}
	if d := now.Sub(m.lastAt).Seconds(); d > 0 {
		f.recent = float64(applied-m.last) / d
	}
	if s := f.elapsed.Seconds(); s > 0 {
		f.overall = float64(applied) / s
	}
	if m.smoothed == 0 {
		m.smoothed = f.recent
	} else {
		m.smoothed = progressSmoothing*f.recent + (1-progressSmoothing)*m.smoothed
	}
	m.lastAt, m.last = now, applied
	switch {
	case applied >= m.total:
		f.left = 0
	case m.smoothed > 0:
		f.left = time.Duration(float64(m.total-applied) / m.smoothed * float64(time.Second))
	}
	return f
}

// String is the figures as the start of a progress line.
func (f progressFigures) String() string {
	left := "?"
	if f.left >= 0 {
		left = f.left.Round(time.Second).String()
	}
	pct := 0.0
	if f.total > 0 {
		pct = 100 * float64(f.applied) / float64(f.total)
	}
	return fmt.Sprintf("%6.1fs  applied %d/%d (%.0f%%)  %.0f events/s (overall %.0f)  left ~%s",
		f.elapsed.Seconds(), f.applied, f.total, pct, f.recent, f.overall, left)
}

// progress prints a progress line to stderr every c.progress, once the run
// has gone on for progressQuiet, until stopped.
func (p *pipeline) progress(start time.Time) (stop func()) {
	if p.c.progress <= 0 {
		return func() {}
	}
	t := time.NewTicker(p.c.progress)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { p.progressLoop(done, t.C, start, p.n.applied.Load, os.Stderr) })
	return func() { close(done); wg.Wait(); t.Stop() }
}

// progressLoop prints a line to w at each tick from progressQuiet after
// start on, until done is closed. Each tick's time is its now; applied is
// read once a tick.
func (p *pipeline) progressLoop(done <-chan struct{}, ticks <-chan time.Time, start time.Time, applied func() int64, w io.Writer) {
	m := newMeter(start, int64(len(p.events)))
	for {
		var now time.Time
		select {
		case <-done:
			return
		case now = <-ticks:
		}
		f := m.sample(now, applied())
		if f.elapsed < progressQuiet {
			continue
		}
		line := f.String()
		// What the store knows, best effort: a failed query leaves its
		// figures out of this line.
		ctx, cancel := context.WithTimeout(context.Background(), p.c.progress)
		if st, err := p.st.Stats(ctx, p.stream); err == nil {
			line += fmt.Sprintf("  watermark %d  in flight %d", st.Watermark, st.Unresolved)
		}
		if gaps, err := p.st.CountGaps(ctx, p.stream); err == nil {
			line += fmt.Sprintf("  gaps %d", gaps)
		}
		cancel()
		fmt.Fprintf(w, "%s  recovered %d\n", line, p.n.recovered.Load())
	}
}
