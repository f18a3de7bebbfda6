package model

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// action is one atomic change a step made, as the model sees it: a step is
// one action, a cleanup cycle one per entry it resolved or was refused.
type action struct {
	desc  string
	apply func(*ledger) error
}

// maxNodes bounds the search for an order of one round's actions.
const maxNodes = 200_000

// search looks for an interleaving of the threads (each in its own order)
// under which the model allows every action and ends in a state leaf
// accepts. It returns that state, or the first discrepancy it met (on the
// first order it tried: the order the steps were issued in). Actions of
// different threads often commute (two cleaners on two streams): a state
// reached again by another order is not searched again.
func search(start *ledger, threads [][]action, leaf func(*ledger) error) (*ledger, error) {
	var first error
	nodes := 0
	pos := make([]int, len(threads))
	seen := map[string]bool{}
	var dfs func(l *ledger) *ledger
	dfs = func(l *ledger) *ledger {
		key := fmt.Sprint(pos, l.fingerprint())
		if seen[key] {
			return nil // searched from here before, in vain
		}
		seen[key] = true
		if nodes++; nodes > maxNodes {
			return nil
		}
		end := true
		for i, th := range threads {
			if pos[i] == len(th) {
				continue
			}
			end = false
			c := l.clone()
			a := th[pos[i]]
			if err := a.apply(c); err != nil {
				if first == nil {
					first = fmt.Errorf("%s: %w", a.desc, err)
				}
				continue
			}
			pos[i]++
			r := dfs(c)
			pos[i]--
			if r != nil {
				return r
			}
		}
		if !end {
			return nil
		}
		if err := leaf(l); err != nil {
			if first == nil {
				first = fmt.Errorf("after every step: %w", err)
			}
			return nil
		}
		return l
	}
	if r := dfs(start); r != nil {
		return r, nil
	}
	if nodes > maxNodes {
		return nil, fmt.Errorf("no order found in %d tries; first discrepancy: %w", maxNodes, first)
	}
	return nil, first
}

// check checks a round: the outcomes against the model in some order of the
// round's actions, the state after it, the backend's timestamps, the
// cleanup cycle, the barrier; then it adopts the model's new state.
func (x *run) check(ctx context.Context, idx int, r round, w window, outs []outcome, snap *snapshot) *failure {
	fail := func(kind, format string, args ...any) *failure {
		var b strings.Builder
		fmt.Fprintf(&b, format, args...)
		fmt.Fprintf(&b, "\n    the round ran %s:", w)
		for i, st := range r {
			fmt.Fprintf(&b, "\n      %s", outs[i].describe(st))
		}
		return &failure{round: idx, kind: kind, msg: b.String()}
	}
	var threads [][]action
	var cycles []*cycleOutcome
	for i, st := range r {
		o := &outs[i]
		switch {
		case o.skip:
		case st.Kind == opCleanup:
			cycle := o.cycle
			cycles = append(cycles, cycle)
			if kind, err := x.checkCycle(st.Level, cycle); err != nil {
				return fail(kind, "%s: %v", st, err)
			}
			threads = append(threads, cycleActions(w, cycle))
		case o.err != nil && !expected(o.err):
			return fail("error", "%s: unexpected error: %v", st, o.err)
		default:
			if a := x.action(w, st, o, snap); a.apply != nil {
				threads = append(threads, []action{a})
			}
		}
	}
	post, err := search(x.m, threads, func(l *ledger) error { return l.matches(snap) })
	if err != nil {
		return fail("model", "no order of the round's steps explains what the system did; %v", err)
	}
	if err := checkTimes(w, x.m, post, snap); err != nil {
		return fail("I3", "%v", err)
	}
	for _, cycle := range cycles {
		// Failed recoveries are the trackers' (the search above explains
		// the store's refusals first).
		for _, err := range unjoin(cycle.err) {
			if !errors.Is(err, errTracker) {
				return fail("error", "the cleanup cycle of p%d failed: %v", cycle.proc, err)
			}
		}
		if err := cleanupDone(w, x.m, post, cycle); err != nil {
			return fail("liveness", "%v", err)
		}
	}
	for i, p := range x.sys.procs {
		for _, s := range streams {
			if post.streams[s] == nil {
				continue
			}
			key := fmt.Sprintf("p%d/%s", i, s)
			bw, err := p.barrier.Watermark(ctx, s)
			switch {
			case err != nil:
				return fail("error", "barrier watermark of %s: %v", key, err)
			case bw < x.barrierW[key]:
				return fail("I5", "the barrier's watermark of %s went back from %d to %d (I5)", key, x.barrierW[key], bw)
			case bw > post.streams[s].watermark():
				return fail("I5", "the barrier's watermark of %s is %d, past the ledger's %d (I5)", key, bw,
					post.streams[s].watermark())
			}
			x.barrierW[key] = bw
		}
	}
	x.m = post
	x.update(r, outs, snap)
	for _, name := range streams {
		if rs := snap.streams[name]; rs != nil {
			rep := audit.Check(name, rs.stats.LowPoint, rs.entries, x.auditOptions(name, rs.stats.LowPoint))
			if err := rep.Err(); err != nil {
				return fail("audit", "%v", err)
			}
		}
	}
	return nil
}

