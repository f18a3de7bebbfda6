package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store/memory"
)

// Two processes want the same name: the second is told who holds it, and
// gets it, with a larger fencing token, once the first releases it.
func Example() {
	ctx := context.Background()
	backend := memory.New(nil) // store/postgres in production
	a, _ := lease.New(backend, &lease.Config{Owner: "worker-a"})
	b, _ := lease.New(backend, &lease.Config{Owner: "worker-b"})
	defer a.Stop()
	defer b.Stop()

	la, err := a.TryAcquire(ctx, "reports/daily", &lease.AcquireOpts{TTL: time.Minute})
	if err != nil {
		panic(err)
	}
	fmt.Println(la.Owner(), "holds it with fence", la.Fence())

	_, err = b.TryAcquire(ctx, "reports/daily", nil)
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Println("worker-b: held by", held.Owner)
	}

	if err := la.Release(ctx); err != nil {
		panic(err)
	}
	lb, err := b.TryAcquire(ctx, "reports/daily", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(lb.Owner(), "holds it with fence", lb.Fence())
	_ = lb.Close(ctx)
	// Output:
	// worker-a holds it with fence 1
	// worker-b: held by worker-a
	// worker-b holds it with fence 2
}

// Leader election: every node runs Run on the same name; one leads at a time
// and its work runs under a context that ends the moment it stops leading.
// When the leader goes away, another takes over.
func ExampleManager_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	backend := memory.New(nil)
	leading := make(chan string)
	node := func(name string) (*lease.Manager, chan error) {
		m, _ := lease.New(backend, &lease.Config{Owner: name})
		_ = m.Start(ctx)
		done := make(chan error, 1)
		go func() {
			done <- m.Run(ctx, "cleanup-leader", &lease.AcquireOpts{TTL: 10 * time.Second},
				func(ctx context.Context, l *lease.Lease) error {
					leading <- fmt.Sprintf("%s leads (fence %d)", l.Owner(), l.Fence())
					<-ctx.Done() // lead until told to stop: lost lease, shutdown
					return nil
				})
		}()
		return m, done
	}
	a, aDone := node("node-a")
	fmt.Println(<-leading)
	b, bDone := node("node-b") // campaigns, waits

	a.Stop() // node-a shuts down: its lease is released, node-b takes over at once
	fmt.Println("node-a:", <-aDone)
	fmt.Println(<-leading)

	cancel()
	<-bDone
	b.Stop()
	// Output:
	// node-a leads (fence 1)
	// node-a: lease: manager stopped
	// node-b leads (fence 2)
}

// cursorStore stands for the system a fan-out cursor lives in. It keeps the
// largest fence it has seen and refuses writes with a smaller one: a writer
// that lost its lease (paused, cut off) can no longer move the cursor. (On
// PostgreSQL, postgres.CheckFence does this inside the writing transaction.)
type cursorStore struct {
	mu    sync.Mutex
	pos   int64
	fence int64
}

func (c *cursorStore) advance(fence, pos int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fence < c.fence {
		return fmt.Errorf("fence %d is stale, %d wrote since", fence, c.fence)
	}
	c.pos, c.fence = pos, fence
	return nil
}

// A fan-out cursor guarded by a lease and its fencing token: the worker that
// holds the lease moves the cursor; a deposed worker's late write is refused.
func Example_fanOutCursor() {
	ctx := context.Background()
	backend := memory.New(nil)
	cursor := &cursorStore{}
	a, _ := lease.New(backend, &lease.Config{Owner: "fanout-a"})
	b, _ := lease.New(backend, &lease.Config{Owner: "fanout-b"})
	defer a.Stop()
	defer b.Stop()

	la, _ := a.TryAcquire(ctx, "cursor/orders", &lease.AcquireOpts{TTL: time.Minute})
	fmt.Println("a advances to 10:", cursor.advance(la.Fence(), 10))

	// fanout-a stalls; an operator declares it dead and fanout-b takes over.
	_, _ = b.ForceRelease(ctx, "fanout-a", nil)
	lb, _ := b.TryAcquire(ctx, "cursor/orders", &lease.AcquireOpts{TTL: time.Minute})
	fmt.Println("b advances to 20:", cursor.advance(lb.Fence(), 20))

	// fanout-a wakes up and, unaware, writes: refused.
	fmt.Println("a advances to 11:", cursor.advance(la.Fence(), 11))
	var stale *lease.FenceError
	if errors.As(la.Check(ctx), &stale) { // asks the backend; the lease ends
		fmt.Println("a's lease:", stale.Reason, errors.Is(la.Err(), lease.ErrLost))
	}
	fmt.Println("cursor at", cursor.pos)
	// Output:
	// a advances to 10: <nil>
	// b advances to 20: <nil>
	// a advances to 11: fence 1 is stale, 2 wrote since
	// a's lease: superseded true
	// cursor at 20
}

// A schema migration guard: every instance of a service starts at once and
// wants to migrate; the lease lets one migrate while the others wait, and
// then find the work done.
func Example_migrationGuard() {
	ctx := context.Background()
	backend := memory.New(nil)
	var mu sync.Mutex
	version, migrations := 6, 0

	var wg sync.WaitGroup
	for i := range 3 {
		m, _ := lease.New(backend, &lease.Config{Owner: fmt.Sprint("instance-", i)})
		_ = m.Start(ctx)
		defer m.Stop()
		wg.Go(func() {
			// Hold: wait for the lease, and keep it renewed while migrating.
			l, err := m.Hold(ctx, "migrate/orders-schema", &lease.AcquireOpts{TTL: 30 * time.Second, Timeout: time.Minute})
			if err != nil {
				panic(err)
			}
			defer l.Close(ctx)
			mu.Lock()
			defer mu.Unlock()
			if version < 7 { // under the lease: look, then act
				version, migrations = 7, migrations+1
			}
		})
	}
	wg.Wait()
	fmt.Println("schema version:", version)
	fmt.Println("migrations run:", migrations)
	// Output:
	// schema version: 7
	// migrations run: 1
}

// One reply per inbox message: the message is delivered at least once, so
// several workers may get the same one. Each takes the message's lease
// before replying; a worker told the lease is held skips, and the holder
// records the reply before it releases, so a later duplicate skips too.
func Example_inboxReply() {
	ctx := context.Background()
	backend := memory.New(nil)
	var mu sync.Mutex
	replied := map[string]bool{} // the inbox table's "replied" column
	replies := 0

	handle := func(m *lease.Manager, msgID string) {
		l, err := m.TryAcquire(ctx, "inbox/reply/"+msgID, &lease.AcquireOpts{TTL: time.Minute})
		if errors.Is(err, lease.ErrHeld) {
			return // another worker is replying right now
		}
		if err != nil {
			panic(err)
		}
		defer l.Close(ctx)
		mu.Lock()
		defer mu.Unlock()
		if replied[msgID] {
			return // a duplicate that came after the reply
		}
		replies++ // send the reply, under l.Context() in real code
		replied[msgID] = true
	}

	var wg sync.WaitGroup
	for i := range 4 { // four workers get the same message
		m, _ := lease.New(backend, &lease.Config{Owner: fmt.Sprint("worker-", i)})
		defer m.Stop()
		wg.Go(func() { handle(m, "msg-42") })
	}
	wg.Wait()
	fmt.Println("replies sent for msg-42:", replies)
	// Output:
	// replies sent for msg-42: 1
}
