package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestPoolSaturation checks the share of the pool in use as connections are
// acquired and released.
func TestPoolSaturation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgtest.NewPool(ctx, &pgtest.Options{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.Zero(t, s.PoolSaturation())
	c1, err := pool.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, 0.5, s.PoolSaturation())
	c2, err := pool.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, 1.0, postgres.PoolSaturation(pool.Stat()))
	c1.Release()
	c2.Release()
	require.Zero(t, s.PoolSaturation())
	require.Zero(t, postgres.PoolSaturation(nil))
}
