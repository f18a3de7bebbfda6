package lease

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Coalescing. The concurrent acquire attempts of a Manager share backend
// calls (store.AcquireLeases), and so do its concurrent releases
// (store.ReleaseLeases), unless the backend answers in process
// (store/memory): on PostgreSQL, one statement and one commit for every
// call that queued while the previous one was in flight, rather than one
// each.
//
// A call that finds no backend call of its kind being sent takes the lead:
// it sends the queued calls (its own first, at most maxBatch) in one, gives
// every caller its own result when the backend call returns, and hands the
// lead to the first caller queued by then, which sends the next batch, and
// so on. No caller serves others for longer than one backend call. (Several
// leaders sending at once were measured: more, smaller batches, fewer
// cycles a second.)
//
// Two refinements keep the batches large when many goroutines take turns:
//
//   - Early hand-off. A backend that can (PostgreSQL, see
//     store.LeaseBatchParams.Decided) says when it has decided a batch but
//     not yet made it durable: an acquire's commit waits for its WAL flush.
//     The leader then hands the lead on at once, so the next batch is
//     decided while this one's commit is flushed, rather than after. At
//     most maxInFlight backend calls of a kind are out at a time (one being
//     decided, one committing); the callers of a batch get their results
//     only when its backend call has returned, durable.
//   - Rounds (see wave). The callers a batch just answered tend to call
//     again at once, all together (a release after an acquire, or the
//     other way round), and the first of them to arrive would otherwise
//     find the lead free and go alone, splitting them in two backend calls.
//     So a leader whose batch is not yet joined by the callers answered
//     just before (within waveWindow) waits for them, for at most a quarter
//     of a backend call. And while the callers of this Manager do come back
//     at once (goroutines that take turns in a loop: most of those answered
//     call again within waveWindow), a leader also waits for the callers
//     of the backend calls still out, of either kind, to come back, for at
//     most about one backend call: every caller then goes in one backend
//     call per round, rather than in two half-full ones that overlap. (Two
//     calls at once are slower than one of both: they contend for the same
//     pages and each waits for its own WAL flush. Measured with 16
//     goroutines: 14k cycles a second in rounds, 12k in two overlapping
//     halves.)
//
// Each item's outcome is the one the single call would have had: the
// backend decides the items independently, and bad input never reaches a
// batch (the Manager checks it first; the backend would fail that item
// alone). Waiting changes when an item is decided, never how: the backend
// decides it when it arrives, against the state it finds, as it would a
// call alone sent at that moment. A call alone runs under its caller's
// context; a call shared with others runs under the leader's context
// without its cancellation, bounded by Config.QueryTimeout, so one
// caller's context cannot fail the others. A caller whose context ends
// returns at once (a leader that waits hands the lead on first); if its
// acquire was sent and is granted, it is released when the backend call
// returns. So that a leader can return too, a call shared with others is
// made by a goroutine of the batcher when the leader's context can end
// (one per backend call, not per caller); the Manager's Stop waits for
// them.

const (
	// maxBatch is the most calls one backend call carries.
	maxBatch = 100
	// maxInFlight is the most backend calls of a kind out at once: one
	// being decided and one whose commit is being made durable.
	maxInFlight = 2
	// waveWindow is how soon after a batch was answered a leader waits for
	// its callers: callers that call again at once do within tens of
	// microseconds (16 woken together: the last within 40 µs, 80 µs at the
	// 90th percentile, measured); later, the wave is over.
	waveWindow = 200 * time.Microsecond
	// maxWaveWait bounds a leader's wait for the callers of a wave (with a
	// quarter of the last backend call).
	maxWaveWait = 250 * time.Microsecond
	// maxRoundWait bounds a leader's wait for the backend calls still out
	// (with the longest recent backend call, plus waveWindow).
	maxRoundWait = 2 * time.Millisecond
	// loopShare is the share of answered callers that must call again
	// within waveWindow, on average, for a leader to wait for the backend
	// calls still out: below it, the callers do other things between their
	// calls, and waiting would only delay the leader.
	loopShare = 0.75
)

