package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/seqlease/seqlease/store"
)

// keepAlive is the running renewal loop of one lease: the runner.
type keepAlive struct {
	cancel   context.CancelFunc
	done     chan struct{}
	renewNow chan struct{}     // capacity 1: renew now (a notice said the name was freed)
	retime   chan struct{}     // capacity 1: the TTL changed (RenewWith): reschedule the next renewal
	requests chan renewRequest // TryRenewNow: renew once now and answer
}

// renewRequest is a TryRenewNow for the loop: renew once, within the
// caller's ctx, and answer on reply (capacity 1).
type renewRequest struct {
	ctx   context.Context
	reply chan error
}

// KeepAlive starts renewing the lease in the background, which makes it a
// runner: renewals at the lease's renew share of the TTL plus a random
// jitter (up to its MaxJitter, at most a tenth of the TTL), on the
// monotonic clock: AcquireOpts.RenewShare and MaxJitter, by default the
// Config's. The TTL is the last one asked for (see RenewWith).
// A renewal that fails for a transient reason is retried with exponential
// backoff until the local deadline, the pauses cut to the time left so
// that a last attempt starts a round trip before it (twice the lease's last
// successful round trip, at least 1 ms, at most a tenth of the TTL); if
// none succeeds by then, the lease ends with ErrLost, before the backend
// could hand the name to anyone else. So a backend that answers again by
// then keeps the lease: one that is away from a renewal on may stay away
// for (1 - share) of the TTL less the jitter, the safety margin and that
// round trip (10-11 s with the defaults and a TTL of 30 s). A
// refusal ends it at once (ErrLost when another holding took the name,
// ErrExpired, ErrForceReleased); reaching MaxRenewals ends it with
// ErrMaxRenewals and releases it. Release and Close stop the loop. Calling
// KeepAlive again while it runs does nothing; on a lease that is over it
// returns why.
func (l *Lease) KeepAlive() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause != nil {
		return l.cause
	}
	if l.keepAlive != nil {
		return nil
	}
	// No loop starts once Stop began: Stop waits for the loops, and ends
	// those it does not stop by releasing their leases (loopCtx).
	ctx, cancel := context.WithCancel(l.m.gate.loopCtx)
	k := &keepAlive{cancel: cancel, done: make(chan struct{}), renewNow: make(chan struct{}, 1), retime: make(chan struct{}, 1), requests: make(chan renewRequest)}
	l.keepAlive = k
	started := l.m.gate.goWork(func() {
		defer close(k.done)
		defer cancel() // frees ctx from loopCtx when the loop ends on its own
		l.renewLoop(ctx, k)
	})
	if !started {
		l.keepAlive = nil
		cancel()
		return ErrStopped
	}
	return nil
}

// stopKeepAlive stops the renewal loop, if one runs, and waits for it.
func (l *Lease) stopKeepAlive() {
	l.mu.Lock()
	k := l.keepAlive
	l.mu.Unlock()
	if k == nil {
		return
	}
	k.cancel()
	<-k.done
}

// dropKeepAlive stops the keep-alive, if one runs, and leaves the lease as
// if none had run (without one, it ends at its local deadline with
// ErrExpired): AcquireAll keeps the leases it took renewed only while it
// waits for the others.
func (l *Lease) dropKeepAlive() {
	l.stopKeepAlive()
	l.mu.Lock()
	l.keepAlive = nil
	l.mu.Unlock()
}

// reschedule makes the loop recompute its pause before the next renewal,
// without renewing: the lease's TTL changed.
func (k *keepAlive) reschedule() {
	select {
	case k.retime <- struct{}{}:
	default:
	}
}

// renewNow makes a running keep-alive renew now.
func (l *Lease) renewNow() {
	l.mu.Lock()
	k := l.keepAlive
	l.mu.Unlock()
	if k != nil {
		select {
		case k.renewNow <- struct{}{}:
		default:
		}
	}
}

