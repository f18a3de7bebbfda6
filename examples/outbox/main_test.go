package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" { // a relay process of TestOutboxKill
		main()
		return
	}
	pgtest.Main(m)
}

// TestOutbox runs the whole outbox on both backends with the embedded
// NATS server: orders declined after their entry was written, gaps left in
// the streams, one relay per stream. JetStream must hold exactly the
// committed entries, in order, with their payloads, and the order rows must
// match (the report's checks), the gaps must have been skipped, and the
// relays' checkpoints must end at each stream's last number.
func TestOutbox(t *testing.T) {
	for name, dsn := range map[string]string{"memory": "", "postgres": pgtest.URL()} {
		t.Run(name, func(t *testing.T) {
			schema := "unused"
			if dsn != "" {
				schema = pgtest.ReserveSchema(t, pgtest.Shared(t, false)) // migrated by run, dropped after
			}
			c := config{
				orders: 400, writers: 8, streams: 3, customers: 40, decline: 10, abandon: 25, seed: 3,
				dsn: dsn, schema: schema, procs: 1, relayTTL: 10 * time.Second, dedupe: time.Minute, // no failover here
			}
			rep, err := run(context.Background(), c)
			require.NoError(t, err)
			rep.print(t.Output())
			require.Empty(t, rep.problems)
			require.Equal(t, 360, rep.placed)
			require.Equal(t, 40, rep.declined)
			require.Equal(t, 360, rep.rows)
			require.Equal(t, 360, rep.committed)
			require.Equal(t, 360, rep.jsMessages)
			gaps := 16 // -abandon
			if dsn == "" {
				gaps += 40 // a declined order's number is released in memory; rolled back on PostgreSQL
			}
			require.Equal(t, gaps, rep.gaps)
			require.EqualValues(t, gaps, rep.relays.Gaps, "every gap skipped")
			require.EqualValues(t, 360, rep.relays.Published)
			require.EqualValues(t, 3, rep.relays.Takeovers, "one relay per stream")
			requireCheckpoints(t, rep, 3)
			require.Len(t, rep.checks, 6)
		})
	}
}

// TestOutboxKill runs three relay processes on PostgreSQL and kills the one
// that holds the first stream's lease with SIGKILL a third of the way in:
// another process must take the stream over, JetStream must still hold
// every committed entry once, in order, with nothing lost, and the relays'
// checkpoints must end at each stream's last number.
func TestOutboxKill(t *testing.T) {
	schema := pgtest.ReserveSchema(t, pgtest.Shared(t, false))
	c := config{
		orders: 1200, writers: 8, streams: 3, customers: 60, decline: 10, seed: 5,
		dsn: pgtest.URL(), schema: schema, procs: 3, kill: true, relayTTL: time.Second, dedupe: time.Minute,
	}
	rep, err := run(context.Background(), c)
	require.NoError(t, err)
	rep.print(t.Output())
	require.Empty(t, rep.problems)
	require.NotNil(t, rep.kill, "a relay process was killed")
	require.True(t, rep.kill.signaled, "by SIGKILL")
	require.NotNil(t, rep.takeover)
	require.NotEqual(t, rep.kill.owner, rep.takeover.relay, "another process took the stream over")
	require.Greater(t, rep.takeover.fence, rep.kill.fence)
	require.Equal(t, 1080, rep.placed)
	require.Equal(t, 1080, rep.committed)
	require.Equal(t, 1080, rep.jsMessages)
	requireCheckpoints(t, rep, 3)
	require.Len(t, rep.checks, 7)
}

// requireCheckpoints requires the relays' seqlease checkpoint of each of
// the run's streams to be at the stream's last number.
func requireCheckpoints(t *testing.T, rep *report, streams int) {
	t.Helper()
	require.Len(t, rep.lastNumbers, streams)
	require.Len(t, rep.checkpoints, streams)
	for rt, last := range rep.lastNumbers {
		require.Positive(t, last)
		require.Equal(t, last, rep.checkpoints[rt], "checkpoint of %s", rt.stream)
	}
}
