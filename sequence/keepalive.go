package sequence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/seqlease/seqlease/store"
)

// ErrLost is the cause of a lease that its keep-alive could not renew before
// the local deadline.
var ErrLost = errors.New("sequence: lease lost")

// Defaults of KeepAliveOpts.
const (
	DefaultRenewShare = 0.6
	DefaultMaxJitter  = time.Second
)

// KeepAliveOpts configure KeepAlive. A nil *KeepAliveOpts means the defaults;
// so does the zero value of each field.
type KeepAliveOpts struct {
	// TTL is the duration each renewal asks for. Default: the lease's
	// original duration.
	TTL time.Duration
	// RenewShare is the share of the TTL after which the lease is renewed.
	// Default: DefaultRenewShare (0.6).
	RenewShare float64
	// MaxJitter bounds the random delay added to each renewal, so many
	// holders do not renew in step; at most a tenth of the TTL. Default: the
	// smaller of DefaultMaxJitter (1 s) and a tenth of the TTL.
	MaxJitter time.Duration
}

// keepAlive is the running renewal loop of one lease.
type keepAlive struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// KeepAlive starts renewing the lease in the background: at RenewShare of the
// TTL plus jitter, on the monotonic clock, with transient errors retried
// (exponential backoff) until the local deadline (Remaining; it includes
// Config.Margin). If the lease cannot be proven held by then, Done closes and
// Err is ErrLost wrapping the last renewal error; if the database refuses a
// renewal, Err says why (ErrExpired, ...). The loop stops when the
// lease is committed or released, or on StopKeepAlive. Calling KeepAlive
// again while it runs does nothing; after StopKeepAlive it starts anew.
func (x *Lease) KeepAlive(opts *KeepAliveOpts) error {
	if x.leaser.inTx {
		return fmt.Errorf("sequence: keep-alive %s/%d: %w: a lease in an application's transaction (InTx) cannot be renewed in the background; Extend it", x.stream, x.number, store.ErrUnsupported)
	}
	if opts == nil {
		opts = &KeepAliveOpts{}
	}
	ttl := cmp.Or(opts.TTL, x.leasedTTL())
	if err := store.ValidateTTL(ttl, x.leaser.maxTTL); err != nil {
		return fmt.Errorf("sequence: keep-alive %s/%d: %w", x.stream, x.number, err)
	}
	share := cmp.Or(opts.RenewShare, DefaultRenewShare)
	if !(share > 0 && share < 1) { // also NaN
		return fmt.Errorf("sequence: keep-alive %s/%d: %w: RenewShare %v must be in (0, 1)", x.stream, x.number, ErrInvalidArgument, share)
	}
	if opts.MaxJitter < 0 || opts.MaxJitter > ttl/10 {
		return fmt.Errorf("sequence: keep-alive %s/%d: %w: MaxJitter %v must be in [0, TTL/10]", x.stream, x.number, ErrInvalidArgument, opts.MaxJitter)
	}
	jitter := cmp.Or(opts.MaxJitter, min(DefaultMaxJitter, ttl/10))

	if err := x.Err(); err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.keepAlive != nil || x.over() != nil {
		return x.over()
	}
	x.armLocked()
	ctx, cancel := context.WithCancel(context.Background())
	k := &keepAlive{cancel: cancel, done: make(chan struct{})}
	x.keepAlive = k
	go func() {
		defer close(k.done)
		x.renewLoop(ctx, ttl, share, jitter)
	}()
	return nil
}

// StopKeepAlive stops the renewal loop, if one runs, and waits for it. The
// lease stays held until its current expiry.
func (x *Lease) StopKeepAlive() { x.stopKeepAlive() }

func (x *Lease) stopKeepAlive() {
	x.mu.Lock()
	k := x.keepAlive
	x.mu.Unlock()
	if k == nil {
		return
	}
	k.cancel()
	<-k.done
	x.mu.Lock()
	if x.keepAlive == k {
		x.keepAlive = nil
	}
	x.mu.Unlock()
}

func (x *Lease) leasedTTL() time.Duration {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.expiresAt.Sub(x.leasedAt)
}

func (x *Lease) renewLoop(ctx context.Context, ttl time.Duration, share float64, jitter time.Duration) {
	wait := time.NewTimer(0)
	defer wait.Stop()
	lost := x.Done()
	for {
		pause := time.Duration(float64(ttl)*share) + rand.N(jitter+1)
		pause = min(pause, x.Remaining())
		wait.Reset(pause)
		select {
		case <-ctx.Done():
			return
		case <-lost:
			return
		case <-wait.C:
		}
		if err := x.renew(ctx, ttl); err != nil {
			if ctx.Err() == nil {
				x.end(err)
			}
			return
		}
	}
}

// renew extends the lease, retrying transient errors until the local
// deadline.
func (x *Lease) renew(ctx context.Context, ttl time.Duration) error {
	left := x.Remaining()
	if left <= 0 {
		return fmt.Errorf("%w: no time left to renew", ErrLost)
	}
	rctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = min(50*time.Millisecond, ttl/20)
	bo.MaxElapsedTime = 0
	var last error
	err := backoff.Retry(func() error {
		last = x.Extend(rctx, ttl)
		if last == nil || store.IsInvalid(last) || isFinal(last) {
			return backoff.Permanent(last)
		}
		x.mu.Lock()
		x.renewErr = last
		x.mu.Unlock()
		return last
	}, backoff.WithContext(bo, rctx))
	switch {
	case err == nil:
		return nil
	case isFinal(err):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("%w: last renewal: %w", ErrLost, last)
}

// isFinal reports an error after which the lease can never be renewed.
func isFinal(err error) bool {
	for _, target := range []error{ErrExpired, ErrReleased, ErrCommitted, ErrGap, ErrTokenMismatch, ErrNotFound} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
