package seqleasetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/seqleasetest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
)

// Two workers crash holding their leases; one had recorded part of its
// work. The test moves the clock past their TTL instead of sleeping, runs
// one cleanup cycle, and checks what became of each number. (In a test,
// Setup(t, cfg) builds the stack and stops it when the test ends.)
func Example() {
	ctx := context.Background()
	partial := map[string][]byte{"invoice-1": []byte("half an invoice")}
	st, err := seqleasetest.New(&seqleasetest.Config{
		Recovery: &recovery.Config{
			WorkTracker: recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
				w, ok := partial[e.OperationID]
				return w, ok, nil
			}),
		},
	})
	if err != nil {
		panic(err)
	}
	defer st.Stop()

	for _, op := range []string{"invoice-1", "invoice-2"} {
		if _, err := st.Leaser.Lease(ctx, "invoices", &sequence.LeaseOpts{OperationID: op, TTL: time.Minute}); err != nil {
			panic(err)
		}
	}
	// ... both workers crash.
	st.Clock.Advance(time.Minute)
	res, err := st.RunCleanup(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("expired:", res.Expired, "recovered:", res.Resolved[recovery.MethodPartialWork], "gaps:", res.Resolved[recovery.MethodGap])

	tb := printTB{}
	st.RequireGap(tb, "invoices", 1, store.ReasonRecovered)
	st.RequireGap(tb, "invoices", 2, store.ReasonExpired)
	st.RequireCommitted(tb, "invoices", 3, []byte("half an invoice"))
	st.RequireAllResolved(tb, "invoices")
	fmt.Println("checked")
	// Output:
	// expired: 2 recovered: 1 gaps: 1
	// checked
}

// A failing assertion says what it found instead of what it wanted: here a
// number whose worker never committed.
func ExampleStack_RequireCommitted() {
	ctx := context.Background()
	st, err := seqleasetest.New(&seqleasetest.Config{Leaser: &sequence.Config{Owner: "worker-1"}})
	if err != nil {
		panic(err)
	}
	defer st.Stop()
	if _, err := st.Leaser.Lease(ctx, "invoices", &sequence.LeaseOpts{TTL: time.Minute}); err != nil {
		panic(err)
	}

	st.RequireCommitted(printTB{}, "invoices", 1)
	// Output:
	// seqleasetest: RequireCommitted invoices/1: the entry is leased by "worker-1" until 2030-01-01T00:01:00Z, want committed
}

// printTB prints the failures a helper reports, for the examples; in a test,
// pass t.
type printTB struct{}

func (printTB) Helper() {}

func (printTB) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
