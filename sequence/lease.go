package sequence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Lease is a held number of a stream: the handle its holder commits, releases
// or extends. Its methods are safe for concurrent use.
//
// Like an etcd Session, a Lease can tell its holder when it is over: Done and
// Context end the moment the lease is committed, released, or can no longer
// be proven held (its local deadline passed, or the keep-alive could not
// renew it in time), and Err says which.
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
	timer         *time.Timer
	ctx           context.Context
	cancelCtx     context.CancelCauseFunc
	keepAlive     *keepAlive
	renewErr      error // the keep-alive's last failed renewal, if any

	committing atomic.Bool   // an ungrouped Commit of this handle runs (commitAlone)
	sum        atomic.Uint64 // payloadSum of the payload this handle committed
	waitIndex  int32         // its place among its stream's deadlines while it waits; guarded by their mu

	// ended holds why the lease is over, nil while it is held; it is set
	// once, under mu, before lost closes. lost is made on first use (most
	// leases never need it).
	ended    atomic.Pointer[endCause]
	lost     chan struct{}
	lostOnce sync.Once
}

// endCause is why a lease is over.
type endCause struct{ err error }

// The causes of a lease its holder resolved, made once.
var (
	endCommitted = &endCause{ErrCommitted}
	endReleased  = &endCause{ErrReleased}
)

// causeOf returns the endCause of err, without allocating for the common
// ones.
func causeOf(err error) *endCause {
	switch err {
	case ErrCommitted:
		return endCommitted
	case ErrReleased:
		return endReleased
	}
	return &endCause{err}
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
// monotonic clock: the time to its local deadline, which is the moment of the
// lease request plus the TTL the database granted, minus Config.Margin, so
// never more than the database would allow. Zero once the lease may have
// expired.
func (x *Lease) Remaining() time.Duration {
	x.mu.Lock()
	deadline := x.localDeadline
	x.mu.Unlock()
	return max(x.leaser.until(deadline), 0)
}

// IsExpired reports whether the lease may have expired (Remaining is zero).
// The database decides: a Commit may still fail with ErrExpired while
// IsExpired is false only if the holder's clock ran slow.
func (x *Lease) IsExpired() bool { return x.Remaining() == 0 }

// Done returns a channel that is closed when the lease is over: committed,
// released, past its local deadline, or lost by its keep-alive.
func (x *Lease) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.armLocked()
	return x.lostLocked()
}

// lostLocked returns the channel that closes when the lease is over, made
// on first use. x.mu must be held.
func (x *Lease) lostLocked() chan struct{} {
	if x.lost == nil {
		x.lost = make(chan struct{})
		if x.ended.Load() != nil {
			close(x.lost)
		}
	}
	return x.lost
}

// Context returns a context that is cancelled, with Err as its cause, when
// the lease is over. Do the lease's work under it, so that work stops when
// the lease can no longer be proven held.
func (x *Lease) Context() context.Context {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.armLocked()
	if x.ctx == nil {
		x.ctx, x.cancelCtx = context.WithCancelCause(context.Background())
		if c := x.ended.Load(); c != nil {
			x.cancelCtx(c.err)
		}
	}
	return x.ctx
}

// Err returns nil while the lease is held, and afterwards why it is over:
// ErrCommitted, ErrReleased, ErrExpired (the local deadline passed) or ErrLost
// (the keep-alive failed to renew in time; its last error is wrapped).
func (x *Lease) Err() error {
	if err := x.over(); err != nil {
		return err
	}
	if x.Remaining() > 0 {
		return nil
	}
	// The deadline passed, and no timer may be armed to notice (Done and
	// Context arm it): end the lease now, so Err, Done and Context agree.
	x.mu.Lock()
	cause := x.expiredCauseLocked()
	x.mu.Unlock()
	x.end(cause)
	return x.over()
}

// over returns why the lease is over, nil while it is held. It takes no
// lock.
func (x *Lease) over() error {
	if c := x.ended.Load(); c != nil {
		return c.err
	}
	return nil
}

// armLocked starts the timer that ends the lease at its local deadline.
// x.mu must be held.
func (x *Lease) armLocked() {
	if x.timer == nil {
		x.timer = time.AfterFunc(x.localDeadline.Sub(x.leaser.now()), x.deadlinePassed)
	}
}

// deadlinePassed runs when the timer fires; an Extend may have moved the
// deadline meanwhile.
func (x *Lease) deadlinePassed() {
	x.mu.Lock()
	if left := x.localDeadline.Sub(x.leaser.now()); left > 0 {
		x.timer.Reset(left)
		x.mu.Unlock()
		return
	}
	cause := x.expiredCauseLocked()
	x.mu.Unlock()
	x.end(cause)
}

