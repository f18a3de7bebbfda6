package seqleasetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/seqleasetest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// TestClockExpiresLeases: on the default stack, moving the Clock past a
// lease's TTL expires it for the store and for the Leaser's handle alike,
// and one cleanup cycle resolves it.
func TestClockExpiresLeases(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := seqleasetest.Setup(t, nil)
	require.NotNil(t, st.Clock)
	require.IsType(t, &memory.Store{}, st.Store)

	x, err := st.Leaser.Lease(ctx, "orders", &sequence.LeaseOpts{TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, x.LeasedAt().Equal(seqleasetest.DefaultStart), "the store reads the Clock")
	require.False(t, x.IsExpired())

	res, err := st.RunCleanup(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Expired, "nothing expired before the clock moved")

	done := x.Done()
	st.Clock.Advance(time.Minute)
	require.True(t, x.IsExpired(), "the Leaser reads the Clock")
	require.ErrorIs(t, x.Err(), sequence.ErrExpired)
	<-done // closed by Err, not by a timer (that runs on real time)
	require.ErrorIs(t, x.Commit(ctx, []byte("late")), sequence.ErrExpired)

	res, err = st.RunCleanup(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Expired)
	require.Equal(t, 1, res.Resolved[recovery.MethodGap])
	st.RequireGap(t, "orders", 1, store.ReasonExpired)
	st.RequireAllResolved(t, "orders")
}

// TestStack runs a small pipeline on each backend: a commit, a release, an
// expiry without sleeping (Expire), one cleanup cycle; then every Require
// helper passes on what happened.
func TestStack(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := b.stack(t, nil)
			xs, err := st.Leaser.LeaseN(ctx, "orders", 3, &sequence.LeaseOpts{TTL: time.Hour})
			require.NoError(t, err)
			require.NoError(t, xs[0].Commit(ctx, []byte("one")))
			require.NoError(t, st.Expire(ctx, xs[1]))
			require.NoError(t, st.Expire(ctx, xs[1]), "expiring twice is fine")
			require.NoError(t, xs[2].Release(ctx))
			require.ErrorIs(t, xs[1].Commit(ctx, []byte("late")), sequence.ErrExpired)
			require.ErrorIs(t, st.Expire(ctx, xs[0]), sequence.ErrCommitted, "a committed lease cannot expire")

			tb := &fakeTB{}
			st.RequireWatermark(tb, "orders", 1)
			tb.requirePassed(t)

			res, err := st.RunCleanup(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Expired)
			require.Equal(t, 1, res.Resolved[recovery.MethodGap])

			st.RequireCommitted(tb, "orders", 1)
			st.RequireCommitted(tb, "orders", 1, []byte("one"))
			st.RequireGap(tb, "orders", 2)
			st.RequireGap(tb, "orders", 2, store.ReasonExpired)
			st.RequireGap(tb, "orders", 3, store.ReasonReleased)
			st.RequireWatermark(tb, "orders", 3)
			st.RequireAllResolved(tb, "orders")
			st.RequireAllResolved(tb, "never-leased")
			st.RequireWatermark(tb, "never-leased", 0)
			tb.requirePassed(t)
		})
	}
}

// TestRecovered: with a WorkTracker in the cleanup configuration, the work
// of an expired lease moves to a new number, which RequireCommitted sees
// with the recovered payload.
func TestRecovered(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			tracker := recovery.WorkTrackerFunc(func(_ context.Context, e store.Entry) ([]byte, bool, error) {
				return []byte("half of " + e.OperationID), e.OperationID == "op-1", nil
			})
			st := b.stack(t, &seqleasetest.Config{Recovery: &recovery.Config{WorkTracker: tracker}})
			x, err := st.Leaser.Lease(ctx, "orders", &sequence.LeaseOpts{OperationID: "op-1", TTL: time.Hour})
			require.NoError(t, err)
			require.NoError(t, st.Expire(ctx, x))

			res, err := st.RunCleanup(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Resolved[recovery.MethodPartialWork])

			tb := &fakeTB{}
			st.RequireGap(tb, "orders", 1, store.ReasonRecovered)
			st.RequireCommitted(tb, "orders", 2, []byte("half of op-1"))
			st.RequireAllResolved(tb, "orders")
			tb.requirePassed(t)
		})
	}
}

