package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
)

// TestWorkLogIsPerStream records work of an operation in one run's log: a
// later run (another stream in the same schema, the same operation ids)
// must not find it, and the run that recorded it must.
func TestWorkLogIsPerStream(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	partial, results, err := newPGLogs(ctx, pool, schema, "projection-1")
	require.NoError(t, err)
	require.NoError(t, partial.record(ctx, "ev-000042", []byte("run 1")))

	got, ok, err := partial.lookup(ctx, store.Entry{OperationID: "ev-000042"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []byte("run 1"), got)
	_, ok, err = results.lookup(ctx, store.Entry{OperationID: "ev-000042"})
	require.NoError(t, err)
	require.False(t, ok, "a partial record is not a result")

	later, _, err := newPGLogs(ctx, pool, schema, "projection-2")
	require.NoError(t, err)
	_, ok, err = later.lookup(ctx, store.Entry{OperationID: "ev-000042"})
	require.NoError(t, err)
	require.False(t, ok, "another run's record of the same operation id")
}
