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

// walk resolves the expired entries of one stream, in number order. The
// decisions of plannable pipelines (the built-in steps) are taken entry by
// entry and written in batches: a run of gaps in one statement
// (ResolveExpiredBatch), a run of moves in one transaction
// (RecoverExpiredBatch), each in number order, so recovered work gets new
// numbers in the order of the originals.
type walk struct {
	c       *cycle
	lead    context.Context // the leadership's: the walk stops the moment it ends
	stream  string
	level   recovery.Level
	seenAt  time.Time
	pending []pending
	bytes   int // the work the pending moves carry
}

// pending is an entry whose plan awaits its write.
type pending struct {
	e    store.Entry
	plan recovery.Plan
	ctx  context.Context // the recovery's (Tracer)
	end  func(recovery.Result, error)
}

// run walks es, the expired entries of the stream in number order. It
// stops at the first entry whose recovery failed, and at the first
// unresolved earlier number that is not among them (a live lease): what
// comes after waits, so that no later number's work moves before an
// earlier one's.
func (w *walk) run(ctx context.Context, es []store.Entry) {
	c := w.c
	for len(es) > 0 {
		limit := min(len(es)+1, store.MaxListLimit)
		qctx, cancel := context.WithTimeout(ctx, c.sv.qTimeout)
		snap, err := c.sv.store.Snapshot(qctx, w.stream, limit)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.errs = append(c.errs, fmt.Errorf("cleanup: snapshot %s: %w", w.stream, err))
			}
			c.done[w.stream] = true
			return
		}
		cut := len(snap.Unresolved) == limit
		unresolved := snap.Unresolved
		for len(es) > 0 {
			e := es[0]
			if w.stopped(ctx) {
				w.abandon()
				return
			}
			if len(unresolved) > 0 && unresolved[0] < e.Number {
				// An earlier number is leased and was not expired when
				// listed: the rest of the stream waits for it.
				if w.flush(ctx) {
					c.deferBehind(ctx, w.stream, unresolved[0], len(es))
				}
				return
			}
			if len(unresolved) == 0 && cut && e.Number > snap.Known {
				break // beyond what the snapshot describes: look again
			}
			es = es[1:]
			if len(unresolved) == 0 || unresolved[0] > e.Number {
				c.res.Elsewhere++ // resolved since it was listed
				continue
			}
			unresolved = unresolved[1:]
			if !w.handle(ctx, e) {
				return
			}
		}
		if !w.flush(ctx) {
			return
		}
	}
}

// stopped reports whether the walk must stop: the cycle ended or the
// leadership was lost (checked directly: the walk's context learns of the
// loss a moment later).
func (w *walk) stopped(ctx context.Context) bool {
	return ctx.Err() != nil || w.lead.Err() != nil
}

// abandon drops the pending plans unwritten.
func (w *walk) abandon() {
	for _, it := range w.pending {
		it.end(recovery.Result{}, errAbandoned)
	}
	w.pending, w.bytes = nil, 0
}

// handle decides what becomes of e; false when the walk must stop.
func (w *walk) handle(ctx context.Context, e store.Entry) bool {
	sv := w.c.sv
	if e.Parked() {
		// An operator's to decide (store.Parker): not tried, not counted;
		// the rest of the stream waits behind it, in order.
		if w.flush(ctx) {
			w.c.res.Parked++
			w.c.done[w.stream] = true
		}
		return false
	}
	now := w.seenAt // zero when the database clock could not be read: not tried again per entry
	if w.c.haveOffset {
		now = w.c.dbNow(ctx)
	}
	p := sv.pipeline.SelectFor(recovery.Situation{Level: w.level, Entry: e, Now: now})
	rctx, end := sv.startRecovery(ctx, e)
	observe := func(step string, r recovery.Result, err error) {
		if !errors.Is(err, store.ErrHistoryLost) { // refused, not failed: see refused
			sv.step(rctx, e, step, r, err)
		}
	}
	it := pending{e: e, ctx: rctx, end: end}
	if p.Plannable() {
		plan, err := p.Plan(rctx, e, observe)
		if err != nil {
			if !w.flush(ctx) { // the earlier entries first
				end(recovery.Result{}, errAbandoned)
				return false
			}
			return w.settle(ctx, it, recovery.Result{}, err)
		}
		it.plan = plan
		w.pending = append(w.pending, it)
		w.bytes += len(plan.Work)
		if len(w.pending) >= w.batchLimit() || w.bytes >= maxBatchBytes {
			return w.flush(ctx)
		}
		return true
	}
	if !w.flush(ctx) {
		end(recovery.Result{}, errAbandoned)
		return false
	}
	r, err := p.Run(rctx, e, observe)
	if err == nil && r.Recovered && !r.Elsewhere && sv.durable != nil {
		w.addHook(ctx, e)
	}
	return w.settle(ctx, it, r, err) && w.c.pace(ctx, 1)
}

