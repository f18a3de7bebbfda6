package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestReaders lists the readers' checkpoints with their lag, as a table
// and as JSON, filtered, and deletes one.
func TestReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	commit := func(stream string, n, k int) {
		reqs := make([]store.LeaseRequest, n)
		for i := range reqs {
			reqs[i].TTL = time.Minute
		}
		es, err := s.Lease(ctx, stream, reqs, nil)
		require.NoError(t, err)
		for _, e := range es[:k] {
			_, err := s.Commit(ctx, e.Stream, e.Number, e.Token, nil)
			require.NoError(t, err)
		}
	}
	commit("orders", 5, 5)
	commit("payments", 3, 2)
	require.NoError(t, s.SaveCheckpoint(ctx, "projection", "orders", 3, nil))
	require.NoError(t, s.SaveCheckpoint(ctx, "relay", "orders", 5, nil))
	require.NoError(t, s.SaveCheckpoint(ctx, "projection", "payments", 1, nil))

	code, out, errOut := seqlease(t, "-schema", schema, "readers")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `READER\s+STREAM\s+CHECKPOINT\s+WATERMARK\s+LAG\n`+
		`projection\s+orders\s+3\s+5\s+2\n`+
		`projection\s+payments\s+1\s+2\s+1\n`+
		`relay\s+orders\s+5\s+5\s+0\n$`, out)

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "readers", "-stream", "orders")
	require.Equal(t, 0, code, errOut)
	var rows []readerRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	for i := range rows {
		require.False(t, rows[i].UpdatedAt.IsZero())
		rows[i].UpdatedAt = time.Time{}
	}
	require.Equal(t, []readerRow{
		{Reader: "projection", Stream: "orders", Checkpoint: 3, Watermark: 5, Lag: 2},
		{Reader: "relay", Stream: "orders", Checkpoint: 5, Watermark: 5},
	}, rows)

	code, out, errOut = seqlease(t, "-schema", schema, "delete-checkpoint", "-reader", "projection", "-stream", "orders")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `projection\s+orders\s+3\s+deleted`, out)
	pos, err := s.Checkpoint(ctx, "projection", "orders")
	require.NoError(t, err)
	require.Zero(t, pos)
	code, out, _ = seqlease(t, "-schema", schema, "readers", "-reader", "projection")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "orders")
	require.Contains(t, out, "payments")

	code, _, errOut = seqlease(t, "-schema", schema, "delete-checkpoint", "-reader", "projection", "-stream", "orders")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `reader "projection" has no checkpoint in stream "orders"`)
}
