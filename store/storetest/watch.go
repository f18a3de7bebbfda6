package storetest

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

func testSnapshot(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("describes the stream at one instant", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		snap, err := b.s.Snapshot(b.ctx, s, 0)
		require.NoError(t, err, "unknown stream")
		require.Equal(t, store.Snapshot{}, snap)

		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Minute, "3"),
			req(time.Minute, "4"), req(time.Minute, "5"), req(time.Minute, "6"))
		b.commit(es[0], time.Second, nil)
		b.release(es[2], time.Second)
		b.commit(es[4], time.Second, nil)
		snap, err = b.s.Snapshot(b.ctx, s, 0)
		require.NoError(t, err)
		require.Equal(t, store.Snapshot{Watermark: 1, Known: 6, Unresolved: []int64{2, 4, 6}}, snap)

		snap, err = b.s.Snapshot(b.ctx, s, 2)
		require.NoError(t, err)
		require.Equal(t, store.Snapshot{Watermark: 1, Known: 4, Unresolved: []int64{2, 4}}, snap, "cut at the limit")

		for _, e := range []store.Entry{es[1], es[3], es[5]} {
			b.commit(e, 2*time.Second, nil)
		}
		snap, err = b.s.Snapshot(b.ctx, s, 0)
		require.NoError(t, err)
		require.Equal(t, int64(6), snap.Watermark)
		require.Equal(t, int64(6), snap.Known)
		require.Empty(t, snap.Unresolved)
	})

	t.Run("bad stream name", func(t *testing.T) {
		b := setup(t, newStore)
		_, err := b.s.Snapshot(b.ctx, "", 0)
		require.ErrorIs(t, err, store.ErrInvalidStream)
	})
}

func testReadResolved(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("stops before the first unresolved entry", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		_, err := b.s.ReadResolved(b.ctx, s, 0, 0)
		require.ErrorIs(t, err, store.ErrStreamNotFound)

		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Minute, "3"), req(time.Minute, "4"))
		got, err := b.s.ReadResolved(b.ctx, s, 0, 0)
		require.NoError(t, err)
		require.Empty(t, got)

		b.commit(es[0], time.Second, []byte("one"))
		b.release(es[1], time.Second)
		b.commit(es[3], time.Second, []byte("four"))
		got, err = b.s.ReadResolved(b.ctx, s, 0, 0)
		require.NoError(t, err)
		require.Len(t, got, 2, "3 is unresolved: 4 is past the watermark")
		require.Equal(t, []byte("one"), got[0].Payload)
		require.Equal(t, store.Gap, got[1].State)

		b.commit(es[2], time.Second, []byte("three"))
		got, err = b.s.ReadResolved(b.ctx, s, 1, 2)
		require.NoError(t, err)
		require.Equal(t, []int64{2, 3}, numbers(got), "after and limit")
		got, err = b.s.ReadResolved(b.ctx, s, 3, 0)
		require.NoError(t, err)
		require.Equal(t, []int64{4}, numbers(got))
		require.Equal(t, []byte("four"), got[0].Payload)
		got, err = b.s.ReadResolved(b.ctx, s, 4, 0)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("bad input", func(t *testing.T) {
		b := setup(t, newStore)
		_, err := b.s.ReadResolved(b.ctx, "", 0, 0)
		require.ErrorIs(t, err, store.ErrInvalidStream)
		_, err = b.s.ReadResolved(b.ctx, "x", -1, 0)
		require.ErrorIs(t, err, store.ErrInvalidNumber)
		_, err = b.s.ReadResolved(b.ctx, "x", 0, store.MaxListLimit+1)
		require.ErrorIs(t, err, store.ErrInvalidCount)
	})

	t.Run("never past the watermark whatever after is", func(t *testing.T) {
		// 1 and 2 committed, 3 leased, 4 and 5 committed: the watermark is
		// 2, and a read from any position yields nothing past it, also one
		// that starts above the unresolved 3 (I5).
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Minute, "3"),
			req(time.Minute, "4"), req(time.Minute, "5"))
		for _, i := range []int{0, 1, 3, 4} {
			b.commit(es[i], time.Second, []byte{byte('1' + i)})
		}
		for _, c := range []struct {
			after, limit int64
			want         []int64
		}{
			{0, 0, []int64{1, 2}}, {1, 0, []int64{2}}, {0, 1, []int64{1}}, {2, 0, []int64{}},
			{3, 0, []int64{}}, {4, 0, []int64{}}, {5, 0, []int64{}}, {3, 1, []int64{}}, {1 << 40, 0, []int64{}},
			{math.MaxInt64, 0, []int64{}},
		} {
			got, err := b.s.ReadResolved(b.ctx, s, c.after, int(c.limit))
			require.NoError(t, err, "after %d", c.after)
			require.Equal(t, c.want, numbers(got), "after %d limit %d: the watermark is 2", c.after, c.limit)
		}

		b.commit(es[2], time.Second, []byte("3"))
		for after, want := range map[int64][]int64{2: {3, 4, 5}, 3: {4, 5}, 4: {5}, 5: {}} {
			got, err := b.s.ReadResolved(b.ctx, s, after, 0)
			require.NoError(t, err)
			require.Equal(t, want, numbers(got), "after %d, everything resolved", after)
		}
	})
}

