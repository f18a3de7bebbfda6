package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seqlease/seqlease/store"
)

// database pings Config.Database.
func (c *Checker) database(ctx context.Context) []Component {
	start := time.Now()
	err := c.cfg.Database.Ping(ctx)
	rtt := time.Since(start)
	comp := Component{Check: CheckDatabase, Observed: map[string]any{"round_trip_seconds": rtt.Seconds()}}
	if err != nil {
		comp.Message = c.failure(ctx, "not reachable or not writable", err)
	} else {
		comp.Healthy = true
		if rtt >= time.Millisecond {
			rtt = rtt.Round(time.Microsecond)
		}
		comp.Message = fmt.Sprintf("reachable and writable: round trip %v", rtt)
	}
	return []Component{comp}
}

// listen reads what the self-checks of Config.Listen's watches found.
func (c *Checker) listen(context.Context) []Component {
	h := c.cfg.Listen.ListenHealth()
	now := c.cfg.Now()
	comp := Component{Check: CheckListen, Observed: map[string]any{
		"watches": int64(h.Watches), "hearing": int64(h.Hearing), "deaf": int64(h.Deaf),
		"deaf_checks": h.DeafChecks, "grace_seconds": c.cfg.ListenGrace.Seconds(),
	}}
	var notHearing time.Duration
	if !h.NotHearingSince.IsZero() {
		notHearing = now.Sub(h.NotHearingSince)
		comp.Observed["not_hearing_seconds"] = notHearing.Seconds()
	}
	last := "never"
	if !h.LastHeard.IsZero() {
		age := now.Sub(h.LastHeard)
		comp.Observed["last_heard_age_seconds"] = age.Seconds()
		last = fmt.Sprintf("%v ago", round(age))
	}
	switch {
	case h.Watches == 0:
		comp.Message = "no watch runs: nothing hears the other processes' commits and releases " +
			"(start the barrier, or the lease manager, that watches this store)"
	case h.Deaf > 0:
		comp.Message = fmt.Sprintf("%d of %d watches are deaf: their LISTEN self-check heard nothing "+
			"(a transaction-mode pooler? give them a direct connection with postgres.Config.ListenDSN); "+
			"they poll meanwhile", h.Deaf, h.Watches)
	case notHearing > c.cfg.ListenGrace:
		comp.Message = fmt.Sprintf("%d of %d watches have not heard for %v (grace %v): connecting or reconnecting; "+
			"a self-check last heard %s", h.Watches-h.Hearing, h.Watches, round(notHearing), c.cfg.ListenGrace, last)
	default:
		comp.Healthy = true
		comp.Message = fmt.Sprintf("%d of %d watches hear, proven by a self-check notice; one last heard %s", h.Hearing, h.Watches, last)
		if h.Hearing < h.Watches {
			comp.Message += fmt.Sprintf("; %d connecting for %v (grace %v)", h.Watches-h.Hearing,
				round(notHearing), c.cfg.ListenGrace)
		}
	}
	return []Component{comp}
}

// maxRefusedNamed bounds the refusals a history result names.
const maxRefusedNamed = 5

