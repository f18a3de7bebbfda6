package sequence_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/sequence"
)

// recordingObserver keeps what a Leaser tells its Observer.
type recordingObserver struct {
	mu      sync.Mutex
	events  []string
	ends    map[string]int // Start key -> times its end was called
	waits   map[int64]int  // number -> CommitReady calls
	commits map[int64]error
}

func newRecordingObserver() *recordingObserver {
	return &recordingObserver{ends: map[string]int{}, waits: map[int64]int{}, commits: map[int64]error{}}
}

type ctxKey struct{}

func (o *recordingObserver) add(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, fmt.Sprintf(format, args...))
}

func (o *recordingObserver) StartLease(ctx context.Context, stream, kind string, n int) (context.Context, func(int64, error)) {
	key := fmt.Sprintf("lease %s %s %d", stream, kind, n)
	return context.WithValue(ctx, ctxKey{}, key), func(first int64, err error) {
		o.mu.Lock()
		o.ends[key]++
		o.mu.Unlock()
		o.add("%s -> %d %v", key, first, err)
	}
}

func (o *recordingObserver) StartCommit(ctx context.Context, stream, kind string, number int64, ordered bool) (context.Context, func(error)) {
	key := fmt.Sprintf("commit %s %s %d ordered=%v", stream, kind, number, ordered)
	return context.WithValue(ctx, ctxKey{}, key), func(err error) {
		o.mu.Lock()
		o.ends[key]++
		o.commits[number] = err
		o.mu.Unlock()
	}
}

func (o *recordingObserver) CommitReady(ctx context.Context, _, _ string, wait time.Duration) {
	key, _ := ctx.Value(ctxKey{}).(string)
	var n int64
	var stream, kind, ordered string
	if _, err := fmt.Sscanf(key, "commit %s %s %d %s", &stream, &kind, &n, &ordered); err != nil || wait < 0 {
		o.add("CommitReady with a foreign context %q (%v) or a negative wait %v", key, err, wait)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waits[n]++
}

func (o *recordingObserver) Released(_ context.Context, stream, kind string, err error) {
	o.add("released %s %s %v", stream, kind, err)
}

func (o *recordingObserver) Extended(_ context.Context, stream, kind string, err error) {
	o.add("extended %s %s %v", stream, kind, err)
}

// TestObserver checks what a Leaser reports to its Observer: every Start's
// end exactly once, with the outcome; the commit wait of every ordered
// commit, grouped or not, under the context StartCommit returned; releases
// and extensions.
func TestObserver(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			o := newRecordingObserver()
			l, err := sequence.New(b.store, &sequence.Config{Barrier: b.barrier, Now: b.now, Observer: o})
			require.NoError(t, err)

			xs, err := l.LeaseN(ctx, "s", 4, &sequence.LeaseOpts{Kind: "k", TTL: time.Minute})
			require.NoError(t, err)
			second := make(chan error, 1)
			go func() { second <- xs[1].Commit(ctx, nil) }() // waits for 1
			require.NoError(t, xs[0].Commit(ctx, nil))
			require.NoError(t, <-second)
			require.NoError(t, xs[1].Commit(ctx, nil), "a repeated commit of the handle is not observed again")
			require.NoError(t, xs[2].Extend(ctx, time.Minute))
			require.NoError(t, xs[2].Release(ctx))
			require.NoError(t, xs[2].Release(ctx), "a repeated release of the handle is not observed again")
			require.NoError(t, xs[3].Complete(ctx, nil))
			require.NoError(t, xs[3].Complete(ctx, nil), "nor a repeated complete")

			late, err := l.Lease(ctx, "s", &sequence.LeaseOpts{Kind: "k", TTL: shortTTL})
			require.NoError(t, err)
			b.expire(t)
			require.ErrorIs(t, late.Commit(ctx, nil), sequence.ErrExpired)
			require.ErrorIs(t, late.Extend(ctx, time.Minute), sequence.ErrExpired)

			o.mu.Lock()
			defer o.mu.Unlock()
			require.Equal(t, map[string]int{
				"lease s k 4":                1,
				"lease s k 1":                1,
				"commit s k 1 ordered=true":  1,
				"commit s k 2 ordered=true":  1,
				"commit s k 4 ordered=false": 1,
				"commit s k 5 ordered=true":  1,
			}, o.ends)
			require.NoError(t, o.commits[1])
			require.NoError(t, o.commits[2])
			require.NoError(t, o.commits[4])
			require.ErrorIs(t, o.commits[5], sequence.ErrExpired)
			require.Equal(t, 1, o.waits[1], "each ordered commit that got its turn reports its wait once")
			require.Equal(t, 1, o.waits[2])
			// The expired lease's turn may come before its holder notices the
			// expiry (the database then refuses it): at most one report.
			require.LessOrEqual(t, o.waits[5], 1)
			require.Len(t, o.waits, 2+o.waits[5])
			require.Equal(t, []string{
				"lease s k 4 -> 1 <nil>",
				"extended s k <nil>",
				"released s k <nil>",
				"lease s k 1 -> 5 <nil>",
			}, o.events[:4])
			require.Len(t, o.events, 5)
			require.Contains(t, o.events[4], "extended s k ")
			require.NotEqual(t, "extended s k <nil>", o.events[4], "the refused extension reports its error")
		})
	}
}
