package lease_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// benchStores returns the stores to benchmark: memory, and PostgreSQL on a
// fresh schema through a pool of its own (20 connections), plus a second
// handle on the same data through another pool.
func benchStores(b *testing.B) []struct {
	name          string
	first, second lease.Store
} {
	mem := memory.New(nil)
	out := []struct {
		name          string
		first, second lease.Store
	}{{"memory", mem, mem}}
	pools := make([]*postgres.Store, 2)
	var schema string
	for i := range pools {
		pool, err := pgtest.NewPool(b.Context(), &pgtest.Options{MaxConns: 20})
		require.NoError(b, err)
		b.Cleanup(pool.Close)
		if schema == "" {
			schema = pgtest.NewSchema(b, pool)
		}
		pools[i], err = postgres.New(pool, &postgres.Config{Schema: schema})
		require.NoError(b, err)
	}
	return append(out, struct {
		name          string
		first, second lease.Store
	}{"postgres", pools[0], pools[1]})
}

// BenchmarkAcquireRelease measures acquire+release cycles: one goroutine on
// its own name, 16 goroutines on 16 names, and 16 goroutines contending for
// one name with blocking acquires, in one Manager (its queue hands the name
// from one to the next) or split over two Managers on two pools (two
// processes: the hand-off is first come, first served across them). ns/op
// is per cycle of the whole group; cycles/s is reported.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, st := range benchStores(b) {
		for _, c := range []struct {
			name       string
			goroutines int
			oneName    bool
			noHistory  bool
			managers   int
		}{
			{"1", 1, false, false, 1},
			{"16", 16, false, false, 1},
			{"16-one-name", 16, true, false, 1},
			{"16-one-name-2-managers", 16, true, false, 2},
			{"1-no-history", 1, false, true, 1},
			{"16-no-history", 16, false, true, 1},
		} {
			b.Run(st.name+"/"+c.name, func(b *testing.B) {
				var ms []*lease.Manager
				for i, s := range []lease.Store{st.first, st.second}[:c.managers] {
					m, err := lease.New(s, &lease.Config{Owner: fmt.Sprint("bench-", b.Name(), "-", i), DisableHistory: c.noHistory, CleanupInterval: -1})
					require.NoError(b, err)
					require.NoError(b, m.Start(b.Context()))
					defer m.Stop()
					ms = append(ms, m)
				}
				ctx := b.Context()
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for g := range c.goroutines {
					name := fmt.Sprint(b.Name(), "/", g)
					if c.oneName {
						name = b.Name()
					}
					m := ms[g%len(ms)]
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							var l *lease.Lease
							var err error
							if c.oneName {
								l, err = m.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute})
							} else {
								l, err = m.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute})
							}
							if err != nil {
								b.Error(err)
								return
							}
							if err := l.Release(ctx); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
			})
		}
	}
}

// BenchmarkHandoff measures the hand-off latency of a blocking acquire: a
// waiter of one Manager (on PostgreSQL, another pool: another process as far
// as the database can tell) waits for a name another Manager holds; the
// time from the start of the holder's Release to the return of the waiter's
// Acquire is reported as p50 and p99 (polling is off: the backend's notice
// wakes the waiter).
func BenchmarkHandoff(b *testing.B) {
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			ctx := b.Context()
			holder, err := lease.New(st.first, &lease.Config{Owner: "holder", CleanupInterval: -1})
			require.NoError(b, err)
			waiter, err := lease.New(st.second, &lease.Config{Owner: "waiter", PollInterval: time.Hour, CleanupInterval: -1})
			require.NoError(b, err)
			listening := make(chan struct{})
			var once sync.Once
			lease.OnReset(waiter, func() { once.Do(func() { close(listening) }) })
			require.NoError(b, holder.Start(ctx))
			defer holder.Stop()
			require.NoError(b, waiter.Start(ctx))
			defer waiter.Stop()
			<-listening
			// The waiter's first pause of each acquire closes that
			// acquire's channel; a second one (woken by a late or
			// spurious notice, it found the name held again) is ignored.
			var mu sync.Mutex
			var paused chan struct{}
			lease.OnPaused(waiter, func(string) {
				mu.Lock()
				defer mu.Unlock()
				if paused != nil {
					close(paused)
					paused = nil
				}
			})
			name := b.Name()
			latencies := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				h, err := holder.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute})
				require.NoError(b, err)
				p := make(chan struct{})
				mu.Lock()
				paused = p
				mu.Unlock()
				got := make(chan *lease.Lease, 1)
				go func() {
					l, err := waiter.Acquire(ctx, name, &lease.AcquireOpts{TTL: time.Minute})
					if err != nil {
						b.Error(err)
					}
					got <- l
				}()
				<-p
				start := time.Now()
				require.NoError(b, h.Release(ctx))
				l := <-got
				latencies = append(latencies, time.Since(start))
				require.NoError(b, l.Release(ctx))
			}
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
		})
	}
}
