package cleanup_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// BenchmarkRecoverExpired measures the time one cleanup cycle takes to
// resolve n expired leases of one stream (cascade mode included, with its
// default batches and pauses):
//
//   - gap: no trackers, every lease becomes a gap (batched statements);
//   - partial-work: every operation has partial work and the load is forced
//     low, so every lease's work moves (batched transactions);
//   - partial-work-per-entry: the same through a custom step, which the loop
//     cannot batch: one transaction per lease, for comparison;
//   - default: a WorkTracker with partial work for every operation and the
//     default Config, probe included (a backlog of 10,000 is high load);
//   - gap+durable-hook, partial-work+durable-hook: gap and partial-work with
//     a durable hook, whose records the resolving statements write (the
//     Service is not started: nothing is delivered);
//   - partial-work+movetx: partial-work with a MoveTx that writes nothing,
//     the cost of the interactive transaction (PostgreSQL only).
//
// Each iteration is a fresh stream; the leases are made outside the timer.
func BenchmarkRecoverExpired(b *testing.B) {
	work := recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
		return []byte("partial"), true, nil
	})
	low := recovery.LoadProbeFunc(func(context.Context, recovery.Signals) recovery.Level { return recovery.Low })
	configs := map[string]func(b *testing.B, s backend) *cleanup.Config{
		"gap": func(*testing.B, backend) *cleanup.Config { return &cleanup.Config{} },
		"partial-work": func(b *testing.B, s backend) *cleanup.Config {
			return &cleanup.Config{Pipeline: newPipeline(b, s, &recovery.Config{WorkTracker: work, Probe: low})}
		},
		"partial-work-per-entry": func(b *testing.B, s backend) *cleanup.Config {
			step := recovery.NewStep(recovery.MethodPartialWork, func(ctx context.Context, e store.Entry) (recovery.Result, error) {
				n, err := s.RecoverExpired(ctx, e.Stream, e.Number, &store.RecoverParams{Payload: []byte("partial"), RecoveryType: recovery.MethodPartialWork})
				return recovery.Result{Recovered: err == nil, NewNumber: n}, err
			})
			return &cleanup.Config{Pipeline: newPipeline(b, s, &recovery.Config{Probe: low, Selector: recovery.SelectorFunc(func(recovery.Level, string) recovery.Steps {
				return recovery.Steps{step}
			})})}
		},
		"default": func(b *testing.B, s backend) *cleanup.Config {
			return &cleanup.Config{Pipeline: newPipeline(b, s, &recovery.Config{WorkTracker: work})}
		},
		"gap+durable-hook": func(*testing.B, backend) *cleanup.Config {
			return &cleanup.Config{Hooks: &cleanup.HooksConfig{Durable: noHook}}
		},
		"partial-work+durable-hook": func(b *testing.B, s backend) *cleanup.Config {
			return &cleanup.Config{Pipeline: newPipeline(b, s, &recovery.Config{WorkTracker: work, Probe: low}),
				Hooks: &cleanup.HooksConfig{Durable: noHook}}
		},
		"partial-work+movetx": func(b *testing.B, s backend) *cleanup.Config {
			return &cleanup.Config{Pipeline: newPipeline(b, s, &recovery.Config{WorkTracker: work, Probe: low}),
				MoveTx: cleanup.MoveTxFunc[pgx.Tx](func(context.Context, pgx.Tx, []cleanup.Move) error { return nil })}
		},
	}
	for _, name := range []string{"memory", "postgres"} {
		for _, method := range []string{"gap", "partial-work", "partial-work-per-entry", "default",
			"gap+durable-hook", "partial-work+durable-hook", "partial-work+movetx"} {
			if name == "memory" && method == "partial-work+movetx" {
				continue // the memory backend runs no transaction functions
			}
			for _, n := range []int{10_000} {
				b.Run(fmt.Sprintf("%s/%s/n=%d", name, method, n), func(b *testing.B) {
					var s backend = memory.New(nil)
					if name == "postgres" {
						s = newPostgres(b)
					}
					sv, err := cleanup.New(s, configs[method](b, s))
					require.NoError(b, err)
					defer sv.Stop()
					var total time.Duration
					resolved := map[string]int{}
					for i := range b.N {
						b.StopTimer()
						stream := fmt.Sprint("s", i)
						for left := n; left > 0; left -= store.MaxBatch {
							reqs := make([]store.LeaseRequest, min(left, store.MaxBatch))
							for j := range reqs {
								reqs[j] = store.LeaseRequest{TTL: time.Microsecond, OperationID: "op"}
							}
							_, err := s.Lease(context.Background(), stream, reqs, nil)
							require.NoError(b, err)
						}
						b.StartTimer()
						start := time.Now()
						res, err := sv.RunOnce(context.Background())
						total += time.Since(start)
						require.NoError(b, err)
						require.Equal(b, n, res.Expired)
						sum := 0
						for m, k := range res.Resolved {
							resolved[m] += k
							sum += k
						}
						require.Equal(b, n, sum)
					}
					b.ReportMetric(total.Seconds()/float64(b.N), "s/cycle")
					b.ReportMetric(float64(n*b.N)/total.Seconds(), "leases/s")
					b.Logf("resolved by: %v", resolved)
				})
			}
		}
	}
}

// noHook is a durable hook that does nothing.
func noHook(context.Context, store.Entry) error { return nil }
