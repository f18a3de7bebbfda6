package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// errAbandoned ends the recovery of an entry whose plan was not applied
// because an earlier entry of its stream failed first, or the walk ended.
var errAbandoned = errors.New("cleanup: not applied: the walk of the stream stopped before it")

// errLeadLost is the cause of a walk's end when its stream lease was lost.
var errLeadLost = errors.New("cleanup: lost the lead of the stream")

// maxBatchBytes bounds the recovered work a pending batch holds in memory.
const maxBatchBytes = 4 << 20

// cycle is the state of one run: a full scan, or a re-run of some streams.
type cycle struct {
	sv       *Service
	full     bool
	res      CycleResult
	leads    map[string]Leadership // streams this cycle leads
	done     map[string]bool       // streams left for a later cycle (failed, deferred, led elsewhere)
	deferred map[string]bool       // streams waiting behind a live lease
	failed   map[string]bool       // streams whose first entry left failed
	errs     []error

	cascade   bool
	cascadeAt time.Time
	paced     int // resolutions written since the last cascade pause

	offset     time.Duration // database clock minus local clock
	haveOffset bool
}

// run runs one cycle over every stream (streams nil) or over streams.
// listed is false when the cycle could not list the expired leases (the
// store is unreachable, or ctx ended): a failure of the cycle, unlike the
// failures of single streams that err joins too.
func (sv *Service) run(ctx context.Context, streams []string) (res CycleResult, listed bool, err error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	start := time.Now()
	ctx, end := sv.startCycle(ctx)
	c := &cycle{
		sv: sv, full: streams == nil, res: CycleResult{Full: streams == nil, Resolved: map[string]int{}},
		leads: map[string]Leadership{}, done: map[string]bool{}, deferred: map[string]bool{}, failed: map[string]bool{},
	}
	if !sv.history.loaded {
		sv.syncHistory(ctx) // a restart reads what earlier processes recorded
	}
	scanned, scanErr := c.scan(ctx, streams)
	if sv.history.dirty.Load() {
		sv.syncHistory(ctx)
	}
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case scanErr != nil:
		err = errors.Join(append(c.errs, scanErr)...)
	default:
		err = errors.Join(c.errs...)
	}
	c.finish(ctx, scanned, scanErr == nil, err)
	sv.expiry.cycleEnded(ctx, sv)
	c.res.Duration = time.Since(start)
	if c.full {
		sv.lastLatency = c.res.Duration
		if ctx.Err() == nil {
			sv.status.pass(c.res, scanErr == nil, err)
		}
	}
	end(c.res, err)
	if sv.observer != nil {
		sv.observer.Cycle(c.res, err)
	}
	return c.res, scanErr == nil, err
}

// scan lists and walks the expired leases of every stream, or of streams;
// it returns the streams it scanned to the end (nil and true for a full
// scan that completed). Only a listing error or the end of ctx stops it:
// the failures of entries are in c.errs.
func (c *cycle) scan(ctx context.Context, streams []string) ([]string, error) {
	if streams == nil {
		return nil, c.scanStream(ctx, "")
	}
	var scanned []string
	for _, s := range streams {
		if err := c.scanStream(ctx, s); err != nil {
			return scanned, err
		}
		scanned = append(scanned, s)
	}
	return scanned, nil
}

// scanStream lists the expired leases of one stream (or of all, for ""),
// a window of up to ScanLimit at a time, and walks each stream of the
// window in number order.
func (c *cycle) scanStream(ctx context.Context, only string) error {
	sv := c.sv
	cursor := &store.ListExpiredParams{Stream: only, AfterStream: only}
	for {
		window, more, err := c.list(ctx, cursor)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("cleanup: list expired: %w", err)
		}
		for stream := range c.leads {
			if len(window) == 0 || stream != window[0].Stream {
				c.release(stream) // its walk ended with the last window
			}
		}
		seenAt := c.dbNow(ctx)
		c.res.Expired += len(window)
		if !c.cascade && c.res.Expired > sv.cascade.threshold {
			c.enterCascade(ctx)
		}
		level := sv.pipeline.Level(ctx, recovery.Signals{Backlog: c.res.Expired, CycleLatency: sv.lastLatency})
		for i := 0; i < len(window); {
			j := i + 1
			for j < len(window) && window[j].Stream == window[i].Stream {
				j++
			}
			stream := window[i].Stream
			if err := c.walk(ctx, stream, window[i:j], level, seenAt); err != nil {
				return err
			}
			if !more || j < len(window) {
				c.release(stream) // its walk is over for this cycle
			}
			i = j
		}
		if !more {
			return nil
		}
	}
}