// batcher coalesces the concurrent calls of one kind.
type batcher[Req, Res any] struct {
	// send makes one backend call for reqs and returns their results, in
	// order. When decided is not nil, send may call it once, when the
	// backend has decided reqs but before their results are final.
	send func(ctx context.Context, reqs []Req, decided func()) []Res
	// orphans, if set, is given the results of calls whose callers gave up
	// while they were in flight.
	orphans func(ctx context.Context, reqs []Req, res []Res)
	// timeout bounds a backend call made for several callers.
	timeout time.Duration
	// direct sends every call alone, at once: the backend answers in
	// process, with no round trip to save.
	direct bool
	// wave is shared by the batchers of a Manager (nil: never wait).
	wave *wave

	mu      sync.Mutex
	waiting []*batchCall[Req, Res]
	leading bool          // a caller holds the lead: it is about to send, or sending and not yet decided
	flying  int           // backend calls sent that have not returned
	several bool          // the last batch carried several calls
	lastDur time.Duration // how long the last backend call took
	closed  bool          // Stop waits for bg: no goroutine starts
	bg      sync.WaitGroup
}

type batchCall[Req, Res any] struct {
	req       Req
	res       Res
	lead      chan struct{} // closed when the call is handed the lead
	done      chan struct{} // closed when res is set
	abandoned bool          // its caller gave up while it was in flight (b.mu)
}

// do sends req, alone or with others, and returns its result, or ctx's
// error if ctx ends first.
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	var zero Res
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if b.direct {
		return b.send(ctx, []Req{req}, nil)[0], nil
	}
	c := &batchCall[Req, Res]{req: req, lead: make(chan struct{}), done: make(chan struct{})}
	b.mu.Lock()
	b.waiting = append(b.waiting, c)
	if b.wave != nil {
		// Counted once queued: a leader that this arrival wakes finds it.
		b.wave.arrived()
	}
	b.passLead()
	b.mu.Unlock()

	// The lead goes to a queued call, which is sent by its own run: a call
	// is never both led and done before it runs.
	select {
	case <-c.lead:
		if !b.run(ctx, c) {
			return zero, ctx.Err()
		}
		// Sent by this run, which returned once the results were set, or
		// in a goroutine of b's (a batch of several): wait like the others.
		select {
		case <-c.done:
			return c.res, nil
		case <-ctx.Done():
		}
	case <-c.done:
		return c.res, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if isClosed(c.done) { // done before we looked: the result is ours
		return c.res, nil
	}
	if !b.unqueue(c) { // in flight in another caller's batch
		c.abandoned = true
	}
	return zero, ctx.Err()
}

// unqueue removes c, which was not sent, from the queue, and hands the lead
// on if c held it. It reports false if c is not queued: it was sent. b.mu
// must be held.
func (b *batcher[Req, Res]) unqueue(c *batchCall[Req, Res]) bool {
	i := slices.Index(b.waiting, c)
	if i < 0 {
		return false
	}
	b.waiting = slices.Delete(b.waiting, i, i+1)
	if isClosed(c.lead) { // handed the lead, which it will not use
		b.leading = false
		b.passLead()
	}
	return true
}

// passLead hands the lead to the first queued call, if the lead is free
// and fewer than maxInFlight backend calls are out. b.mu must be held.
func (b *batcher[Req, Res]) passLead() {
	if !b.leading && b.flying < maxInFlight && len(b.waiting) > 0 {
		b.leading = true
		close(b.waiting[0].lead)
	}
}

// close makes b send every batch from its leader's goroutine from now on,
// and waits for the goroutines that send batches.
func (b *batcher[Req, Res]) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.bg.Wait()
}

// run sends the queued calls, the leader's (me) first, gives them their
// results and hands the lead on. A batch of several is sent by a goroutine
// of b's when ctx can end, so that the leader can give up like the others;
// otherwise run returns once the results are set. It returns false, having
// sent nothing, if ctx ended while it waited for a wave.
func (b *batcher[Req, Res]) run(ctx context.Context, me *batchCall[Req, Res]) bool {
	if !b.awaitWave(ctx) {
		b.mu.Lock()
		b.unqueue(me)
		b.mu.Unlock()
		return false
	}
	b.mu.Lock()
	n := min(len(b.waiting), maxBatch)
	calls := slices.Clone(b.waiting[:n]) // me first: the lead goes to the first queued
	b.waiting = slices.Delete(b.waiting, 0, n)
	early := n > 1 || b.several // with a single caller, nobody could use an early lead
	b.several = n > 1
	b.flying++
	async := n > 1 && ctx.Done() != nil && !b.closed
	if async {
		b.bg.Add(1) // under b.mu, before close: close waits for it
	}
	b.mu.Unlock()
	if b.wave != nil {
		b.wave.sent(n)
	}
	if async {
		go func() {
			defer b.bg.Done()
			b.dispatch(ctx, calls, early)
		}()
		return true
	}
	b.dispatch(ctx, calls, early)
	return true
}

