package sequence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/store"
)

// The application's own transaction. A Leaser from InTx runs every call
// in one transaction the application owns, through a store bound to it
// (on PostgreSQL, postgres.Store.InTx): the application's rows and the
// stream's entries commit or roll back together, and a rollback leaves no
// hole. Such a transaction is one connection, used by one goroutine at a
// time, so its calls go alone (no coalescing, no group commit), and what
// it resolves is not committed when a call returns: the Leaser tells the
// barrier nothing, and the store notices the resolutions once the
// transaction commits. An ordered commit asks the store first, since the
// transaction sees its own earlier resolutions, which no barrier knows of
// before the commit; refused (earlier numbers unresolved), it waits for
// the barrier's turn or a pause, whichever comes first (the numbers it
// waits for may have been resolved by this very transaction, or be held
// by it, which only the store can tell), and asks again, until the lease's
// local deadline.

const (
	// txRetryMin and txRetryMax bound the pause between two tries of an
	// ordered commit in a transaction whose turn the barrier cannot tell.
	txRetryMin = time.Millisecond
	txRetryMax = 100 * time.Millisecond
)

// InTx returns a Leaser over s, a store bound to one transaction the
// application owns (on PostgreSQL, postgres.Store.InTx(tx)), with l's
// configuration, barrier and observer. Lease, LeaseN, Append, and the
// handles' Commit, CommitTx, Complete, Release and Extend run in that
// transaction; what they write commits or rolls back with it. KeepAlive
// fails with store.ErrUnsupported: a renewal in the background cannot
// share the transaction.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "INSERT INTO orders ..."); err != nil {
//			return err
//		}
//		_, err := leaser.InTx(pgStore.InTx(tx)).Append(ctx, "orders", nil, event)
//		return err
//	})
//
// The returned Leaser is cheap (make one per transaction) and, like the
// transaction, for one goroutine at a time. Its calls go alone, without
// batching. An ordered Commit first asks the store, which sees the
// transaction's own earlier resolutions; refused because earlier numbers
// are unresolved, it waits at the barrier (or a short pause, for numbers
// this transaction itself resolved or holds) and tries again, until the
// lease's local deadline (then ErrExpired). Mind that a number this
// transaction holds below the one it commits blocks that commit until the
// deadline, and that the transaction holds the stream's counter row from
// its first Lease or Append until it ends, which every other lease of the
// stream waits for, and so does the cleanup loop's move of expired work
// (it takes the next number from that row): an ordered Commit of a
// number leased in this transaction, behind another holder's expired
// number that cleanup moves, waits until the lease's deadline (ErrExpired)
// while the move waits for the transaction. Lease last, keep the
// transaction short, and prefer Append or Complete there, or CommitTx
// outside (docs/transactions.md). It needs PostgreSQL's default READ
// COMMITTED isolation: a snapshot taken once (REPEATABLE READ) never sees
// the earlier numbers resolve.
func (l *Leaser) InTx(s Store) *Leaser {
	root := l
	if l.parent != nil {
		root = l.parent
	}
	if s == nil {
		s = nilStore{}
	}
	return &Leaser{
		store:         s,
		barrier:       l.barrier,
		defaultTTL:    l.defaultTTL,
		policy:        l.policy,
		maxTTL:        l.maxTTL,
		maxPayload:    l.maxPayload,
		owner:         l.owner,
		maxGroup:      1,
		maxLeaseBatch: 1,
		writeTimeout:  l.writeTimeout,
		margin:        l.margin,
		now:           l.now,
		sysClock:      l.sysClock,
		observer:      l.observer,
		observed:      l.observed,
		leaseParams:   l.leaseParams,
		parent:        root,
		inTx:          true,
	}
}

// commitInTx is the ordered commit of a lease of a Leaser in a
// transaction (see InTx): ask the store, and while it refuses because
// earlier numbers are unresolved, wait for the barrier's turn or a pause
// and ask again.
func (x *Lease) commitInTx(ctx context.Context, payload []byte, fn txFunc) error {
	l := x.leaser
	if !x.committing.CompareAndSwap(false, true) {
		return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, ErrCommitInProgress)
	}
	defer x.committing.Store(false)
	start := l.now()
	pause := txRetryMin
	for {
		err := l.commitOne(ctx, &commitItem{lease: x, payload: payload, fn: fn, ordered: true})
		switch {
		case err == nil:
			if l.observed {
				l.observer.CommitReady(ctx, x.stream, x.kind, l.now().Sub(start))
			}
			x.committed(payload)
			return nil
		case !errors.Is(err, store.ErrNotReady):
			return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, err)
		}
		if err := x.awaitRetry(ctx, &pause); err != nil {
			if errors.Is(err, errOver) {
				return x.commitOver(ctx, payload, fn)
			}
			return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, err)
		}
	}
}