// expected reports whether err is an outcome the model judges (a sentinel
// of the library), as opposed to a failure of the harness or the database.
func expected(err error) bool {
	if errors.Is(err, context.Canceled) {
		return true
	}
	for _, s := range []error{store.ErrExpired, store.ErrReleased, store.ErrCommitted, store.ErrGap, store.ErrNotFound,
		store.ErrTokenMismatch, store.ErrTrimmed, store.ErrStreamNotFound, store.ErrNotGap, store.ErrHeld,
		store.ErrNotHolder, store.ErrForceReleased, store.ErrNotReady, store.ErrNotExpired} {
		if errors.Is(err, s) {
			return true
		}
	}
	return errors.Is(err, gap.ErrFillRefused)
}

// action returns the model's action for step st with outcome o; none (a
// nil apply) for steps that change nothing the model holds.
func (x *run) action(w window, st step, o *outcome, snap *snapshot) action {
	ttl := time.Duration(st.TTL) * x.sys.tick
	a := action{desc: st.String()}
	switch st.Kind {
	case opLease:
		a.apply = func(l *ledger) error {
			if o.err != nil {
				return fmt.Errorf("lease failed: %w", o.err)
			}
			return l.lease(w, st.ID, st.Stream, ttl, o.entries)
		}
	case opComplete:
		a.apply = func(l *ledger) error { return l.commit(w, st.Handle, payload(st), false, o.err) }
	case opCommit:
		if !o.canceled {
			a.apply = func(l *ledger) error { return l.commit(w, st.Handle, payload(st), true, o.err) }
			break
		}
		// Given up at the round's end: it changed nothing, or it had
		// committed (an unknown outcome, I7), which the backend shows.
		h := x.m.handles[st.Handle]
		if e := snap.entry(h.Stream, h.Number); e != nil && e.State == store.Committed && e.Token == h.Token &&
			e.FilledAt.IsZero() && x.m.streams[h.Stream].leased(h.Number) {
			a.desc += " (cancelled, but committed)"
			a.apply = func(l *ledger) error { return l.commit(w, st.Handle, payload(st), true, nil) }
		}
	case opRelease:
		a.apply = func(l *ledger) error { return l.release(st.Handle, o.err) }
	case opExtend:
		a.apply = func(l *ledger) error { return l.extend(w, st.Handle, ttl, o.err, o.exp) }
	case opForeign:
		a.apply = func(l *ledger) error { return l.foreign(st.Handle, o.err) }
	case opFill:
		a.apply = func(l *ledger) error { return l.fill(st.Stream, o.number, payload(st), o.err) }
	case opTrim:
		a.apply = func(l *ledger) error { return l.trim(st.Stream, o.number, o.low, o.err) }
	case opRead:
		a.apply = func(l *ledger) error { return l.read(st.Stream, o.number, o.read, o.err) }
	case opAcquire:
		a.apply = func(l *ledger) error { return l.acquire(w, st.ID, st.Name, st.Owner, ttl, o.named, o.err) }
	case opRenew:
		a.apply = func(l *ledger) error { return l.renew(w, st.Of, ttl, o.named, o.err) }
	case opReleaseName:
		a.apply = func(l *ledger) error { return l.releaseName(st.Of, o.err) }
	}
	return a
}

