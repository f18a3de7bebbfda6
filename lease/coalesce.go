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
// (store/memory): on PostgreSQL, one statement and one commit for
// every call that queued while the previous one was in flight, rather than
// one each. A call that finds nothing in flight is sent at once, alone, and
// its caller leads: when its call returns, it gives every caller its own
// result and hands the lead to the first queued caller, which sends the
// queued calls (its own first, at most maxBatch) in one, and so on. No
// caller serves others for longer than one backend call. (Several leaders
// at a time were measured: more, smaller batches, fewer cycles a second.)
//
// Each item's outcome is the one the single call would have had: the
// backend decides the items independently, and bad input never reaches a
// batch (the Manager checks it first; the backend would fail that item
// alone). A call alone runs under its caller's context; a call shared with
// others runs under the leader's context without its cancellation, bounded
// by Config.QueryTimeout, so one caller's context cannot fail the others. A
// caller whose context ends returns at once; if its acquire was sent and is
// granted, the leader releases it.

// maxBatch is the most calls one backend call carries.
const maxBatch = 100

// batcher coalesces the concurrent calls of one kind.
type batcher[Req, Res any] struct {
	// send makes one backend call for reqs and returns their results, in
	// order.
	send func(ctx context.Context, reqs []Req) []Res
	// orphans, if set, is given the results of calls whose callers gave up
	// while they were in flight.
	orphans func(ctx context.Context, reqs []Req, res []Res)
	// timeout bounds a backend call made for several callers.
	timeout time.Duration
	// direct sends every call alone, at once: the backend answers in
	// process, with no round trip to save.
	direct bool

	mu      sync.Mutex
	waiting []*batchCall[Req, Res]
	busy    bool // a leader runs
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
		return b.send(ctx, []Req{req})[0], nil
	}
	c := &batchCall[Req, Res]{req: req, lead: make(chan struct{}), done: make(chan struct{})}
	b.mu.Lock()
	b.waiting = append(b.waiting, c)
	if !b.busy {
		b.busy = true
		close(c.lead)
	}
	b.mu.Unlock()

	// The lead goes to a queued call, which is sent by its own run: a call
	// is never both led and done before it runs.
	select {
	case <-c.lead:
		b.run(ctx)
		return c.res, nil
	case <-c.done:
		return c.res, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if isClosed(c.done) { // done before we looked: the result is ours
		return c.res, nil
	}
	i := slices.Index(b.waiting, c)
	if i < 0 { // in flight in another caller's batch
		c.abandoned = true
		return zero, ctx.Err()
	}
	b.waiting = slices.Delete(b.waiting, i, i+1) // not sent
	if isClosed(c.lead) {                        // but handed the lead: pass it on
		b.passLead()
	}
	return zero, ctx.Err()
}

// passLead hands the lead to the first queued call, if any. b.mu must be
// held.
func (b *batcher[Req, Res]) passLead() {
	if len(b.waiting) > 0 {
		close(b.waiting[0].lead)
	} else {
		b.busy = false
	}
}

// run sends the queued calls, the leader's first, gives them their results
// and hands the lead on.
func (b *batcher[Req, Res]) run(ctx context.Context) {
	b.mu.Lock()
	n := min(len(b.waiting), maxBatch)
	calls := slices.Clone(b.waiting[:n])
	b.waiting = slices.Delete(b.waiting, 0, n)
	b.mu.Unlock()

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
	res := b.send(sctx, reqs)

	b.mu.Lock()
	var lostReqs []Req
	var lostRes []Res
	for i, c := range calls {
		c.res = res[i]
		if c.abandoned {
			lostReqs, lostRes = append(lostReqs, c.req), append(lostRes, c.res)
		}
		close(c.done)
	}
	b.passLead()
	b.mu.Unlock()
	if len(lostReqs) > 0 && b.orphans != nil {
		b.orphans(ctx, lostReqs, lostRes)
	}
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
	m.acquires = &batcher[store.AcquireLeaseRequest, store.AcquireLeaseResult]{
		direct: local,
		send: func(ctx context.Context, reqs []store.AcquireLeaseRequest) []store.AcquireLeaseResult {
			return m.store.AcquireLeases(ctx, reqs, &store.LeaseBatchParams{NoHistory: m.noHistory})
		},
		orphans: m.releaseOrphans,
		timeout: m.queryTimeout,
	}
	m.releases = &batcher[store.LeaseHolding, error]{
		direct: local,
		send: func(ctx context.Context, reqs []store.LeaseHolding) []error {
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
