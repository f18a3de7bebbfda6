package codec_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/codec"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// Order is the payload type of the example.
type Order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

// Workers commit Orders, not bytes; a reader gets them back decoded, in
// sequence order, with each entry's number.
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

	orders := codec.New[Order](nil) // JSON
	for _, o := range []Order{{"o-1", 30}, {"o-2", 12}} {
		lease, err := leaser.Lease(ctx, "orders", nil)
		if err != nil {
			panic(err)
		}
		if err := orders.Commit(ctx, lease, o); err != nil {
			panic(err)
		}
	}

	// A value the codec cannot encode is bad input, and nothing is written.
	lease, err := leaser.Lease(ctx, "orders", nil)
	if err != nil {
		panic(err)
	}
	bad := codec.New[chan int](nil)
	err = bad.Commit(ctx, lease, make(chan int))
	fmt.Println("invalid argument:", errors.Is(err, store.ErrInvalidArgument), "still held:", lease.Err() == nil)
	if err := lease.Release(ctx); err != nil {
		panic(err)
	}

	for e, err := range orders.Entries(ctx, b, "orders", nil) {
		if err != nil {
			panic(err)
		}
		fmt.Println(e.Number, e.Value.ID, e.Value.Total)
	}
	// Output:
	// invalid argument: true still held: true
	// 1 o-1 30
	// 2 o-2 12
}
