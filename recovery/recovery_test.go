package recovery_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqlease/seqlease/internal/configtest"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// expiredEntries leases n numbers of stream with a 1 s TTL on a store whose
// clock then moves past their expiry, and returns the store and the entries.
func expiredEntries(t *testing.T, n int) (*memory.Store, []store.Entry) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := memory.New(&memory.Config{Now: func() time.Time { return now }})
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Second, OperationID: "op", Kind: "orders"}
	}
	es, err := s.Lease(context.Background(), "s", reqs, nil)
	require.NoError(t, err)
	now = now.Add(time.Minute)
	return s, es
}

func read(t *testing.T, s *memory.Store, n int64) store.Entry {
	es, err := s.Read(context.Background(), "s", n-1, 1)
	require.NoError(t, err)
	return es[0]
}

func tracker(work []byte, ok bool, err error) recovery.WorkTrackerFunc {
	return func(context.Context, store.Entry) ([]byte, bool, error) { return work, ok, err }
}

func results(work []byte, ok bool, err error) recovery.OperationTrackerFunc {
	return func(context.Context, store.Entry) ([]byte, bool, error) { return work, ok, err }
}

func TestPartialWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, es := expiredEntries(t, 2)
	step := recovery.PartialWork(s, tracker([]byte("half done"), true, nil), "cleaner")
	require.Equal(t, recovery.MethodPartialWork, step.Name())
	r, err := step.TryRecover(ctx, es[0])
	require.NoError(t, err)
	require.True(t, r.Recovered)
	require.Equal(t, int64(3), r.NewNumber)

	old, moved := read(t, s, 1), read(t, s, 3)
	require.Equal(t, store.Gap, old.State)
	require.Equal(t, int64(3), old.RecoveredAs)
	require.Equal(t, []byte("half done"), moved.Payload)
	md, ok := recovery.MetadataOf(moved)
	require.True(t, ok)
	require.Equal(t, recovery.Metadata{OriginalNumber: 1, OriginalOperationID: "op", RecoveredAt: moved.ResolvedAt, Type: "partial-work"}, md)
	_, ok = recovery.MetadataOf(old)
	require.False(t, ok)

	// Running it again finds the work moved: resolved, no second copy.
	r, err = step.TryRecover(ctx, es[0])
	require.NoError(t, err)
	require.True(t, r.Recovered)
	require.True(t, r.Elsewhere)
	require.Zero(t, r.NewNumber)
	stats, err := s.Stats(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(4), stats.NextNumber)

	r, err = recovery.PartialWork(s, tracker(nil, false, nil), "c").TryRecover(ctx, es[1])
	require.NoError(t, err)
	require.False(t, r.Recovered, "nothing to recover: declined")
	_, err = recovery.PartialWork(s, tracker(nil, false, errors.New("tracker down")), "c").TryRecover(ctx, es[1])
	require.ErrorContains(t, err, "tracker down")
	require.Equal(t, store.Leased, read(t, s, 2).State, "declining changes nothing")
}

func TestRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, es := expiredEntries(t, 1)
	r, err := recovery.Retry(s, results([]byte("result"), true, nil), "cleaner").TryRecover(ctx, es[0])
	require.NoError(t, err)
	require.Equal(t, int64(2), r.NewNumber)
	require.Equal(t, "retry", read(t, s, 2).RecoveryType)
	require.Equal(t, []byte("result"), read(t, s, 2).Payload)
}

func TestGapStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, es := expiredEntries(t, 1)
	r, err := recovery.Gap(s).TryRecover(ctx, es[0])
	require.NoError(t, err)
	require.True(t, r.Recovered)
	require.Equal(t, store.ReasonExpired, read(t, s, 1).GapReason)
	r, err = recovery.Gap(s).TryRecover(ctx, es[0])
	require.NoError(t, err, "already a gap: resolved meanwhile")
	require.True(t, r.Recovered)
	require.True(t, r.Elsewhere)
}

func TestPipelineOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, es := expiredEntries(t, 4)
	var ran []string
	observe := func(step string, r recovery.Result, err error) { ran = append(ran, step) }
	p := recovery.Steps{
		recovery.PartialWork(s, tracker(nil, false, nil), "c"),
		recovery.Retry(s, results([]byte("r"), true, nil), "c"),
		recovery.Gap(s),
	}
	r, err := p.Run(ctx, es[0], observe)
	require.NoError(t, err)
	require.Equal(t, recovery.MethodRetry, r.Method)
	require.Equal(t, []string{"partial-work", "retry"}, ran, "a decline passes on; stops at the first success")

	ran = nil
	failing := recovery.Steps{
		recovery.PartialWork(s, tracker(nil, false, errors.New("down")), "c"),
		recovery.Gap(s),
	}
	_, err = failing.Run(ctx, es[1], observe)
	require.ErrorIs(t, err, recovery.ErrUnrecovered)
	require.ErrorContains(t, err, "down")
	require.Equal(t, []string{"partial-work"}, ran, "an erring step stops the pipeline: no fall-through to the gap")
	require.Equal(t, store.Leased, read(t, s, 2).State, "left expired for a later attempt")

	never := recovery.NewStep("never", func(context.Context, store.Entry) (recovery.Result, error) {
		return recovery.Result{}, errors.New("db down")
	})
	_, err = recovery.Steps{never}.Run(ctx, es[2], nil)
	require.ErrorIs(t, err, recovery.ErrUnrecovered)
	require.ErrorContains(t, err, "db down")

	_, err = recovery.Steps{recovery.PartialWork(s, tracker(nil, false, nil), "c")}.Run(ctx, es[3], nil)
	require.ErrorIs(t, err, recovery.ErrUnrecovered, "every step declined")
	require.Equal(t, store.Leased, read(t, s, 4).State)
}

func TestPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, es := expiredEntries(t, 1)
	var ran []string
	observe := func(step string, r recovery.Result, err error) { ran = append(ran, step) }
	p := recovery.Steps{
		recovery.PartialWork(s, tracker(nil, false, nil), "c"),
		recovery.Retry(s, results([]byte("r"), true, nil), "c"),
		recovery.Gap(s),
	}
	require.True(t, p.Plannable())
	plan, err := p.Plan(ctx, es[0], observe)
	require.NoError(t, err)
	require.Equal(t, recovery.Plan{Step: recovery.MethodRetry, Work: []byte("r")}, plan)
	require.Equal(t, []string{"partial-work"}, ran, "only the declines are reported")
	require.Equal(t, store.Leased, read(t, s, 1).State, "planning writes nothing")

	plan, err = recovery.Steps{recovery.PartialWork(s, tracker(nil, false, nil), "c"), recovery.Gap(s)}.Plan(ctx, es[0], nil)
	require.NoError(t, err)
	require.Equal(t, recovery.Plan{Step: recovery.MethodGap, Gap: true}, plan)

	_, err = recovery.Steps{recovery.PartialWork(s, tracker(nil, false, errors.New("down")), "c"), recovery.Gap(s)}.Plan(ctx, es[0], nil)
	require.ErrorIs(t, err, recovery.ErrUnrecovered)
	require.ErrorContains(t, err, "down")

	custom := recovery.Steps{recovery.NewStep("mine", func(context.Context, store.Entry) (recovery.Result, error) {
		return recovery.Result{}, nil
	}), recovery.Gap(s)}
	require.False(t, custom.Plannable(), "a custom step must run")
	_, err = custom.Plan(ctx, es[0], nil)
	require.Error(t, err)
}

// lostReply loses the reply of every RecoverExpired: the work moved, but the
// caller hears an error.
type lostReply struct{ *memory.Store }

func (l lostReply) RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error) {
	if _, err := l.Store.RecoverExpired(ctx, stream, number, p); err != nil {
		return 0, err
	}
	return 0, errors.New("connection reset after the statement committed")
}

// TestMoveOutcomes: a move whose reply was lost is reported as the move it
// was (read back); an entry resolved by someone else is reported as such.
func TestMoveOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, es := expiredEntries(t, 2)
	r, err := recovery.PartialWork(lostReply{s}, tracker([]byte("w"), true, nil), "c").TryRecover(ctx, es[0])
	require.NoError(t, err)
	require.True(t, r.Recovered)
	require.False(t, r.Elsewhere)
	require.Equal(t, int64(3), r.NewNumber, "the work moved: reported as moved, not as a gap")

	require.NoError(t, s.ResolveExpired(ctx, "s", 2, nil)) // someone else
	r, err = recovery.Retry(s, results([]byte("w"), true, nil), "c").TryRecover(ctx, es[1])
	require.NoError(t, err)
	require.True(t, r.Recovered)
	require.True(t, r.Elsewhere)
	require.Zero(t, r.NewNumber)
	r, err = recovery.Gap(s).TryRecover(ctx, es[1])
	require.NoError(t, err)
	require.True(t, r.Elsewhere)
}