// cycleActions are the actions of a cleanup cycle in the order it took
// them: each tracker call (the entry must be expired, or resolved since it
// was listed: the loop never asks about a live lease), each resolution it
// wrote and each the store refused.
func cycleActions(w window, c *cycleOutcome) []action {
	type event struct {
		seq  int64
		acts []action
	}
	var evs []event
	for _, call := range c.calls {
		a := action{desc: fmt.Sprintf("cleanup asks a tracker about %s/%d", call.Stream, call.Number)}
		a.apply = func(l *ledger) error {
			e, err := l.entry(call.Stream, call.Number, nil)
			switch {
			case err != nil:
				return err
			case e.State == store.Leased && !w.expired(e.ExpiresAt):
				return fmt.Errorf("it is live until %s, %s", stamp(e.ExpiresAt), w)
			}
			return nil
		}
		evs = append(evs, event{call.Seq, []action{a}})
	}
	for _, wr := range c.writes {
		ev := event{seq: wr.Seq}
		stream := wr.Stream
		for i, it := range wr.Items {
			res := wr.Results[i]
			a := action{desc: fmt.Sprintf("cleanup move %s/%d", stream, it.Number)}
			if res.Moved != 0 {
				a.desc += fmt.Sprintf(" to %d (%s)", res.Moved, it.RecoveryType)
				a.apply = func(l *ledger) error {
					return l.resolveExpired(w, stream, it.Number, "", res.Moved, string(it.Payload), it.RecoveryType)
				}
			} else {
				a.desc += " refused"
				a.apply = func(l *ledger) error { return l.refusedExpired(w, stream, it.Number, res.Err) }
			}
			ev.acts = append(ev.acts, a)
		}
		for _, n := range wr.Numbers {
			a := action{desc: fmt.Sprintf("cleanup gap(%s) %s/%d", wr.Reason, stream, n)}
			if contains64(wr.Resolved, n) {
				a.apply = func(l *ledger) error { return l.resolveExpired(w, stream, n, wr.Reason, 0, "", "") }
			} else {
				a.desc += " refused"
				a.apply = func(l *ledger) error { return l.refusedExpired(w, stream, n, wr.Refused) }
			}
			ev.acts = append(ev.acts, a)
		}
		evs = append(evs, ev)
	}
	slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.seq, b.seq) })
	var out []action
	for _, ev := range evs {
		out = append(out, ev.acts...)
	}
	return out
}

