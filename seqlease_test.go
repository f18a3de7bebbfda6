package seqlease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease"
	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// orderedPipeline leases n numbers of stream, commits them from n
// goroutines started last number first (each commit waits at the barrier
// for the numbers before it), and returns what a reader reads back.
func orderedPipeline(t *testing.T, c *seqlease.Client, stream string, n int) []string {
	t.Helper()
	ctx := t.Context()
	leases := make([]*sequence.Lease, n)
	for i := range leases {
		l, err := c.Lease(ctx, stream, nil)
		require.NoError(t, err)
		leases[i] = l
	}
	var wg sync.WaitGroup
	for _, l := range slices.Backward(leases) {
		wg.Go(func() {
			if err := l.Commit(ctx, fmt.Appendf(nil, "%d", l.Number())); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var got []string
	for e, err := range c.Entries(ctx, stream, nil) {
		require.NoError(t, err)
		got = append(got, fmt.Sprintf("%d=%s", e.Number, e.Payload))
	}
	return got
}

func want(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%d=%d", i+1, i+1)
	}
	return out
}

func TestOpenMemory(t *testing.T) {
	t.Parallel()
	c, err := seqlease.OpenMemory(nil)
	require.NoError(t, err)
	require.Equal(t, want(8), orderedPipeline(t, c, "orders", 8))
	require.NotNil(t, c.Cleanup(), "the cleanup loop runs by default")
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close twice")

	_, err = c.Tx(nil).Append(t.Context(), "orders", nil, []byte("x"))
	require.ErrorIs(t, err, store.ErrUnsupported, "no transactions in memory")
}

func TestOpenRefusesAnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.ReserveSchema(t, pool)
	_, err := seqlease.Open(t.Context(), pool, &seqlease.Options{Schema: schema})
	require.ErrorIs(t, err, migrations.ErrPending)
	require.ErrorContains(t, err, "seqlease -schema "+schema+" migrate up", "names the command to run")
	var exists bool
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	require.False(t, exists, "the check creates nothing")

	// A schema migrated to an older version is refused the same way.
	m, err := migrations.New(&migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(t.Context(), pool)
	require.NoError(t, err)
	_, err = m.Down(t.Context(), pool, 1)
	require.NoError(t, err)
	_, err = seqlease.Open(t.Context(), pool, &seqlease.Options{Schema: schema})
	var pe *migrations.PendingError
	require.ErrorAs(t, err, &pe)
	last := migrations.Migrations()[len(migrations.Migrations())-1].Version
	require.Equal(t, []int{last}, pe.Pending)

	c, err := seqlease.Open(t.Context(), pool, &seqlease.Options{Schema: schema, Migrate: true})
	require.NoError(t, err, "Migrate applies what is missing")
	require.NoError(t, c.Close())
}

func TestOpenRefusesConflictingOptions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	cases := map[string]*seqlease.Options{
		"Options.Postgres.Schema": {Schema: schema, Postgres: &postgres.Config{Schema: "other"}},
		"Options.Leaser.Barrier":  {Schema: schema, Leaser: &sequence.Config{Barrier: fakeWaiter{}}},
		"Options.Leases.Owner":    {Schema: schema, Owner: "a", Leases: &lease.Config{Owner: "b"}},
		"Options.Schema":          {Schema: "Not A Schema"},
	}
	for field, opts := range cases {
		_, err := seqlease.Open(t.Context(), pool, opts)
		require.ErrorIs(t, err, store.ErrInvalidArgument, field)
		require.ErrorContains(t, err, field)
	}
	_, err := seqlease.Open(t.Context(), nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}

// fakeWaiter is a sequence.Waiter that Open must refuse to be given.
type fakeWaiter struct{}

func (fakeWaiter) Ready(context.Context, string, int64) (<-chan struct{}, func(), error) {
	return nil, nil, errors.ErrUnsupported
}
func (fakeWaiter) Resolved(string, int64)     {}
func (fakeWaiter) Reached(string, int64) bool { return false }

func TestOpenPostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Shared(t, false)
	schema := pgtest.ReserveSchema(t, pool)
	c, err := seqlease.Open(ctx, pool, &seqlease.Options{Schema: schema, Migrate: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	require.Equal(t, want(8), orderedPipeline(t, c, "orders", 8))

	t.Run("appends in the caller's transaction", func(t *testing.T) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := c.Tx(tx).Append(ctx, "outbox", nil, []byte("rolled back"))
			require.NoError(t, err)
			return errors.New("roll back")
		})
		require.Error(t, err)
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			ns, err := c.Tx(tx).Append(ctx, "outbox", nil, []byte("kept"))
			require.Equal(t, []int64{1}, ns, "the rolled-back append left no hole")
			return err
		})
		require.NoError(t, err)
		var got []string
		for e, err := range c.Entries(ctx, "outbox", nil) {
			require.NoError(t, err)
			got = append(got, string(e.Payload))
		}
		require.Equal(t, []string{"kept"}, got)
	})

	t.Run("saves a checkpoint in the transaction", func(t *testing.T) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return c.Tx(tx).SaveCheckpoint(ctx, "projection", "orders", 3)
		})
		require.NoError(t, err)
		var got []int64
		for e, err := range c.Entries(ctx, "orders", &barrier.ReadOpts{Reader: "projection"}) {
			require.NoError(t, err)
			got = append(got, e.Number)
			if len(got) == 2 {
				break
			}
		}
		require.Equal(t, []int64{4, 5}, got, "resumes after the checkpoint")
		require.NoError(t, c.SaveCheckpoint(ctx, "projection", "orders", 5))
	})

	t.Run("checks fences without naming the schema", func(t *testing.T) {
		l, err := c.Leases().TryAcquire(ctx, "leader", nil)
		require.NoError(t, err)
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return c.Tx(tx).CheckFence(ctx, "leader", l.Fence())
		})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		l2, err := c.Leases().TryAcquire(ctx, "leader", nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, l2.Release(ctx)) }()
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return c.Tx(tx).CheckFence(ctx, "leader", l.Fence())
		})
		require.ErrorIs(t, err, store.ErrStaleFence, "the deposed holder's fence")
	})
}