// batchLimit is the most resolutions one statement writes.
func (w *walk) batchLimit() int {
	if w.c.cascade {
		return w.c.sv.cascade.batch
	}
	return w.c.sv.batch
}

// flush writes the pending plans, a run of gaps or of moves per statement,
// in number order; false when one failed (the rest are abandoned).
func (w *walk) flush(ctx context.Context) bool {
	items := w.pending
	w.pending, w.bytes = nil, 0
	for len(items) > 0 {
		n := 1
		for n < len(items) && items[n].plan.Gap == items[0].plan.Gap {
			n++
		}
		run := items[:n]
		if w.stopped(ctx) {
			w.pending = items
			w.abandon()
			return false
		}
		items = items[n:]
		var ok bool
		if run[0].plan.Gap {
			ok = w.gaps(ctx, run)
		} else {
			ok = w.moves(ctx, run)
		}
		if !ok || !w.c.pace(ctx, n) {
			for _, it := range items {
				it.end(recovery.Result{}, errAbandoned)
			}
			return false
		}
	}
	return true
}

// gaps declares a run of entries gaps in one statement.
func (w *walk) gaps(ctx context.Context, run []pending) bool {
	sv := w.c.sv
	numbers := make([]int64, len(run))
	for i, it := range run {
		numbers[i] = it.e.Number
	}
	qctx, cancel := context.WithTimeout(ctx, sv.qTimeout)
	resolved, err := sv.store.ResolveExpiredBatch(qctx, w.stream, numbers, &store.ResolveExpiredParams{Hook: sv.durable != nil})
	cancel()
	if err != nil {
		return w.unknown(ctx, run, err)
	}
	w.accepted()
	mine := make(map[int64]bool, len(resolved))
	for _, n := range resolved {
		mine[n] = true
	}
	ok := true
	for _, it := range run {
		r := recovery.Result{Recovered: true, Method: it.plan.Step, Reason: store.ReasonExpired}
		if !mine[it.e.Number] {
			r.Elsewhere, r.Reason = true, "resolved meanwhile"
		}
		sv.step(it.ctx, it.e, it.plan.Step, r, nil)
		ok = w.settle(ctx, it, r, nil) && ok
	}
	return ok
}

// moves moves the work of a run of entries in one transaction.
func (w *walk) moves(ctx context.Context, run []pending) bool {
	sv := w.c.sv
	items := make([]store.RecoverItem, len(run))
	es := make([]store.Entry, len(run))
	for i, it := range run {
		items[i] = store.RecoverItem{Number: it.e.Number, Payload: it.plan.Work, RecoveryType: it.plan.Step}
		es[i] = it.e
	}
	p := &store.RecoverBatchParams{Owner: sv.owner, Hook: sv.durable != nil}
	timeout := sv.qTimeout
	if sv.moveTx != nil {
		timeout = sv.moveTxTime // the application's function runs in it
	}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	var res []store.RecoverResult
	var err error
	if sv.moveTx != nil {
		var fnErr error
		res, fnErr, err = sv.moveTx.recoverTx(qctx, sv.store, es, items, p)
		if fnErr != nil {
			cancel()
			return w.rolledBack(ctx, run, fnErr)
		}
	} else {
		res, err = sv.store.RecoverExpiredBatch(qctx, w.stream, items, p)
	}
	cancel()
	if err == nil {
		w.accepted()
	}
	if err != nil {
		if errors.Is(err, store.ErrHistoryLost) && w.knownRefusal(err) {
			return w.refused(run, err) // refused before any statement
		}
		return w.unknown(ctx, run, err)
	}
	ok := true
	for i, it := range run {
		var r recovery.Result
		var err error
		switch {
		case res[i].Moved != 0:
			r = recovery.Result{Recovered: true, Method: it.plan.Step, NewNumber: res[i].Moved, Reason: fmt.Sprintf("moved to %d", res[i].Moved)}
		case recovery.ResolvedMeanwhile(res[i].Err):
			r = recovery.Result{Recovered: true, Method: it.plan.Step, Elsewhere: true, Reason: "resolved meanwhile: " + res[i].Err.Error()}
		default:
			err = fmt.Errorf("%w: %s/%d: %s: %w", recovery.ErrUnrecovered, w.stream, it.e.Number, it.plan.Step, res[i].Err)
		}
		sv.step(it.ctx, it.e, it.plan.Step, r, err)
		ok = w.settle(ctx, it, r, err) && ok
	}
	return ok
}