// dispatch makes the backend call of calls, sets their results, hands the
// lead on, and gives the grants of the calls whose callers gave up to
// orphans. ctx is the leader's; early tells whether the lead may pass when
// the backend has decided the batch.
func (b *batcher[Req, Res]) dispatch(ctx context.Context, calls []*batchCall[Req, Res], early bool) {
	n := len(calls)
	reqs := make([]Req, n)
	for i, c := range calls {
		reqs[i] = c.req
	}
	sctx := ctx
	if n > 1 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
		defer cancel()
	}
	// The lead is released once: at decided, or when send returns. Until
	// then, no other batch is sent (but one whose commit is still out).
	var released bool
	release := func() { // b.mu held
		if !released {
			released = true
			b.leading = false
		}
	}
	var decided func()
	if early {
		decided = func() {
			b.mu.Lock()
			release()
			b.passLead()
			b.mu.Unlock()
		}
	}
	start := time.Now()
	res := b.send(sctx, reqs, decided)
	took := time.Since(start)

	b.mu.Lock()
	b.flying--
	b.lastDur = took
	var lostReqs []Req
	var lostRes []Res
	for i, c := range calls {
		c.res = res[i]
		if c.abandoned {
			lostReqs, lostRes = append(lostReqs, c.req), append(lostRes, c.res)
		}
	}
	if b.wave != nil { // before its callers wake: their next calls are its arrivals
		b.wave.answered(n, n-len(lostReqs), took)
	}
	for _, c := range calls {
		close(c.done)
	}
	release()
	b.passLead()
	b.mu.Unlock()
	if len(lostReqs) > 0 && b.orphans != nil {
		b.orphans(ctx, lostReqs, lostRes)
	}
}

