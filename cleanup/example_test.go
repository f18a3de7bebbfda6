package cleanup_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// Two workers crash holding their leases: one had done part of its work and
// recorded it, the other had nothing. After their leases expire, one cleanup
// cycle moves the first one's work to a new number and turns the second
// number into a gap, so the stream goes on.
func Example() {
	ctx := context.Background()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	backend := memory.New(&memory.Config{Now: func() time.Time { return clock }})
	leaser, err := sequence.New(backend, &sequence.Config{Now: func() time.Time { return clock }, UnorderedOnly: true}) // its workers crash
	if err != nil {
		panic(err)
	}

	partial := map[string][]byte{} // what workers recorded before they died
	for _, op := range []string{"order-1", "order-2"} {
		if _, err := leaser.Lease(ctx, "orders", &sequence.LeaseOpts{OperationID: op, TTL: time.Minute}); err != nil {
			panic(err)
		}
	}
	partial["order-1"] = []byte("half an invoice")
	// ... both workers crash; a minute passes.
	clock = clock.Add(2 * time.Minute)

	// The recovery pipeline asks the application for the partial work;
	// without one, every expired lease would become a gap.
	pipeline, err := recovery.New(backend, &recovery.Config{
		WorkTracker: recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
			w, ok := partial[e.OperationID]
			return w, ok, nil
		}),
	})
	if err != nil {
		panic(err)
	}
	cl, err := cleanup.New(backend, &cleanup.Config{Pipeline: pipeline})
	if err != nil {
		panic(err)
	}
	res, err := cl.RunOnce(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("expired:", res.Expired, "partial work:", res.Resolved[recovery.MethodPartialWork], "gaps:", res.Resolved[recovery.MethodGap])

	entries, err := backend.Read(ctx, "orders", 0, 10)
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		if md, ok := recovery.MetadataOf(e); ok {
			fmt.Printf("%d %s %s: %s of %d (%s)\n", e.Number, e.State, e.OperationID, md.Type, md.OriginalNumber, e.Payload)
			continue
		}
		fmt.Printf("%d %s %s: %s, recovered as %d\n", e.Number, e.State, e.OperationID, e.GapReason, e.RecoveredAs)
	}
	// Output:
	// expired: 2 partial work: 1 gaps: 1
	// 1 gap order-1: recovered, recovered as 3
	// 2 gap order-2: expired, recovered as 0
	// 3 committed order-1: partial-work of 1 (half an invoice)
}
