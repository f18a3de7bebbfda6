package sequence

import (
	"context"
	"slices"
	"sync"

	"github.com/seqlease/seqlease/store"
)

// leaseQueue coalesces concurrent lease calls on one stream: the first caller
// becomes the leader and sends one statement for every call queued by then;
// when it is done it hands the lead to the next queued call, so no caller
// serves others for longer than one round trip. The stream's counter row is
// touched once per batch, not once per lease.
type leaseQueue struct {
	mu      sync.Mutex
	waiting []*leaseCall
	busy    bool // a leader is running
}

type leaseCall struct {
	reqs    []store.LeaseRequest
	lead    chan struct{} // closed when this call is handed the lead
	done    chan struct{} // closed when entries/err are set
	entries []store.Entry
	err     error
	// abandoned is set (under the queue's lock) by a caller whose context
	// ended while its call was in flight: the leader releases its entries.
	abandoned bool
}

// isClosed reports whether ch is closed; ch is only ever closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (l *Leaser) leaseQueue(stream string) *leaseQueue {
	if v, ok := l.leaseQueues.Load(stream); ok {
		return v.(*leaseQueue)
	}
	v, _ := l.leaseQueues.LoadOrStore(stream, &leaseQueue{})
	return v.(*leaseQueue)
}

func (q *leaseQueue) lease(ctx context.Context, l *Leaser, stream string, reqs []store.LeaseRequest) ([]store.Entry, error) {
	call := &leaseCall{reqs: reqs, lead: make(chan struct{}), done: make(chan struct{})}
	q.mu.Lock()
	q.waiting = append(q.waiting, call)
	if !q.busy {
		q.busy = true
		close(call.lead)
	}
	q.mu.Unlock()

	select {
	case <-call.lead:
		q.runBatch(ctx, l, stream)
	case <-call.done:
	case <-ctx.Done():
		q.mu.Lock()
		if isClosed(call.done) {
			// The batch completed before we looked: its leader did not
			// know we gave up, so the entries are ours to take.
			q.mu.Unlock()
			return call.entries, call.err
		}
		led := isClosed(call.lead)
		if i := slices.Index(q.waiting, call); i >= 0 && !led {
			q.waiting = slices.Delete(q.waiting, i, i+1)
			q.mu.Unlock()
			return nil, ctx.Err()
		}
		// In flight in another caller's batch, whose leader releases what
		// it leases for us; or just handed the lead.
		call.abandoned = true
		q.mu.Unlock()
		if led {
			q.runBatch(ctx, l, stream) // the lead must be taken, or the queue stalls
		}
		return nil, ctx.Err()
	}
	<-call.done
	return call.entries, call.err
}

// runBatch sends one statement for the queued calls (the leader's first),
// completes them, and hands the lead on.
func (q *leaseQueue) runBatch(ctx context.Context, l *Leaser, stream string) {
	q.mu.Lock()
	var batch []*leaseCall
	var reqs []store.LeaseRequest
	for len(q.waiting) > 0 {
		c := q.waiting[0]
		if len(batch) > 0 && len(reqs)+len(c.reqs) > l.maxLeaseBatch {
			break
		}
		q.waiting = q.waiting[1:]
		batch = append(batch, c)
		reqs = append(reqs, c.reqs...)
	}
	q.mu.Unlock()

	sctx, cancel := l.sharedContext(ctx)
	entries, err := l.store.Lease(sctx, stream, reqs, &store.LeaseParams{Owner: l.owner})
	cancel()

	q.mu.Lock()
	var orphans []store.Entry
	for _, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.entries, entries = entries[:len(c.reqs):len(c.reqs)], entries[len(c.reqs):]
			if c.abandoned {
				orphans = append(orphans, c.entries...)
			}
		}
		close(c.done)
	}
	if len(q.waiting) > 0 {
		close(q.waiting[0].lead)
	} else {
		q.busy = false
	}
	q.mu.Unlock()

	// Numbers leased for callers that gave up: release them now rather than
	// have the barrier wait for their expiry.
	for _, e := range orphans {
		rctx, cancel := l.sharedContext(ctx)
		if err := l.store.Release(rctx, stream, e.Number, e.Token, nil); err == nil && l.barrier != nil {
			l.barrier.Resolved(stream, e.Number)
		}
		cancel()
	}
}
