package sequence

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Lease is a held number of a stream: the handle its holder commits, releases
// or extends. Its methods are safe for concurrent use.
type Lease struct {
	leaser      *Leaser
	stream      string
	number      int64
	token       store.Token
	operationID string
	kind        string
	leasedAt    time.Time

	mu            sync.Mutex
	expiresAt     time.Time // by the database clock
	localDeadline time.Time // the holder's conservative estimate, monotonic
}

// Stream returns the stream the number belongs to.
func (x *Lease) Stream() string { return x.stream }

// Number returns the leased sequence number.
func (x *Lease) Number() int64 { return x.number }

// Token returns the holder's secret. Whoever has it can commit or release the
// number, so pass it only to the process that does the work.
func (x *Lease) Token() store.Token { return x.token }

// OperationID returns the operation id given at lease time.
func (x *Lease) OperationID() string { return x.operationID }

// Kind returns the kind given at lease time.
func (x *Lease) Kind() string { return x.kind }

// LeasedAt returns when the database granted the lease, by its clock.
func (x *Lease) LeasedAt() time.Time { return x.leasedAt }

// ExpiresAt returns when the lease expires by the database clock, as of the
// last grant or Extend.
func (x *Lease) ExpiresAt() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.expiresAt
}

// Remaining returns how long the holder can count on the lease, by the local
// monotonic clock: never more than the database would allow. Zero once the
// lease may have expired.
func (x *Lease) Remaining() time.Duration {
	x.mu.Lock()
	deadline := x.localDeadline
	x.mu.Unlock()
	return max(deadline.Sub(x.leaser.now()), 0)
}

// IsExpired reports whether the lease may have expired (Remaining is zero).
// The database decides: a Commit may still fail with ErrExpired while
// IsExpired is false only if the holder's clock ran slow.
func (x *Lease) IsExpired() bool { return x.Remaining() == 0 }

// Commit resolves the number as committed with payload (nil for none). It
// fails with ErrExpired once the lease expired by the database clock,
// ErrReleased after Release, and ErrPayloadTooLarge above Config.MaxPayload;
// a failed Commit changes nothing. Calling it again after it succeeded (or
// after an error whose outcome is unknown, like a lost connection) reports
// success exactly when the number is committed with this token.
func (x *Lease) Commit(ctx context.Context, payload []byte) error {
	if len(payload) > x.leaser.maxPayload {
		return fmt.Errorf("sequence: commit %s/%d: %w: %d bytes, limit %d",
			x.stream, x.number, ErrPayloadTooLarge, len(payload), x.leaser.maxPayload)
	}
	_, err := x.leaser.store.Commit(ctx, x.stream, x.number, x.token, &store.CommitParams{Payload: payload})
	if err != nil {
		return fmt.Errorf("sequence: %s/%d: %w", x.stream, x.number, err)
	}
	return nil
}

// Release gives the number up: it becomes a gap with reason "released" and
// later numbers no longer wait for it. Releasing twice is not an error;
// releasing a committed number is (ErrCommitted).
func (x *Lease) Release(ctx context.Context) error {
	if err := x.leaser.store.Release(ctx, x.stream, x.number, x.token, nil); err != nil {
		return fmt.Errorf("sequence: %s/%d: %w", x.stream, x.number, err)
	}
	return nil
}

// Extend moves the expiry to the database's now plus ttl (zero means the
// Leaser's default TTL). It fails with ErrExpired once the lease expired: a
// lease cannot be revived.
func (x *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	ttl = cmp.Or(ttl, x.leaser.defaultTTL)
	if err := store.ValidateTTL(ttl, x.leaser.maxTTL); err != nil {
		return fmt.Errorf("sequence: extend %s/%d: %w", x.stream, x.number, err)
	}
	start := x.leaser.now()
	now, expiresAt, err := x.leaser.store.Extend(ctx, x.stream, x.number, x.token, &store.ExtendParams{TTL: ttl})
	if err != nil {
		return fmt.Errorf("sequence: %s/%d: %w", x.stream, x.number, err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expiresAt = expiresAt
	x.localDeadline = start.Add(expiresAt.Sub(now))
	return nil
}