func contains64(xs []int64, x int64) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// checkCycle checks a cleanup cycle against the trackers' answers, before
// any order is chosen: the trackers are asked in the order of the pipeline
// the load level selects (Low: partial work,
// retry, gap; Medium: partial work, gap; High: gap); what the loop wrote
// for each entry is what the answers call for (work found is moved, never
// turned into a gap; a failure leaves the entry expired, or after
// maxRecoveryAttempts makes it a recovery-failed gap); each stream's
// writes are in number order. It returns the kind of the failure.
func (x *run) checkCycle(level recovery.Level, c *cycleOutcome) (string, error) {
	type key struct {
		stream string
		n      int64
	}
	calls := map[key][]trackerCall{}
	errsOf := map[string]int{}
	for _, call := range c.calls {
		k := key{call.Stream, call.Number}
		switch {
		case level == recovery.High:
			return "cleanup", fmt.Errorf("asked a tracker about %s/%d at high load", call.Stream, call.Number)
		case call.Result && level == recovery.Medium:
			return "cleanup", fmt.Errorf("asked the OperationTracker about %s/%d at medium load", call.Stream, call.Number)
		case len(calls[k]) == 0 && call.Result, len(calls[k]) == 1 && (!call.Result || calls[k][0].Err || calls[k][0].Has),
			len(calls[k]) > 1:
			return "cleanup", fmt.Errorf("asked the trackers about %s/%d out of the pipeline's order", call.Stream, call.Number)
		}
		calls[k] = append(calls[k], call)
		if call.Err {
			errsOf[call.Op]++
		}
	}
	// decide is what the answers call for: "fail", "gap", or a move.
	decide := func(k key) (what, work, typ string) {
		cs := calls[k]
		switch {
		case level == recovery.High:
			return "gap", "", ""
		case len(cs) == 0:
			return "unasked", "", ""
		case cs[0].Err:
			return "fail", "", ""
		case cs[0].Has:
			return "move", cs[0].Work, recovery.MethodPartialWork
		case level == recovery.Medium:
			return "gap", "", ""
		case len(cs) < 2:
			return "unasked", "", ""
		case cs[1].Has:
			return "move", cs[1].Work, recovery.MethodRetry
		}
		return "gap", "", ""
	}
	written := map[key]bool{}
	last := map[string]int64{}
	for _, wr := range c.writes {
		if wr.Err != nil {
			return "error", fmt.Errorf("a resolving write failed: %w", wr.Err)
		}
		var ns []int64
		for _, it := range wr.Items {
			ns = append(ns, it.Number)
		}
		ns = append(ns, wr.Numbers...)
		for i, n := range ns {
			k := key{wr.Stream, n}
			if n <= last[wr.Stream] {
				return "cleanup", fmt.Errorf("wrote %s/%d after %d: not in number order", wr.Stream, n, last[wr.Stream])
			}
			last[wr.Stream], written[k] = n, true
			what, work, typ := decide(k)
			switch {
			case wr.Items != nil:
				it := wr.Items[i]
				if what != "move" || string(it.Payload) != work || it.RecoveryType != typ {
					return "cleanup", fmt.Errorf("moved %s/%d as %s %q; the trackers' answers call for %s %q %s",
						wr.Stream, n, it.RecoveryType, it.Payload, what, work, typ)
				}
			case wr.Reason == recovery.ReasonRecoveryFailed:
				if what != "fail" || x.failed[calls[k][0].Op]+errsOf[calls[k][0].Op] < maxRecoveryAttempts {
					return "cleanup", fmt.Errorf("declared %s/%d a recovery-failed gap; the trackers' answers call for %s",
						wr.Stream, n, what)
				}
			case what != "gap":
				return "cleanup", fmt.Errorf("declared %s/%d a gap (%s); the trackers' answers call for %s %q",
					wr.Stream, n, wr.Reason, what, work)
			}
		}
	}
	for k := range calls {
		if what, _, _ := decide(k); what != "fail" && !written[k] {
			return "cleanup", fmt.Errorf("decided %s for %s/%d but wrote nothing", what, k.stream, k.n)
		}
	}
	return "", nil
}

// unjoin lists the errors err joins (errors.Join, as RunOnce reports the
// failures of a cycle), or err itself.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// cleanupDone checks that a cleanup cycle left no entry unresolved that
// had expired before the round began, unless a live earlier lease held its
// stream back or the recovery of it or of an earlier number failed in the
// cycle (I6). A cycle that found a stream led by another cleaner (the
// other process's) is not held to it.
func cleanupDone(w window, pre, post *ledger, c *cycleOutcome) error {
	if c.res.NotLeader > 0 {
		return nil
	}
	for _, name := range streams {
		s, ps := post.streams[name], pre.streams[name]
		if s == nil || ps == nil {
			continue
		}
		for n := s.Low; n <= ps.last(); n++ {
			if !s.leased(n) || s.at(n).ExpiresAt.After(w.lo) {
				continue
			}
			for m := int64(1); m < n; m++ {
				if ps.leased(m) && ps.at(m).ExpiresAt.After(w.lo) {
					return nil // live when the cycle listed: the rest waits
				}
			}
			for _, call := range c.calls {
				if call.Stream == name && call.Number <= n && call.Err {
					return nil // the walk stopped at a failed recovery
				}
			}
			return fmt.Errorf("the cleanup cycle of p%d left %s/%d unresolved, expired at %s before the round began %s",
				c.proc, name, n, stamp(s.at(n).ExpiresAt), w)
		}
	}
	return nil
}

