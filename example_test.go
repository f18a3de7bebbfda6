package seqlease_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"

	"github.com/seqlease/seqlease"
)

// An ordered pipeline: the work runs in parallel, the results come out in
// the order the numbers were leased.
func Example() {
	ctx := context.Background()
	db, err := seqlease.OpenMemory(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	var wg sync.WaitGroup
	for _, word := range []string{"alpha", "beta", "gamma", "delta"} {
		l, err := db.Lease(ctx, "words", nil) // 1, 2, 3, 4
		if err != nil {
			log.Fatal(err)
		}
		wg.Go(func() { // in parallel; each commit waits for the numbers before it
			if err := l.Commit(ctx, []byte(strings.ToUpper(word))); err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()
	for e, err := range db.Entries(ctx, "words", nil) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(e.Number, string(e.Payload))
	}
	// Output:
	// 1 ALPHA
	// 2 BETA
	// 3 GAMMA
	// 4 DELTA
}
