package cleanup_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// BenchmarkRecoverExpired measures the time one cleanup cycle takes to
// resolve n expired leases of one stream, with the gap step and with
// partial-work recovery (every operation has partial work). Each iteration
// is a fresh stream; the leases are made outside the timer.
func BenchmarkRecoverExpired(b *testing.B) {
	pool := pgtest.Shared(b, false)
	stores := map[string]func() backend{
		"memory": func() backend { return memory.New(nil) },
		"postgres": func() backend {
			s, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(b, pool)})
			require.NoError(b, err)
			return s
		},
	}
	work := recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
		return []byte("partial"), true, nil
	})
	for _, name := range []string{"memory", "postgres"} {
		for _, method := range []string{"gap", "partial-work"} {
			for _, n := range []int{10_000} {
				b.Run(fmt.Sprintf("%s/%s/n=%d", name, method, n), func(b *testing.B) {
					s := stores[name]()
					cfg := &cleanup.Config{CascadeThreshold: 1 << 30} // measure the steps, not the pauses
					if method == "partial-work" {
						cfg.WorkTracker = work
						// A backlog of 10,000 is high load for the default
						// probe, which would choose gaps: force recovery.
						cfg.Probe = recovery.LoadProbeFunc(func(context.Context, recovery.Signals) recovery.Level { return recovery.Low })
					}
					sv, err := cleanup.New(s, cfg)
					require.NoError(b, err)
					var total time.Duration
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
						require.Equal(b, n, res.Resolved[method])
					}
					b.ReportMetric(total.Seconds()/float64(b.N), "s/cycle")
					b.ReportMetric(float64(n*b.N)/total.Seconds(), "leases/s")
				})
			}
		}
	}
}
