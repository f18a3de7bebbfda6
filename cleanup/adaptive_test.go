package cleanup_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// fixedProbe is a LoadProbe whose level the test sets, and which records
// the signals it is given.
type fixedProbe struct {
	level   atomic.Int64
	mu      sync.Mutex
	signals []recovery.Signals
}

func (p *fixedProbe) Level(_ context.Context, s recovery.Signals) recovery.Level {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signals = append(p.signals, s)
	return recovery.Level(p.level.Load())
}

// TestAdaptiveLevels runs the default mapping through the Service at each
// level a custom probe reports: low recovers partial work and results,
// medium skips retry, high declares gaps.
func TestAdaptiveLevels(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			probe := &fixedProbe{}
			results := recovery.OperationTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
				return []byte("result " + e.OperationID), true, nil
			})
			sv, err := cleanup.New(s, &cleanup.Config{
				Pipeline: newPipeline(t, s, &recovery.Config{Probe: probe, WorkTracker: partialFor("op-2"), OperationTracker: results}),
			})
			require.NoError(t, err)
			defer sv.Stop()
			// op-1 has partial work and a result, op-2 a result only.
			for _, c := range []struct {
				level recovery.Level
				want  map[string]int
				types []string // recovery types of op-1's and op-2's new entries; "" for a gap
			}{
				{recovery.Low, map[string]int{"partial-work": 1, "retry": 1}, []string{"partial-work", "retry"}},
				{recovery.Medium, map[string]int{"partial-work": 1, "gap": 1}, []string{"partial-work", ""}},
				{recovery.High, map[string]int{"gap": 2}, []string{"", ""}},
			} {
				stream := "level-" + c.level.String()
				probe.level.Store(int64(c.level))
				leaseExpired(t, s, stream, 2)
				res, err := sv.RunOnce(context.Background())
				require.NoError(t, err)
				require.Equal(t, c.want, res.Resolved, c.level.String())
				es := readAll(t, s, stream)
				for i, typ := range c.types {
					if typ == "" {
						require.Equal(t, store.ReasonExpired, es[i].GapReason, "%s: op-%d", c.level, i+1)
						continue
					}
					require.Equal(t, typ, es[es[i].RecoveredAs-1].RecoveryType, "%s: op-%d", c.level, i+1)
				}
			}
		})
	}
}

// TestCustomSelector: the Service asks the Selector with the probe's level
// and the entry's kind, and runs what it returns, custom steps included.
func TestCustomSelector(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	probe := &fixedProbe{}
	probe.level.Store(int64(recovery.Medium))
	var mu sync.Mutex
	var asked []string
	mine := recovery.NewStep("mine", func(ctx context.Context, e store.Entry) (recovery.Result, error) {
		n, err := s.RecoverExpired(ctx, e.Stream, e.Number, &store.RecoverParams{Payload: []byte("mine"), RecoveryType: "mine"})
		return recovery.Result{Recovered: err == nil, NewNumber: n}, err
	})
	sel := recovery.SelectorFunc(func(level recovery.Level, kind string) recovery.Steps {
		mu.Lock()
		asked = append(asked, fmt.Sprint(level, "/", kind))
		mu.Unlock()
		if kind == "special" {
			return recovery.Steps{mine}
		}
		return recovery.Steps{recovery.Gap(s)}
	})
	sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{Probe: probe, Selector: sel})})
	require.NoError(t, err)
	defer sv.Stop()
	leaseWith(t, s, "c", []store.LeaseRequest{
		{TTL: time.Microsecond, Kind: "plain"}, {TTL: time.Microsecond, Kind: "special"}, {TTL: time.Microsecond, Kind: "plain"},
	})
	res, err := sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"gap": 2, "mine": 1}, res.Resolved)
	require.Equal(t, []string{"medium/plain", "medium/special", "medium/plain"}, asked)
	es := readAll(t, s, "c")
	require.Equal(t, int64(4), es[1].RecoveredAs)
	require.Equal(t, "mine", es[3].RecoveryType)
}

// TestBacklogIsWholeScan: the probe's backlog is every expired lease the
// scan found, across pages and streams, not one page.
func TestBacklogIsWholeScan(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	probe := &fixedProbe{}
	sv, err := cleanup.New(s, &cleanup.Config{BatchSize: 10, Pipeline: newPipeline(t, s, &recovery.Config{Probe: probe}), Cascade: &cleanup.CascadeConfig{Threshold: 1000}})
	require.NoError(t, err)
	defer sv.Stop()
	leaseExpired(t, s, "a", 25)
	leaseExpired(t, s, "b", 10)
	res, err := sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 35, res.Expired)
	require.Equal(t, []recovery.Signals{{Backlog: 35}}, probe.signals)
}

// saturated is a store whose pool is 95% in use.
type saturated struct{ *memory.Store }

func (saturated) PoolSaturation() float64 { return 0.95 }

// TestPoolSaturationFromStore: without Config.PoolSaturation the loop asks
// the store (postgres.Store has the method), and a saturated pool is high
// load for the default probe.
func TestPoolSaturationFromStore(t *testing.T) {
	t.Parallel()
	s := saturated{memory.New(nil)}
	probe := &fixedProbe{}
	sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{Probe: probe})})
	require.NoError(t, err)
	defer sv.Stop()
	leaseExpired(t, s, "p", 1)
	_, err = sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 0.95, probe.signals[0].PoolSaturation)

	sv, err = cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: partialFor()})})
	require.NoError(t, err)
	defer sv.Stop()
	leaseExpired(t, s, "q", 1)
	res, err := sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"gap": 1}, res.Resolved, "the default probe: high load")
}

// TestRateFilterWired: with the pipeline's MinStepSuccessRate the loop feeds the rate
// filter itself; a step that never succeeds for a kind is then skipped.
func TestRateFilterWired(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	var calls atomic.Int64
	never := recovery.WorkTrackerFunc(func(context.Context, store.Entry) ([]byte, bool, error) {
		calls.Add(1)
		return nil, false, nil
	})
	sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: never, MinStepSuccessRate: 0.5, StepRateWindow: 4})})
	require.NoError(t, err)
	defer sv.Stop()
	leaseExpired(t, s, "r", 4)
	_, err = sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(4), calls.Load(), "no history yet: asked every time")
	leaseExpired(t, s, "r", 3)
	res, err := sv.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"gap": 3}, res.Resolved)
	require.Equal(t, int64(4), calls.Load(), "4 failures of 4: partial work is skipped for this kind")
}
