package main

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
)

// loopOpts configure a timed loop.
type loopOpts struct {
	workers int
	warm    time.Duration // ops finishing before this are not counted
	dur     time.Duration // the measured window
	// cutAtEnd cancels the operations' context when the window ends (for
	// loops that may block indefinitely, like a blocking acquire); an
	// error after that is the cut, not a failure.
	cutAtEnd bool
	memStats bool // count heap allocations in the window
}

// loopResult is what a timed loop measured.
type loopResult struct {
	perWorker []int64 // operations each worker finished in the window
	mallocs   uint64  // heap allocations in the window (memStats)
	dur       time.Duration
}

func (r loopResult) ops() int64 {
	var n int64
	for _, c := range r.perWorker {
		n += c
	}
	return n
}

func (r loopResult) perSecond() float64 { return float64(r.ops()) / r.dur.Seconds() }

func (r loopResult) allocsPerOp() float64 {
	if r.ops() == 0 {
		return 0
	}
	return float64(r.mallocs) / float64(r.ops())
}

// errWindowEnd is the cause of the cancellation at the end of a cut loop.
var errWindowEnd = errors.New("window ended")

// loop runs op on o.workers goroutines until the window ends, and counts
// the operations that finished inside it. Each worker finishes the
// operation it is in when the window ends (unless cutAtEnd), so nothing is
// left half done. The first error stops every worker and is returned.
func loop(ctx context.Context, o loopOpts, op func(ctx context.Context, worker int) error) (loopResult, error) {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	from, end := start.Add(o.warm), start.Add(o.warm+o.dur)
	res := loopResult{perWorker: make([]int64, o.workers), dur: o.dur}
	var wg sync.WaitGroup
	for w := range o.workers {
		wg.Go(func() {
			for runCtx.Err() == nil {
				err := op(runCtx, w)
				now := time.Now()
				if err != nil {
					if !errors.Is(context.Cause(runCtx), errWindowEnd) {
						cancel(err)
					}
					return
				}
				if !now.Before(from) && now.Before(end) {
					res.perWorker[w]++
				}
				if !now.Before(end) {
					return
				}
			}
		})
	}
	var m0, m1 runtime.MemStats
	if o.memStats && sleepUntil(runCtx, from) {
		runtime.ReadMemStats(&m0)
	}
	if (o.memStats || o.cutAtEnd) && sleepUntil(runCtx, end) {
		if o.memStats {
			runtime.ReadMemStats(&m1)
			res.mallocs = m1.Mallocs - m0.Mallocs
		}
		if o.cutAtEnd {
			cancel(errWindowEnd)
		}
	}
	wg.Wait()
	if err := context.Cause(runCtx); err != nil && !errors.Is(err, errWindowEnd) {
		return res, err
	}
	return res, nil
}

// sleepUntil sleeps until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// median returns the median of xs (the mean of the middle two for an even
// count); NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted samples,
// nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// spread describes how evenly successes were shared among workers.
func spread(counts []int64) (lo, hi int64, winners int) {
	lo = math.MaxInt64
	for _, c := range counts {
		lo, hi = min(lo, c), max(hi, c)
		if c > 0 {
			winners++
		}
	}
	return lo, hi, winners
}