// TryRenewNow renews the lease once, now, and returns the outcome: through
// the keep-alive, which then counts its next renewal from this one, or
// directly (Renew) when none runs. Either way the renewal is bounded by ctx,
// by the lease's local deadline and by its end (see Renew): on a lease that
// is over, or that ends meanwhile, it returns why at once.
func (l *Lease) TryRenewNow(ctx context.Context) error {
	l.mu.Lock()
	k := l.keepAlive
	l.mu.Unlock()
	if k == nil {
		return l.Renew(ctx)
	}
	over := func() error { return fmt.Errorf("lease: renew %s: %w", store.QuoteInput(l.name), l.Err()) }
	req := renewRequest{ctx: ctx, reply: make(chan error, 1)}
	select {
	case k.requests <- req:
		select {
		case err := <-req.reply:
			return err
		case <-l.over:
			return over()
		case <-k.done:
			select {
			case err := <-req.reply: // answered, then ended
				return err
			default:
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	case <-l.over:
		return over()
	case <-k.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	// The keep-alive stopped without renewing (AcquireAll dropped it, or a
	// Release stops it, and the lease ends meanwhile): renew directly.
	return l.Renew(ctx)
}

// nextRenewal returns the pause before the next renewal: RenewShare of the
// TTL plus jitter, cut so that half of what the TTL leaves beyond its share
// remains for retries before the local deadline.
func (l *Lease) nextRenewal() time.Duration {
	l.mu.Lock()
	ttl := l.ttl
	l.mu.Unlock()
	share := time.Duration(float64(ttl) * l.cadence.share)
	jitter := min(l.cadence.jitter, ttl/10)
	pause := share
	if jitter > 0 {
		pause += rand.N(jitter + 1)
	}
	return min(pause, max(l.Remaining()-(ttl-share)/2, 0))
}

func (l *Lease) renewLoop(ctx context.Context, k *keepAlive) {
	defer func() {
		if ctx.Err() != nil {
			return // stopped by Release or Close, which release
		}
		// Given up (maximum renewals, or renewals failing until the local
		// deadline, whichever noticed first): release, best effort.
		if cause := l.Err(); errors.Is(cause, ErrMaxRenewals) || (errors.Is(cause, ErrLost) && !errors.Is(cause, ErrNotHolder)) {
			l.releaseAfterEnd()
		}
	}()
	timer := time.NewTimer(l.nextRenewal())
	defer timer.Stop()
	for {
		var req renewRequest
		select {
		case <-ctx.Done():
			return
		case <-l.over:
			return
		case <-k.renewNow:
		case req = <-k.requests:
		case <-timer.C:
		case <-k.retime:
			timer.Stop()
			timer.Reset(l.nextRenewal())
			continue
		}
		var err error
		if req.reply != nil {
			err = l.renewOnce(ctx, req.ctx)
			if ctx.Err() == nil { // else stopped: TryRenewNow sees k.done and goes on alone
				req.reply <- err
			}
		} else {
			err = l.renewRetrying(ctx)
		}
		if ctx.Err() != nil {
			return // stopped by Release or Close
		}
		if errors.Is(err, ErrMaxRenewals) {
			l.end(fmt.Errorf("%w: %s reached its maximum of %d renewals", ErrMaxRenewals, store.QuoteInput(l.name), l.maxRenewals))
		}
		if l.Err() == nil && l.Remaining() <= 0 {
			// The renewals ran out of time at the local deadline, just
			// before its timer fired: end the lease now rather than renew
			// again with no pause until the timer does.
			l.onDeadline()
		}
		if l.Err() != nil {
			return
		}
		timer.Stop()
		timer.Reset(l.nextRenewal())
	}
}

// renewOnce renews the lease once for TryRenewNow, bounded by the loop's
// context and the caller's (and, as every Renew, by the local deadline): a
// backend call that hangs cannot hold the loop (nor Stop) past the lease's
// end.
func (l *Lease) renewOnce(ctx, caller context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(caller, cancel)()
	return l.Renew(rctx)
}

// renewRetrying renews the lease, retrying failures with exponential
// backoff until the local deadline (or until the loop is stopped, even
// while a renewal of the holder's has the turn). A pause never runs past
// the last chance: a round trip's allowance (lastTry) before the deadline,
// when one more attempt is made; a backend that answers again by then
// keeps the lease.
func (l *Lease) renewRetrying(ctx context.Context) error {
	left := l.Remaining()
	if left <= 0 {
		return l.Err()
	}
	rctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	l.mu.Lock()
	ttl := l.ttl
	l.mu.Unlock()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = max(min(50*time.Millisecond, ttl/20), time.Millisecond)
	bo.MaxInterval = max(ttl/10, bo.InitialInterval)
	bo.MaxElapsedTime = 0
	bo.Reset()
	for {
		err := l.Renew(rctx)
		switch {
		case err == nil:
			return nil
		case l.Err() != nil, errors.Is(err, ErrMaxRenewals), rctx.Err() != nil:
			return err
		}
		left := l.Remaining()
		pause := bo.NextBackOff()
		if last := left - l.lastTry(); pause > last {
			pause = last
			if last <= 0 { // that was the last chance: the deadline ends the lease
				pause = left
				l.m.cfg.Logger.Warn("lease: renewal failed, no time left for another before the local deadline",
					slog.String("name", l.name), slog.Any("error", err), slog.Duration("left", left))
			}
		}
		if pause < left {
			l.m.cfg.Logger.Warn("lease: renewal failed, retrying", slog.String("name", l.name), slog.Any("error", err), slog.Duration("pause", pause))
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-rctx.Done():
			t.Stop()
			return err
		}
	}
}

// lastTry returns how long before the local deadline the keep-alive makes
// its last renewal attempt: twice the lease's last round trip (its last
// successful grant or renewal), at least 1 ms, at most a tenth of the TTL.
func (l *Lease) lastTry() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return min(max(2*l.rtt, time.Millisecond), l.ttl/10)
}

// releaseAfterEnd releases, best effort, a holding whose lease is over but
// that the backend may still hold, so others need not wait for its expiry:
// one the keep-alive gave up (maximum renewals, or renewals failing), or
// one whose renewal had an unknown outcome or landed after the end
// (settleLocked). The release is fenced by the holding's token, so it never
// ends a later holding of the name, and bounded by Config.ReleaseTimeout.
// It does nothing if the holding was released already or its release runs.
func (l *Lease) releaseAfterEnd() {
	l.mu.Lock()
	if l.cleaning || l.releasedDB {
		l.mu.Unlock()
		return
	}
	l.cleaning = true
	l.mu.Unlock()
	l.release()
}

// release is releaseAfterEnd once l.cleaning is set.
func (l *Lease) release() {
	if l.m.testHooks.cleanup != nil {
		l.m.testHooks.cleanup(l.name, l.fence)
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.m.cfg.ReleaseTimeout)
	defer cancel()
	err := l.m.calls.release(ctx, store.LeaseHolding{Name: l.name, Owner: l.owner, Fence: l.fence})
	ok := err == nil || errors.Is(err, ErrReleased)
	if !ok {
		l.m.cfg.Logger.Warn("lease: release of a lease that ended failed; it will expire", slog.String("name", l.name), slog.Any("error", err))
	}
	l.mu.Lock()
	l.cleaning = false
	l.releasedDB = l.releasedDB || ok
	l.unsure = false // released, or given up: it expires
	l.settleLocked()
	l.mu.Unlock()
	if ok {
		l.m.queues.wakeHead(l.name)
	}
}
