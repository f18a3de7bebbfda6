package cleanup_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/configtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// cycleDeadline bounds the cycle FuzzNewConfig runs with an accepted
// config: it resolves three expired leases on the memory backend, which
// takes microseconds, plus, in cascade mode, a Cascade.Delay after each
// Cascade.Batch of them; a cycle still running after this long is stuck
// unless those pauses take that long.
const cycleDeadline = 10 * time.Second

// FuzzNewConfig builds Services from fuzzed configs. New must never panic;
// it fails with an error naming a guilty field (with that field at its
// default the config passes or another field is blamed), or returns a
// Service whose documented ranges hold and that works on the memory
// backend: one cycle resolves three expired leases (one recorded result
// moves to a new number through the Retry step, the others become gaps),
// runs the hook of each, and the Service starts and stops.
func FuzzNewConfig(f *testing.F) {
	type seed struct {
		interval                             int64
		minRate                              float64
		window, attempts                     int
		leaseTTL                             int64
		batch, scan, threshold, cascadeBatch int
		cascadeDelay                         int64
		factor                               float64
		hookTimeout                          int64
		hookConcurrency, hookQueue           int
		hookGrace, maxBackoff, queryTimeout  int64
		owner                                string
		moveTxTimeout                        int64
		durable                              bool
	}
	const maxInt64 = 1<<63 - 1
	for _, s := range []seed{
		{},
		{interval: int64(time.Second), minRate: 0.5, window: 10, attempts: 3, leaseTTL: int64(time.Second), batch: 1, scan: 1,
			threshold: 1, cascadeBatch: 1, cascadeDelay: int64(time.Millisecond), factor: 2, hookTimeout: int64(time.Second),
			hookConcurrency: 1, hookQueue: 1, hookGrace: int64(time.Second), maxBackoff: int64(time.Second),
			queryTimeout: int64(time.Second), owner: "o"},
		{interval: -1}, {interval: int64(cleanup.MaxInterval) + 1}, {interval: maxInt64}, {minRate: -0.1},
		{minRate: 1.5}, {minRate: math.NaN()}, {minRate: 1}, {window: -1}, {attempts: -1}, {leaseTTL: -1},
		{leaseTTL: int64(lease.DefaultMaxTTL) + 1}, {batch: -1}, {batch: store.MaxListLimit + 1}, {scan: -1},
		{threshold: -1}, {cascadeBatch: -1}, {cascadeBatch: store.MaxBatch + 1}, {cascadeDelay: -1},
		{factor: 0.5}, {factor: math.Inf(1)}, {factor: math.NaN()}, {factor: cleanup.MaxCascadeTTLFactor + 1},
		{hookTimeout: -1}, {hookConcurrency: -1}, {hookQueue: -1}, {hookGrace: -1}, {maxBackoff: -1},
		{queryTimeout: -1}, {owner: "nul\x00"}, {owner: string(make([]byte, store.MaxTextLen+1))},
		{threshold: 1, cascadeBatch: 1, cascadeDelay: int64(time.Microsecond)}, {scan: 1, batch: 1},
		{hookTimeout: maxInt64, hookConcurrency: math.MaxInt, hookQueue: math.MaxInt, hookGrace: maxInt64,
			maxBackoff: int64(cleanup.MaxInterval), queryTimeout: maxInt64, scan: math.MaxInt, attempts: math.MaxInt, threshold: math.MaxInt},
		{maxBackoff: int64(cleanup.MaxInterval) + 1}, {maxBackoff: maxInt64}, {moveTxTimeout: -1},
		{moveTxTimeout: int64(cleanup.MaxInterval)}, {moveTxTimeout: int64(cleanup.MaxInterval) + 1},
		// A durable hook's claim, Hooks.Timeout plus QueryTimeout, must fit
		// in store.MaxHookClaim.
		{durable: true}, {durable: true, hookTimeout: int64(store.MaxHookClaim - cleanup.DefaultQueryTimeout)},
		{durable: true, hookTimeout: int64(store.MaxHookClaim-cleanup.DefaultQueryTimeout) + 1},
		{durable: true, queryTimeout: int64(store.MaxHookClaim - cleanup.DefaultHookTimeout)},
		{durable: true, queryTimeout: int64(store.MaxHookClaim-cleanup.DefaultHookTimeout) + 1},
		{durable: true, hookTimeout: maxInt64, queryTimeout: maxInt64},
		{durable: true, hookTimeout: int64(time.Hour), queryTimeout: int64(store.MaxHookClaim)},
		{durable: true, maxBackoff: int64(cleanup.MaxInterval), hookTimeout: int64(time.Millisecond)},
	} {
		f.Add(s.interval, s.minRate, s.window, s.attempts, s.leaseTTL, s.batch, s.scan, s.threshold, s.cascadeBatch,
			s.cascadeDelay, s.factor, s.hookTimeout, s.hookConcurrency, s.hookQueue, s.hookGrace, s.maxBackoff,
			s.queryTimeout, s.owner, s.moveTxTimeout, s.durable)
	}
	f.Fuzz(func(t *testing.T, interval int64, minRate float64, window, attempts int, leaseTTL int64,
		batch, scan, threshold, cascadeBatch int, cascadeDelay int64, factor float64, hookTimeout int64,
		hookConcurrency, hookQueue int, hookGrace, maxBackoff, queryTimeout int64, owner string, moveTxTimeout int64, durable bool) {
		t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		var clock atomic.Int64 // the store's clock, as an offset from t0
		s := memory.New(&memory.Config{Now: func() time.Time { return t0.Add(time.Duration(clock.Load())) }})
		var hooks, durableRuns atomic.Int32
		// The recovery pipeline's part of the config is recovery.New's to
		// check.
		rcfg := recovery.Config{
			MinStepSuccessRate: minRate, StepRateWindow: window, MaxAttempts: attempts, Owner: owner,
			// The operation "op-2" completed: the Retry step moves its
			// result to a new number.
			OperationTracker: recovery.OperationTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
				return []byte("result"), e.OperationID == "op-2", nil
			}),
		}
		pipeline, err := recovery.New(s, &rcfg)
		if err != nil {
			configtest.RequireBlame(t, err, &rcfg, func() error { _, err := recovery.New(s, &rcfg); return err })
			return
		}
		if !(rcfg.MinStepSuccessRate >= 0 && rcfg.MinStepSuccessRate <= 1) || // NaN is not in 0..1
			rcfg.StepRateWindow < 0 || rcfg.StepRateWindow > recovery.MaxRateWindow || rcfg.MaxAttempts < 0 {
			t.Fatalf("recovery.New accepted %+v", rcfg)
		}
		cfg := cleanup.Config{
			Interval: time.Duration(interval), Pipeline: pipeline, LeaseTTL: time.Duration(leaseTTL), BatchSize: batch,
			ScanLimit: scan, MaxBackoff: time.Duration(maxBackoff), QueryTimeout: time.Duration(queryTimeout),
			MoveTxTimeout: time.Duration(moveTxTimeout),
			Cascade: &cleanup.CascadeConfig{
				Threshold: threshold, Batch: cascadeBatch, Delay: time.Duration(cascadeDelay), TTLFactor: factor,
			},
			Hooks: &cleanup.HooksConfig{
				BestEffort: []cleanup.HookFunc{func(context.Context, store.Entry) error { hooks.Add(1); return nil }},
				Timeout:    time.Duration(hookTimeout), Concurrency: hookConcurrency, Queue: hookQueue,
				Grace: time.Duration(hookGrace),
			},
		}
		if durable {
			cfg.Hooks.Durable = func(context.Context, store.Entry) error { durableRuns.Add(1); return nil }
		}
		sv, err := cleanup.New(s, &cfg)
		if err != nil {
			configtest.RequireBlame(t, err, &cfg, func() error { _, err := cleanup.New(s, &cfg); return err })
			return
		}
		defer sv.Stop()
		cc, hc := cfg.Cascade, cfg.Hooks
		// The documented ranges.
		switch {
		case cfg.Interval < 0 || cfg.Interval > cleanup.MaxInterval,
			cfg.LeaseTTL < 0, cfg.LeaseTTL > lease.DefaultMaxTTL,
			cfg.BatchSize < 0, cfg.BatchSize > store.MaxListLimit, cfg.ScanLimit < 0, cc.Threshold < 0,
			cc.Batch < 0, cc.Batch > store.MaxBatch, cc.Delay < 0,
			// A pause between cascade batches longer than the longest
			// interval between cycles stalls recovery for longer than any
			// Interval may (as Interval was bounded after it overflowed).
			cc.Delay > cleanup.MaxInterval,
			cc.TTLFactor != 0 && !(cc.TTLFactor >= 1 && cc.TTLFactor <= cleanup.MaxCascadeTTLFactor),
			hc.Timeout < 0, hc.Concurrency < 0, hc.Queue < 0, hc.Grace < 0, cfg.MaxBackoff < 0,
			cfg.MaxBackoff > cleanup.MaxInterval, cfg.QueryTimeout < 0, cfg.MoveTxTimeout < 0, cfg.MoveTxTimeout > cleanup.MaxInterval,
			// A claim longer than store.MaxHookClaim is refused: no durable
			// hook would ever run.
			durable && cmp.Or(hc.Timeout, cleanup.DefaultHookTimeout) > store.MaxHookClaim-cmp.Or(cfg.QueryTimeout, cleanup.DefaultQueryTimeout):
			t.Fatalf("New accepted %+v", cfg)
		}

		// Three leases of a second, expired by the store's clock.
		ctx := context.Background()
		reqs := []store.LeaseRequest{{OperationID: "op-1", TTL: time.Second}, {OperationID: "op-2", TTL: time.Second},
			{OperationID: "op-3", TTL: time.Second}}
		if _, err := s.Lease(ctx, "s", reqs, nil); err != nil {
			t.Fatal(err)
		}
		clock.Store(int64(2 * time.Second))
		cctx, cancel := context.WithTimeout(ctx, cycleDeadline)
		defer cancel()
		res, err := runOnce(cctx, sv)
		switch {
		case cctx.Err() != nil && 3*cc.Delay >= cycleDeadline/2:
			return // in cascade mode, the cycle pauses as asked after each batch
		case cctx.Err() != nil:
			t.Fatalf("New accepted %+v, but a cycle resolving 3 expired leases was still running after %v", cfg, cycleDeadline)
		case err != nil && errors.Is(err, context.DeadlineExceeded) && cfg.QueryTimeout > 0 && cfg.QueryTimeout < time.Second,
			err != nil && errors.Is(err, lease.ErrExpired) && cfg.LeaseTTL >= time.Microsecond && cfg.LeaseTTL < time.Second:
			// A statement that outlives QueryTimeout fails the cycle, as
			// documented, and so does a stream lease whose acquire outlives
			// its LeaseTTL less the lease's safety margin (a tenth): on a
			// loaded machine even the memory backend's can, when they are
			// tiny. How tiny is a matter of timing, not judged here.
			return
		case err != nil:
			t.Fatalf("New accepted %+v, but the cycle fails: %v", cfg, err)
		}
		if res.NotLeader > 0 && cfg.LeaseTTL > 0 && cfg.LeaseTTL < time.Second {
			return // the stream lease lapsed during the walk, which ends it: timing again
		}
		st, err := s.Stats(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if res.Expired != 3 || st.Unresolved != 0 || res.Resolved["retry"] != 1 || st.NextNumber != 5 {
			t.Fatalf("New accepted %+v, but the cycle did %+v, leaving %+v", cfg, res, st)
		}
		if durable {
			// Every resolution recorded a durable hook, which can be
			// claimed and runs.
			n, err := sv.DeliverHooks(cctx)
			switch {
			case err != nil && errors.Is(err, context.DeadlineExceeded) && cfg.QueryTimeout > 0 && cfg.QueryTimeout < time.Second:
				return // timing, as above
			case err != nil:
				t.Fatalf("New accepted %+v, but the durable hooks cannot be delivered: %v", cfg, err)
			case n != 3 || durableRuns.Load() != 3:
				t.Fatalf("New accepted %+v: %d durable hooks delivered (%d runs) for 3 expired leases", cfg, n, durableRuns.Load())
			}
		}
		if err := sv.Start(ctx); err != nil {
			t.Fatalf("New accepted %+v, but Start fails: %v", cfg, err)
		}
		sv.Stop() // waits for the hooks, up to Hooks.Grace, then drops the rest
		n := hooks.Load()
		roomy := (hc.Queue == 0 || hc.Queue >= 3) && (hc.Grace == 0 || hc.Grace >= time.Second)
		if n > 3 || roomy && n != 3 {
			t.Fatalf("New accepted %+v: %d hook runs for 3 expired leases", cfg, n)
		}
	})
}

// runOnce runs a cycle and turns a panic into an error.
func runOnce(ctx context.Context, sv *cleanup.Service) (res cleanup.CycleResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the cycle panicked: %v", r)
		}
	}()
	return sv.RunOnce(ctx)
}