// history reads what Config.History found: it fails while any stream or
// named lease is refused for lost history, naming the first few.
func (c *Checker) history(context.Context) []Component {
	h := c.cfg.History.HistoryHealth()
	var losses int64
	for _, l := range h.Losses {
		losses += l.Count
	}
	comp := Component{Check: CheckHistory, Observed: map[string]any{
		"refused": int64(len(h.Refused)), "losses": losses,
	}}
	if len(h.Refused) == 0 {
		comp.Healthy = true
		comp.Message = "no stream or named lease refused for lost history"
		if losses > 0 {
			comp.Message += fmt.Sprintf(" (%d refusals accepted since start)", losses)
		}
		return []Component{comp}
	}
	var b strings.Builder
	for i, e := range h.Refused {
		if i == maxRefusedNamed {
			fmt.Fprintf(&b, "; and %d more", len(h.Refused)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		if e.Name != "" {
			fmt.Fprintf(&b, "named lease %s: fence %d after %d", store.QuoteInput(e.Name), e.Got, e.Seen)
		} else {
			fmt.Fprintf(&b, "stream %s: %s %d after %d", store.QuoteInput(e.Stream), e.What, e.Got, e.Seen)
		}
	}
	comp.Message = fmt.Sprintf("%d refused because the database lost history (an asynchronous standby promoted?): %s; "+
		"decide, then accept it (AcceptHistory, AcceptLeaseHistory) or restart", len(h.Refused), b.String())
	return []Component{comp}
}

// cleanup reads Config.Cleanup's status.
func (c *Checker) cleanup(context.Context) []Component {
	st := c.cfg.Cleanup.Status()
	now := c.cfg.Now()
	stale := c.cfg.CleanupStale
	if stale == 0 {
		stale = max(DefaultCleanupStaleIntervals*st.Interval, DefaultCleanupStaleMin)
	}
	comp := Component{Check: CheckCleanup, Observed: map[string]any{
		"running": st.Running, "interval_seconds": st.Interval.Seconds(), "max_stale_seconds": stale.Seconds(),
		"failures": int64(st.Failures), "last_pass_failed": int64(st.LastPassFailed),
	}}
	if !st.LastPass.IsZero() {
		comp.Observed["last_pass_age_seconds"] = now.Sub(st.LastPass).Seconds()
	}
	switch {
	case !st.Running && st.Started.IsZero():
		comp.Message = "not started: expired leases are not resolved, and their streams wait"
		return []Component{comp}
	case !st.Running:
		comp.Message = "stopped (Stop was called, or the context it was started with ended): " +
			"expired leases are not resolved, and their streams wait"
		return []Component{comp}
	}
	since, what := st.LastPass, "last full pass"
	if since.IsZero() {
		since, what = st.Started, "started, no full pass yet,"
	}
	age := now.Sub(since)
	var b strings.Builder
	if age > stale {
		fmt.Fprintf(&b, "no full pass for %v (max %v)", round(age), stale)
	} else {
		comp.Healthy = true
		fmt.Fprintf(&b, "%s %v ago (max %v)", what, round(age), stale)
	}
	if st.Failures > 0 {
		fmt.Fprintf(&b, "; the last %d cycles could not list the expired leases: %v", st.Failures, st.LastError)
	}
	if st.LastPassFailed > 0 {
		fmt.Fprintf(&b, "; %d recoveries failed in the last pass (tried again next cycle)", st.LastPassFailed)
	}
	comp.Message = b.String()
	return []Component{comp}
}

// streams checks the watermark of every stream of Config.StreamNames, or
// of those Config.Streams lists.
func (c *Checker) streams(ctx context.Context) []Component {
	src := c.cfg.Streams
	names, more := c.cfg.StreamNames, false
	if len(names) == 0 {
		var err error
		if names, more, err = c.listStreams(ctx); err != nil {
			return []Component{{Check: CheckStreams, Message: c.failure(ctx, "list the streams", err)}}
		}
	}
	now, err := src.Now(ctx)
	if err != nil {
		return []Component{{Check: CheckStreams, Message: c.failure(ctx, "read the backend's clock", err)}}
	}
	out := make([]Component, 0, len(names)+1)
	for i, name := range names {
		st, err := src.Stats(ctx, name)
		switch {
		case errors.Is(err, store.ErrStreamNotFound):
			out = append(out, Component{Check: CheckStream, Stream: name, Healthy: true, Message: "no number leased yet"})
		case err != nil && ctx.Err() != nil:
			return append(out, Component{Check: CheckStreams,
				Message: c.failure(ctx, fmt.Sprintf("%d of %d streams checked", i, len(names)), err)})
		case err != nil:
			out = append(out, Component{Check: CheckStream, Stream: name, Message: c.failure(ctx, "stats", err)})
		default:
			out = append(out, c.stream(st, now))
		}
	}
	if more {
		out = append(out, Component{Check: CheckStreams, Healthy: true, Message: fmt.Sprintf(
			"checked the first %d streams in name order; more exist: name those to check in Config.StreamNames, "+
				"or raise Config.MaxStreams", len(names))})
	}
	return out
}

// listStreams lists up to Config.MaxStreams streams; more says there are
// more.
func (c *Checker) listStreams(ctx context.Context) (names []string, more bool, err error) {
	after := ""
	for want := c.cfg.MaxStreams + 1; len(names) < want; {
		page, err := c.cfg.Streams.Streams(ctx, after, min(want-len(names), store.MaxListLimit))
		if err != nil {
			return nil, false, err
		}
		names = append(names, page...)
		if len(page) == 0 || len(names) >= want {
			break
		}
		after = page[len(page)-1]
	}
	if len(names) > c.cfg.MaxStreams {
		return names[:c.cfg.MaxStreams], true, nil
	}
	return names, false, nil
}

// stream judges one stream's stats, taken when the backend's clock read
// now.
func (c *Checker) stream(st store.StreamStats, now time.Time) Component {
	lag := max(st.NextNumber-1-st.Watermark, 0)
	comp := Component{Check: CheckStream, Stream: st.Stream, Healthy: true, Observed: map[string]any{
		"watermark": st.Watermark, "next_number": st.NextNumber, "lag": lag, "in_flight": st.Unresolved,
	}}
	if c.cfg.MaxLag > 0 {
		comp.Observed["max_lag"] = c.cfg.MaxLag
	}
	if c.cfg.MaxStall > 0 {
		comp.Observed["max_stall_seconds"] = c.cfg.MaxStall.Seconds()
	}
	if st.OldestUnresolved == 0 {
		comp.Message = fmt.Sprintf("watermark %d: every number handed out is resolved", st.Watermark)
		return comp
	}
	age := max(now.Sub(st.OldestUnresolvedAt), 0)
	comp.Observed["oldest_unresolved"] = st.OldestUnresolved
	comp.Observed["oldest_unresolved_age_seconds"] = age.Seconds()
	var why []string
	if c.cfg.MaxStall > 0 && age > c.cfg.MaxStall {
		why = append(why, fmt.Sprintf("stalled: number %d, leased %v ago, holds it (max stall %v)",
			st.OldestUnresolved, round(age), c.cfg.MaxStall))
	}
	if c.cfg.MaxLag > 0 && lag > c.cfg.MaxLag {
		why = append(why, fmt.Sprintf("%d numbers handed out beyond it (max lag %d)", lag, c.cfg.MaxLag))
	}
	if len(why) > 0 {
		comp.Healthy = false
		comp.Message = fmt.Sprintf("watermark %d: %s; %d in flight", st.Watermark, strings.Join(why, "; "), st.Unresolved)
		return comp
	}
	comp.Message = fmt.Sprintf("watermark %d, %d numbers beyond it, %d in flight; number %d, leased %v ago, holds it",
		st.Watermark, lag, st.Unresolved, st.OldestUnresolved, round(age))
	return comp
}

// readers checks the checkpoints of Config.Readers, or every one
// Config.Checkpoints lists, up to Config.MaxCheckpoints.
func (c *Checker) readers(ctx context.Context) []Component {
	now, err := c.cfg.Checkpoints.Now(ctx)
	if err != nil {
		return []Component{{Check: CheckReaders, Message: c.failure(ctx, "read the backend's clock", err)}}
	}
	readers := c.cfg.Readers
	if len(readers) == 0 {
		readers = []string{""} // every reader
	}
	var out []Component
	want, seen := c.cfg.MaxCheckpoints+1, 0 // one more than the bound: are there more?
	for _, reader := range readers {
		p := &store.ListCheckpointsParams{Reader: reader}
		found := false
		for seen < want {
			p.Limit = min(want-seen, store.MaxListLimit)
			cps, err := c.cfg.Checkpoints.ListCheckpoints(ctx, p)
			if err != nil {
				return append(out, Component{Check: CheckReaders, Reader: reader, Message: c.failure(ctx, "list the checkpoints", err)})
			}
			for _, cp := range cps[:min(len(cps), c.cfg.MaxCheckpoints-seen)] {
				out = append(out, c.reader(cp, now))
			}
			found = found || len(cps) > 0
			seen += len(cps)
			if len(cps) < p.Limit {
				break
			}
			p.AfterReader, p.AfterStream = cps[len(cps)-1].Reader, cps[len(cps)-1].Stream
		}
		if seen >= want {
			return append(out, Component{Check: CheckReaders, Healthy: true, Message: fmt.Sprintf(
				"checked the first %d checkpoints in (reader, stream) order; more exist: name the readers to check "+
					"in Config.Readers, or raise Config.MaxCheckpoints", c.cfg.MaxCheckpoints)})
		}
		if reader != "" && !found {
			out = append(out, Component{Check: CheckReader, Reader: reader, Healthy: true, Message: "no checkpoint saved"})
		}
	}
	return out
}

// reader judges one checkpoint, listed when the backend's clock read now.
func (c *Checker) reader(cp store.Checkpoint, now time.Time) Component {
	lag := cp.Lag()
	age := max(now.Sub(cp.UpdatedAt), 0)
	comp := Component{Check: CheckReader, Reader: cp.Reader, Stream: cp.Stream, Healthy: true, Observed: map[string]any{
		"position": cp.Position, "watermark": cp.Watermark, "lag": lag, "checkpoint_age_seconds": age.Seconds(),
	}}
	if c.cfg.MaxReaderLag > 0 {
		comp.Observed["max_lag"] = c.cfg.MaxReaderLag
	}
	if c.cfg.MaxReaderStall > 0 {
		comp.Observed["max_stall_seconds"] = c.cfg.MaxReaderStall.Seconds()
	}
	var why []string
	if c.cfg.MaxReaderLag > 0 && lag > c.cfg.MaxReaderLag {
		why = append(why, fmt.Sprintf("%d behind the watermark %d (max lag %d)", lag, cp.Watermark, c.cfg.MaxReaderLag))
	}
	if c.cfg.MaxReaderStall > 0 && lag > 0 && age > c.cfg.MaxReaderStall {
		why = append(why, fmt.Sprintf("stalled: behind, and its checkpoint %d has not moved for %v (max stall %v)",
			cp.Position, round(age), c.cfg.MaxReaderStall))
	}
	switch {
	case len(why) > 0:
		comp.Healthy = false
		comp.Message = strings.Join(why, "; ")
	case lag == 0:
		comp.Message = fmt.Sprintf("at the watermark %d", cp.Watermark)
	default:
		comp.Message = fmt.Sprintf("%d behind the watermark %d; checkpoint saved %v ago", lag, cp.Watermark, round(age))
	}
	return comp
}

// failure says what failed, and that it timed out when the check's
// Timeout ran out.
func (c *Checker) failure(ctx context.Context, what string, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("%s: timed out after %v: %v", what, c.cfg.Timeout, err)
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// round rounds a duration for a message: to the millisecond below a
// minute, to the second above (the exact figure is in Observed).
func round(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}
