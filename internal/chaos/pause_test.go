package chaos_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/chaos"
	"github.com/seqlease/seqlease/store"
)

// TestPausedHolder stops a holder's process (SIGSTOP) past its lease's TTL
// while other worker processes go on, then continues it (SIGCONT):
//
//   - stopped while it works, its lease kept alive (the keep-alive stops
//     with the process): the others' cleanup resolves the number meanwhile
//     (a gap, or its recorded result moved to a new number) and the stream
//     moves past it; the late commit is refused, by the handle and by the
//     database alone (a commit through the store with the same token);
//   - stopped inside its commit's transaction, after the conditional write:
//     the commit was decided at the row lock, before the expiry, so it
//     stands; until the holder goes on nobody can resolve the number, and
//     the stream waits behind it.
//
// After each case the pipeline must go on and the audit of the load find
// nothing wrong (afterFault); at the end everything is verified (finish).
func TestPausedHolder(t *testing.T) {
	h := newHarness(t, "paused")
	require.NoError(t, h.Follow(t.Context()))
	for range 2 {
		spawn(t, h, load())
	}
	progress(t, h, 10)
	const stream = "paused"
	for _, tc := range []struct {
		name   string
		in     string
		result bool // the holder recorded its result: the Retry step moves it
		pause  time.Duration
	}{
		{"while working", "work", false, 0},
		{"while working, result recorded", "work", true, 0},
		{"inside the commit transaction", "tx", false, 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cfg := chaos.WorkerConfig{Streams: []string{stream}, TTL: time.Second, Hold: true, HoldIn: tc.in,
				HoldFor: 2 * time.Second, HoldKeepAlive: true}
			if tc.result {
				cfg.ResultShare = 1
			}
			p := spawn(t, h, cfg)
			ev, err := p.Event(ctx)
			require.NoError(t, err)
			require.Equal(t, "held", ev[0])
			require.NoError(t, p.Pause())
			h.Fault("SIGSTOP of a holder past its TTL, then SIGCONT (" + tc.in + ")")
			n, err := strconv.ParseInt(ev[2], 10, 64)
			require.NoError(t, err)

			if tc.in == "work" {
				// The others resolve n, and the stream goes past it.
				e := waitResolved(ctx, t, h, stream, n)
				// I6, for this lease: resolved within the bound of its
				// expiry, by the database clock.
				require.LessOrEqual(t, e.ResolvedAt.Sub(e.ExpiresAt), resolveBound, "resolved late")
				if tc.result {
					require.NotZero(t, e.RecoveredAs, "the recorded result moved to a new number")
				}
				for {
					st, err := h.Store.Stats(ctx, stream)
					require.NoError(t, err)
					if st.Watermark > n+5 {
						break
					}
					require.NoError(t, ctx.Err(), "the stream did not go past the stopped holder's number")
					time.Sleep(20 * time.Millisecond)
				}
			} else {
				// Past the TTL, n is still leased (the transaction has not
				// committed) and nothing can resolve it: the stream waits.
				deadline := time.Now().Add(tc.pause)
				for time.Now().Before(deadline) {
					st, err := h.Store.Stats(ctx, stream)
					require.NoError(t, err)
					require.Less(t, st.Watermark, n, "resolved past a number whose commit is under way")
					time.Sleep(50 * time.Millisecond)
				}
			}
			require.NoError(t, p.Resume())
			ev, err = p.Event(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{"late", stream, strconv.FormatInt(n, 10)}, ev[:3])
			e := readEntry(ctx, t, h, stream, n)
			if tc.in == "work" {
				require.Contains(t, []string{"expired", "gap"}, ev[3], "the handle's late commit")
				require.Contains(t, []string{"expired", "gap"}, ev[4], "the store's late commit with the same token")
				require.Equal(t, store.Gap, e.State)
			} else {
				require.Equal(t, "ok", ev[3])
				require.Equal(t, store.Committed, e.State)
				require.True(t, e.ResolvedAt.Before(e.ExpiresAt), "decided before the expiry")
			}
			require.NoError(t, p.Shutdown(ctx))
			afterFault(t, h, "SIGSTOP "+tc.name, 10, 0)
		})
	}
	finish(t, h, 5)
}

// waitResolved waits until entry n of stream is resolved and returns it.
func waitResolved(ctx context.Context, t *testing.T, h *chaos.Harness, stream string, n int64) store.Entry {
	t.Helper()
	for {
		e := readEntry(ctx, t, h, stream, n)
		if e.State.Resolved() {
			return e
		}
		require.NoError(t, ctx.Err(), "entry %d never resolved", n)
		time.Sleep(20 * time.Millisecond)
	}
}

func readEntry(ctx context.Context, t *testing.T, h *chaos.Harness, stream string, n int64) store.Entry {
	t.Helper()
	es, err := h.Store.Read(ctx, stream, n-1, 1)
	require.NoError(t, err)
	require.Len(t, es, 1)
	return es[0]
}
