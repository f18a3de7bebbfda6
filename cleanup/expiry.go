package cleanup

import (
	"context"
	"log/slog"
	"time"

	"github.com/seqlease/seqlease/store"
)

// The expiry watch. Leases that expire often mean that their holders do not
// finish within the TTL: the TTL is too short for the work on this machine,
// and every expiry becomes a gap or a recovery. Over windows of
// ExpiryWindow, the Service counts the expired leases it resolved on each
// stream against the numbers handed out on that stream meanwhile, read
// after each cycle from the store (its Stats, one query per stream, for at
// most maxExpiryReads streams a cycle), and warns when the share is above
// Config.ExpiryWarnShare. A stream's count starts at the first cycle that
// resolves one of its leases (a restart's backlog is not counted) and
// stops after a window without one.

const (
	// ExpiryWindow is the window of the expiry watch.
	ExpiryWindow = time.Minute
	// expiryWarnEvery is the least time between two warnings.
	expiryWarnEvery = 10 * time.Minute
	// expiryMinSamples is how many numbers a window must have handed out
	// before its share counts (the metrics package's alert evaluator's
	// DefaultMinSamples).
	expiryMinSamples = 20
	// maxExpiryReads bounds the Stats reads after a cycle.
	maxExpiryReads = 100
)

// ExpiryShare is one window of the expiry watch: the expired leases the
// Service resolved, and the numbers handed out meanwhile on their streams.
type ExpiryShare struct {
	Window    time.Duration // how long the window lasted
	Expired   int64         // expired leases resolved, on the streams counted
	HandedOut int64         // numbers handed out on those streams in the window
	// TTL is the lease duration (ExpiresAt - LeasedAt) of the last
	// expired lease counted; zero when none was.
	TTL time.Duration
}

// Share returns Expired over HandedOut, 0 when nothing was handed out.
func (s ExpiryShare) Share() float64 {
	if s.HandedOut <= 0 {
		return 0
	}
	return float64(s.Expired) / float64(s.HandedOut)
}

// ExpiryObserver is an Observer that is also told of every window of the
// expiry watch, with the share of the numbers handed out that expired (the
// metrics package's CleanupObserver exports it as a gauge). Its method
// must not block.
type ExpiryObserver interface {
	ExpiryShare(s ExpiryShare)
}

// statsReader is the store's reader of a stream's figures (both backends).
type statsReader interface {
	Stats(ctx context.Context, stream string) (store.StreamStats, error)
}

// expiryWatch is the state of the expiry watch; the cycles use it in turn
// (under Service.mu).
type expiryWatch struct {
	threshold float64        // a share; negative: no warning
	observer  ExpiryObserver // nil: none
	reader    statsReader    // nil: off

	resolved map[string]int64    // expired leases the running cycle resolved, by stream
	next     map[string]int64    // each counted stream's next number, when last read
	seen     map[string]struct{} // the counted streams with a resolution in this window
	sum      ExpiryShare         // this window's
	start    time.Time           // of this window; zero before the first cycle
	warned   time.Time           // the last warning
}

func newExpiryWatch(s Store, threshold float64, o Observer) *expiryWatch {
	w := &expiryWatch{threshold: threshold, resolved: map[string]int64{}, next: map[string]int64{}, seen: map[string]struct{}{}}
	w.observer, _ = o.(ExpiryObserver)
	if threshold >= 0 || w.observer != nil {
		w.reader, _ = s.(statsReader)
	}
	return w
}

// expired records an expired lease the running cycle resolved.
func (w *expiryWatch) expired(e store.Entry) {
	if w.reader == nil {
		return
	}
	w.resolved[e.Stream]++
	w.sum.TTL = e.ExpiresAt.Sub(e.LeasedAt)
}

// cycleEnded reads the next numbers of the streams the cycle resolved
// expired leases of, and ends the window when it is over.
func (w *expiryWatch) cycleEnded(ctx context.Context, sv *Service) {
	if w.reader == nil {
		return
	}
	now := time.Now()
	if w.start.IsZero() {
		w.start = now
	}
	reads := 0
	for stream, n := range w.resolved {
		delete(w.resolved, stream)
		if reads == maxExpiryReads || ctx.Err() != nil {
			continue
		}
		reads++
		qctx, cancel := context.WithTimeout(ctx, sv.qTimeout)
		st, err := w.reader.Stats(qctx, stream)
		cancel()
		if err != nil {
			sv.logger.Debug("cleanup: expiry watch: read the stream", slog.String("stream", stream), slog.Any("error", err))
			continue
		}
		if before, ok := w.next[stream]; ok {
			w.sum.Expired += n
			w.sum.HandedOut += st.NextNumber - before
		}
		w.next[stream] = st.NextNumber
		w.seen[stream] = struct{}{}
	}
	if now.Sub(w.start) >= ExpiryWindow {
		w.endWindow(sv, now)
	}
}

// endWindow reports the window, warns if its share is above the threshold
// (at most every expiryWarnEvery), and starts the next.
func (w *expiryWatch) endWindow(sv *Service, now time.Time) {
	s := w.sum
	s.Window = now.Sub(w.start)
	if w.observer != nil {
		w.observer.ExpiryShare(s)
	}
	if w.threshold >= 0 && s.HandedOut >= expiryMinSamples && s.Share() > w.threshold &&
		(w.warned.IsZero() || now.Sub(w.warned) >= expiryWarnEvery) {
		w.warned = now
		sv.logger.Warn("cleanup: many leases expire: unless their holders crashed, they do not finish in time, "+
			"and the lease TTL is too short for the work on this machine; raise sequence.Config.DefaultTTL "+
			"(or AdaptiveTTL's Max), or keep long work alive with Lease.KeepAlive",
			slog.Int64("expired", s.Expired), slog.Int64("handed_out", s.HandedOut),
			slog.Float64("share", s.Share()), slog.Float64("threshold", w.threshold),
			slog.Duration("window", s.Window), slog.Duration("ttl", s.TTL))
	}
	for stream := range w.next {
		if _, ok := w.seen[stream]; !ok {
			delete(w.next, stream) // quiet for a window: counted afresh from its next expiry
		}
	}
	clear(w.seen)
	w.sum, w.start = ExpiryShare{}, now
}