// awaitRetry waits until the barrier says the turn of x came (unless it
// said so already: then the store knows better) or the pause passes
// (which then doubles, up to txRetryMax); errOver if the lease ends
// locally first, ctx's error if ctx ends.
func (x *Lease) awaitRetry(ctx context.Context, pause *time.Duration) error {
	ready, withdraw, err := x.leaser.barrier.Ready(ctx, x.stream, x.number)
	if err != nil {
		return err
	}
	defer withdraw()
	select {
	case <-ready:
		ready = nil // the barrier is no help: wait for the pause alone
	default:
	}
	t := time.NewTimer(*pause)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
		*pause = min(2**pause, txRetryMax)
	case <-x.Done():
		return errOver
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// errNilStore is what every call of InTx(nil)'s Leaser fails with.
var errNilStore = fmt.Errorf("sequence: %w: nil Store", ErrInvalidArgument)

// nilStore is the store of InTx(nil).
type nilStore struct{}

func (nilStore) Lease(context.Context, string, []store.LeaseRequest, *store.LeaseParams) ([]store.Entry, error) {
	return nil, errNilStore
}

func (nilStore) Commit(context.Context, string, int64, store.Token, *store.CommitParams) (time.Time, error) {
	return time.Time{}, errNilStore
}

func (nilStore) Release(context.Context, string, int64, store.Token, *store.ReleaseParams) error {
	return errNilStore
}

func (nilStore) Extend(context.Context, string, int64, store.Token, *store.ExtendParams) (time.Time, time.Time, error) {
	return time.Time{}, time.Time{}, errNilStore
}

// AppendOpts are the options of Append. A nil *AppendOpts means the
// defaults.
type AppendOpts struct {
	// OperationID is recorded on every appended entry. Optional.
	OperationID string
	// Kind is recorded on every appended entry (e.g. the event type).
	// Optional.
	Kind string
}

// Append appends payloads to stream as entries born committed, and
// returns their numbers: consecutive, in the payloads' order. It is the
// outbox write: one round trip (on PostgreSQL one statement) takes the
// numbers and commits them, with no lease to hold and nothing to
// recover. It is not an ordered commit: numbers below may still be
// leased by others, and readers read up to the watermark only.
//
// An empty payload is valid. The library treats nil and []byte{} as the
// same payload; read back, a nil payload is nil and a []byte{} is empty
// but not nil, so test a payload with len, not against nil.
//
// Within an application's transaction (InTx), the entries commit or roll
// back with the application's rows. On the Leaser itself, each call goes
// alone: to append many entries, pass them in one call (up to
// store.MaxBatch). It fails, appending nothing, with ErrPayloadTooLarge
// for a payload above Config.MaxPayload, ErrInvalidCount for no payloads
// or too many, other input errors matching ErrInvalidArgument, and
// store.ErrUnsupported on a store that is no store.Appender. The
// Observer is not told of appends (no lease, no commit of a held number).
func (l *Leaser) Append(ctx context.Context, stream string, opts *AppendOpts, payloads ...[]byte) ([]int64, error) {
	ap, ok := l.store.(store.Appender)
	if !ok {
		return nil, fmt.Errorf("sequence: append: %w: the store is no store.Appender", store.ErrUnsupported)
	}
	if opts == nil {
		opts = &AppendOpts{}
	}
	reqs := make([]store.AppendRequest, len(payloads))
	for i, p := range payloads {
		if len(p) > l.maxPayload {
			return nil, fmt.Errorf("sequence: append %s: %w: payload %d is %d bytes, limit %d", store.QuoteInput(stream), ErrPayloadTooLarge, i, len(p), l.maxPayload)
		}
		reqs[i] = store.AppendRequest{OperationID: opts.OperationID, Kind: opts.Kind, Payload: p}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sequence: append: %w", err)
	}
	es, err := ap.Append(ctx, stream, reqs, &store.AppendParams{Owner: l.owner})
	if err != nil {
		return nil, fmt.Errorf("sequence: %w", err)
	}
	numbers := make([]int64, len(es))
	for i, e := range es {
		numbers[i] = e.Number
		// As Lease.resolved: a store across the network reports later.
		if l.barrier != nil && !l.inProcess && !l.inTx {
			l.barrier.Resolved(stream, e.Number)
		}
	}
	return numbers, nil
}
