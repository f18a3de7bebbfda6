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
	if os.Getenv(runMainEnv) == "1" { // a worker process of TestProjectionProcs
		main()
		return
	}
	pgtest.Main(m)
}

// TestProjection runs the pipeline with heavy faults on both backends: the
// read model must match the sequential replay and the ledger pass its audit.
func TestProjection(t *testing.T) {
	for name, dsn := range map[string]string{"memory": "", "postgres": pgtest.URL()} {
		t.Run(name, func(t *testing.T) {
			schema := "unused"
			if dsn != "" {
				schema = pgtest.ReserveSchema(t, pgtest.Shared(t, false)) // migrated by run, dropped after
			}
			c := config{
				events: 400, workers: 8, accounts: 10, seed: 7,
				ttl: 50 * time.Millisecond, interval: 10 * time.Millisecond,
				stall: 0.02, crash: 0.03, partial: 0.03, retry: 0.02,
				dsn: dsn, schema: schema,
			}
			rep, err := run(context.Background(), c)
			require.NoError(t, err)
			require.True(t, rep.matches)
			require.Equal(t, 400, rep.committed)
			require.NotZero(t, rep.n.stalled.Load()+rep.n.crashed.Load(), "faults were injected")
			require.NotZero(t, rep.recoveredBy["partial-work"]+rep.recoveredBy["retry"], "work was recovered")
			rep.print(io.Discard)
		})
	}
}

// TestProjectionProcs runs the pipeline in three worker processes on one
// PostgreSQL, with faults: the cleanup of the stream moves between them, and
// the outcome is the same as in one process.
func TestProjectionProcs(t *testing.T) {
	schema := pgtest.ReserveSchema(t, pgtest.Shared(t, false))
	c := config{
		events: 300, workers: 4, accounts: 10, seed: 11, procs: 3,
		ttl: 300 * time.Millisecond, interval: 20 * time.Millisecond,
		stall: 0.02, crash: 0.03, partial: 0.03, retry: 0.02,
		dsn: pgtest.URL(), schema: schema,
	}
	rep, err := run(context.Background(), c)
	require.NoError(t, err)
	require.True(t, rep.matches)
	require.Equal(t, 300, rep.committed)
	require.NotZero(t, rep.n.stalled.Load()+rep.n.crashed.Load(), "faults were injected")
	require.NotZero(t, rep.recoveredBy["partial-work"]+rep.recoveredBy["retry"], "work was recovered")
	require.Len(t, rep.owners, 3, "all three processes leased")
}
