// Command quickstart runs a small pipeline on the in-memory backend: workers
// lease numbers of one stream in parallel, do some work, and commit in
// sequence order, give up (release) or stall past their lease. A janitor
// turns expired leases into gaps, standing in for the cleanup loop, and a
// projector follows the stream with the ordered reader. At the end it prints
// the ledger and checks that it is dense, fully resolved, and that the
// projector saw every committed result exactly once, in order.
//
//	go run ./examples/quickstart [-events 400] [-workers 8]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

func main() {
	events := flag.Int("events", 400, "events to process")
	workers := flag.Int("workers", 8, "parallel workers")
	flag.Parse()
	if err := run(*events, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

const (
	stream = "orders"
	ttl    = 100 * time.Millisecond
)

func run(events, workers int) error {
	ctx := context.Background()
	st := memory.New(nil)
	b, err := barrier.New(st, nil)
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Stop()
	leaser, err := sequence.New(st, &sequence.Config{Barrier: b, DefaultTTL: ttl, Owner: "quickstart"})
	if err != nil {
		return err
	}

	// The projector: applies committed results strictly in order, until it
	// has seen the last event's number.
	var projected []int64
	var projector sync.WaitGroup
	projector.Go(func() {
		for e, err := range b.Entries(ctx, stream, &barrier.ReadOpts{Follow: true, IncludeGaps: true}) {
			if err != nil {
				fmt.Fprintln(os.Stderr, "projector:", err)
				return
			}
			if e.State == store.Committed {
				projected = append(projected, e.Number)
			}
			if e.Number == int64(events) {
				return
			}
		}
	})

	var committed, released, lateRefused atomic.Int64
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ev := range jobs {
				lease, err := leaser.Lease(ctx, stream, &sequence.LeaseOpts{OperationID: fmt.Sprintf("event-%d", ev), Kind: "order"})
				if err != nil {
					fmt.Fprintln(os.Stderr, "lease:", err)
					continue
				}
				switch r := rand.Float64(); {
				case r < 0.05: // the worker gives up: the number becomes a gap
					if lease.Release(ctx) == nil {
						released.Add(1)
					}
				case r < 0.08: // the worker stalls past its lease: its late commit is refused
					time.Sleep(ttl + 20*time.Millisecond)
					if errors.Is(lease.Commit(ctx, []byte("late")), sequence.ErrExpired) {
						lateRefused.Add(1)
					}
				default:
					// Keep the lease alive while the work runs and while the
					// commit waits for earlier numbers; a stalled worker
					// (above) cannot renew, which is why it loses its number.
					if err := lease.KeepAlive(nil); err != nil {
						fmt.Fprintln(os.Stderr, "keep-alive:", err)
					}
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // the work
					if lease.Commit(ctx, fmt.Appendf(nil, "result of event %d", ev)) == nil {
						committed.Add(1)
					}
				}
			}
		})
	}

	// The janitor: until the cleanup loop exists, resolve expired leases by
	// hand, in sequence order, the way it will.
	stop := make(chan struct{})
	var janitor sync.WaitGroup
	janitor.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			list, _ := st.ListExpired(ctx, &store.ListExpiredParams{Stream: stream})
			for _, e := range list {
				_ = st.ResolveExpired(ctx, e.Stream, e.Number, nil) // a racing Release may win
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})

	start := time.Now()
	for ev := 1; ev <= events; ev++ {
		jobs <- ev
	}
	close(jobs)
	wg.Wait()
	for { // let the janitor resolve the last stalled leases
		stats, err := st.Stats(ctx, stream)
		if err != nil {
			return err
		}
		if stats.Unresolved == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	janitor.Wait()
	projector.Wait()
	elapsed := time.Since(start)

	entries, err := st.Read(ctx, stream, 0, store.MaxListLimit)
	if err != nil {
		return err
	}
	gaps := map[string]int{}
	for i, e := range entries {
		if e.Number != int64(i+1) {
			return fmt.Errorf("ledger not dense: position %d holds number %d", i+1, e.Number)
		}
		switch e.State {
		case store.Gap:
			gaps[e.GapReason]++
		case store.Leased:
			return fmt.Errorf("number %d is still unresolved", e.Number)
		}
	}
	stats, err := st.Stats(ctx, stream)
	if err != nil {
		return err
	}
	fmt.Printf("%d events, %d workers, %v on the in-memory backend\n", events, workers, elapsed.Round(time.Millisecond))
	fmt.Printf("numbers handed out:   %d (dense 1..%d, no hole, no duplicate)\n", len(entries), len(entries))
	fmt.Printf("committed:            %d\n", committed.Load())
	fmt.Printf("released (gap):       %d\n", gaps[store.ReasonReleased])
	fmt.Printf("expired (gap):        %d, and %d late commits refused\n", gaps[store.ReasonExpired], lateRefused.Load())
	fmt.Printf("watermark:            %d (every entry resolved)\n", stats.Watermark)
	if int(committed.Load())+gaps[store.ReasonReleased]+gaps[store.ReasonExpired] != len(entries) {
		return fmt.Errorf("ledger does not add up")
	}
	var want []int64
	for _, e := range entries {
		if e.State == store.Committed {
			want = append(want, e.Number)
		}
	}
	if !slices.Equal(projected, want) {
		return fmt.Errorf("the projector saw %d results, want the %d committed ones in order", len(projected), len(want))
	}
	fmt.Printf("projector:            %d results applied, strictly in sequence order\n", len(projected))
	fmt.Println("ledger checked: dense, every number resolved exactly once, results read in order")
	return nil
}