// endIfPast ends the lease if its local deadline passed (an Extend may
// have moved it meanwhile): its stream's deadlines found it past while it
// waited.
func (x *Lease) endIfPast() {
	x.mu.Lock()
	if x.localDeadline.After(x.leaser.now()) {
		x.mu.Unlock()
		return
	}
	cause := x.expiredCauseLocked()
	x.mu.Unlock()
	x.end(cause)
}

// expiredCauseLocked is why a lease whose local deadline passed is over:
// ErrLost with the last renewal error while a keep-alive was trying to renew
// it, else ErrExpired. x.mu must be held.
func (x *Lease) expiredCauseLocked() error {
	if x.keepAlive != nil {
		if x.renewErr != nil {
			return fmt.Errorf("%w: not renewed before the local deadline: %w", ErrLost, x.renewErr)
		}
		return fmt.Errorf("%w: not renewed before the local deadline", ErrLost)
	}
	return ErrExpired
}

// end closes Done and cancels Context with cause, once. Both happen under
// x.mu after the cause is set, so whoever sees either end finds Err, Done and
// the context's cause in agreement.
func (x *Lease) end(cause error) {
	x.lostOnce.Do(func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.ended.Store(causeOf(cause))
		if x.timer != nil {
			x.timer.Stop()
		}
		if x.cancelCtx != nil {
			x.cancelCtx(cause)
		}
		if x.lost != nil {
			close(x.lost)
		}
	})
}

// finish ends the lease after its holder resolved it, and stops its
// keep-alive.
func (x *Lease) finish(cause error) {
	x.end(cause)
	x.stopKeepAlive()
}

// Commit waits until every earlier number of the stream is resolved, then
// commits this number with payload (nil for none): the side effects of
// commits happen in sequence order (I4) while the work before them runs in
// parallel. Concurrent commits of consecutive numbers in this process are
// grouped into one transaction (Config.MaxGroup).
//
// It fails, changing nothing, with ErrExpired if the lease expires (by the
// database clock, or by the holder's conservative local estimate while it
// waits), ErrReleased after Release, ErrPayloadTooLarge above
// Config.MaxPayload, ErrCommitInProgress while another Commit of the same
// handle runs, and the context's error if ctx ends while it waits.
// Calling it again with the same payload after it succeeded, or after an
// error whose outcome is unknown (a lost connection), reports success
// exactly when the number is committed with this lease's token (I7), also
// once the lease is over by the local estimate: then the database is asked,
// and it decides. Calling it again with another payload once the number is
// committed fails with ErrPayloadMismatch and changes nothing: the entry
// keeps the payload it was committed with.
func (x *Lease) Commit(ctx context.Context, payload []byte) error {
	if err := x.checkPayload(payload); err != nil {
		return err
	}
	return x.commitOrdered(ctx, payload, nil)
}

// CommitTx is Commit with a function that runs inside the committing
// transaction, after the number's conditional write and before the
// transaction commits, so the caller's own writes and the commit are atomic
// and happen in sequence order. On PostgreSQL T is pgx.Tx:
//
//	err := sequence.CommitTx(ctx, lease, nil, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "UPDATE read_model SET ...")
//		return err
//	})
//
// If fn fails, nothing of this commit persists and CommitTx returns fn's
// error; other commits grouped into the same transaction are not affected.
// fn's context carries ctx's values, but since the transaction may be shared
// with other commits (group commit), it is not cancelled when ctx ends: it
// ends after Config.WriteTimeout. fn runs at most once per successful commit;
// a retry of a commit that already took effect does not run it again.
// A backend that runs no functions of type T in its transactions (it is no
// store.TxCommitter[T], as the memory backend is none) fails it with
// store.ErrUnsupported, changing nothing.
func CommitTx[T any](ctx context.Context, x *Lease, payload []byte, fn func(context.Context, T) error) error {
	if err := x.checkPayload(payload); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("sequence: commit %s/%d: %w: nil function", x.stream, x.number, ErrInvalidArgument)
	}
	if _, ok := x.leaser.store.(store.TxCommitter[T]); !ok {
		return fmt.Errorf("sequence: commit %s/%d: %w: the store runs no functions of %T in its transactions (store.TxCommitter)",
			x.stream, x.number, store.ErrUnsupported, *new(T))
	}
	withValues := txFuncOf[T](func(txCtx context.Context, tx T) error {
		return fn(valuesOf{Context: txCtx, values: ctx}, tx)
	})
	return x.commitOrdered(ctx, payload, withValues)
}