// rolledBack settles a run whose moves Config.MoveTx rolled back: nothing
// of it was written, and the failure counts against its first entry (the
// rest waits behind it, in order).
func (w *walk) rolledBack(ctx context.Context, run []pending, cause error) bool {
	sv := w.c.sv
	it := run[0]
	err := fmt.Errorf("%w: %s/%d: %s: %w: %w", recovery.ErrUnrecovered, w.stream, it.e.Number, it.plan.Step, errMoveTx, cause)
	sv.step(it.ctx, it.e, it.plan.Step, recovery.Result{}, err)
	w.settle(ctx, it, recovery.Result{}, err)
	for _, rest := range run[1:] {
		rest.end(recovery.Result{}, errAbandoned)
	}
	return false
}

// unknown settles a run whose statement failed: it may have committed all
// the same (a reply lost with the connection). The entries are read back:
// if none is still leased, the statement took effect and each is settled as
// it is found; otherwise nothing of the run was written, and the first
// entry still leased fails (the ones before it were resolved elsewhere).
func (w *walk) unknown(ctx context.Context, run []pending, err error) bool {
	sv := w.c.sv
	now, rerr := w.readBack(ctx, run)
	leased := rerr != nil
	for _, it := range run {
		if e, ok := now[it.e.Number]; !ok || !e.State.Resolved() {
			leased = true
		}
	}
	if leased && errors.Is(err, store.ErrHistoryLost) {
		return w.refused(run, err) // not applied
	}
	for i, it := range run {
		e, found := now[it.e.Number]
		if leased && (!found || !e.State.Resolved()) {
			err := fmt.Errorf("%w: %s/%d: %s: %w", recovery.ErrUnrecovered, w.stream, it.e.Number, it.plan.Step, err)
			sv.step(it.ctx, it.e, it.plan.Step, recovery.Result{}, err)
			w.settle(ctx, it, recovery.Result{}, err)
			for _, rest := range run[i+1:] {
				rest.end(recovery.Result{}, errAbandoned)
			}
			return false
		}
		r := recovery.Result{Recovered: true, Method: it.plan.Step, Elsewhere: true, Reason: "resolved meanwhile"}
		if !leased {
			r = outcome(it.plan, e)
		}
		sv.step(it.ctx, it.e, it.plan.Step, r, nil)
		w.settle(ctx, it, r, nil)
	}
	return true
}

// refused settles a run (or one entry) whose recovery the store refused
// because the database lost the stream's history (store.ErrHistoryLost):
// it was not applied, and every recovery of the stream is refused until
// the operator accepts the server's history (the PostgreSQL store's
// AcceptHistory). That is no failure of the entries: nothing is counted
// (no failed step, no attempt toward MaxRecoveryAttempts, so no gap), the
// stream waits for a later cycle, logged once per refusal, and the other
// streams go on.
func (w *walk) refused(run []pending, err error) bool {
	for _, it := range run {
		it.end(recovery.Result{}, err)
	}
	w.c.done[w.stream] = true
	if !w.knownRefusal(err) {
		w.c.sv.refused[w.stream] = refusedAt(err)
		w.c.sv.logger.Warn("cleanup: recoveries of the stream are refused: the database lost history; "+
			"the stream waits until its history is accepted (see docs/operations.md, Asynchronous replication)",
			slog.String("stream", w.stream), slog.Any("error", err))
	}
	return false
}

