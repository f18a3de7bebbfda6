package lease

import (
	"context"
	"log/slog"

	"github.com/seqlease/seqlease/internal/batch"
	"github.com/seqlease/seqlease/store"
)

// Coalescing. The concurrent acquire attempts of a Manager share backend
// calls (store.AcquireLeases), and so do its concurrent releases
// (store.ReleaseLeases), through the library's batching engine
// (internal/batch): on PostgreSQL, one statement and one commit for every
// call that queued while the previous one was in flight, rather than one
// each. Acquires and releases share one wave, since a Manager's callers
// alternate between them; a backend that decides an acquire batch before
// it is durable (store.EarlyAcquirer) lets the next batch go meanwhile
// (two out at most). On a backend that answers in process
// (store.InProcess) every call goes alone.
//
// Each item's outcome is the one the single call would have had: the
// backend decides the items independently, and bad input never reaches a
// batch (the Manager checks it first). A call shared with others runs under
// the leader's context without its cancellation, bounded by
// Config.QueryTimeout, and, so that its leader can return with its context
// like the others, from a goroutine of the batcher that Stop waits for. An
// acquire whose caller gave up while it was in flight is released when the
// backend call returns.

// maxBatch is the most calls one backend call carries.
const maxBatch = 100

// newBatchers sets up the coalescing of m's acquires and releases.
func (m *Manager) newBatchers() {
	ip, local := m.store.(store.InProcess)
	local = local && ip.InProcess()
	early, _ := m.store.(store.EarlyAcquirer)
	m.wave = batch.NewWave()
	m.acquires = batch.New(batch.Config[store.AcquireLeaseRequest, store.AcquireLeaseResult]{
		Send: func(ctx context.Context, reqs []store.AcquireLeaseRequest, decided func()) []store.AcquireLeaseResult {
			p := &store.LeaseBatchParams{NoHistory: m.noHistory}
			if early != nil {
				return early.AcquireLeasesEarly(ctx, reqs, p, decided)
			}
			return m.store.AcquireLeases(ctx, reqs, p)
		},
		Orphans:     m.releaseOrphans,
		MaxBatch:    maxBatch,
		MaxInFlight: 2, // one being decided, one whose commit is being made durable
		Timeout:     m.queryTimeout,
		Direct:      local,
		Wave:        m.wave,
		Async:       true,
	})
	m.releases = batch.New(batch.Config[store.LeaseHolding, error]{
		Send: func(ctx context.Context, reqs []store.LeaseHolding, _ func()) []error {
			return m.store.ReleaseLeases(ctx, reqs, &store.LeaseBatchParams{NoHistory: m.noHistory})
		},
		MaxBatch: maxBatch,
		Timeout:  m.queryTimeout,
		Direct:   local,
		Wave:     m.wave,
		Async:    true,
	})
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
		m.queues.wakeHead(hs[i].Name)
	}
}

// acquireLease acquires through the coalescing.
func (m *Manager) acquireLease(ctx context.Context, req store.AcquireLeaseRequest) (store.NamedLease, error) {
	r, err := m.acquires.Do(ctx, req)
	if err != nil {
		return store.NamedLease{}, err
	}
	return r.Lease, r.Err
}

// releaseLease releases through the coalescing.
func (m *Manager) releaseLease(ctx context.Context, h store.LeaseHolding) error {
	res, err := m.releases.Do(ctx, h)
	if err != nil {
		return err
	}
	return res
}
