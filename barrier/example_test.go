package barrier_test

import (
	"context"
	"errors"
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
	// stopped: barrier: follow "orders": context canceled
}

// A named reader resumes after its checkpoint: the first run processes 1..3,
// saving its position after each entry, and stops; the next run starts at
// 4. A checkpoint never moves back, and its lag is the watermark minus it.
func ExampleReadOpts_reader() {
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
	reqs := []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}, {TTL: time.Minute}, {TTL: time.Minute}, {TTL: time.Minute}}
	leased, err := backend.Lease(ctx, "orders", reqs, nil)
	if err != nil {
		panic(err)
	}
	for _, e := range leased {
		if _, err := backend.Commit(ctx, "orders", e.Number, e.Token, nil); err != nil {
			panic(err)
		}
	}

	run := func(name string, stopAt int64) {
		for e, err := range b.Entries(ctx, "orders", &barrier.ReadOpts{Reader: "projection"}) {
			if err != nil {
				panic(err)
			}
			fmt.Printf("%s: apply %d\n", name, e.Number)
			// Not transactional here: on PostgreSQL, save in the
			// transaction that applies the entry (exactly once).
			if err := backend.SaveCheckpoint(ctx, "projection", "orders", e.Number, nil); err != nil {
				panic(err)
			}
			if e.Number == stopAt {
				return
			}
		}
	}
	run("first run", 3)
	cs, _ := backend.ListCheckpoints(ctx, nil)
	fmt.Printf("%s at %d of %d: lag %d\n", cs[0].Reader, cs[0].Position, cs[0].Watermark, cs[0].Lag())
	run("next run", 0)

	err = backend.SaveCheckpoint(ctx, "projection", "orders", 2, nil)
	fmt.Println(errors.Is(err, store.ErrCheckpointBackwards), err)
	// Output:
	// first run: apply 1
	// first run: apply 2
	// first run: apply 3
	// projection at 3 of 5: lag 2
	// next run: apply 4
	// next run: apply 5
	// true save checkpoint: seqlease: checkpoint would move backwards: reader "projection", stream "orders": at 5, asked 2
}
