package model

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
)

// failure is what a run found wrong.
type failure struct {
	round int    // 1-based
	drain bool   // in the final drain, after the schedule
	kind  string // "model", "I3", "I5", "I8", "cleanup", "liveness", "audit", "error"
	msg   string
}

func (f *failure) Error() string {
	if f.drain {
		return fmt.Sprintf("after the schedule (every lease expired, cleanup until none is left): %s: %s", f.kind, f.msg)
	}
	return fmt.Sprintf("round %d: %s: %s", f.round, f.kind, f.msg)
}

// totals counts what runs did.
type totals struct {
	schedules, rounds, steps int
	spans, cuts              int64 // batches of commits across streams; batches cut
}

// run is one schedule on one system, with the model alongside.
type run struct {
	sys      *system
	m        *ledger
	handles  map[ref]*sequence.Lease
	reader   map[string]int64   // the reader's position per stream
	observed map[string][]int64 // what the reader yielded (gaps too)
	acked    map[string]map[int64][]byte
	failed   map[string]int   // tracker failures per operation id, over the run
	barrierW map[string]int64 // the barrier's watermarks seen
	rounds   int
	steps    int
}

// runSchedule runs s on a fresh system of b (wrapped by wrap, if not nil),
// checking every round against the model, then drains the system and
// audits it.
func runSchedule(ctx context.Context, b backend, s schedule, wrap func(Store) Store) (*failure, totals) {
	sys, err := open(ctx, b, wrap)
	if err != nil {
		return &failure{kind: "error", msg: err.Error()}, totals{}
	}
	defer sys.close()
	x := &run{sys: sys, m: newLedger(), handles: map[ref]*sequence.Lease{}, reader: map[string]int64{},
		observed: map[string][]int64{}, acked: map[string]map[int64][]byte{}, failed: map[string]int{},
		barrierW: map[string]int64{}}
	f := x.all(ctx, s)
	return f, totals{schedules: 1, rounds: x.rounds, steps: x.steps, spans: sys.spans.Load(), cuts: sys.cuts.Load()}
}

func (x *run) all(ctx context.Context, s schedule) *failure {
	for i, r := range s {
		if f := x.round(ctx, i+1, r); f != nil {
			return f
		}
	}
	f := x.drain(ctx, len(s)+1)
	if f != nil {
		f.drain = true
	}
	return f
}

// round runs the steps of r concurrently and checks what they did.
func (x *run) round(ctx context.Context, idx int, r round) *failure {
	sys := x.sys
	lo, err := sys.now(ctx)
	if err != nil {
		return &failure{round: idx, kind: "error", msg: fmt.Sprintf("clock: %v", err)}
	}
	outs := make([]outcome, len(r))
	commitCtx, cancelCommits := context.WithCancel(ctx)
	defer cancelCommits()
	var wg sync.WaitGroup
	dones := make([]chan struct{}, len(r))
	for i, st := range r {
		dones[i] = make(chan struct{})
		do := x.prepare(st)
		if do == nil {
			outs[i].skip = true
			close(dones[i])
			continue
		}
		sctx := ctx
		if st.Kind == opCommit {
			sctx = commitCtx
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(dones[i])
			outs[i] = do(sctx)
		}()
	}
	for i, st := range r {
		if st.Kind != opCommit {
			<-dones[i]
		}
	}
	f := x.settleCommits(ctx, idx, r, dones, cancelCommits)
	wg.Wait()
	if f == nil {
		f = x.retryCut(ctx, idx, r, outs)
	}
	if f != nil {
		return f
	}
	for i, st := range r {
		if st.Kind == opCommit && errors.Is(outs[i].err, context.Canceled) && ctx.Err() == nil {
			outs[i].canceled = true
		}
	}
	hi, err := sys.now(ctx)
	if err != nil {
		return &failure{round: idx, kind: "error", msg: fmt.Sprintf("clock: %v", err)}
	}
	snap, err := sys.snapshot(ctx)
	if err != nil {
		return &failure{round: idx, kind: "error", msg: err.Error()}
	}
	x.rounds++
	x.steps += len(r)
	return x.check(ctx, idx, r, window{lo: lo, hi: hi}, outs, snap)
}