func TestDefaultAdaptiveMapping(t *testing.T) {
	t.Parallel()
	s, _ := expiredEntries(t, 1)
	sel := recovery.StepSelector{
		PartialWork: recovery.PartialWork(s, tracker(nil, false, nil), "c"),
		Retry:       recovery.Retry(s, results(nil, false, nil), "c"),
		Gap:         recovery.Gap(s),
	}
	names := func(p recovery.Steps) []string {
		var out []string
		for _, st := range p {
			out = append(out, st.Name())
		}
		return out
	}
	require.Equal(t, []string{"partial-work", "retry", "gap"}, names(sel.Select(recovery.Low, "k")))
	require.Equal(t, []string{"partial-work", "gap"}, names(sel.Select(recovery.Medium, "k")))
	require.Equal(t, []string{"gap"}, names(sel.Select(recovery.High, "k")))
	require.Equal(t, []string{"gap"}, names(recovery.StepSelector{Gap: sel.Gap}.Select(recovery.Low, "k")), "missing steps are left out")

	ctx := context.Background()
	p := recovery.DefaultProbe()
	for _, c := range []struct {
		s    recovery.Signals
		want recovery.Level
	}{
		{recovery.Signals{}, recovery.Low},
		{recovery.Signals{Backlog: 999}, recovery.Low},
		{recovery.Signals{Backlog: 1000}, recovery.Medium},
		{recovery.Signals{Backlog: 9999}, recovery.Medium},
		{recovery.Signals{Backlog: 10_000}, recovery.High},
		{recovery.Signals{PoolSaturation: 0.75}, recovery.Medium},
		{recovery.Signals{PoolSaturation: 0.95, Backlog: 5}, recovery.High},
		{recovery.Signals{CycleLatency: 6 * time.Second}, recovery.Medium},
		{recovery.Signals{CycleLatency: 21 * time.Second, Backlog: 1500}, recovery.High},
	} {
		require.Equal(t, c.want, p.Level(ctx, c.s), "%+v", c.s)
	}
	require.Equal(t, "medium", recovery.Medium.String())
}

func TestCustomProbeAndSelector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, es := expiredEntries(t, 1)
	probe := recovery.LoadProbeFunc(func(_ context.Context, sig recovery.Signals) recovery.Level {
		if sig.Backlog > 0 {
			return recovery.High
		}
		return recovery.Low
	})
	sel := recovery.SelectorFunc(func(level recovery.Level, kind string) recovery.Steps {
		if kind == "orders" && level == recovery.High {
			return recovery.Steps{recovery.Retry(s, results([]byte("x"), true, nil), "c")}
		}
		return recovery.Steps{recovery.Gap(s)}
	})
	level := probe.Level(ctx, recovery.Signals{Backlog: 1})
	r, err := sel.Select(level, es[0].Kind).Run(ctx, es[0], nil)
	require.NoError(t, err)
	require.Equal(t, recovery.MethodRetry, r.Method)
}

func TestRateFilter(t *testing.T) {
	t.Parallel()
	s, _ := expiredEntries(t, 1)
	f := &recovery.RateFilter{
		Selector: recovery.StepSelector{
			PartialWork: recovery.PartialWork(s, tracker(nil, false, nil), "c"),
			Gap:         recovery.Gap(s),
		},
		MinRate: 0.5, Window: 4,
	}
	require.Len(t, f.Select(recovery.Low, "k"), 2, "no history yet")
	for range 4 {
		f.Record("partial-work", "k", false)
	}
	require.Len(t, f.Select(recovery.Low, "k"), 1, "partial work never works for k: skipped")
	require.Len(t, f.Select(recovery.Low, "other"), 2, "per kind")
	got := 0
	for range 8 {
		got += len(f.Select(recovery.Low, "k"))
	}
	require.Equal(t, 8+2, got, "let through once every Window selections")
	for range 4 {
		f.Record("partial-work", "k", true)
	}
	require.Len(t, f.Select(recovery.Low, "k"), 2, "recovered")
}

