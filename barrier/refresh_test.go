package barrier_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// gatedSource holds the first Snapshot until released, then runs it with its
// caller's context.
type gatedSource struct {
	*quietSource
	once    sync.Once
	entered chan struct{} // closed when the first Snapshot is held
	release chan struct{} // close to let it go on
}

func (g *gatedSource) Snapshot(ctx context.Context, stream string, limit int) (store.Snapshot, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.release
	}
	return g.quietSource.Snapshot(ctx, stream, limit)
}

// TestCoalescedRefreshSurvivesLoaderFailure: a waiter whose snapshot is
// coalesced into another caller's load must still get a snapshot when that
// load fails because its caller gave up. Without that, the waiter sleeps
// until the safety poll (here: never) even though its number is resolved.
func TestCoalescedRefreshSurvivesLoaderFailure(t *testing.T) {
	t.Parallel()
	src := &gatedSource{quietSource: &quietSource{Store: memory.New(nil), watching: make(chan struct{})},
		entered: make(chan struct{}), release: make(chan struct{})}
	b := start(t, src, &barrier.Config{PollInterval: time.Hour})
	<-src.watching // no Reset races the test
	es := lease(t, src, "s", 2)
	commit(t, src, es[0]) // before the barrier knows the stream: only a snapshot tells it

	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		_, withdraw, err := b.Ready(ctxA, "s", 2) // loads the snapshot, held by the gate
		if err == nil {
			withdraw()
		}
	}()
	<-src.entered

	chB, withdrawB, err := b.Ready(context.Background(), "s", 2) // coalesced into A's load
	require.NoError(t, err)
	defer withdrawB()
	require.False(t, closed(chB))

	cancelA() // A gives up while its load is in flight: the load fails
	close(src.release)
	<-doneA
	waitClosed(t, chB, "waiter whose refresh was coalesced into a failed load")
}

// lateSource reads the first Snapshot at once but returns it only when
// released: the barrier then merges a snapshot older than what it heard
// meanwhile.
type lateSource struct {
	*quietSource
	once    sync.Once
	read    chan struct{} // closed when the first snapshot was read
	release chan struct{}
}

func (l *lateSource) Snapshot(ctx context.Context, stream string, limit int) (store.Snapshot, error) {
	snap, err := l.quietSource.Snapshot(ctx, stream, limit)
	first := false
	l.once.Do(func() { first = true })
	if first {
		close(l.read)
		<-l.release
	}
	return snap, err
}

// TestResolutionsDuringASnapshotAreKept: resolutions heard while a snapshot
// is in flight wake their waiters at once, and the older snapshot merged
// afterwards neither loses them nor moves the watermark back (I5).
func TestResolutionsDuringASnapshotAreKept(t *testing.T) {
	t.Parallel()
	src := &lateSource{quietSource: &quietSource{Store: memory.New(nil), watching: make(chan struct{})},
		read: make(chan struct{}), release: make(chan struct{})}
	b := start(t, src, &barrier.Config{PollInterval: time.Hour})
	<-src.watching // resolutions are heard from now on
	es := lease(t, src, "s", 3)
	type ready struct {
		ch       <-chan struct{}
		withdraw func()
	}
	got := make(chan ready, 1)
	go func() {
		ch, withdraw, err := b.Ready(context.Background(), "s", 3) // reads the snapshot: 1, 2, 3 leased
		if err != nil {
			t.Error(err)
		}
		got <- ready{ch, withdraw}
	}()
	<-src.read
	commit(t, src, es[1])
	commit(t, src, es[0]) // heard: W=2 while the snapshot still says 1 and 2 are leased
	chEarly, withdrawEarly, err := b.Ready(context.Background(), "s", 3)
	require.NoError(t, err)
	defer withdrawEarly()
	require.True(t, closed(chEarly), "W=2 from what was heard, before the snapshot landed")
	close(src.release)
	r := <-got
	defer r.withdraw()
	require.True(t, closed(r.ch), "the older snapshot must not hide what was heard")
	w, err := b.Watermark(context.Background(), "s")
	require.NoError(t, err)
	require.Equal(t, int64(2), w, "the watermark went back")
	commit(t, src, es[2])
	ch4, withdraw4, err := b.Ready(context.Background(), "s", 4)
	require.NoError(t, err)
	defer withdraw4()
	waitClosed(t, ch4, "waiter for 4")
}

// quietSource passes on resolutions but swallows Watch's Reset, so that no
// background refresh races the test; watching closes once Watch registered.
type quietSource struct {
	*memory.Store
	once     sync.Once
	watching chan struct{}
}

func (q *quietSource) Watch(ctx context.Context, sink store.Sink) error {
	return q.Store.Watch(ctx, quietSink{sink, q})
}

type quietSink struct {
	store.Sink
	q *quietSource
}

func (s quietSink) Reset() { s.q.once.Do(func() { close(s.q.watching) }) }

// TestCutSnapshotIsReadAgainAtItsEnd: a snapshot cut at SnapshotLimit
// describes the stream only up to Known. Numbers above Known that were
// resolved before it was read will never be heard of, so when W reaches
// Known with waiters beyond it the barrier must read on at once, not wait for
// the safety poll.
func TestCutSnapshotIsReadAgainAtItsEnd(t *testing.T) {
	t.Parallel()
	src := &quietSource{Store: memory.New(nil), watching: make(chan struct{})}
	b := start(t, src, &barrier.Config{SnapshotLimit: 2, PollInterval: time.Hour})
	<-src.watching
	es := lease(t, src, "s", 6)
	commit(t, src, es[4]) // 5 and 6 resolve before the barrier looks at the stream
	commit(t, src, es[5])
	ch, withdraw, err := b.Ready(context.Background(), "s", 7) // snapshot: {1, 2}, cut: Known = 2
	require.NoError(t, err)
	defer withdraw()
	for _, e := range es[:4] {
		commit(t, src, e) // heard: W = 4
	}
	waitClosed(t, ch, "waiter for 7 (5 and 6 were resolved before the cut snapshot)")
}
