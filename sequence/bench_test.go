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

// benchBackend makes fresh stores of one backend for benchmarks.
type benchBackend struct {
	name     string
	newStore func() fullStore
}

// benchBackends returns the backends in a fixed order (memory, then
// PostgreSQL), so that runs list their rows alike; the PostgreSQL pool is
// sized for the largest worker count.
func benchBackends(b *testing.B) []benchBackend {
	pool, err := pgtest.NewPool(context.Background(), &pgtest.Options{MaxConns: 24})
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	return []benchBackend{
		{"memory", func() fullStore { return memory.New(nil) }},
		{"postgres", func() fullStore {
			s, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(b, pool)})
			require.NoError(b, err)
			return s
		}},
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
// whole ordered pipeline. On PostgreSQL it runs with group commit and lease
// coalescing on (the defaults) and off (MaxGroup and MaxLeaseBatch 1). On
// memory there is no such dimension: the Leaser turns both off on a store
// that answers in process (sequence.New, Config.MaxGroup), so "on" and "off"
// would measure the same configuration twice.
func BenchmarkOrderedCommit(b *testing.B) {
	type config struct {
		name string
		cfg  sequence.Config
	}
	for _, backend := range benchBackends(b) {
		configs := []config{{"", sequence.Config{}}}
		if backend.name == "postgres" {
			configs = []config{
				{"/group=on", sequence.Config{}},
				{"/group=off", sequence.Config{MaxGroup: 1, MaxLeaseBatch: 1}},
			}
		}
		for _, c := range configs {
			for _, workers := range []int{1, 4, 16} {
				b.Run(fmt.Sprintf("%s%s/workers=%d", backend.name, c.name, workers), func(b *testing.B) {
					l, _ := leaserOn(b, backend.newStore(), c.cfg)
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
	for _, backend := range benchBackends(b) {
		for _, workers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/workers=%d", backend.name, workers), func(b *testing.B) {
				l, _ := leaserOn(b, backend.newStore(), sequence.Config{})
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
	for _, backend := range benchBackends(b) {
		b.Run(backend.name, func(b *testing.B) {
			l, _ := leaserOn(b, backend.newStore(), sequence.Config{})
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