// list lists the next window of expired leases after the cursor, in pages
// of BatchSize; more is true when the window is full.
func (c *cycle) list(ctx context.Context, cursor *store.ListExpiredParams) (window []store.Entry, more bool, err error) {
	sv := c.sv
	for len(window) < sv.scanLimit {
		cursor.Limit = min(sv.batch, sv.scanLimit-len(window))
		qctx, cancel := context.WithTimeout(ctx, sv.qTimeout)
		page, err := sv.store.ListExpired(qctx, cursor)
		cancel()
		if err != nil {
			return nil, false, err
		}
		window = append(window, page...)
		if len(page) > 0 {
			last := page[len(page)-1]
			cursor.AfterStream, cursor.AfterNumber = last.Stream, last.Number
		}
		if len(page) < cursor.Limit {
			return window, false, nil
		}
	}
	return window, true, nil
}

// walk resolves the expired entries es of stream, in number order, under
// the stream's leadership. It returns only the end of ctx.
func (c *cycle) walk(ctx context.Context, stream string, es []store.Entry, level recovery.Level, seenAt time.Time) error {
	if c.done[stream] {
		return nil
	}
	l, ok := c.lead(ctx, stream)
	if !ok {
		return ctx.Err()
	}
	// The walk runs under the leadership: losing it stops the walk at once.
	wctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancel(errLeadLost) })
	w := &walk{c: c, lead: l.Context(), stream: stream, level: level, seenAt: seenAt}
	w.run(wctx, es)
	stop()
	cancel(nil)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case l.Context().Err() != nil:
		c.done[stream] = true
		c.res.NotLeader++
		c.release(stream)
		c.sv.logger.Warn("cleanup: lost the lead of a stream; stopped walking it", slog.String("stream", stream),
			slog.Any("cause", context.Cause(l.Context())))
	}
	return nil
}

// lead makes sure this cycle leads stream.
func (c *cycle) lead(ctx context.Context, stream string) (Leadership, bool) {
	if l, ok := c.leads[stream]; ok {
		if l.Context().Err() == nil {
			return l, true
		}
		c.release(stream) // lost meanwhile
	}
	l, ok, err := c.sv.elector.Lead(ctx, stream)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			c.errs = append(c.errs, fmt.Errorf("cleanup: lead %s: %w", stream, err))
		}
		c.done[stream] = true
		return nil, false
	case !ok:
		c.res.NotLeader++
		c.done[stream] = true
		return nil, false
	}
	c.leads[stream] = l
	return l, true
}

// release gives up the leadership of stream, if this cycle holds it,
// within the query timeout.
func (c *cycle) release(stream string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.sv.qTimeout)
	defer cancel()
	c.releaseWithin(ctx, stream)
}

// releaseWithin gives up the leadership of stream, if this cycle holds it,
// before ctx ends.
func (c *cycle) releaseWithin(ctx context.Context, stream string) {
	l, ok := c.leads[stream]
	if !ok {
		return
	}
	delete(c.leads, stream)
	if err := l.Release(ctx); err != nil {
		c.sv.logger.Warn("cleanup: release the lead of a stream", slog.String("stream", stream), slog.Any("error", err))
	}
}

// finish ends the cycle: it releases the leaderships (within one query
// timeout in all, so that a Stop while the store is down does not wait one
// per lead), leaves cascade mode and forgets what no longer applies: the
// deferrals and failure counts of streams the cycle scanned to the end and
// found otherwise (for a full scan that completed, of every stream).
func (c *cycle) finish(ctx context.Context, scanned []string, complete bool, err error) {
	sv := c.sv
	rctx, cancel := context.WithTimeout(context.Background(), sv.qTimeout)
	for stream := range c.leads {
		c.releaseWithin(rctx, stream)
	}
	cancel()
	if c.cascade {
		c.leaveCascade(ctx, err)
	}
	switch {
	case c.full && complete:
		sv.wake.retain(c.deferred)
		for s := range sv.attempts {
			if !c.failed[s] {
				delete(sv.attempts, s)
			}
		}
	case !c.full:
		for _, s := range scanned {
			if !c.deferred[s] {
				sv.wake.release(s)
			}
			if !c.failed[s] {
				delete(sv.attempts, s)
			}
		}
	}
}

// enterCascade enters cascade mode: bounded batches with pauses, and the
// Leaser's default TTL boosted, and the fleet's.
func (c *cycle) enterCascade(ctx context.Context) {
	sv := c.sv
	c.cascade, c.res.Cascade, c.cascadeAt = true, true, time.Now()
	sv.logger.Warn("cleanup: cascade mode: mass expiry, working in bounded batches",
		slog.Int("expired", c.res.Expired), slog.Float64("ttl_factor", sv.cascade.factor))
	if sv.booster != nil {
		sv.booster.BoostTTL(sv.cascade.factor)
	}
	if sv.fleet != nil {
		if err := sv.fleet.Raise(ctx, sv.cascade.factor, sv.cascade.hold); err != nil && ctx.Err() == nil {
			sv.logger.Warn("cleanup: raising the fleet's TTL boost failed; this process's boost stands",
				slog.Any("error", err))
		}
	}
	if sv.observer != nil {
		sv.observer.Cascade(true)
	}
}