// knownRefusal reports whether err, an ErrHistoryLost of a recovery of the
// stream, is a refusal already met (refused): then it was refused before
// any statement. The first time, the statement may have run and found the
// loss in its answer, so the entries are read back (unknown).
func (w *walk) knownRefusal(err error) bool {
	at, ok := w.c.sv.refused[w.stream]
	return ok && at.Equal(refusedAt(err))
}

// accepted forgets a refusal of the stream once a write of it went
// through: its history was accepted, and the set of refused streams keeps
// only the streams still refused.
func (w *walk) accepted() { delete(w.c.sv.refused, w.stream) }

// refusedAt tells refusals apart: the time its finding was made at.
func refusedAt(err error) time.Time {
	if lost := (*store.HistoryLostError)(nil); errors.As(err, &lost) {
		return lost.At
	}
	return time.Time{}
}

// outcome is what an entry found resolved after a statement of unknown
// outcome came to: the plan's own result if the entry looks as the plan
// would have left it, else resolved elsewhere.
func outcome(plan recovery.Plan, e store.Entry) recovery.Result {
	if plan.Gap {
		if e.State == store.Gap && e.GapReason == store.ReasonExpired && e.RecoveredAs == 0 {
			return recovery.Result{Recovered: true, Method: plan.Step, Reason: store.ReasonExpired}
		}
		return recovery.Result{Recovered: true, Method: plan.Step, Elsewhere: true, Reason: "resolved meanwhile"}
	}
	r := recovery.Outcome(e)
	r.Method = plan.Step
	return r
}

// readBack reads the run's entries again, even when ctx ended (the write
// may have committed all the same), bounded by the query timeout.
func (w *walk) readBack(ctx context.Context, run []pending) (map[int64]store.Entry, error) {
	sv := w.c.sv
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sv.qTimeout)
	defer cancel()
	out := make(map[int64]store.Entry, len(run))
	last := run[len(run)-1].e.Number
	for _, it := range run {
		n := it.e.Number
		if _, ok := out[n]; ok {
			continue
		}
		limit := min(last-n+1, int64(2*len(run)), store.MaxListLimit)
		es, err := sv.store.Read(ctx, w.stream, n-1, int(limit))
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			out[e.Number] = e
		}
	}
	return out, nil
}

// settle records what became of an entry; false when it is left
// unresolved (its stream waits for a later cycle). A failed recovery is
// counted; with an attempt limit (recovery.Config.MaxAttempts), its
// MaxAttempts-th failure in a row declares the entry a gap instead. A failure because the walk
// itself ended (Stop, the lead lost) is no failure of the entry.
func (w *walk) settle(ctx context.Context, it pending, r recovery.Result, err error) bool {
	c := w.c
	if err != nil && w.stopped(ctx) {
		it.end(recovery.Result{}, err)
		return false
	}
	if errors.Is(err, store.ErrHistoryLost) {
		return w.refused([]pending{it}, err)
	}
	if err != nil {
		r, err = w.giveUp(ctx, it, err)
	}
	it.end(r, err)
	if err != nil {
		c.res.Failed++
		c.errs = append(c.errs, err)
		c.done[w.stream] = true
		c.failed[w.stream] = true
		c.report(it.e, w.seenAt, r, err)
		return false
	}
	if a, ok := c.sv.attempts[w.stream]; ok && a.number == it.e.Number {
		delete(c.sv.attempts, w.stream)
	}
	if r.Elsewhere {
		c.res.Elsewhere++
		return true
	}
	c.res.Resolved[r.Method]++
	c.sv.expiry.expired(it.e)
	c.report(it.e, w.seenAt, r, nil)
	c.sv.hooks.add(it.ctx, it.e)
	if c.sv.durable != nil {
		c.sv.durable.wake()
	}
	return true
}

// addHook records the durable hook of e, which a step of a pipeline the
// loop cannot plan (one with a custom step) resolved with its own write:
// that write recorded none unless the step asked for it (the Hook field of
// the store's params; then this adds nothing), so it is added now, in a
// statement of its own. A crash between the two loses it, and so does a
// failure here, which is logged and reported.
func (w *walk) addHook(ctx context.Context, e store.Entry) {
	sv := w.c.sv
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sv.qTimeout)
	_, err := sv.durable.q.AddHooks(qctx, e.Stream, []int64{e.Number})
	cancel()
	if err != nil {
		sv.logger.Error("cleanup: could not record the durable hook of an entry a custom step resolved; it will not run",
			slog.String("stream", e.Stream), slog.Int64("number", e.Number), slog.Any("error", err))
		if sv.observer != nil {
			sv.observer.HookFailed(e, fmt.Errorf("%w: recording it failed: %w", ErrHookDropped, err))
		}
	}
}