// valuesOf is a context whose deadline and cancellation are Context's and
// whose values are those of values.
type valuesOf struct {
	context.Context
	values context.Context
}

func (c valuesOf) Value(key any) any { return c.values.Value(key) }

// Complete commits this number without waiting for earlier ones, for
// pipelines that need ordered reading but not ordered side effects (an outbox
// whose dispatcher reads in order). Otherwise it behaves like Commit.
func (x *Lease) Complete(ctx context.Context, payload []byte) error {
	if err := x.checkPayload(payload); err != nil {
		return err
	}
	if done, err := x.resolvedLocally(payload); done {
		return err // a repeat: same outcome, nothing written, nothing counted
	}
	l := x.leaser
	ctx, end := l.observer.StartCommit(ctx, x.stream, x.kind, x.number, false)
	var err error
	if l.commits != nil { // with the commits of other streams (group commit)
		l.arrive()
		r := l.sendGroup(ctx, &group{items: []*commitItem{{lease: x, payload: payload}}})
		if err = r.err; err == nil {
			err = r.res[0].Err
		}
	} else {
		err = l.commitPlain(ctx, x, payload, false)
	}
	end(err)
	if err != nil {
		return fmt.Errorf("sequence: %s/%d: %w", x.stream, x.number, err)
	}
	x.committed(payload)
	return nil
}

func (x *Lease) checkPayload(payload []byte) error {
	if len(payload) > x.leaser.maxPayload {
		return fmt.Errorf("sequence: commit %s/%d: %w: %d bytes, limit %d",
			x.stream, x.number, ErrPayloadTooLarge, len(payload), x.leaser.maxPayload)
	}
	return nil
}

// resolved records that this process resolved the number.
func (x *Lease) resolved(cause error) {
	// A store across the network reports resolutions later (NOTIFY): tell
	// the barrier now, so the local waiters behind this number go on. A
	// local store has already told it, before the call returned.
	// In an application's transaction (InTx), nothing is committed yet:
	// the store notices it once the transaction commits.
	if x.leaser.barrier != nil && !x.leaser.inProcess && !x.leaser.inTx {
		x.leaser.barrier.Resolved(x.stream, x.number)
	}
	x.finish(cause)
}

// Release gives the number up: it becomes a gap with reason "released" and
// later numbers no longer wait for it. Releasing twice is not an error;
// releasing a committed number is (ErrCommitted).
func (x *Lease) Release(ctx context.Context) error {
	if errors.Is(x.over(), ErrReleased) {
		return nil // released by this handle already: nothing to write or count
	}
	err := x.leaser.store.Release(ctx, x.stream, x.number, x.token, nil)
	x.leaser.observer.Released(ctx, x.stream, x.kind, err)
	if err != nil {
		return fmt.Errorf("sequence: %s/%d: %w", x.stream, x.number, err)
	}
	x.resolved(ErrReleased)
	return nil
}

// Extend moves the expiry to the database's now plus ttl (zero means the
// Leaser's default TTL). It fails with ErrExpired once the lease expired,
// by the database clock or by the holder's local estimate (Err): a lease
// that is over cannot be revived.
func (x *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	ttl = cmp.Or(ttl, x.leaser.DefaultTTL())
	if err := store.ValidateTTL(ttl, x.leaser.maxTTL); err != nil {
		return fmt.Errorf("sequence: extend %s/%d: %w", x.stream, x.number, err)
	}
	// A handle that is over stays over: its holder was told to stop (Done,
	// Context), so it is not renewed behind that back, even if the
	// database, whose expiry comes a margin later, would still allow it.
	if err := x.Err(); err != nil {
		x.leaser.observer.Extended(ctx, x.stream, x.kind, err)
		return fmt.Errorf("sequence: extend %s/%d: %w", x.stream, x.number, err)
	}
	start := x.leaser.now()
	now, expiresAt, err := x.leaser.store.Extend(ctx, x.stream, x.number, x.token, &store.ExtendParams{TTL: ttl})
	x.leaser.observer.Extended(ctx, x.stream, x.kind, err)
	if err != nil {
		return fmt.Errorf("sequence: %s/%d: %w", x.stream, x.number, err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expiresAt = expiresAt
	x.localDeadline = x.leaser.localDeadline(start, now, expiresAt)
	return nil
}
