package lease

import (
	"context"
	"log/slog"

	"github.com/seqlease/seqlease/internal/batch"
	"github.com/seqlease/seqlease/store"
)

// maxBatch is the most calls one backend call carries.
const maxBatch = 100

// coalescer makes the concurrent acquires of a Manager share backend calls,
// and its concurrent releases too (see "Coalescing" in doc.go). Acquires
// and releases share one wave, since a Manager's callers alternate between
// them.
type coalescer struct {
	store    Store
	acquires *batch.Batcher[store.AcquireLeaseRequest, store.AcquireLeaseResult]
	releases *batch.Batcher[store.LeaseHolding, error]
	wave     *batch.Wave
}

// newCoalescer returns the coalescer of m's calls to s; the grants of
// acquires whose callers gave up are released, and their names' heads
// woken.
func newCoalescer(m *Manager) *coalescer {
	ip, local := m.store.(store.InProcess)
	local = local && ip.InProcess()
	early, _ := m.store.(store.EarlyAcquirer)
	c := &coalescer{store: m.store, wave: batch.NewWave()}
	c.acquires = batch.New(batch.Config[store.AcquireLeaseRequest, store.AcquireLeaseResult]{
		Send: func(ctx context.Context, reqs []store.AcquireLeaseRequest, decided func()) []store.AcquireLeaseResult {
			p := &store.LeaseBatchParams{NoHistory: m.conf().DisableHistory}
			if early != nil {
				return early.AcquireLeasesEarly(ctx, reqs, p, decided)
			}
			return c.store.AcquireLeases(ctx, reqs, p)
		},
		Orphans:     m.releaseOrphans,
		MaxBatch:    maxBatch,
		MaxInFlight: 2, // one being decided, one whose commit is being made durable
		Timeout:     m.cfg.QueryTimeout,
		Direct:      local,
		Wave:        c.wave,
		Async:       true,
	})
	c.releases = batch.New(batch.Config[store.LeaseHolding, error]{
		Send: func(ctx context.Context, reqs []store.LeaseHolding, _ func()) []error {
			return c.store.ReleaseLeases(ctx, reqs, &store.LeaseBatchParams{NoHistory: m.conf().DisableHistory})
		},
		MaxBatch: maxBatch,
		Timeout:  m.cfg.QueryTimeout,
		Direct:   local,
		Wave:     c.wave,
		Async:    true,
	})
	return c
}

// acquire acquires through the coalescing. unsure reports a failure that
// may have come after the backend granted the name (outcomeUnknown). A
// caller that gave up while its call was out gets its context's error, not
// unsure: a grant made for it goes to releaseOrphans.
func (c *coalescer) acquire(ctx context.Context, req store.AcquireLeaseRequest) (g store.NamedLease, unsure bool, err error) {
	r, err := c.acquires.Do(ctx, req)
	if err != nil {
		return store.NamedLease{}, false, err
	}
	return r.Lease, outcomeUnknown(r.Err), r.Err
}

// release releases through the coalescing.
func (c *coalescer) release(ctx context.Context, h store.LeaseHolding) error {
	res, err := c.releases.Do(ctx, h)
	if err != nil {
		return err
	}
	return res
}

// close waits for the backend calls in flight (Stop).
func (c *coalescer) close() {
	c.acquires.Close()
	c.releases.Close()
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
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ReleaseTimeout)
	defer cancel()
	for i, err := range m.store.ReleaseLeases(rctx, hs, &store.LeaseBatchParams{NoHistory: m.conf().DisableHistory}) {
		if err != nil {
			m.cfg.Logger.Warn("lease: release of an abandoned acquire failed; it will expire", slog.String("name", hs[i].Name), slog.Any("error", err))
		}
		m.queues.wakeHead(hs[i].Name)
	}
}
