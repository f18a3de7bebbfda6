package store

import (
	"context"
	"fmt"
	"time"
)

// StreamSummarizer is implemented by a backend that reads the overview of
// many streams at once: what a status page lists of each stream, in one
// call rather than a few per stream.
type StreamSummarizer interface {
	// SummarizeStreams returns the summaries of streams, in their order
	// (a name given twice, twice), leaving out the streams that do not
	// exist. Each summary is read in one snapshot of its stream. At most
	// MaxListLimit names; the cost grows with the names times
	// SummaryParams.Samples, so a caller summarizes a page at a time.
	SummarizeStreams(ctx context.Context, streams []string, p *SummaryParams) ([]StreamSummary, error)
}

// Limits and defaults of SummaryParams.
const (
	DefaultSummaryExpired = 100
	DefaultSummaryBuckets = 20
	MaxSummaryBuckets     = 100
	DefaultSummarySamples = 200
)

// SummaryParams select what SummarizeStreams reads beyond the streams'
// Stats. A nil *SummaryParams means the defaults and no throughput.
type SummaryParams struct {
	// Now is the time expiries and the throughput window are measured at;
	// nil means the store's clock.
	Now *time.Time
	// ExpiredLimit caps the count of expired leases: a summary's Expired
	// stops there. Zero means DefaultSummaryExpired (100), at most
	// MaxListLimit.
	ExpiredLimit int
	// Window is the span of the throughput, ending at Now; zero means no
	// throughput is read.
	Window time.Duration
	// Buckets is how many equal intervals Window is cut into; zero means
	// DefaultSummaryBuckets (20), at most MaxSummaryBuckets. Each must be
	// at least a microsecond long.
	Buckets int
	// Samples caps the numbers read per stream for the throughput; zero
	// means DefaultSummarySamples (200), at most MaxListLimit.
	Samples int
}

// StreamSummary is one stream as an overview shows it.
type StreamSummary struct {
	StreamStats
	// OpenGaps counts the open gaps (CountGaps).
	OpenGaps int64
	// Expired counts the leased entries whose lease has expired at Now,
	// up to SummaryParams.ExpiredLimit.
	Expired int64
	// Parked counts the parked entries (store.Parker).
	Parked int64
	// Throughput is zero when SummaryParams.Window is.
	Throughput Throughput
}

// Throughput counts a stream's numbers resolved (committed or made gaps)
// in each interval of a window ending at Now. Interval i holds the
// resolutions after Since + i·Step up to Since + (i+1)·Step.
//
// The store keeps no counters; the counts come from the entries' resolution
// times, bounded in cost:
//   - From: the numbers counted are those after the most recent one
//     already resolved at Since, found by probing back from the stream's
//     last number by 1, 2, 4, 8, ... numbers. A number below From resolved
//     inside the window, such as an old lease turned into a gap, is not
//     counted.
//   - Stride: when more than Samples numbers follow From, only every
//     Stride-th one is read, from the last number down, and each counts for
//     Stride numbers. The counts are then estimates, exact to about Stride
//     per interval; with Stride 1 they are exact.
type Throughput struct {
	Since  time.Time
	Step   time.Duration
	Counts []int64 // one per interval, oldest first; nil without a window
	From   int64   // the first number looked at
	Stride int64   // 1: every number from From on was read
}

// Estimated reports whether the counts are estimates (Stride above 1).
func (t Throughput) Estimated() bool { return t.Stride > 1 }

// Total is the sum of the counts.
func (t Throughput) Total() int64 {
	var n int64
	for _, c := range t.Counts {
		n += c
	}
	return n
}

// Summary is a SummaryParams with its defaults applied, as the backends
// use it.
type Summary struct {
	ExpiredLimit int
	Buckets      int
	Samples      int
	Step         time.Duration // Window / Buckets, in whole microseconds; 0: no throughput
}

// Window is the throughput's span: Buckets whole Steps.
func (s Summary) Window() time.Duration { return s.Step * time.Duration(s.Buckets) }

// ValidateSummary checks a SummarizeStreams call (each name valid, at most
// MaxListLimit of them, the limits of SummaryParams) and returns its
// settings.
func ValidateSummary(streams []string, p *SummaryParams) (Summary, error) {
	if len(streams) > MaxListLimit {
		return Summary{}, fmt.Errorf("%w: %d streams, at most %d", ErrInvalidCount, len(streams), MaxListLimit)
	}
	for _, s := range streams {
		if err := ValidateStream(s); err != nil {
			return Summary{}, err
		}
	}
	if p == nil {
		p = &SummaryParams{}
	}
	s := Summary{ExpiredLimit: DefaultSummaryExpired, Buckets: DefaultSummaryBuckets, Samples: DefaultSummarySamples}
	for _, f := range []struct {
		name string
		v    int
		max  int
		to   *int
	}{
		{"ExpiredLimit", p.ExpiredLimit, MaxListLimit, &s.ExpiredLimit},
		{"Buckets", p.Buckets, MaxSummaryBuckets, &s.Buckets},
		{"Samples", p.Samples, MaxListLimit, &s.Samples},
	} {
		if f.v < 0 || f.v > f.max {
			return Summary{}, fmt.Errorf("%w: summary %s %d, must be 0..%d", ErrInvalidArgument, f.name, f.v, f.max)
		}
		if f.v > 0 {
			*f.to = f.v
		}
	}
	if p.Window < 0 {
		return Summary{}, fmt.Errorf("%w: summary Window %v is negative", ErrInvalidArgument, p.Window)
	}
	if p.Window > 0 {
		s.Step = (p.Window / time.Duration(s.Buckets)).Truncate(time.Microsecond)
		if s.Step == 0 {
			return Summary{}, fmt.Errorf("%w: summary Window %v is shorter than a microsecond per bucket", ErrInvalidArgument, p.Window)
		}
	}
	return s, nil
}

// Bucket returns the interval of a throughput window starting at since,
// with steps of step, that holds a resolution at t: -1 when t is not after
// since. The caller drops t after the window's end.
func Bucket(since, t time.Time, step time.Duration) int {
	d := t.Sub(since)
	if d <= 0 {
		return -1
	}
	return int((d - time.Microsecond) / step)
}
