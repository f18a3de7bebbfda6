package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestTrimDuringAConcurrentLease starts a Trim while a lease of 4 and 5 is
// written but not yet committed, in another transaction that holds the
// stream row. Trim must wait for that row, and when the lease commits it
// must stop below 4: its bound comes from its own snapshot, in which 4 and
// 5 do not exist yet, and not from the stream row's newest version, whose
// last_number (5) would carry the low point past two unresolved entries.
func TestTrimDuringAConcurrentLease(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	reqs := []store.LeaseRequest{{TTL: time.Hour}, {TTL: time.Hour}, {TTL: time.Hour}}
	es, err := s.Lease(ctx, "s", reqs, nil)
	require.NoError(t, err)
	for _, e := range es {
		_, err := s.Commit(ctx, "s", e.Number, e.Token, nil)
		require.NoError(t, err)
	}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	inTx, err := postgres.New(tx, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	leased, err := inTx.Lease(ctx, "s", reqs[:2], nil)
	require.NoError(t, err)
	require.Equal(t, []int64{4, 5}, []int64{leased[0].Number, leased[1].Number})

	type result struct {
		low int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		low, err := s.Trim(ctx, "s", 100)
		done <- result{low, err}
	}()
	// Wait until the Trim statement waits for the stream row's lock.
	for {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock'
				AND query LIKE '%' || $1::text || '.streams%' AND query LIKE '%low_point = GREATEST%')`,
			`"`+schema+`"`).Scan(&waiting)
		require.NoError(t, err)
		if waiting {
			break
		}
	}
	require.NoError(t, tx.Commit(ctx))

	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, int64(4), r.low, "the low point stops below the concurrently leased 4")
	got, err := s.Read(ctx, "s", 3, 0)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, e := range got {
		require.Equal(t, int64(4+i), e.Number)
		require.Equal(t, store.Leased, e.State)
	}
	stats, err := s.Stats(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(4), stats.LowPoint)
	require.Equal(t, int64(3), stats.Watermark)
}