// giveUp counts a failed recovery of it.e: on the entry when the store is
// a store.Parker (so a restart does not forget the count, and operators see
// the last error), else in this process. The entry stays expired, unless
// the pipeline's recovery.Config.MaxAttempts is set and this is its
// MaxAttempts-th failure: then, by recovery.Config.OnExhausted, the store
// parks it in the same write (ExhaustedPark: the error returned matches
// store.ErrParked), or it is declared a gap with reason
// recovery.ReasonRecoveryFailed (ExhaustedGap).
func (w *walk) giveUp(ctx context.Context, it pending, cause error) (recovery.Result, error) {
	sv := w.c.sv
	e := it.e
	n, parked, recorded := w.record(ctx, e, cause)
	if !recorded {
		a := sv.attempts[w.stream]
		if a.number != e.Number {
			a = attempt{number: e.Number}
		}
		a.n++
		sv.attempts[w.stream] = a
		n = a.n
	}
	attrs := []any{slog.String("stream", e.Stream), slog.Int64("number", e.Number),
		slog.String("operation_id", e.OperationID), slog.Int("attempt", n), slog.Int("max_attempts", sv.maxAttempts),
		slog.Any("error", cause)}
	switch {
	case parked:
		sv.logger.Error("cleanup: recovery kept failing; parked the entry: its stream waits until an operator "+
			"unparks it, commits its work or gives it up (seqlease parked)", attrs...)
		return recovery.Result{}, fmt.Errorf("%w; %w after %d failed attempts", cause, store.ErrParked, n)
	case sv.maxAttempts == 0 || n < sv.maxAttempts || sv.park:
		sv.logger.Warn("cleanup: recovery failed; the entry stays expired and its stream waits for the next cycle", attrs...)
		return recovery.Result{}, cause
	}
	sv.logger.Error("cleanup: recovery kept failing; declaring the entry a gap", attrs...)
	qctx, cancel := context.WithTimeout(ctx, sv.qTimeout)
	err := sv.store.ResolveExpired(qctx, e.Stream, e.Number, &store.ResolveExpiredParams{Reason: recovery.ReasonRecoveryFailed, Hook: sv.durable != nil})
	cancel()
	r := recovery.Result{Recovered: true, Method: recovery.MethodGap, Reason: recovery.ReasonRecoveryFailed}
	switch {
	case err == nil:
	case recovery.ResolvedMeanwhile(err):
		r.Elsewhere, r.Reason = true, "resolved meanwhile: "+err.Error()
		err = nil
	default:
		r, err = recovery.Result{}, fmt.Errorf("%w; declaring it a gap failed too: %w", cause, err)
	}
	sv.step(it.ctx, e, recovery.MethodGap, r, err)
	return r, err
}

// record counts a failed recovery of e on the entry (store.Parker), parking
// it at the attempt limit when the pipeline parks. It returns the attempts
// so far and whether e is parked now; recorded is false when the store
// keeps no count or the write failed (giveUp then counts in this process).
func (w *walk) record(ctx context.Context, e store.Entry, cause error) (n int, parked, recorded bool) {
	sv := w.c.sv
	if sv.parker == nil {
		return 0, false, false
	}
	p := &store.RecoveryFailureParams{Error: cause.Error()}
	if sv.park {
		p.ParkAfter = sv.maxAttempts
	}
	qctx, cancel := context.WithTimeout(ctx, sv.qTimeout)
	got, err := sv.parker.RecordRecoveryFailure(qctx, e.Stream, e.Number, p)
	cancel()
	switch {
	case err == nil:
		return got.RecoveryAttempts, got.Parked(), true
	case errors.Is(err, store.ErrParked): // by another cleaner meanwhile
		return e.RecoveryAttempts, true, true
	}
	sv.logger.Warn("cleanup: could not record a failed recovery on the entry; counting it in this process",
		slog.String("stream", e.Stream), slog.Int64("number", e.Number), slog.Any("error", err))
	return 0, false, false
}