func TestRateFilterRingCountsAndWindowCap(t *testing.T) {
	t.Parallel()
	s, _ := expiredEntries(t, 1)
	steps := recovery.StepSelector{
		PartialWork: recovery.PartialWork(s, tracker(nil, false, nil), "c"),
		Gap:         recovery.Gap(s),
	}
	// The ring forgets the oldest outcome: 3 failures then 3 successes over
	// a window of 4 is a rate of 3/4.
	f := &recovery.RateFilter{Selector: steps, MinRate: 0.7, Window: 4}
	for _, ok := range []bool{false, false, false, true, true, true} {
		f.Record("partial-work", "k", ok)
	}
	require.Len(t, f.Select(recovery.Low, "k"), 2, "3 of the last 4 succeeded")
	f.Record("partial-work", "k", false)
	f.Record("partial-work", "k", false)
	require.Len(t, f.Select(recovery.Low, "k"), 1, "2 of the last 4")

	// An enormous Window counts as MaxRateWindow instead of allocating it.
	huge := &recovery.RateFilter{Selector: steps, MinRate: 0.5, Window: 1 << 50}
	for range recovery.MaxRateWindow {
		huge.Record("partial-work", "k", false)
	}
	require.Len(t, huge.Select(recovery.Low, "k"), 1, "full after MaxRateWindow outcomes")
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, es := expiredEntries(t, 1)
	p, err := recovery.New(s, nil)
	require.NoError(t, err)
	names := func(steps recovery.Steps) []string {
		var out []string
		for _, st := range steps {
			out = append(out, st.Name())
		}
		return out
	}
	require.Equal(t, []string{"gap"}, names(p.Select(recovery.Low, "k")), "no trackers: every entry becomes a gap")
	require.Equal(t, recovery.DefaultOwner, p.Owner())
	require.Zero(t, p.MaxAttempts(), "never give up")
	require.Equal(t, recovery.Low, p.Level(ctx, recovery.Signals{}))
	require.Equal(t, recovery.High, p.Level(ctx, recovery.Signals{Backlog: 10_000}), "DefaultProbe")

	p, err = recovery.New(s, &recovery.Config{
		WorkTracker:      tracker(nil, false, nil),
		OperationTracker: results([]byte("done"), true, nil),
		Owner:            "me", MaxAttempts: 3,
	})
	require.NoError(t, err)
	require.Equal(t, []string{"partial-work", "retry", "gap"}, names(p.Select(recovery.Low, "k")))
	require.Equal(t, []string{"gap"}, names(p.Select(recovery.High, "k")))
	require.Equal(t, 3, p.MaxAttempts())
	require.Equal(t, recovery.ExhaustedGap, p.OnExhausted(), "the default gives up as a gap")
	p2, err := recovery.New(s, &recovery.Config{MaxAttempts: 2, OnExhausted: recovery.ExhaustedPark})
	require.NoError(t, err)
	require.Equal(t, recovery.ExhaustedPark, p2.OnExhausted())
	require.Equal(t, "park", p2.OnExhausted().String())
	r, err := p.Select(recovery.Low, "k").Run(ctx, es[0], nil)
	require.NoError(t, err)
	require.Equal(t, recovery.MethodRetry, r.Method)
	require.Equal(t, "me", read(t, s, r.NewNumber).Owner, "Owner is recorded on the moved work")
}

func TestNewPoolSaturationAndRates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := expiredEntries(t, 1)
	// The store's pool is read when the caller gives no signal.
	p, err := recovery.New(saturated{s}, nil)
	require.NoError(t, err)
	require.Equal(t, recovery.High, p.Level(ctx, recovery.Signals{}))
	require.Equal(t, recovery.Medium, p.Level(ctx, recovery.Signals{PoolSaturation: 0.8}), "a signal given wins")
	p, err = recovery.New(saturated{s}, &recovery.Config{PoolSaturation: func() float64 { return 0 }})
	require.NoError(t, err)
	require.Equal(t, recovery.Low, p.Level(ctx, recovery.Signals{}), "Config.PoolSaturation wins over the store's")

	p, err = recovery.New(s, &recovery.Config{WorkTracker: tracker(nil, false, nil), MinStepSuccessRate: 0.5, StepRateWindow: 2})
	require.NoError(t, err)
	require.Len(t, p.Select(recovery.Low, "k"), 2)
	p.Record(recovery.MethodPartialWork, "k", false)
	p.Record(recovery.MethodPartialWork, "k", false)
	require.Len(t, p.Select(recovery.Low, "k"), 1, "the rate filter skips a failing step")
}

// saturated is a store whose connection pool is nearly full.
type saturated struct{ *memory.Store }

func (saturated) PoolSaturation() float64 { return 0.95 }

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	s, _ := expiredEntries(t, 1)
	_, err := recovery.New(nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	for _, cfg := range []recovery.Config{
		{MinStepSuccessRate: -0.1}, {MinStepSuccessRate: 1.5}, {MinStepSuccessRate: math.NaN()},
		{StepRateWindow: -1}, {StepRateWindow: recovery.MaxRateWindow + 1}, {MaxAttempts: -1},
		{Owner: "nul\x00"}, {Owner: string(make([]byte, store.MaxTextLen+1))},
		{OnExhausted: 7, MaxAttempts: 1}, {OnExhausted: -1, MaxAttempts: 1}, {OnExhausted: recovery.ExhaustedPark},
	} {
		_, err := recovery.New(s, &cfg)
		require.Error(t, err, "%+v", cfg)
		configtest.RequireBlame(t, err, &cfg, func() error { _, err := recovery.New(s, &cfg); return err })
	}
}
