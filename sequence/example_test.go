package sequence_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
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

// An outbox: events are appended to a stream as entries born committed,
// with no lease to hold. Readers follow the stream in order.
func ExampleLeaser_Append() {
	ctx := context.Background()
	backend := memory.New(nil)
	leaser, err := sequence.New(backend, &sequence.Config{UnorderedOnly: true}) // appends only: no ordered Commit
	if err != nil {
		panic(err)
	}
	numbers, err := leaser.Append(ctx, "outbox", &sequence.AppendOpts{Kind: "order-placed"},
		[]byte(`{"order":1}`), []byte(`{"order":2}`))
	if err != nil {
		panic(err)
	}
	fmt.Println("appended:", numbers)
	entries, err := backend.ReadResolved(ctx, "outbox", 0, 10)
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		fmt.Println(e.Number, e.State, e.Kind, string(e.Payload))
	}
	// Output:
	// appended: [1 2]
	// 1 committed order-placed {"order":1}
	// 2 committed order-placed {"order":2}
}

// The application's own transaction: the business row and the stream's
// entries commit together, or roll back together and leave no hole. It
// needs PostgreSQL, so it only compiles here.
func ExampleLeaser_InTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	pg, err := postgres.New(pool, nil)
	if err != nil {
		panic(err)
	}
	b, err := barrier.New(pg, nil) // its Watch notices what the transactions commit
	if err != nil {
		panic(err)
	}
	if err := b.Start(ctx); err != nil {
		panic(err)
	}
	defer b.Stop()
	leaser, err := sequence.New(pg, &sequence.Config{Barrier: b})
	if err != nil {
		panic(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id, total) VALUES ($1, $2)", 42, 1999); err != nil {
			return err
		}
		txl := leaser.InTx(pg.InTx(tx))
		// The outbox entry of the order, committed with it.
		if _, err := txl.Append(ctx, "orders", &sequence.AppendOpts{Kind: "order-placed"}, []byte(`{"order":42}`)); err != nil {
			return err
		}
		// A projection's ordered commit, in the same transaction.
		x, err := txl.Lease(ctx, "order-totals", nil)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE totals SET sum = sum + $1", 1999); err != nil {
			return err
		}
		return x.Commit(ctx, nil)
	})
	if err != nil {
		fmt.Println("rolled back, no number lost:", err)
	}
}
