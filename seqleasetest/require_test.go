package seqleasetest_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/seqleasetest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
)

// TestRequireFails checks that each Require helper fails when it should,
// with a message that says what it found instead, on each backend. The
// stream: 1 committed "one", 2 released, 3 leased, 4 committed "four"
// (Complete, out of order).
func TestRequireFails(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := b.stack(t, &seqleasetest.Config{Leaser: &sequence.Config{Owner: "worker-7"}})
			xs, err := st.Leaser.LeaseN(ctx, "orders", 4, &sequence.LeaseOpts{TTL: time.Hour})
			require.NoError(t, err)
			require.NoError(t, xs[0].Commit(ctx, []byte("one")))
			require.NoError(t, xs[1].Release(ctx))
			require.NoError(t, xs[3].Complete(ctx, []byte("four")))
			tb := &fakeTB{}

			t.Run("RequireCommitted", func(t *testing.T) {
				st.RequireCommitted(tb, "orders", 2)
				tb.requireFailed(t, `RequireCommitted orders/2: the entry is a gap (reason "released"), want committed`)
				st.RequireCommitted(tb, "orders", 3)
				tb.requireFailed(t, `RequireCommitted orders/3: the entry is leased by "worker-7" until `, "want committed")
				st.RequireCommitted(tb, "orders", 1, []byte("uno"))
				tb.requireFailed(t, `RequireCommitted orders/1: the payload is "one", want "uno"`)
				st.RequireCommitted(tb, "orders", 1, nil)
				tb.requireFailed(t, `the payload is "one", want nil`)
				st.RequireCommitted(tb, "orders", 1, bytes.Repeat([]byte("x"), 100))
				tb.requireFailed(t, `want "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"... (100 bytes)`)
				st.RequireCommitted(tb, "orders", 5)
				tb.requireFailed(t, "RequireCommitted orders/5: no such entry: the stream has 4 entries")
				st.RequireCommitted(tb, "nothing", 1)
				tb.requireFailed(t, "RequireCommitted nothing/1: the stream has no entries")
				st.RequireCommitted(tb, "orders", 0)
				tb.requireFailed(t, "RequireCommitted orders/0: numbers start at 1")
				st.RequireCommitted(tb, "orders", 1, []byte("one"), []byte("two"))
				tb.requireFailed(t, "2 payloads given, at most one")
				st.RequireCommitted(tb, "orders", 4, []byte("four"))
				tb.requirePassed(t)
			})
			t.Run("RequireGap", func(t *testing.T) {
				st.RequireGap(tb, "orders", 1)
				tb.requireFailed(t, `RequireGap orders/1: the entry is committed with payload "one", want a gap`)
				st.RequireGap(tb, "orders", 3)
				tb.requireFailed(t, `RequireGap orders/3: the entry is leased by "worker-7"`, "want a gap")
				st.RequireGap(tb, "orders", 2, store.ReasonExpired)
				tb.requireFailed(t, `RequireGap orders/2: the entry is a gap (reason "released"), want reason "expired"`)
				st.RequireGap(tb, "orders", 9)
				tb.requireFailed(t, "RequireGap orders/9: no such entry: the stream has 4 entries")
				st.RequireGap(tb, "orders", 2, "a", "b")
				tb.requireFailed(t, "2 reasons given, at most one")
				st.RequireGap(tb, "orders", 2, store.ReasonReleased)
				tb.requirePassed(t)
			})
			t.Run("RequireWatermark", func(t *testing.T) {
				st.RequireWatermark(tb, "orders", 4)
				tb.requireFailed(t, `RequireWatermark orders: the watermark is 2, want 4; last number 4; unresolved: 3 (leased by "worker-7" until `)
				st.RequireWatermark(tb, "nothing", 1)
				tb.requireFailed(t, "RequireWatermark nothing: the watermark is 0, want 1; last number 0")
				st.RequireWatermark(tb, "orders", 2)
				tb.requirePassed(t)
			})
			t.Run("RequireAllResolved", func(t *testing.T) {
				st.RequireAllResolved(tb, "orders")
				tb.requireFailed(t, `RequireAllResolved orders: 1 of 4 entries unresolved (watermark 2); unresolved: 3 (leased by "worker-7" until `)
			})
			t.Run("ManyUnresolved", func(t *testing.T) {
				_, err := st.Leaser.LeaseN(ctx, "many", 7, &sequence.LeaseOpts{TTL: time.Hour})
				require.NoError(t, err)
				st.RequireAllResolved(tb, "many")
				tb.requireFailed(t, "7 of 7 entries unresolved", "1 (leased by", "5 (leased by", ", and 2 more")
			})
			t.Run("BadStream", func(t *testing.T) {
				st.RequireAllResolved(tb, "")
				tb.requireFailed(t, "RequireAllResolved : ", "invalid stream name")
				st.RequireWatermark(tb, "", 0)
				tb.requireFailed(t, "invalid stream name")
				st.RequireGap(tb, "", 1)
				tb.requireFailed(t, "invalid stream name")
			})
		})
	}
}