// recordingSink collects what Watch reports.
type recordingSink struct {
	resets  chan struct{}
	mu      sync.Mutex
	seen    map[int64]int // number -> times reported, for one stream
	through int64         // the highest ResolvedThrough, for that stream
	stream  string
	got     chan int64
}

func (r *recordingSink) Resolved(stream string, number int64) {
	if stream != r.stream {
		return
	}
	r.mu.Lock()
	r.seen[number]++
	r.mu.Unlock()
	select {
	case r.got <- number:
	default:
	}
}

func (r *recordingSink) ResolvedThrough(stream string, through int64) {
	if stream != r.stream {
		return
	}
	r.mu.Lock()
	r.through = max(r.through, through)
	r.mu.Unlock()
}

// reported returns the numbers reported resolved, one by one or up to
// through.
func (r *recordingSink) reported() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for n := int64(1); n <= r.through; n++ {
		out = append(out, n)
	}
	for n := range r.seen {
		if n > r.through {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (r *recordingSink) Reset() {
	select {
	case r.resets <- struct{}{}:
	default:
	}
}

// watch starts a Watch whose sink records stream's resolutions and returns
// the sink once the Watch listens (its first Reset). The Watch ends with the
// test, and must then return context.Canceled.
func (b *bundle) watch(t *testing.T, stream string) *recordingSink {
	t.Helper()
	sink := &recordingSink{resets: make(chan struct{}, 1), seen: map[int64]int{}, stream: stream, got: make(chan int64, 100)}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- b.s.Watch(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
	select {
	case <-sink.resets:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not call Reset when it started listening")
	}
	return sink
}

func testWatch(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("reports exactly the resolutions that took effect", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		sink := b.watch(t, s)

		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Second, "3"),
			req(time.Minute, "4"), req(time.Minute, "5"), req(time.Minute, "6"), req(time.Minute, "7"))
		b.commit(es[0], time.Second, nil)
		_, err := b.s.Commit(b.ctx, s, 2, store.NewToken(), &store.CommitParams{Now: b.at(time.Second)})
		require.ErrorIs(t, err, store.ErrTokenMismatch, "a refused commit is not reported")
		b.release(es[1], time.Second)
		b.expire(es[2], 2*time.Second, nil)
		res, err := b.s.CommitBatch(b.ctx, s, []store.CommitItem{
			{Number: 4, Token: es[3].Token}, {Number: 5, Token: store.NewToken()}, {Number: 6, Token: es[5].Token},
		}, &store.CommitBatchParams{Ordered: true, Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.Error(t, res[1].Err)
		require.ErrorIs(t, res[2].Err, store.ErrNotReady)
		b.commit(es[6], 3*time.Second, nil) // the sentinel: reported after everything above

		for {
			select {
			case n := <-sink.got:
				if n != 7 {
					continue
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the sentinel's resolution was not reported")
			}
			break
		}
		require.Equal(t, []int64{1, 2, 3, 4, 7}, sink.reported(), "every resolution, and nothing else, before the sentinel")
	})
}
