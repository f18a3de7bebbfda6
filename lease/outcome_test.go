package lease_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
)

// stallStore makes the outcome of a renewal unknown to its caller, on
// purpose: while stalled, it runs the renewal in the backend whatever the
// caller's context does (the statement commits), then holds the answer
// until the caller stopped waiting (its context ended) and answers with
// answer, as when a holder's local deadline passes while its renewal
// commits. Without apply, the renewal never reaches the backend. With a
// gate, releases wait for it to close.
type stallStore struct {
	lease.Store
	stall   atomic.Bool
	apply   bool
	answer  func(applied store.NamedLease, ctxErr error) (store.NamedLease, error)
	applied chan store.NamedLease // capacity 1: the renewal the backend applied
	waiting chan struct{}         // capacity 1: a stalled renewal waits for its caller to give up
	calls   atomic.Int64          // renewals that reached the store

	gate      chan struct{} // nil: releases go through at once
	releasing chan struct{} // capacity 1: a release waits at the gate
}

func newStallStore(s lease.Store, apply bool, answer func(store.NamedLease, error) (store.NamedLease, error)) *stallStore {
	return &stallStore{Store: s, apply: apply, answer: answer, applied: make(chan store.NamedLease, 1), waiting: make(chan struct{}, 1)}
}

// answerLost is a renewal whose answer never came: the caller sees its
// context's error.
func answerLost(_ store.NamedLease, ctxErr error) (store.NamedLease, error) {
	return store.NamedLease{}, ctxErr
}

// answerNotSent is a renewal the store never sent: its context ended while
// it waited for a connection.
func answerNotSent(_ store.NamedLease, ctxErr error) (store.NamedLease, error) {
	return store.NamedLease{}, fmt.Errorf("renew lease: %w", store.NotSent(ctxErr))
}

// answerLate is a renewal whose success came after the caller stopped
// waiting.
func answerLate(applied store.NamedLease, _ error) (store.NamedLease, error) { return applied, nil }

func (s *stallStore) RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error) {
	s.calls.Add(1)
	if !s.stall.Load() {
		return s.Store.RenewLease(ctx, name, owner, fence, p)
	}
	var applied store.NamedLease
	if s.apply {
		var err error
		applied, err = s.Store.RenewLease(context.WithoutCancel(ctx), name, owner, fence, p)
		if err != nil {
			return store.NamedLease{}, err
		}
		s.applied <- applied
	}
	s.waiting <- struct{}{}
	<-ctx.Done()
	return s.answer(applied, ctx.Err())
}

func (s *stallStore) ReleaseLeases(ctx context.Context, reqs []store.LeaseHolding, p *store.LeaseBatchParams) []error {
	if s.gate != nil {
		select {
		case s.releasing <- struct{}{}:
		default:
		}
		<-s.gate
	}
	return s.Store.ReleaseLeases(ctx, reqs, p)
}

// stalledRenewal acquires name on m (whose clock skew moves), renews it
// through s while stalled, and once the backend applied the renewal makes
// the lease's local deadline pass while the answer is still out. It
// returns the renewal the backend applied and Renew's error.
func stalledRenewal(t *testing.T, m *lease.Manager, s *stallStore, skew *atomic.Int64, name string) (*lease.Lease, store.NamedLease, error) {
	t.Helper()
	ctx := t.Context()
	l, err := m.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute})
	require.NoError(t, err)
	s.stall.Store(true)
	renewed := make(chan error, 1)
	go func() { renewed <- l.Renew(ctx) }()
	wait(t, s.waiting, "the renewal waits for its answer")
	var applied store.NamedLease
	if s.apply {
		applied = <-s.applied
		require.Equal(t, l.Fence(), applied.Fence)
	}
	require.NoError(t, l.Err(), "held while its renewal is out")
	skew.Store(int64(time.Minute)) // the local deadline passes, the answer still out
	lease.FireDeadline(l)
	err = within(t, "Renew returns", func() error { return <-renewed })
	require.ErrorIs(t, l.Err(), lease.ErrExpired)
	return l, applied, err
}

// skewedClock returns a clock that runs skew ahead of the time.
func skewedClock(skew *atomic.Int64) func() time.Time {
	return func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
}

