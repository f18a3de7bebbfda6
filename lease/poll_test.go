package lease_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// deafWatch is a store whose WatchLeases hears nothing, as a PostgreSQL
// watch behind a transaction-mode pooler: it hands its sink to the test
// and waits for its context.
type deafWatch struct {
	*memory.Store
	sinks chan store.LeaseSink
}

func (d *deafWatch) WatchLeases(ctx context.Context, sink store.LeaseSink) error {
	sink.Reset()
	d.sinks <- sink
	<-ctx.Done()
	return ctx.Err()
}

// TestPollWakesABlockedAcquire: the Manager's sink is a store.Poller, and
// Poll makes a blocked Acquire try again at once, so that a release whose
// notice was never heard is seen. On synctest's fake clock, which moves
// only while every goroutine waits, nothing else wakes the waiter: its poll
// interval is an hour, and its next announcement is seconds away.
func TestPollWakesABlockedAcquire(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := memory.New(nil)
		holder, err := lease.New(mem, &lease.Config{Owner: "alice"})
		require.NoError(t, err)
		defer holder.Stop()
		d := &deafWatch{Store: mem, sinks: make(chan store.LeaseSink, 1)}
		waiter, err := lease.New(d, &lease.Config{Owner: "bob", PollInterval: time.Hour})
		require.NoError(t, err)
		require.NoError(t, waiter.Start(ctx))
		defer waiter.Stop()
		poller, ok := (<-d.sinks).(store.Poller)
		require.True(t, ok, "the Manager's sink is a store.Poller")

		held, err := holder.Acquire(ctx, "x", &lease.AcquireOpts{TTL: 50 * time.Minute})
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			l, err := waiter.Acquire(ctx, "x", &lease.AcquireOpts{TTL: time.Minute})
			if err == nil {
				err = l.Close(ctx)
			}
			got <- err
		}()
		synctest.Wait()
		require.NoError(t, held.Release(ctx))
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("the waiter was woken without a notice or a poll: %v", err)
		default:
		}

		poller.Poll()
		synctest.Wait()
		select {
		case err := <-got:
			require.NoError(t, err)
		default:
			t.Fatal("Poll did not make the blocked Acquire try again")
		}
	})
}
