package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" { // a consumer process of TestInboxKill
		main()
		return
	}
	pgtest.Main(m)
}

// TestInbox runs the demo on both backends with an embedded NATS server:
// redeliveries (withheld acks) and payments stored twice reach the
// consumers, every payment is credited exactly once, and the inbox
// records are purged through the library.
func TestInbox(t *testing.T) {
	for name, dsn := range map[string]string{"memory": "", "postgres": pgtest.URL()} {
		t.Run(name, func(t *testing.T) {
			schema := "unused"
			if dsn != "" {
				schema = pgtest.ReserveSchema(t, pgtest.Shared(t, false)) // migrated by the run, dropped after
			}
			c := config{
				payments: 600, accounts: 10, workers: 4, seed: 3,
				withhold: 0.05, republish: 0.05, ackWait: 500 * time.Millisecond,
				dsn: dsn, schema: schema, procs: 1,
			}
			rep, err := runDemo(t.Context(), c)
			require.NoError(t, err)
			require.True(t, rep.exactlyOn, "every payment credited exactly once")
			require.Equal(t, int64(600), rep.n.Applied, "first receipts")
			require.NotZero(t, rep.n.Withheld, "acks were withheld")
			require.NotZero(t, rep.twice, "payments were stored twice")
			require.GreaterOrEqual(t, rep.n.Duplicates, rep.n.Withheld+int64(rep.twice), "each withheld ack and each second copy came back as a duplicate")
			require.Equal(t, rep.n.Applied+rep.n.Duplicates, rep.n.Deliveries)
			require.Equal(t, rep.records, rep.purged, "every record purged")
			require.GreaterOrEqual(t, rep.purged, int64(600))
			rep.print(io.Discard)
		})
	}
}

// TestInboxCatchesDoubleCredit: a consumer that ignores the inbox credits
// the duplicates, and the demo's check says so.
func TestInboxCatchesDoubleCredit(t *testing.T) {
	c := config{
		payments: 200, accounts: 5, workers: 2, seed: 5,
		withhold: 0, republish: 0.1, ackWait: 500 * time.Millisecond, procs: 1, noInbox: true,
	}
	rep, err := runDemo(t.Context(), c)
	require.Error(t, err)
	require.ErrorContains(t, err, "credited 2 times")
	require.False(t, rep.exactlyOn)
}

// TestInboxKill runs three consumer processes on PostgreSQL, with the NATS
// server embedded in this test's process, and SIGKILLs one of them a third
// of the way in: its open transaction rolls back, its unacked messages go
// to the others, and still every payment is credited exactly once, none is
// lost, and the records are purged.
func TestInboxKill(t *testing.T) {
	schema := pgtest.ReserveSchema(t, pgtest.Shared(t, false))
	c := config{
		payments: 1500, accounts: 10, workers: 4, seed: 9,
		withhold: 0.05, republish: 0.05, ackWait: time.Second,
		dsn: pgtest.URL(), schema: schema, procs: 3, kill: true,
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rep, err := runDemo(ctx, c)
	require.NoError(t, err)
	require.Equal(t, 0, rep.killed, "process 0 was killed")
	require.GreaterOrEqual(t, rep.killedAt, 500, "killed a third of the way in")
	require.Less(t, rep.killedAt, 1500, "killed before the end")
	require.True(t, rep.exactlyOn, "every payment credited exactly once, none lost")
	require.Equal(t, rep.records, rep.purged, "every record purged")
	require.GreaterOrEqual(t, rep.purged, int64(1500))
	rep.print(io.Discard)
}