// leaveCascade leaves cascade mode, whatever ended the cycle, and restores
// the Leaser's default TTL.
func (c *cycle) leaveCascade(ctx context.Context, err error) {
	sv := c.sv
	c.cascade = false
	reason := "backlog drained"
	switch {
	case ctx.Err() != nil:
		reason = "stopped"
	case err != nil:
		reason = "cycle failed"
	case c.res.Deferred > 0:
		reason = "the rest waits behind live leases"
	}
	if sv.booster != nil {
		sv.booster.BoostTTL(1)
	}
	sv.logger.Info("cleanup: cascade mode over", slog.String("reason", reason),
		slog.Duration("took", time.Since(c.cascadeAt)), slog.Int("expired", c.res.Expired))
	if sv.observer != nil {
		sv.observer.Cascade(false)
	}
}

// pace pauses Cascade.Delay after every Cascade.Batch resolutions written in
// cascade mode; false when ctx ended meanwhile.
func (c *cycle) pace(ctx context.Context, n int) bool {
	if !c.cascade {
		return true
	}
	c.paced += n
	if c.paced < c.sv.cascade.batch {
		return true
	}
	c.paced = 0
	t := time.NewTimer(c.sv.cascade.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// deferBehind leaves the waiting expired entries of stream behind its live
// lease blocker, and has the loop walk the stream again when the blocker
// resolves (the Waiter) or expires.
func (c *cycle) deferBehind(ctx context.Context, stream string, blocker int64, waiting int) {
	sv := c.sv
	c.res.Deferred += waiting
	c.done[stream] = true
	c.deferred[stream] = true
	deadline := c.blockerDeadline(ctx, stream, blocker)
	sv.wake.hold(sv.waiter, stream, blocker, deadline, func(err error) {
		sv.logger.Warn("cleanup: waiter refused; the stream is walked again at the lease's expiry",
			slog.String("stream", stream), slog.Any("error", err))
	})
	sv.logger.Debug("cleanup: expired leases wait behind a live earlier lease", slog.String("stream", stream),
		slog.Int64("blocker", blocker), slog.Int("waiting", waiting), slog.Time("recheck", deadline))
}

// blockerDeadline returns when, on the local clock, the blocking entry
// expires by the database clock; now if it is resolved already; zero when
// that cannot be read (the next cycle looks again).
func (c *cycle) blockerDeadline(ctx context.Context, stream string, blocker int64) time.Time {
	sv := c.sv
	qctx, cancel := context.WithTimeout(ctx, sv.qTimeout)
	es, err := sv.store.Read(qctx, stream, blocker-1, 1)
	cancel()
	if err != nil || len(es) == 0 {
		return time.Time{}
	}
	if es[0].State.Resolved() {
		return time.Now().Add(minRecheck)
	}
	offset, ok := c.clockOffset(ctx)
	if !ok {
		return time.Time{}
	}
	now := time.Now()
	return now.Add(max(es[0].ExpiresAt.Sub(now.Add(offset)), minRecheck))
}

// dbNow returns the database clock's now, as the local clock and the
// cycle's clock offset tell it; zero when the offset cannot be read.
func (c *cycle) dbNow(ctx context.Context) time.Time {
	offset, ok := c.clockOffset(ctx)
	if !ok {
		return time.Time{}
	}
	return time.Now().Add(offset).Round(0)
}

// clockOffset returns the database clock minus the local clock, read once
// per cycle (Store.Now, taken halfway through its round trip); false when
// it cannot be read (a later call tries again).
func (c *cycle) clockOffset(ctx context.Context) (time.Duration, bool) {
	if c.haveOffset {
		return c.offset, true
	}
	qctx, cancel := context.WithTimeout(ctx, c.sv.qTimeout)
	defer cancel()
	before := time.Now()
	dbNow, err := c.sv.store.Now(qctx)
	if err != nil {
		c.sv.logger.Debug("cleanup: read the database clock", slog.Any("error", err))
		return 0, false
	}
	after := time.Now()
	c.offset, c.haveOffset = dbNow.Sub(before.Add(after.Sub(before)/2)), true
	return c.offset, true
}

// report tells the Observer what became of e.
func (c *cycle) report(e store.Entry, seenAt time.Time, r recovery.Result, err error) {
	if c.sv.observer != nil {
		c.sv.observer.Handled(e, seenAt, r, err)
	}
}