// TestARenewalWithAnUnknownOutcomeIsReleased: the holder's local deadline
// passes while its renewal, applied by the backend, is still out (its
// answer is lost, or comes late). Renew says the lease is over (and, when
// the answer was lost, that the outcome is unknown); the library releases
// the holding with its token, so another process gets the name long before
// the renewed expiry, and Stop waits for that release.
func TestARenewalWithAnUnknownOutcomeIsReleased(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, c := range []struct {
			name string
			lost bool // the answer is lost (else it comes late)
			stop bool // Stop right after Renew, then take the name at once
		}{
			{"answer lost, freed in the background", true, false},
			{"answer lost, freed by Stop", true, true},
			{"answer late, freed in the background", false, false},
			{"answer late, freed by Stop", false, true},
		} {
			t.Run(c.name, func(t *testing.T) { // not parallel: b.open is not
				ctx := t.Context()
				name := "job/" + c.name
				var skew atomic.Int64
				answer := answerLate
				if c.lost {
					answer = answerLost
				}
				s := newStallStore(b.open(t), true, answer)
				m := newManager(t, s, &lease.Config{Owner: "holder", Now: skewedClock(&skew)})
				other := newListeningManager(t, b.open(t), &lease.Config{Owner: "other"})

				l, applied, err := stalledRenewal(t, m, s, &skew, name)
				require.ErrorIs(t, err, lease.ErrExpired, "the lease is over for its holder")
				if c.lost {
					require.ErrorIs(t, err, lease.ErrOutcomeUnknown)
				} else {
					require.NotErrorIs(t, err, lease.ErrOutcomeUnknown, "the answer came: the renewal was applied")
				}

				var next *lease.Lease
				if c.stop {
					m.Stop()
					next, err = other.TryAcquire(ctx, name, nil)
					require.NoError(t, err, "Stop released the renewed holding")
				} else {
					next, err = acquireWithin(t, "the name is freed", func() (*lease.Lease, error) {
						return other.Acquire(ctx, name, nil) // woken by the release
					})
					require.NoError(t, err)
				}
				require.Equal(t, l.Fence()+1, next.Fence())
				require.True(t, next.AcquiredAt().Before(applied.ExpiresAt),
					"taken over at %v, before the renewed expiry %v", next.AcquiredAt(), applied.ExpiresAt)
				events, err := other.History(ctx, name, 0, 10)
				require.NoError(t, err)
				require.Equal(t, store.LeaseReleased, events[2].Kind, "acquired, renewed, released: %v", events)
			})
		}
	})
}

// TestARenewalThatCertainlyFailedReleasesNothing: when the renewal
// certainly did not run (the backend refused it, or it was not sent
// because its context had ended, before the call or inside the store),
// the lease that ends at its local deadline is not released: its holding
// expires as it would have, and even Stop leaves it alone.
func TestARenewalThatCertainlyFailedReleasesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, c := range []struct {
			name, why string
			answer    func(store.NamedLease, error) (store.NamedLease, error)
		}{
			{"refused", "the backend refused it", func(store.NamedLease, error) (store.NamedLease, error) {
				return store.NamedLease{}, fmt.Errorf("renew lease: %w: 1 of 1", store.ErrMaxRenewals)
			}},
			{"not sent by the store", "the store says it was not sent", answerNotSent},
		} {
			t.Run(c.name, func(t *testing.T) { // not parallel: b.open is not
				var skew atomic.Int64
				s := newStallStore(b.open(t), false, c.answer)
				m := newManager(t, s, &lease.Config{Owner: "holder", Now: skewedClock(&skew)})
				l, _, err := stalledRenewal(t, m, s, &skew, "job/"+c.name)
				require.ErrorIs(t, err, lease.ErrExpired)
				require.NotErrorIs(t, err, lease.ErrOutcomeUnknown, c.why)
				requireKept(t, m, b.open(t), l)
			})
		}
		t.Run("not sent by the store, the lease still held", func(t *testing.T) {
			ctx := t.Context()
			var skew atomic.Int64
			s := newStallStore(b.open(t), false, answerNotSent)
			m := newManager(t, s, &lease.Config{Owner: "holder", Now: skewedClock(&skew)})
			other := b.open(t)
			l, err := m.TryAcquire(ctx, "job/held-not-sent", &lease.AcquireOpts{TTL: time.Minute})
			require.NoError(t, err)
			s.stall.Store(true)
			short, cancel := context.WithCancel(ctx)
			renewed := make(chan error, 1)
			go func() { renewed <- l.Renew(short) }()
			wait(t, s.waiting, "the renewal waits for a connection")
			cancel() // it gives up waiting: nothing was sent
			err = within(t, "Renew returns", func() error { return <-renewed })
			require.ErrorIs(t, err, store.ErrNotSent)
			require.NotErrorIs(t, err, lease.ErrOutcomeUnknown, "the store says it was not sent")
			require.NoError(t, l.Err(), "held until its local deadline, as before the call")
			skew.Store(int64(time.Minute))
			lease.FireDeadline(l)
			require.ErrorIs(t, l.Err(), lease.ErrExpired)
			requireKept(t, m, other, l)
		})
		t.Run("not sent", func(t *testing.T) {
			ctx := t.Context()
			var skew atomic.Int64
			s := newStallStore(b.open(t), false, answerLost)
			m := newManager(t, s, &lease.Config{Owner: "holder", Now: skewedClock(&skew)})
			other := b.open(t)
			l, err := m.TryAcquire(ctx, "job/not-sent", &lease.AcquireOpts{TTL: time.Minute})
			require.NoError(t, err)
			ended, cancel := context.WithCancel(ctx)
			cancel()
			err = l.Renew(ended)
			require.ErrorIs(t, err, context.Canceled)
			require.NotErrorIs(t, err, lease.ErrOutcomeUnknown, "nothing was sent")
			require.Zero(t, s.calls.Load(), "nothing was sent")
			require.NoError(t, l.Err(), "held until its local deadline")
			skew.Store(int64(time.Minute))
			lease.FireDeadline(l)
			require.ErrorIs(t, l.Err(), lease.ErrExpired)
			requireKept(t, m, other, l)
		})
	})
}

