package sequence_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// benchBackends returns constructors of fresh stores for benchmarks; the
// PostgreSQL pool is sized for the largest worker count.
func benchBackends(b *testing.B) map[string]func() fullStore {
	pool, err := pgtest.NewPool(context.Background(), &pgtest.Options{MaxConns: 24})
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	return map[string]func() fullStore{
		"memory": func() fullStore { return memory.New(nil) },
		"postgres": func() fullStore {
			s, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(b, pool)})
			require.NoError(b, err)
			return s
		},
	}
}

// runWorkers splits b.N operations among workers goroutines and reports
// operations per second.
func runWorkers(b *testing.B, workers int, op func(ctx context.Context) error) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkOrderedCommit measures lease + ordered commit on one stream: the
// whole ordered pipeline, with group commit and lease coalescing on and off.
func BenchmarkOrderedCommit(b *testing.B) {
	for name, newStore := range benchBackends(b) {
		for _, grouped := range []bool{true, false} {
			for _, workers := range []int{1, 4, 16} {
				b.Run(fmt.Sprintf("%s/group=%v/workers=%d", name, grouped, workers), func(b *testing.B) {
					cfg := sequence.Config{}
					if !grouped {
						cfg = sequence.Config{MaxGroup: 1, MaxLeaseBatch: 1}
					}
					l, _ := leaserOn(b, newStore(), cfg)
					runWorkers(b, workers, func(ctx context.Context) error {
						x, err := l.Lease(ctx, "bench", &sequence.LeaseOpts{TTL: time.Minute})
						if err != nil {
							return err
						}
						return x.Commit(ctx, []byte("payload"))
					})
				})
			}
		}
	}
}

// BenchmarkUnorderedComplete measures lease + Complete (no ordering wait).
func BenchmarkUnorderedComplete(b *testing.B) {
	for name, newStore := range benchBackends(b) {
		for _, workers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/workers=%d", name, workers), func(b *testing.B) {
				l, _ := leaserOn(b, newStore(), sequence.Config{})
				runWorkers(b, workers, func(ctx context.Context) error {
					x, err := l.Lease(ctx, "bench", &sequence.LeaseOpts{TTL: time.Minute})
					if err != nil {
						return err
					}
					return x.Complete(ctx, []byte("payload"))
				})
			})
		}
	}
}

// BenchmarkLeaseN measures batch leasing: numbers per second, 100 a call.
func BenchmarkLeaseN(b *testing.B) {
	for name, newStore := range benchBackends(b) {
		b.Run(name, func(b *testing.B) {
			l, _ := leaserOn(b, newStore(), sequence.Config{})
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if _, err := l.LeaseN(ctx, "bench", 100, &sequence.LeaseOpts{TTL: time.Minute}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(100*b.N)/time.Since(start).Seconds(), "numbers/s")
		})
	}
}