// settleCommits ends the ordered commits of a round once its other steps
// are done: one whose turn has come by the backend's watermark must go
// ahead (the barrier wakes it) within wakeTimeout; the others wait for
// numbers no step of the round resolves, and are cancelled.
func (x *run) settleCommits(ctx context.Context, idx int, r round, dones []chan struct{}, cancel func()) *failure {
	for {
		turn := -1
		for i, st := range r {
			if st.Kind != opCommit || isClosed(dones[i]) {
				continue
			}
			h := x.handles[st.Handle]
			stats, err := x.sys.procs[0].st.Stats(ctx, h.Stream())
			if err != nil {
				cancel()
				return &failure{round: idx, kind: "error", msg: fmt.Sprintf("stats: %v", err)}
			}
			if stats.Watermark >= h.Number()-1 {
				turn = i
				break
			}
		}
		if turn < 0 {
			cancel()
			return nil
		}
		t := time.NewTimer(wakeTimeout)
		select {
		case <-dones[turn]:
			t.Stop()
		case <-t.C:
			cancel()
			h := x.handles[r[turn].Handle]
			return &failure{round: idx, kind: "liveness", msg: fmt.Sprintf(
				"%s: the ordered commit of %s/%d still waits %v after every earlier number resolved",
				r[turn], h.Stream(), h.Number(), wakeTimeout)}
		}
	}
}