// checkTimes checks the backend's timestamps of what the round changed:
// within the round's window, commits before the expiry and expiry gaps at
// or after it (I3).
func checkTimes(w window, pre, post *ledger, snap *snapshot) error {
	for _, name := range streams {
		rs := snap.streams[name]
		if rs == nil {
			continue
		}
		ps := pre.streams[name]
		for _, e := range rs.entries {
			var was *mentry
			if ps != nil && e.Number <= ps.last() {
				was = ps.at(e.Number)
			}
			switch {
			case was == nil && !w.has(e.LeasedAt):
				return fmt.Errorf("%s/%d leased at %s, not %s", name, e.Number, stamp(e.LeasedAt), w)
			case e.State == store.Leased || (was != nil && was.State.Resolved()):
			case !w.has(e.ResolvedAt):
				return fmt.Errorf("%s/%d resolved at %s, not %s", name, e.Number, stamp(e.ResolvedAt), w)
			case e.State == store.Committed && e.RecoveredFrom == 0 && e.FilledAt.IsZero() && !e.ResolvedAt.Before(e.ExpiresAt):
				return fmt.Errorf("%s/%d committed at %s, at or after its expiry %s", name, e.Number, stamp(e.ResolvedAt),
					stamp(e.ExpiresAt))
			case e.State == store.Gap && e.GapReason != store.ReasonReleased && e.ResolvedAt.Before(e.ExpiresAt):
				return fmt.Errorf("%s/%d became a gap (%s) at %s, before its expiry %s", name, e.Number, e.GapReason,
					stamp(e.ResolvedAt), stamp(e.ExpiresAt))
			}
			if !e.FilledAt.IsZero() && (was == nil || was.FilledBy == "") && !w.has(e.FilledAt) {
				return fmt.Errorf("%s/%d filled at %s, not %s", name, e.Number, stamp(e.FilledAt), w)
			}
		}
	}
	for _, name := range names {
		rn, was := snap.names[name], pre.names[name]
		if rn != nil && !rn.EndedAt.IsZero() && (was.Fence != rn.Fence || was.End == "") && !w.has(rn.EndedAt) {
			return fmt.Errorf("named lease %s ended at %s, not %s", name, stamp(rn.EndedAt), w)
		}
	}
	return nil
}

// entry returns number n of stream in the snapshot, nil if absent.
func (snap *snapshot) entry(stream string, n int64) *store.Entry {
	rs := snap.streams[stream]
	if rs == nil {
		return nil
	}
	for i := range rs.entries {
		if rs.entries[i].Number == n {
			return &rs.entries[i]
		}
	}
	return nil
}

// matches compares the model with the backend's state after a round.
func (l *ledger) matches(snap *snapshot) error {
	for _, name := range streams {
		s, rs := l.streams[name], snap.streams[name]
		switch {
		case s == nil && rs == nil:
			continue
		case s == nil:
			return fmt.Errorf("stream %s exists; the model never leased on it", name)
		case rs == nil:
			return fmt.Errorf("stream %s does not exist; the model has %d entries", name, s.last())
		}
		unresolved := int64(0)
		for n := int64(1); n <= s.last(); n++ {
			if s.leased(n) {
				unresolved++
			}
		}
		st := rs.stats
		if st.NextNumber != s.last()+1 || st.Watermark != s.watermark() || st.LowPoint != s.Low || st.Unresolved != unresolved {
			return fmt.Errorf("stats of %s: next %d, watermark %d, low point %d, unresolved %d; the model's: %d, %d, %d, %d",
				name, st.NextNumber, st.Watermark, st.LowPoint, st.Unresolved, s.last()+1, s.watermark(), s.Low, unresolved)
		}
		if int64(len(rs.entries)) != s.last()-s.Low+1 {
			return fmt.Errorf("%s keeps %d entries; the model's are %d..%d", name, len(rs.entries), s.Low, s.last())
		}
		for i, re := range rs.entries {
			n := s.Low + int64(i)
			if re.Number != n {
				return fmt.Errorf("%s has %d where %d was due (I1)", name, re.Number, n)
			}
			if err := sameEntry(s.at(n), re); err != nil {
				return fmt.Errorf("%s/%d: %w", name, n, err)
			}
		}
	}
	for _, name := range names {
		h, held := l.names[name]
		rn := snap.names[name]
		switch {
		case !held && rn == nil:
			continue
		case !held:
			return fmt.Errorf("named lease %s is held by %s fence %d; the model never granted it", name, rn.Owner, rn.Fence)
		case rn == nil:
			return fmt.Errorf("named lease %s is not found; the model has %s fence %d", name, h.Owner, h.Fence)
		case rn.Owner != h.Owner || rn.Fence != h.Fence || !rn.ExpiresAt.Equal(h.ExpiresAt) || rn.EndReason != h.End:
			return fmt.Errorf("named lease %s: %s fence %d until %s ended %q; the model's: %s fence %d until %s ended %q",
				name, rn.Owner, rn.Fence, stamp(rn.ExpiresAt), rn.EndReason, h.Owner, h.Fence, stamp(h.ExpiresAt), h.End)
		}
	}
	return nil
}

