package barrier_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// A projector replays a stream from a checkpoint and then follows it live:
// it sees resolved entries in order, never past the watermark, and stops
// when its context ends.
func ExampleBarrier_Entries() {
	backend := memory.New(nil)
	b, err := barrier.New(backend, nil)
	if err != nil {
		panic(err)
	}
	if err := b.Start(context.Background()); err != nil {
		panic(err)
	}
	defer b.Stop()

	ctx := context.Background()
	leased, err := backend.Lease(ctx, "orders", []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}, {TTL: time.Minute}, {TTL: time.Minute}}, nil)
	if err != nil {
		panic(err)
	}
	commit := func(i int) {
		e := leased[i]
		if _, err := backend.Commit(ctx, "orders", e.Number, e.Token, &store.CommitParams{Payload: fmt.Appendf(nil, "op %d", e.Number)}); err != nil {
			panic(err)
		}
	}
	commit(0)
	commit(1)
	commit(3) // 4 is committed, but 3 is not: the watermark is 2

	follow, stop := context.WithCancel(ctx)
	defer stop()
	checkpoint := int64(1) // the projector already applied 1
	for e, err := range b.Entries(follow, "orders", &barrier.ReadOpts{After: checkpoint, Follow: true}) {
		if err != nil {
			fmt.Println("stopped:", err)
			break
		}
		fmt.Printf("apply %d: %s\n", e.Number, e.Payload)
		switch e.Number {
		case 2:
			commit(2) // the watermark moves to 4
		case 4:
			stop() // the projector shuts down
		}
	}
	// Output:
	// apply 2: op 2
	// apply 3: op 3
	// apply 4: op 4
	// stopped: barrier: follow orders: context canceled
}