// retryCut retries, with the same handle, every commit of the round whose
// batch a cut step cut (an unknown outcome): each reports whether the cut
// attempt had committed, or commits now (I7). The retries of ordered
// commits are settled like the round's commits; their outcomes replace the
// cut ones.
func (x *run) retryCut(ctx context.Context, idx int, r round, outs []outcome) *failure {
	commitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	dones := make([]chan struct{}, len(r))
	var wg sync.WaitGroup
	for i, st := range r {
		dones[i] = make(chan struct{})
		if (st.Kind != opCommit && st.Kind != opComplete) || !errors.Is(outs[i].err, errCut) {
			close(dones[i])
			continue
		}
		h, pl := x.handles[st.Handle], []byte(payload(st))
		outs[i].cut = true
		wg.Go(func() {
			defer close(dones[i])
			// A cut step armed meanwhile may cut a retry too: try again.
			for tries := 0; tries == 0 || (errors.Is(outs[i].err, errCut) && tries < 3); tries++ {
				if st.Kind == opComplete {
					outs[i].err = h.Complete(ctx, pl)
				} else {
					outs[i].err = h.Commit(commitCtx, pl)
				}
			}
		})
	}
	for i, st := range r {
		if st.Kind != opCommit {
			<-dones[i]
		}
	}
	f := x.settleCommits(ctx, idx, r, dones, cancel)
	wg.Wait()
	return f
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// payload is what step st commits or fills. A commit carries its handle's
// payload, so that a repeat is a retry (I7), not a commit of another
// payload (ErrPayloadMismatch, which the sequence and store tests check).
func payload(st step) string {
	if st.Kind == opFill {
		return fmt.Sprintf("f%d", st.ID)
	}
	return fmt.Sprintf("c%v", st.Handle)
}

// prepare returns the call step st makes, or nil when it names a handle or
// holding that does not exist (an earlier step was shrunk away or failed).
// It reads the run's state here, on the round's goroutine.
func (x *run) prepare(st step) func(context.Context) outcome {
	sys := x.sys
	p := sys.procs[st.Proc]
	ttl := time.Duration(st.TTL) * sys.tick
	switch st.Kind {
	case opLease:
		sys.tracker.add(opID(st.ID), st.Plan)
		opts := &sequence.LeaseOpts{OperationID: opID(st.ID), TTL: ttl}
		return func(ctx context.Context) outcome {
			var ls []*sequence.Lease
			var err error
			if st.N == 1 {
				var l *sequence.Lease
				if l, err = p.leaser.Lease(ctx, st.Stream, opts); err == nil {
					ls = []*sequence.Lease{l}
				}
			} else {
				ls, err = p.leaser.LeaseN(ctx, st.Stream, st.N, opts)
			}
			o := outcome{err: err, leases: ls}
			for _, l := range ls {
				o.entries = append(o.entries, store.Entry{Number: l.Number(), Token: l.Token(),
					OperationID: l.OperationID(), LeasedAt: l.LeasedAt(), ExpiresAt: l.ExpiresAt()})
			}
			return o
		}
	case opComplete, opCommit, opRelease, opExtend, opForeign:
		h := x.handles[st.Handle]
		if h == nil {
			return nil
		}
		pl := []byte(payload(st))
		return func(ctx context.Context) outcome {
			switch st.Kind {
			case opComplete:
				return outcome{err: h.Complete(ctx, pl)}
			case opCommit:
				return outcome{err: h.Commit(ctx, pl)}
			case opRelease:
				return outcome{err: h.Release(ctx)}
			case opExtend:
				err := h.Extend(ctx, ttl)
				return outcome{err: err, exp: h.ExpiresAt()}
			}
			_, err := p.st.Commit(ctx, h.Stream(), h.Number(), store.NewToken(), &store.CommitParams{Payload: pl})
			return outcome{err: err}
		}
	case opCrash:
		// The holder stops: nothing happens, and no later step uses it.
		return func(context.Context) outcome { return outcome{} }
	case opCut:
		// Armed now, it cuts the process's next batch of commits, in this
		// round or a later one: the commits of that batch are retried.
		return func(context.Context) outcome {
			p.cut.armed.Store(int32(1 + st.Pick%2))
			return outcome{}
		}
	case opAdvance:
		return func(ctx context.Context) outcome {
			sys.advance(ctx, time.Duration(st.Ticks)*sys.tick)
			return outcome{}
		}
	case opCleanup:
		return func(ctx context.Context) outcome {
			p.level.Store(int32(st.Level))
			res, err := p.cleaner.RunOnce(ctx)
			return outcome{cycle: &cycleOutcome{proc: st.Proc, res: res, err: err, calls: sys.tracker.take(st.Proc),
				writes: p.rec.take()}}
		}
	case opFill:
		n := x.fillTarget(st)
		pl := []byte(payload(st))
		return func(ctx context.Context) outcome {
			err := p.gaps.Fill(ctx, st.Stream, n, pl, &gap.FillOpts{FilledBy: filledBy, Policy: gap.FillReasons(fillable...)})
			return outcome{err: err, number: n}
		}
	case opTrim:
		below := max(1, x.reader[st.Stream]+1-int64(st.Pick%3))
		return func(ctx context.Context) outcome {
			low, err := p.st.Trim(ctx, st.Stream, below)
			return outcome{err: err, number: below, low: low}
		}
	case opRead:
		after := x.reader[st.Stream]
		return func(ctx context.Context) outcome {
			o := outcome{number: after}
			opts := &barrier.ReadOpts{After: after, IncludeGaps: true, PageSize: store.MaxListLimit}
			for e, err := range p.barrier.Entries(ctx, st.Stream, opts) {
				if err != nil {
					o.err = err
					break
				}
				o.read = append(o.read, e)
			}
			return o
		}
	case opAcquire:
		return func(ctx context.Context) outcome {
			nl, err := p.st.AcquireLease(ctx, st.Name, st.Owner, &store.AcquireLeaseParams{TTL: ttl})
			return outcome{err: err, named: nl}
		}
	case opRenew, opReleaseName:
		hold, ok := x.m.holds[st.Of]
		if !ok {
			return nil
		}
		return func(ctx context.Context) outcome {
			if st.Kind == opReleaseName {
				return outcome{err: p.st.ReleaseLease(ctx, hold.Name, hold.Owner, hold.Fence, nil)}
			}
			nl, err := p.st.RenewLease(ctx, hold.Name, hold.Owner, hold.Fence, &store.RenewLeaseParams{TTL: ttl})
			return outcome{err: err, named: nl}
		}
	}
	panic(fmt.Sprintf("model: unknown step %v", st))
}

// fillTarget turns a fill step's pick into a number: mostly an open gap of
// the model, sometimes any retained number.
func (x *run) fillTarget(st step) int64 {
	s := x.m.streams[st.Stream]
	if s == nil {
		return 1
	}
	var gaps []int64
	for n := s.Low; n <= s.last(); n++ {
		if s.at(n).State == store.Gap {
			gaps = append(gaps, n)
		}
	}
	switch {
	case len(gaps) > 0 && st.Pick%5 != 0:
		return gaps[st.Pick%len(gaps)]
	case s.last() >= s.Low:
		return s.Low + int64(st.Pick)%(s.last()-s.Low+1)
	}
	return s.Low
}

// update takes note of what the round did, once it is checked.
func (x *run) update(r round, outs []outcome, snap *snapshot) {
	for i, st := range r {
		o := &outs[i]
		if o.skip {
			continue
		}
		switch st.Kind {
		case opLease:
			for j, l := range o.leases {
				x.handles[ref{st.ID, j}] = l
			}
		case opComplete, opCommit:
			h := x.handles[st.Handle]
			if rs := snap.streams[h.Stream()]; rs != nil && (o.err == nil || o.canceled) {
				for _, e := range rs.entries {
					if e.Number == h.Number() && e.State == store.Committed && e.FilledAt.IsZero() &&
						e.Token == h.Token() && string(e.Payload) == payload(st) {
						if x.acked[e.Stream] == nil {
							x.acked[e.Stream] = map[int64][]byte{}
						}
						x.acked[e.Stream][e.Number] = e.Payload
					}
				}
			}
		case opRead:
			// Two reads of a round are two readers from one position: the
			// reader moves on by what either saw.
			for _, e := range o.read {
				if e.Number > x.reader[st.Stream] {
					x.observed[st.Stream] = append(x.observed[st.Stream], e.Number)
					x.reader[st.Stream] = e.Number
				}
			}
		case opCleanup:
			for _, c := range o.cycle.calls {
				if c.Err {
					x.failed[c.Op]++
				}
			}
		}
	}
}

// describe tells what a step returned, for reports.
func (o *outcome) describe(st step) string {
	var b strings.Builder
	b.WriteString(st.String())
	b.WriteString(" -> ")
	switch {
	case o.skip:
		b.WriteString("skipped")
		return b.String()
	case o.canceled:
		b.WriteString("cancelled at the round's end")
		return b.String()
	case o.cut:
		b.WriteString("its batch cut, then retried: ")
	case o.err != nil && !errors.As(o.err, new(*store.HeldError)):
		fmt.Fprintf(&b, "error %q", o.err)
		return b.String()
	}
	switch st.Kind {
	case opLease:
		for _, e := range o.entries {
			fmt.Fprintf(&b, "%s/%d leased %s expires %s; ", st.Stream, e.Number, stamp(e.LeasedAt), stamp(e.ExpiresAt))
		}
	case opExtend:
		fmt.Fprintf(&b, "ok, expires %s", stamp(o.exp))
	case opAcquire, opRenew:
		var he *store.HeldError
		if errors.As(o.err, &he) {
			fmt.Fprintf(&b, "held by %s fence %d until %s as of %s", he.Owner, he.Fence, stamp(he.ExpiresAt), stamp(he.AsOf))
		} else {
			fmt.Fprintf(&b, "%s fence %d at %s until %s", o.named.Owner, o.named.Fence, stamp(o.named.RenewedAt),
				stamp(o.named.ExpiresAt))
		}
	case opTrim:
		fmt.Fprintf(&b, "below %d: low point %d", o.number, o.low)
	case opFill:
		fmt.Fprintf(&b, "filled %d", o.number)
	case opRead:
		nums := make([]string, len(o.read))
		for i, e := range o.read {
			nums[i] = fmt.Sprint(e.Number)
		}
		fmt.Fprintf(&b, "after %d read [%s]", o.number, strings.Join(nums, " "))
	case opCleanup:
		c := o.cycle
		fmt.Fprintf(&b, "resolved %v failed %d deferred %d not-leader %d error %v; trackers:", c.res.Resolved, c.res.Failed,
			c.res.Deferred, c.res.NotLeader, c.err)
		for _, call := range c.calls {
			fmt.Fprintf(&b, " %s/%d", call.Stream, call.Number)
			switch {
			case call.Err:
				b.WriteString(":error")
			case call.Has:
				b.WriteString(":" + call.Work)
			case call.Result:
				b.WriteString(":no-result")
			default:
				b.WriteString(":no-work")
			}
		}
		b.WriteString("; writes:")
		for _, w := range c.writes {
			fmt.Fprintf(&b, " %s", w)
		}
	default:
		b.WriteString("ok")
	}
	return b.String()
}

func (w write) String() string {
	if w.Items != nil {
		var parts []string
		for i, it := range w.Items {
			if w.Results != nil && w.Results[i].Moved != 0 {
				parts = append(parts, fmt.Sprintf("%d->%d(%s)", it.Number, w.Results[i].Moved, it.RecoveryType))
			} else if w.Results != nil {
				parts = append(parts, fmt.Sprintf("%d:refused(%v)", it.Number, w.Results[i].Err))
			}
		}
		return fmt.Sprintf("move %s [%s]", w.Stream, strings.Join(parts, " "))
	}
	return fmt.Sprintf("gap(%s) %s %v resolved %v", w.Reason, w.Stream, w.Numbers, w.Resolved)
}

// drain ends a run: every lease expires, the cleanup loop runs until
// nothing is left unresolved (I6), the reader catches up, and the ledger
// is audited (I1, I2, I4, I5, I6) and the named leases' history checked
// (I8).
func (x *run) drain(ctx context.Context, idx int) *failure {
	id := 1 << 20
	next := func(st step) round {
		id++
		st.ID = id
		return round{st}
	}
	if f := x.round(ctx, idx, next(step{Kind: opAdvance, Ticks: maxTTLTicks + 1})); f != nil {
		return f
	}
	for i := 0; x.m.anyLeased(); i++ {
		if i == 100 {
			return &failure{round: idx, kind: "liveness", msg: "entries still leased after 100 cleanup cycles: " + x.m.leasedList()}
		}
		if f := x.round(ctx, idx, next(step{Kind: opCleanup, Level: recovery.Low})); f != nil {
			return f
		}
	}
	for _, s := range streams {
		if f := x.round(ctx, idx, next(step{Kind: opRead, Stream: s})); f != nil {
			return f
		}
	}
	if f := x.audit(ctx, idx); f != nil {
		return f
	}
	return x.checkHistory(ctx, idx)
}

func (l *ledger) anyLeased() bool { return l.leasedList() != "" }

func (l *ledger) leasedList() string {
	var out []string
	for _, name := range streams {
		if s := l.streams[name]; s != nil {
			for n := s.Low; n <= s.last(); n++ {
				if s.leased(n) {
					out = append(out, fmt.Sprintf("%s/%d", name, n))
				}
			}
		}
	}
	return strings.Join(out, " ")
}