// awaitWave waits, holding the lead, while the wave says more callers are
// about to join the batch (see wave): at most a quarter of the last
// backend call and maxWaveWait; or, while the callers loop, at most the
// longest recent backend call plus waveWindow, and maxRoundWait. It returns
// false if ctx ended first.
func (b *batcher[Req, Res]) awaitWave(ctx context.Context) bool {
	if b.wave == nil {
		return true
	}
	var t *time.Timer
	for {
		changed, loop, longest, least := b.wave.await()
		if changed == nil {
			return true
		}
		if t == nil {
			b.mu.Lock()
			bound := min(b.lastDur/4, maxWaveWait)
			b.mu.Unlock()
			if loop {
				bound = min(longest+waveWindow, maxRoundWait)
			}
			bound = max(bound, least)
			if bound <= 0 {
				return true
			}
			t = time.NewTimer(bound)
			defer t.Stop()
		}
		select {
		case <-changed: // look again
		case <-t.C:
			b.wave.forget() // the callers awaited are not coming soon
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// wave tracks the callers of a Manager's batches, for the leaders that wait
// for them (see awaitWave). Goroutines that take turns on the Manager
// (acquire, release, acquire...) are woken together by a batch's results
// and call again together: a leader that waits until those answered a
// moment ago have all called again sends them in one batch, rather than
// the first alone and then the rest. And while the callers mostly call
// again at once (loop: a moving average of the share of the callers of
// batches of several that did, within waveWindow, is at least loopShare),
// a leader also waits for the callers of the backend calls still out:
// they are about to call again too, and every caller then goes in one
// backend call per round. A caller that does not call again soon (it works
// while it holds its lease) costs a leader its bounded wait once, and
// lowers the share.
//
// Waiting is safe: a leader waits only for events that happen without it
// (a backend call returns; a woken caller calls), never for another
// leader, and always with a bound; and a caller's context ends its wait.
type wave struct {
	mu      sync.Mutex
	now     func() time.Time // time.Now; tests pin it
	minWait time.Duration    // the least a leader waits for a wave; tests only
	out     int              // callers in backend calls not yet answered
	pending int              // callers answered in the window that have not called again
	at      time.Time        // when the window opened: the first batch answered in it
	counted int              // callers answered in the window
	loop    float64          // moving share of answered callers that called again in the window
	longest time.Duration    // the longest recent backend call (decaying)
	changed chan struct{}    // closed at the next change; nil if no leader waits
}

// sent counts the n callers of a backend call sent.
func (w *wave) sent(n int) {
	w.mu.Lock()
	w.out += n
	w.mu.Unlock()
}

// answered counts the n callers of a backend call that took took, of which
// back may call again (the others gave up).
func (w *wave) answered(n, back int, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out -= n
	w.longest = max(took, w.longest-w.longest/8)
	if n > 1 { // a lone call says nothing of waves
		if w.counted > 0 && w.now().Sub(w.at) > waveWindow {
			w.settle()
		}
		if w.counted == 0 {
			w.at = w.now()
		}
		w.pending += back
		w.counted += back
	}
	w.notify()
}

// arrived counts a call.
func (w *wave) arrived() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending > 0 {
		if w.now().Sub(w.at) > waveWindow {
			w.settle()
			return
		}
		if w.pending--; w.pending == 0 {
			w.settle()
			w.notify()
		}
	}
}

// settle closes the window: the share of its callers that called again
// moves loop. w.mu must be held.
func (w *wave) settle() {
	if w.counted > 0 {
		share := float64(w.counted-w.pending) / float64(w.counted)
		w.loop += (share - w.loop) / 4
	}
	w.pending, w.counted = 0, 0
}

// notify wakes the leaders that wait. w.mu must be held.
func (w *wave) notify() {
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
}

// await returns a channel closed at the next change, if a leader should
// wait now, or nil: callers answered in the window have not all called
// again, or the callers loop and backend calls are out. loop tells which
// bound applies, longest is the longest recent backend call, and least
// the least wait (tests).
func (w *wave) await() (changed chan struct{}, loop bool, longest, least time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending > 0 && w.now().Sub(w.at) > waveWindow {
		w.settle()
	}
	loop = w.loop >= loopShare
	if w.pending == 0 && !(loop && w.out > 0) {
		return nil, loop, w.longest, w.minWait
	}
	if w.changed == nil {
		w.changed = make(chan struct{})
	}
	return w.changed, loop, w.longest, w.minWait
}

// forget gives up on the callers still awaited; a wait for the backend
// calls still out that ran out lowers the share.
func (w *wave) forget() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.counted == 0 {
		w.loop -= w.loop / 4
	}
	w.settle()
	w.notify()
}

// isClosed reports whether ch, which is only ever closed, is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// newBatchers sets up the coalescing of m's acquires and releases, unless
// the store answers in process (store/memory: Local): coalescing saves
// round trips, and there are none to save, only hand-offs between
// goroutines to add.
func (m *Manager) newBatchers() {
	ls, local := m.store.(interface{ Local() bool })
	local = local && ls.Local()
	w := &wave{now: time.Now}
	m.acquires = &batcher[store.AcquireLeaseRequest, store.AcquireLeaseResult]{
		direct: local,
		wave:   w,
		send: func(ctx context.Context, reqs []store.AcquireLeaseRequest, decided func()) []store.AcquireLeaseResult {
			return m.store.AcquireLeases(ctx, reqs, &store.LeaseBatchParams{NoHistory: m.noHistory, Decided: decided})
		},
		orphans: m.releaseOrphans,
		timeout: m.queryTimeout,
	}
	m.releases = &batcher[store.LeaseHolding, error]{
		direct: local,
		wave:   w,
		send: func(ctx context.Context, reqs []store.LeaseHolding, _ func()) []error {
			return m.store.ReleaseLeases(ctx, reqs, &store.LeaseBatchParams{NoHistory: m.noHistory})
		},
		timeout: m.queryTimeout,
	}
}

// releaseOrphans releases the holdings granted to acquires whose callers
// gave up while they were in flight, and wakes the waiters of their names.
func (m *Manager) releaseOrphans(ctx context.Context, _ []store.AcquireLeaseRequest, res []store.AcquireLeaseResult) {
	var hs []store.LeaseHolding
	for _, r := range res {
		if r.Err == nil {
			hs = append(hs, store.LeaseHolding{Name: r.Lease.Name, Owner: r.Lease.Owner, Fence: r.Lease.Fence})
		}
	}
	if len(hs) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.releaseTimeout)
	defer cancel()
	for i, err := range m.store.ReleaseLeases(rctx, hs, &store.LeaseBatchParams{NoHistory: m.noHistory}) {
		if err != nil {
			m.logger.Warn("lease: release of an abandoned acquire failed; it will expire", slog.String("name", hs[i].Name), slog.Any("error", err))
		}
		m.wakeHead(hs[i].Name)
	}
}

// acquireLease acquires through the coalescing.
func (m *Manager) acquireLease(ctx context.Context, req store.AcquireLeaseRequest) (store.NamedLease, error) {
	r, err := m.acquires.do(ctx, req)
	if err != nil {
		return store.NamedLease{}, err
	}
	return r.Lease, r.Err
}

// releaseLease releases through the coalescing.
func (m *Manager) releaseLease(ctx context.Context, h store.LeaseHolding) error {
	res, err := m.releases.do(ctx, h)
	if err != nil {
		return err
	}
	return res
}
