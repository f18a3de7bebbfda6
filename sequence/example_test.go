package sequence_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// Three workers lease numbers and finish their work in reverse order; their
// ordered commits still take effect in sequence order, because each waits at
// the barrier for every earlier number.
func Example() {
	ctx := context.Background()
	backend := memory.New(nil)
	b, err := barrier.New(backend, nil)
	if err != nil {
		panic(err)
	}
	if err := b.Start(ctx); err != nil {
		panic(err)
	}
	defer b.Stop()
	leaser, err := sequence.New(backend, &sequence.Config{Barrier: b})
	if err != nil {
		panic(err)
	}

	leases, err := leaser.LeaseN(ctx, "orders", 3, nil)
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	for i := len(leases) - 1; i >= 0; i-- { // the last one finishes its work first
		x := leases[i]
		fmt.Println("work done for", x.Number())
		wg.Go(func() {
			if err := x.Commit(ctx, fmt.Appendf(nil, "result %d", x.Number())); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()

	entries, err := backend.Read(ctx, "orders", 0, 10)
	if err != nil {
		panic(err)
	}
	fmt.Println("committed in number order:", slices.IsSortedFunc(entries, func(a, b store.Entry) int {
		return a.ResolvedAt.Compare(b.ResolvedAt)
	}))
	for e, err := range b.Entries(ctx, "orders", nil) {
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d %s\n", e.Number, e.Payload)
	}
	// Output:
	// work done for 3
	// work done for 2
	// work done for 1
	// committed in number order: true
	// 1 result 1
	// 2 result 2
	// 3 result 3
}

// A worker that cannot finish releases its number: it becomes a gap, and the
// commits behind it go on without waiting for its lease to expire.
func ExampleLease_Release() {
	ctx := context.Background()
	backend := memory.New(nil)
	b, _ := barrier.New(backend, nil)
	if err := b.Start(ctx); err != nil {
		panic(err)
	}
	defer b.Stop()
	leaser, _ := sequence.New(backend, &sequence.Config{Barrier: b})

	first, _ := leaser.Lease(ctx, "outbox", &sequence.LeaseOpts{OperationID: "msg-1"})
	second, _ := leaser.Lease(ctx, "outbox", &sequence.LeaseOpts{OperationID: "msg-2"})
	if err := first.Release(ctx); err != nil { // msg-1 cannot be sent
		panic(err)
	}
	if err := second.Commit(ctx, []byte("sent msg-2")); err != nil {
		panic(err)
	}
	for e, err := range b.Entries(ctx, "outbox", &barrier.ReadOpts{IncludeGaps: true}) {
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d %s %q %q\n", e.Number, e.State, e.GapReason, e.Payload)
	}
	// Output:
	// 1 gap "released" ""
	// 2 committed "" "sent msg-2"
}

// A retry with the same lease after an error whose outcome is unknown (a lost
// connection) reports the true outcome and never commits twice.
func ExampleLease_Commit_retry() {
	ctx := context.Background()
	backend := memory.New(nil)
	b, _ := barrier.New(backend, nil)
	if err := b.Start(ctx); err != nil {
		panic(err)
	}
	defer b.Stop()
	leaser, _ := sequence.New(backend, &sequence.Config{Barrier: b})

	x, _ := leaser.Lease(ctx, "s", nil)
	fmt.Println(x.Commit(ctx, []byte("v")))
	fmt.Println(x.Commit(ctx, []byte("v"))) // as after a lost reply
	fmt.Println(x.Err())
	// Output:
	// <nil>
	// <nil>
	// seqlease: entry already committed
}