// requireKept stops m, which waits for every release it started, and
// checks through other that l's holding was not released.
func requireKept(t *testing.T, m *lease.Manager, other lease.Store, l *lease.Lease) {
	t.Helper()
	m.Stop()
	info, err := other.GetLease(t.Context(), l.Name(), nil)
	require.NoError(t, err)
	require.Equal(t, l.Fence(), info.Fence)
	require.True(t, info.EndedAt.IsZero(), "not released: %+v", info)
}

// TestTheReleaseAfterAnUnknownOutcomeSparesALaterHolding: the release of
// a holding whose renewal had an unknown outcome is fenced by its token.
// Held up until another Manager of the same owner took the name over (after
// a force-release), it leaves that later holding alone.
func TestTheReleaseAfterAnUnknownOutcomeSparesALaterHolding(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		var skew atomic.Int64
		s := newStallStore(b.open(t), true, answerLost)
		s.gate, s.releasing = make(chan struct{}), make(chan struct{}, 1)
		m := newManager(t, s, &lease.Config{Owner: "svc", Now: skewedClock(&skew), ReleaseTimeout: time.Minute})
		other := newManager(t, b.open(t), &lease.Config{Owner: "svc"})

		l, _, err := stalledRenewal(t, m, s, &skew, "job")
		require.ErrorIs(t, err, lease.ErrOutcomeUnknown)
		wait(t, s.releasing, "the release after the unknown outcome waits at the gate")
		_, err = other.ForceRelease(ctx, "svc", nil)
		require.NoError(t, err)
		next, err := other.TryAcquire(ctx, "job", &lease.AcquireOpts{TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, l.Fence()+1, next.Fence())

		close(s.gate)
		m.Stop() // waits for the release
		require.NoError(t, next.Check(ctx), "the later holding is still held")
		require.NoError(t, next.Err())
		info, err := other.Get(ctx, "job")
		require.NoError(t, err)
		require.Equal(t, next.Fence(), info.Fence)
		require.True(t, info.EndedAt.IsZero(), "not released: %+v", info)
	})
}

// TestALeaseWithARenewalOfUnknownOutcomeIsReleasedAtItsDeadline: the
// holder gives up on a renewal (its context ends) after the backend
// applied it. Renew says the outcome is unknown and the lease stays held
// until its local deadline; when it ends there, the library releases the
// holding, so another process gets the name before the renewed expiry.
func TestALeaseWithARenewalOfUnknownOutcomeIsReleasedAtItsDeadline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		var skew atomic.Int64
		s := newStallStore(b.open(t), true, answerLost)
		m := newManager(t, s, &lease.Config{Owner: "holder", Now: skewedClock(&skew)})
		other := newListeningManager(t, b.open(t), &lease.Config{Owner: "other"})
		l, err := m.TryAcquire(ctx, "job", &lease.AcquireOpts{TTL: time.Minute})
		require.NoError(t, err)
		s.stall.Store(true)
		rctx, giveUp := context.WithCancel(ctx)
		renewed := make(chan error, 1)
		go func() { renewed <- l.Renew(rctx) }()
		wait(t, s.waiting, "the renewal waits for its answer")
		applied := <-s.applied
		giveUp()
		err = within(t, "Renew returns", func() error { return <-renewed })
		require.ErrorIs(t, err, lease.ErrOutcomeUnknown)
		require.ErrorIs(t, err, context.Canceled)
		require.NoError(t, l.Err(), "held until its local deadline")

		skew.Store(int64(time.Minute))
		lease.FireDeadline(l)
		require.ErrorIs(t, l.Err(), lease.ErrExpired)
		next, err := acquireWithin(t, "the name is freed", func() (*lease.Lease, error) {
			return other.Acquire(ctx, "job", nil)
		})
		require.NoError(t, err)
		require.Equal(t, l.Fence()+1, next.Fence())
		require.True(t, next.AcquiredAt().Before(applied.ExpiresAt),
			"taken over at %v, before the renewed expiry %v", next.AcquiredAt(), applied.ExpiresAt)
	})
}
