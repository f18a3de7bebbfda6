package seqleasetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// Store is what a Stack needs of a backend: what the Leaser, the Barrier and
// the cleanup Service need, and Stats. *memory.Store and *postgres.Store
// satisfy it.
type Store interface {
	sequence.Store
	barrier.Source
	cleanup.Store
	Stats(ctx context.Context, stream string) (store.StreamStats, error)
}

var _ Store = (*memory.Store)(nil)

// Config configures a Stack. A nil *Config means the defaults; so does the
// zero value of each field.
type Config struct {
	// Store is the backend. Default: a new memory store whose clock is
	// Clock.
	Store Store
	// Clock is the clock of the stack: the Leaser's (unless Leaser.Now is
	// set) and, when the stack makes its own memory store, that store's.
	// With a Store of your own, set Clock only if that store reads it too
	// (memory.Config{Now: clock.Now}). Default: NewClock(DefaultStart) when
	// Store is nil; none otherwise (the Leaser uses time.Now).
	Clock *Clock
	// Barrier configures the Barrier. Default: barrier.New's defaults.
	Barrier *barrier.Config
	// Leaser configures the Leaser; its Barrier is always the stack's.
	// Default: sequence.New's defaults, with Now set to Clock.Now.
	Leaser *sequence.Config
	// Cleanup configures the cleanup Service; its Barrier and
	// Cascade.Booster default to the stack's. Default: cleanup.New's
	// defaults.
	Cleanup *cleanup.Config
	// Recovery configures the cleanup Service's recovery pipeline, which
	// the stack builds on its store (recovery.New): the trackers of the
	// PartialWork and Retry steps, say. Leave it nil when Cleanup.Pipeline
	// is set. Default: recovery.New's defaults (the Gap step alone).
	Recovery *recovery.Config
}

// Stack is a ready seqlease stack: a store, a started Barrier, a Leaser that
// commits through it, and a cleanup Service that is not started (a test runs
// its cycles with RunCleanup, one at a time).
//
// Each method uses only the parts it needs: the Require helpers and Expire
// the Store, Drain the Store and the Barrier, RunCleanup the Cleanup
// Service. So a Stack literal over parts wired by your own code, such as
// &Stack{Store: st}, serves for the assertions too; Stop stops the parts
// that are set.
type Stack struct {
	Store   Store
	Clock   *Clock // nil unless Config.Clock was set or the stack made its memory store
	Barrier *barrier.Barrier
	Leaser  *sequence.Leaser
	Cleanup *cleanup.Service
}

// Setup returns a new Stack (New) and stops it when tb ends (tb.Cleanup). It
// fails tb when cfg is invalid.
func Setup(tb testing.TB, cfg *Config) *Stack {
	tb.Helper()
	s, err := New(cfg)
	if err != nil {
		tb.Fatalf("seqleasetest: %v", err)
		return nil
	}
	tb.Cleanup(s.Stop)
	return s
}

// New returns a new Stack with its Barrier started. The caller calls Stop;
// tests use Setup, which does it for them.
func New(cfg *Config) (*Stack, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	s := &Stack{Store: cfg.Store, Clock: cfg.Clock}
	if s.Store == nil {
		if s.Clock == nil {
			s.Clock = NewClock(DefaultStart)
		}
		s.Store = memory.New(&memory.Config{Now: s.Clock.Now})
	}
	var err error
	if s.Barrier, err = barrier.New(s.Store, cfg.Barrier); err != nil {
		return nil, err
	}
	// Background, not a caller's context: Stop ends the Barrier.
	if err = s.Barrier.Start(context.Background()); err != nil {
		return nil, err
	}
	lc := sequence.Config{}
	if cfg.Leaser != nil {
		lc = *cfg.Leaser
	}
	lc.Barrier = s.Barrier
	if lc.Now == nil && s.Clock != nil {
		lc.Now = s.Clock.Now
	}
	if s.Leaser, err = sequence.New(s.Store, &lc); err != nil {
		s.Barrier.Stop()
		return nil, err
	}
	cc := cleanup.Config{}
	if cfg.Cleanup != nil {
		cc = *cfg.Cleanup
	}
	if cc.Barrier == nil {
		cc.Barrier = s.Barrier
	}
	cascade := cleanup.CascadeConfig{}
	if cc.Cascade != nil {
		cascade = *cc.Cascade
	}
	if cascade.Booster == nil {
		cascade.Booster = s.Leaser
	}
	cc.Cascade = &cascade
	if cfg.Recovery != nil {
		if cc.Pipeline != nil {
			s.Barrier.Stop()
			return nil, fmt.Errorf("seqleasetest: Config.Recovery is set with Config.Cleanup.Pipeline: set one: %w", store.ErrInvalidArgument)
		}
		if cc.Pipeline, err = recovery.New(s.Store, cfg.Recovery); err != nil {
			s.Barrier.Stop()
			return nil, err
		}
	}
	if s.Cleanup, err = cleanup.New(s.Store, &cc); err != nil {
		s.Barrier.Stop()
		return nil, err
	}
	return s, nil
}

// Stop stops the cleanup Service (if the test started it) and the Barrier,
// and waits for their goroutines. It is safe twice.
func (s *Stack) Stop() {
	if s.Cleanup != nil {
		s.Cleanup.Stop()
	}
	if s.Barrier != nil {
		s.Barrier.Stop()
	}
}

// RunCleanup runs exactly one full cleanup cycle now, in the caller's
// goroutine, and returns what it did (cleanup.Service.RunOnce): every
// expired lease it can lead is resolved, recovered through the configured
// trackers or made a gap. Expire leases first with Clock.Advance (memory)
// or Expire (any backend).
func (s *Stack) RunCleanup(ctx context.Context) (cleanup.CycleResult, error) {
	return s.Cleanup.RunOnce(ctx)
}

// Expire makes the lease of l expire now by the store's clock, on any
// backend, without waiting for its TTL: it moves the entry's expiry to the
// store's current time, as a renewal would (its Renewals count grows by
// one). A commit of l then fails with sequence.ErrExpired and the next
// cleanup cycle resolves the number. On the memory backend of a Stack,
// Clock.Advance does the same for every lease at once. Expiring a lease that
// has already expired (or was made a gap for it) is not an error; one that
// its holder resolved is (sequence.ErrCommitted, sequence.ErrReleased).
func (s *Stack) Expire(ctx context.Context, l *sequence.Lease) error {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return fmt.Errorf("seqleasetest: expire %s/%d: %w", l.Stream(), l.Number(), err)
	}
	// Renew as if at now-1µs for 1µs: the new expiry is now, and a lease
	// is expired at its expiry. Pinning the time is how the store lets
	// tests hit deadlines exactly.
	at := now.Add(-time.Microsecond)
	_, _, err = s.Store.Extend(ctx, l.Stream(), l.Number(), l.Token(), &store.ExtendParams{TTL: time.Microsecond, Now: &at})
	if err != nil && !errors.Is(err, store.ErrExpired) {
		return fmt.Errorf("seqleasetest: expire %s/%d: %w", l.Stream(), l.Number(), err)
	}
	return nil
}
