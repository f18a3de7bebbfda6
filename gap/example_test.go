package gap_test

import (
	"context"
	"fmt"

	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// A worker gives up its number; the gap it leaves is listed and then filled
// by an operator, through a policy that allows filling released gaps only.
func Example() {
	ctx := context.Background()
	backend := memory.New(nil)
	leaser, err := sequence.New(backend, &sequence.Config{UnorderedOnly: true}) // this worker only releases
	if err != nil {
		panic(err)
	}
	gaps, err := gap.New(backend, nil)
	if err != nil {
		panic(err)
	}

	lease, err := leaser.Lease(ctx, "orders", &sequence.LeaseOpts{OperationID: "order-42", Kind: "invoice"})
	if err != nil {
		panic(err)
	}
	if err := lease.Release(ctx); err != nil { // the worker gives the work up
		panic(err)
	}

	open, err := gaps.List(ctx, "orders", nil)
	if err != nil {
		panic(err)
	}
	for _, g := range open {
		fmt.Printf("gap %d: %s %s, reason %q\n", g.Number, g.Kind, g.OperationID, g.Reason)
	}

	err = gaps.Fill(ctx, "orders", 1, []byte(`{"skipped":true}`), &gap.FillOpts{
		FilledBy: "operator alice",
		Policy:   gap.FillReasons(store.ReasonReleased),
	})
	if err != nil {
		panic(err)
	}

	g, err := gaps.Get(ctx, "orders", 1)
	if err != nil {
		panic(err)
	}
	entries, err := backend.Read(ctx, "orders", 0, 1)
	if err != nil {
		panic(err)
	}
	fmt.Printf("gap %d filled by %s: %s %s\n", g.Number, g.FilledBy, entries[0].State, entries[0].Payload)
	count, _ := gaps.Count(ctx, "orders")
	fmt.Println("open gaps:", count)
	// Output:
	// gap 1: invoice order-42, reason "released"
	// gap 1 filled by operator alice: committed {"skipped":true}
	// open gaps: 0
}
