package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestPGWriterNotifies checks where the PostgreSQL writer's notices come
// from. The writers' transactions run on a pool of their own, the root
// Store on another, and a listener records the backend of every notice on
// the schema's channel. With the root Store's Watch running, no notice
// comes from a transaction's backend (none is sent inside the
// application's transaction); without it, every notice does (the control:
// the check can tell). Either way each placed order is noticed, and the
// stream stays dense: a declined order rolls its number back.
func TestPGWriterNotifies(t *testing.T) {
	for _, watch := range []bool{true, false} {
		t.Run(fmt.Sprintf("watch=%v", watch), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a bound, not an assertion
			defer cancel()
			schema := pgtest.NewSchema(t, pgtest.Shared(t, false))
			newPool := func(max int32) *pgxpool.Pool {
				p, err := pgtest.NewPool(ctx, &pgtest.Options{MaxConns: max})
				require.NoError(t, err)
				t.Cleanup(p.Close)
				return p
			}
			txPool, stPool := newPool(2), newPool(4)
			txPIDs := map[uint32]bool{} // the backends of the writers' transactions
			var conns []*pgxpool.Conn
			for range 2 {
				c, err := txPool.Acquire(ctx)
				require.NoError(t, err)
				conns = append(conns, c)
				txPIDs[c.Conn().PgConn().PID()] = true
			}
			for _, c := range conns {
				c.Release()
			}
			listener, err := pgx.Connect(ctx, pgtest.URL())
			require.NoError(t, err)
			defer func() { _ = listener.Close(context.WithoutCancel(ctx)) }()
			_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{schema}.Sanitize())
			require.NoError(t, err)

			st, err := postgres.New(stPool, &postgres.Config{Schema: schema})
			require.NoError(t, err)
			n := names{run: "t", streams: 2}
			w, err := newPGWriter(ctx, txPool, st, schema, n.run, watch)
			require.NoError(t, err)
			defer w.close()
			i := 0
			place := func(rt route, declined bool) uint32 {
				i++
				placed, err := w.write(ctx, order{ID: fmt.Sprintf("o%d", i), Customer: "c1", Route: rt, Amount: 1, Declined: declined})
				require.NoError(t, err)
				require.Equal(t, !declined, placed)
				if declined {
					return 0
				}
				nt, err := listener.WaitForNotification(ctx) // one write at a time: its notice
				require.NoError(t, err)
				return nt.PID
			}
			if watch {
				// The Watch serves once its goroutine runs: until then, the
				// Store in the transaction notifies in it.
				for txPIDs[place(n.route(1), false)] {
				}
			}
			for k := range 6 {
				pid := place(n.route(0), k == 2)
				if k == 2 {
					continue
				}
				require.Equal(t, !watch, txPIDs[pid], "notice %d from a transaction's backend", k)
			}
			es, err := st.Read(ctx, n.route(0).stream, 0, 100)
			require.NoError(t, err)
			require.Len(t, es, 5, "the declined order left no entry")
			for j, e := range es {
				require.EqualValues(t, j+1, e.Number, "dense")
			}
		})
	}
}
