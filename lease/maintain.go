package lease

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/seqlease/seqlease/store"
)

// maintenanceBatch is the most rows one maintenance statement touches.
const maintenanceBatch = 1000

// MaintenanceResult is what one maintenance pass did.
type MaintenanceResult struct {
	Expired        int   // expired holdings marked
	HistoryDeleted int64 // audit events deleted by the retention
}

// maintain runs the maintenance loop: a pass at once, then every
// CleanupInterval (±10%); errors back off.
func (m *Manager) maintain(ctx context.Context) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = time.Second
	bo.MaxElapsedTime = 0
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.retuned: // the settings changed: a pass now, then the new pace
		}
		every := m.conf().CleanupInterval
		bo.MaxInterval = max(every, time.Second) // the settings table may have changed it
		pause := every - every/10 + rand.N(every/5+1)
		res, err := m.maintainPass(ctx, !m.tuned.Load().noExpiry)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			pause = bo.NextBackOff()
			m.cfg.Logger.Warn("lease: maintenance failed", slog.Any("error", err), slog.Duration("pause", pause))
		default:
			bo.Reset()
			if res.Expired > 0 || res.HistoryDeleted > 0 {
				m.cfg.Logger.Debug("lease: maintenance", slog.Int("expired", res.Expired), slog.Int64("history_deleted", res.HistoryDeleted))
			}
		}
		t.Reset(pause)
	}
}

// Maintain runs one maintenance pass now: it marks every expired holding
// (recording them as expired and waking their waiters) and deletes the audit
// events older than Config.HistoryRetention, in bounded batches, each
// statement bounded by Config.QueryTimeout. The loop Start runs calls it
// every Config.CleanupInterval; it is idempotent, so every process may run
// it.
func (m *Manager) Maintain(ctx context.Context) (MaintenanceResult, error) {
	return m.maintainPass(ctx, true)
}

// maintainPass is Maintain; without expire (the setting lease.auto_expiry
// is false) it only trims the history.
func (m *Manager) maintainPass(ctx context.Context, expire bool) (MaintenanceResult, error) {
	var res MaintenanceResult
	for expire {
		qctx, cancel := m.queryContext(ctx)
		n, err := m.store.CleanupExpiredLeases(qctx, &store.CleanupLeasesParams{Limit: maintenanceBatch, NoHistory: m.conf().DisableHistory})
		cancel()
		if err != nil {
			return res, err
		}
		res.Expired += n
		if n < maintenanceBatch {
			break
		}
	}
	retention := m.conf().HistoryRetention
	if retention < 0 {
		return res, nil
	}
	qctx, cancel := m.queryContext(ctx)
	now, err := m.store.Now(qctx)
	cancel()
	if err != nil {
		return res, err
	}
	before := now.Add(-retention)
	for {
		qctx, cancel := m.queryContext(ctx)
		n, err := m.store.TrimLeaseHistory(qctx, before, maintenanceBatch)
		cancel()
		if err != nil {
			return res, err
		}
		res.HistoryDeleted += n
		if n < maintenanceBatch {
			return res, nil
		}
	}
}

// Run campaigns for name until ctx ends or the Manager stops: it holds the
// lease (Hold: a blocking acquire, then the keep-alive), runs fn with a
// context that ends the moment the lease is over, ctx ends or Stop is
// called, and releases the lease when fn returns. It then campaigns again,
// unless fn failed while the lease was still held: that error is returned.
// It returns ctx's error, or ErrStopped. This is leader election: fn runs in
// at most one process at a time per name, as long as it stops when its
// context ends (and fences what it writes: see Lease.Fence). Stop waits for
// fn to return before it releases the lease.
func (m *Manager) Run(ctx context.Context, name string, opts *AcquireOpts, fn func(ctx context.Context, l *Lease) error) error {
	if !m.gate.enter(&m.gate.runs) { // Stop waits for the runs before releasing what is left
		return ErrStopped
	}
	defer m.gate.runs.Done()
	for {
		l, err := m.Hold(ctx, name, opts)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, ErrStopped) || store.IsInvalid(err) {
				return err
			}
			if errors.Is(err, ErrHeld) && !errors.Is(err, ErrTimeout) { // blocking is off: a poll
				m.cfg.Logger.Debug("lease: campaign found the name held, retrying", slog.String("name", name), slog.Any("error", err))
			} else {
				m.cfg.Logger.Warn("lease: campaign failed, retrying", slog.String("name", name), slog.Any("error", err))
			}
			if perr := m.pauseCampaign(ctx); perr != nil {
				return perr
			}
			continue
		}
		ferr := m.runLeading(ctx, l, fn)
		lost := l.Err() != nil
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ReleaseTimeout)
		_ = l.Close(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case m.gate.stopping():
			return ErrStopped
		case ferr != nil && !lost:
			return ferr
		}
	}
}

// runLeading runs fn with a context that ends with the lease, with ctx, or
// with Stop.
func (m *Manager) runLeading(ctx context.Context, l *Lease, fn func(ctx context.Context, l *Lease) error) error {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopLease := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	defer stopLease()
	stopManager := context.AfterFunc(m.gate.ctx, func() { cancel(ErrStopped) })
	defer stopManager()
	return fn(fctx, l)
}

// pauseCampaign waits a poll interval between failed campaigns.
func (m *Manager) pauseCampaign(ctx context.Context) error {
	t := time.NewTimer(m.jitteredPoll())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.gate.done():
		return ErrStopped
	}
}