// TestDrain: Drain returns once every number handed out is resolved, and
// not before; when its context ends first it fails, naming the entries that
// hold the watermark back.
func TestDrain(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := b.stack(t, nil)
			tb := &fakeTB{}
			st.Drain(ctx, tb, "empty")
			tb.requirePassed(t)

			xs, err := st.Leaser.LeaseN(ctx, "orders", 2, &sequence.LeaseOpts{TTL: time.Hour})
			require.NoError(t, err)

			// A context that has ended: Drain must fail, not pass.
			ended, cancel := context.WithCancel(ctx)
			cancel()
			st.Drain(ended, tb, "orders")
			tb.requireFailed(t, "Drain orders: the watermark is 0, not the last number 2", "context canceled",
				"unresolved: 1 (leased by", "2 (leased by")

			drained := make(chan struct{})
			dtb := &fakeTB{}
			go func() {
				defer close(drained)
				st.Drain(ctx, dtb, "orders")
			}()
			require.NoError(t, xs[1].Complete(ctx, []byte("two")))
			select {
			case <-drained:
				t.Fatal("Drain returned while number 1 was leased")
			default:
			}
			require.NoError(t, xs[0].Commit(ctx, []byte("one")))
			<-drained
			dtb.requirePassed(t)
			st.RequireWatermark(tb, "orders", 2)
			tb.requirePassed(t)
		})
	}
}

// TestNew: New rejects an invalid configuration with an error matching
// store.ErrInvalidArgument (and leaves no goroutine behind, which TestMain
// checks); Stop is safe twice; a Clock given with a store of one's own is
// the Leaser's clock too.
func TestNew(t *testing.T) {
	t.Parallel()
	_, err := seqleasetest.New(&seqleasetest.Config{Leaser: &sequence.Config{MaxTTL: -time.Second}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = seqleasetest.New(&seqleasetest.Config{Cleanup: &cleanup.Config{Interval: -time.Second}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	_, err = seqleasetest.New(&seqleasetest.Config{Recovery: &recovery.Config{MaxAttempts: -1}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	mem := memory.New(nil)
	p, err := recovery.New(mem, nil)
	require.NoError(t, err)
	_, err = seqleasetest.New(&seqleasetest.Config{Store: mem, Cleanup: &cleanup.Config{Pipeline: p}, Recovery: &recovery.Config{}})
	require.ErrorIs(t, err, store.ErrInvalidArgument, "a pipeline and a recovery config")

	clock := seqleasetest.NewClock(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := seqleasetest.New(&seqleasetest.Config{Store: memory.New(&memory.Config{Now: clock.Now}), Clock: clock})
	require.NoError(t, err)
	defer st.Stop()
	x, err := st.Leaser.Lease(t.Context(), "s", &sequence.LeaseOpts{TTL: time.Minute})
	require.NoError(t, err)
	clock.Advance(time.Minute)
	require.True(t, x.IsExpired())
	st.Stop()
	st.Stop()
}

// TestStackLiteral: the assertions work on a Stack literal over a store
// wired elsewhere, and Stop stops only the parts that are set.
func TestStackLiteral(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	backend := memory.New(nil)
	leaser, err := sequence.New(backend, &sequence.Config{UnorderedOnly: true})
	require.NoError(t, err)
	x, err := leaser.Lease(ctx, "s", nil)
	require.NoError(t, err)
	require.NoError(t, x.Complete(ctx, []byte("p")))

	st := &seqleasetest.Stack{Store: backend}
	tb := &fakeTB{}
	st.RequireCommitted(tb, "s", 1, []byte("p"))
	st.RequireAllResolved(tb, "s")
	tb.requirePassed(t)
	st.RequireGap(tb, "s", 1)
	tb.requireFailed(t, `the entry is committed with payload "p", want a gap`)
	st.Stop()
}
