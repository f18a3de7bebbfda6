package sequence_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestLeaseSurfacesLostHistory: after the server forgot a stream's numbers
// (a promoted asynchronous standby), the Leaser's leases of that stream,
// alone or coalesced with another stream's, fail with store.ErrHistoryLost
// and hand out nothing; the other stream goes on.
func TestLeaseSurfacesLostHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	pg, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	l, err := sequence.New(pg, &sequence.Config{UnorderedOnly: true})
	require.NoError(t, err)
	for range 3 {
		for _, st := range []string{"lost", "kept"} {
			_, err := l.Lease(ctx, st, &sequence.LeaseOpts{TTL: time.Minute})
			require.NoError(t, err)
		}
	}
	s := pgx.Identifier{schema}.Sanitize()
	_, err = pool.Exec(ctx, `UPDATE `+s+`.streams SET last_number = 1 WHERE name = 'lost'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM `+s+`.entries WHERE stream = 'lost' AND number > 1`)
	require.NoError(t, err)

	_, err = l.Lease(ctx, "lost", &sequence.LeaseOpts{TTL: time.Minute})
	require.ErrorIs(t, err, store.ErrHistoryLost)
	var lost *store.HistoryLostError
	require.ErrorAs(t, err, &lost)
	require.Equal(t, "lost", lost.Stream)

	// Concurrent leases of both streams share statements.
	var wg sync.WaitGroup
	errs := make([]error, 16)
	numbers := make([]int64, 16)
	for i := range errs {
		st := []string{"lost", "kept"}[i%2]
		wg.Go(func() {
			x, err := l.Lease(ctx, st, &sequence.LeaseOpts{TTL: time.Minute})
			if err == nil {
				numbers[i] = x.Number()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 {
			require.ErrorIs(t, err, store.ErrHistoryLost, "lease %d of the lost stream", i)
		} else {
			require.NoError(t, err, "lease %d of the other stream", i)
			require.Greater(t, numbers[i], int64(3))
		}
	}
}
