package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// moveBundle is a Store on a fresh schema with a side table the moves'
// function writes to.
type moveBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	s      *postgres.Store
	side   string // the side table, quoted
	base   time.Time
	stream string
}

func newMoveBundle(t *testing.T, simple bool) *moveBundle {
	pool := pgtest.Shared(t, simple)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	side := pgx.Identifier{schema, "side"}.Sanitize()
	_, err = pool.Exec(t.Context(), "CREATE TABLE "+side+" (stream text, old bigint, moved bigint)")
	require.NoError(t, err)
	now, err := s.Now(t.Context())
	require.NoError(t, err)
	return &moveBundle{ctx: t.Context(), pool: pool, s: s, side: side, base: now, stream: "tx"}
}

// sideRows returns the side table's rows as old -> moved.
func (b *moveBundle) sideRows(t *testing.T) map[int64]int64 {
	rows, err := b.pool.Query(b.ctx, "SELECT old, moved FROM "+b.side)
	require.NoError(t, err)
	out := map[int64]int64{}
	var old, moved int64
	_, err = pgx.ForEachRow(rows, []any{&old, &moved}, func() error { out[old] = moved; return nil })
	require.NoError(t, err)
	return out
}

// write is a moves' function that records each move in the side table.
func (b *moveBundle) write(items []store.RecoverItem, calls *int) func(ctx context.Context, tx pgx.Tx, moved []int64) error {
	return func(ctx context.Context, tx pgx.Tx, moved []int64) error {
		*calls++
		for i, to := range moved {
			if to == 0 {
				continue
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+b.side+" VALUES ($1, $2, $3)", b.stream, items[i].Number, to); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestRecoverExpiredTx(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		t.Run(map[bool]string{false: "extended", true: "simple"}[simple], func(t *testing.T) {
			t.Parallel()
			t.Run("the function's writes commit with the moves", func(t *testing.T) {
				t.Parallel()
				b := newMoveBundle(t, simple)
				at := b.base.Add(2 * time.Second)
				_, err := b.s.Lease(b.ctx, b.stream, []store.LeaseRequest{{TTL: time.Second}, {TTL: time.Minute}, {TTL: time.Second}},
					&store.LeaseParams{Now: &b.base})
				require.NoError(t, err)
				items := []store.RecoverItem{{Number: 1, Payload: []byte("w1"), RecoveryType: "retry"},
					{Number: 2, Payload: []byte("w2"), RecoveryType: "retry"}, {Number: 3, Payload: []byte("w3"), RecoveryType: "retry"}}
				calls := 0
				res, err := b.s.RecoverExpiredTx(b.ctx, b.stream, items, &store.RecoverBatchParams{Hook: true, Now: &at}, b.write(items, &calls))
				require.NoError(t, err)
				require.Equal(t, 1, calls)
				require.Equal(t, []int64{4, 0, 5}, []int64{res[0].Moved, res[1].Moved, res[2].Moved})
				require.ErrorIs(t, res[1].Err, store.ErrNotExpired)
				require.Equal(t, map[int64]int64{1: 4, 3: 5}, b.sideRows(t))
				st, err := b.s.HookStats(b.ctx)
				require.NoError(t, err)
				require.Equal(t, int64(2), st.Pending, "the hooks recorded in the same transaction")

				// nothing to move: the function is not called
				res, err = b.s.RecoverExpiredTx(b.ctx, b.stream, items[:1], &store.RecoverBatchParams{Now: &at}, b.write(items, &calls))
				require.NoError(t, err)
				require.ErrorIs(t, res[0].Err, store.ErrGap)
				require.Equal(t, 1, calls)
			})
			t.Run("a failing function rolls the moves back", func(t *testing.T) {
				t.Parallel()
				b := newMoveBundle(t, simple)
				at := b.base.Add(2 * time.Second)
				es, err := b.s.Lease(b.ctx, b.stream, []store.LeaseRequest{{TTL: time.Second}, {TTL: time.Second}}, &store.LeaseParams{Now: &b.base})
				require.NoError(t, err)
				items := []store.RecoverItem{{Number: 1, Payload: []byte("w1"), RecoveryType: "retry"},
					{Number: 2, Payload: []byte("w2"), RecoveryType: "retry"}}
				boom := errors.New("boom")
				calls := 0
				write := b.write(items, &calls)
				res, err := b.s.RecoverExpiredTx(b.ctx, b.stream, items, &store.RecoverBatchParams{Hook: true, Now: &at},
					func(ctx context.Context, tx pgx.Tx, moved []int64) error {
						require.NoError(t, write(ctx, tx, moved))
						return boom
					})
				require.ErrorIs(t, err, boom)
				require.Nil(t, res)
				require.Empty(t, b.sideRows(t))
				got, err := b.s.Read(b.ctx, b.stream, 0, 10)
				require.NoError(t, err)
				require.Len(t, got, 2, "no new number")
				for i, e := range got {
					require.Equal(t, store.Leased, e.State, "still expired, for a later attempt")
					require.Equal(t, es[i].Token, e.Token)
				}
				st, err := b.s.HookStats(b.ctx)
				require.NoError(t, err)
				require.Zero(t, st.Pending)

				// a later attempt succeeds
				res, err = b.s.RecoverExpiredTx(b.ctx, b.stream, items, &store.RecoverBatchParams{Now: &at}, write)
				require.NoError(t, err)
				require.Equal(t, []int64{3, 4}, []int64{res[0].Moved, res[1].Moved})
				require.Equal(t, map[int64]int64{1: 3, 2: 4}, b.sideRows(t))
			})
			t.Run("bad input is refused and changes nothing", func(t *testing.T) {
				t.Parallel()
				b := newMoveBundle(t, simple)
				_, err := b.s.Lease(b.ctx, b.stream, []store.LeaseRequest{{TTL: time.Second}}, &store.LeaseParams{Now: &b.base})
				require.NoError(t, err)
				at := b.base.Add(2 * time.Second)
				items := []store.RecoverItem{{Number: 1, RecoveryType: "retry"}}
				_, err = b.s.RecoverExpiredTx(b.ctx, b.stream, items, &store.RecoverBatchParams{Now: &at}, nil)
				require.ErrorIs(t, err, store.ErrInvalidArgument)
				_, err = b.s.RecoverExpiredTx(b.ctx, b.stream, []store.RecoverItem{{Number: 1}}, &store.RecoverBatchParams{Now: &at},
					func(context.Context, pgx.Tx, []int64) error { return nil })
				require.ErrorIs(t, err, store.ErrInvalidArgument)
				got, err := b.s.Read(b.ctx, b.stream, 0, 10)
				require.NoError(t, err)
				require.Len(t, got, 1)
				require.Equal(t, store.Leased, got[0].State)
			})
		})
	}
}