// auditOptions are the audit's checks beyond I1 and I2 for stream, whose
// low point is low: I4 on stream "o" (ordered commits only), I5 on what
// the reader yielded, I6 on every acknowledged commit (those still kept).
func (x *run) auditOptions(stream string, low int64) *audit.Options {
	opts := &audit.Options{Ordered: stream == "o", ObservedGaps: true, Observed: []int64{},
		Acknowledged: map[int64][]byte{}}
	for _, n := range x.observed[stream] {
		if n >= low {
			opts.Observed = append(opts.Observed, n)
		}
	}
	for n, p := range x.acked[stream] {
		if n >= low {
			opts.Acknowledged[n] = p
		}
	}
	return opts
}

// audit runs the ledger auditor on every stream, reading through the
// store as an operator would.
func (x *run) audit(ctx context.Context, idx int) *failure {
	for _, name := range streams {
		s := x.m.streams[name]
		if s == nil {
			continue
		}
		rep, err := audit.Stream(ctx, x.sys.procs[0].st, name, x.auditOptions(name, s.Low))
		if err != nil {
			return &failure{round: idx, kind: "error", msg: err.Error()}
		}
		if err := rep.Err(); err != nil {
			return &failure{round: idx, kind: "audit", msg: err.Error()}
		}
	}
	return nil
}

// checkHistory checks I8 on the backend's record of the named leases.
func (x *run) checkHistory(ctx context.Context, idx int) *failure {
	var evs []store.LeaseEvent
	for after := int64(0); ; {
		page, err := x.sys.procs[0].st.LeaseHistory(ctx, "", &store.LeaseHistoryParams{AfterID: after, Limit: store.MaxListLimit})
		if err != nil {
			return &failure{round: idx, kind: "error", msg: fmt.Sprintf("lease history: %v", err)}
		}
		evs = append(evs, page...)
		if len(page) < store.MaxListLimit {
			break
		}
		after = page[len(page)-1].ID
	}
	if err := historyI8(evs); err != nil {
		return &failure{round: idx, kind: "I8", msg: err.Error()}
	}
	return nil
}

// historyI8 checks I8 on a history of named leases (in ID order): per name,
// fences strictly increase from holding to holding, a holding begins only
// once the one before it ended or expired, and a renewal comes before the
// expiry it extends.
func historyI8(evs []store.LeaseEvent) error {
	type holding struct {
		fence int64
		owner string
		exp   time.Time
		end   time.Time // zero until an end event
	}
	cur := map[string]*holding{}
	for _, ev := range evs {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("history of %s, event %d (%s by %s fence %d at %s): %s", ev.Name, ev.ID, ev.Kind,
				ev.Owner, ev.Fence, stamp(ev.At), fmt.Sprintf(format, args...))
		}
		h := cur[ev.Name]
		switch ev.Kind {
		case store.LeaseAcquired:
			if h != nil {
				end := h.exp
				if !h.end.IsZero() && h.end.Before(end) {
					end = h.end
				}
				switch {
				case ev.Fence <= h.fence:
					return fail("fence not above the previous holding's %d", h.fence)
				case ev.At.Before(end):
					return fail("granted while %s fence %d held it until %s", h.owner, h.fence, stamp(end))
				}
			}
			cur[ev.Name] = &holding{fence: ev.Fence, owner: ev.Owner, exp: ev.ExpiresAt}
		case store.LeaseRenewed:
			switch {
			case h == nil || ev.Fence != h.fence:
				return fail("renewal of a holding that is not the current one")
			case !ev.At.Before(h.exp) || !h.end.IsZero():
				return fail("renewal at or after the end of the holding (expiry %s)", stamp(h.exp))
			}
			h.exp = ev.ExpiresAt
		default:
			if h == nil || ev.Fence != h.fence {
				return fail("end of a holding that is not the current one")
			}
			if h.end.IsZero() {
				h.end = ev.At
			}
		}
	}
	return nil
}
