package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// xid returns the transaction id tx has been assigned, or nil if it has none:
// PostgreSQL assigns one at a transaction's first write (a row written or
// locked), and only then will its commit write WAL and wait for a flush.
func xid(t *testing.T, tx pgx.Tx) *string {
	t.Helper()
	var id *string
	require.NoError(t, tx.QueryRow(t.Context(), "SELECT pg_current_xact_id_if_assigned()::text").Scan(&id))
	return id
}

// TestAcquireOfHeldNameReadsBeforeItWrites checks that contention is cheap: an
// acquire of a name another holds, run inside a transaction, leaves that
// transaction without a transaction id, so it wrote nothing, locked no row,
// and its commit would cost no WAL flush. (A refused INSERT ... ON CONFLICT
// DO UPDATE would have locked the row and taken one.) The control, an
// acquire of a free name, does take one. A waiting acquire (Wait) writes
// its wanted mark once, not at every try.
func TestAcquireOfHeldNameReadsBeforeItWrites(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		t.Run(fmt.Sprintf("simple protocol %v", simple), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := pgtest.Shared(t, simple)
			schema := pgtest.NewSchema(t, pool)
			s, err := postgres.New(pool, &postgres.Config{Schema: schema})
			require.NoError(t, err)
			held, err := s.AcquireLease(ctx, "held", "alice", &store.AcquireLeaseParams{TTL: time.Hour})
			require.NoError(t, err)

			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			txs, err := postgres.New(tx, &postgres.Config{Schema: schema})
			require.NoError(t, err)
			for range 3 {
				_, err = txs.AcquireLease(ctx, "held", "bob", &store.AcquireLeaseParams{TTL: time.Minute})
				var he *store.HeldError
				require.ErrorAs(t, err, &he)
				require.Equal(t, held.Fence, he.Fence)
			}
			require.Nil(t, xid(t, tx), "a refused acquire must not write")

			_, err = txs.AcquireLease(ctx, "free", "bob", &store.AcquireLeaseParams{TTL: time.Minute})
			require.NoError(t, err)
			require.NotNil(t, xid(t, tx), "control: an acquire that wins writes")
			require.NoError(t, tx.Rollback(ctx))

			// A waiting acquire writes its mark, then nothing while the
			// mark lasts.
			wait := &store.AcquireLeaseParams{TTL: time.Minute, Wait: time.Minute}
			for i, writes := range []bool{true, false, false} {
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				txs, err := postgres.New(tx, &postgres.Config{Schema: schema})
				require.NoError(t, err)
				_, err = txs.AcquireLease(ctx, "held", "bob", wait)
				require.ErrorIs(t, err, store.ErrHeld)
				require.Equal(t, writes, xid(t, tx) != nil, "waiting acquire %d", i)
				require.NoError(t, tx.Commit(ctx))
			}
		})
	}
}

// TestCheckFenceRefusesADeposedHolder guards a write to a table of the
// caller's with CheckFence inside the writing transaction: the holder's
// write goes through, a deposed holder's (its lease force-released and taken
// by another, or expired) is refused and rolled back.
func TestCheckFenceRefusesADeposedHolder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	cursors := pgx.Identifier{schema, "cursors"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE TABLE "+cursors+" (name text PRIMARY KEY, pos bigint NOT NULL, fence bigint NOT NULL)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+cursors+" VALUES ('orders', 0, 0)")
	require.NoError(t, err)

	// advance moves the cursor under the fence, as a holder would.
	advance := func(fence, pos int64) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := postgres.CheckFence(ctx, tx, schema, "cursor/orders", fence); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE "+cursors+" SET pos = $1, fence = $2 WHERE name = 'orders'", pos, fence)
			return err
		})
	}
	cursor := func() (pos, fence int64) {
		require.NoError(t, pool.QueryRow(ctx, "SELECT pos, fence FROM "+cursors).Scan(&pos, &fence))
		return pos, fence
	}

	alice, err := s.AcquireLease(ctx, "cursor/orders", "alice", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, advance(alice.Fence, 10))

	// Alice is deposed: an operator force-releases her leases, Bob takes over.
	_, err = s.ForceReleaseLeases(ctx, "alice", nil)
	require.NoError(t, err)
	bob, err := s.AcquireLease(ctx, "cursor/orders", "bob", &store.AcquireLeaseParams{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	require.Greater(t, bob.Fence, alice.Fence)
	require.NoError(t, advance(bob.Fence, 20))

	err = advance(alice.Fence, 11) // alice wakes up from a pause and writes
	require.ErrorIs(t, err, store.ErrStaleFence)
	var fe *store.FenceError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "superseded", fe.Reason)
	require.Equal(t, bob.Fence, fe.Current)
	pos, fence := cursor()
	require.Equal(t, []int64{20, bob.Fence}, []int64{pos, fence}, "the deposed holder's write was refused")

	// Bob's lease runs out by the database clock: his next write is refused.
	require.Eventually(t, func() bool {
		now, err := s.Now(ctx)
		return err == nil && !now.Before(bob.ExpiresAt)
	}, 10*time.Second, time.Millisecond)
	err = advance(bob.Fence, 30)
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "expired", fe.Reason)
	pos, _ = cursor()
	require.Equal(t, int64(20), pos)

	// Store.CheckFence is the same check in the Store's schema.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return s.CheckFence(ctx, tx, "cursor/orders", bob.Fence) })
	require.ErrorIs(t, err, store.ErrStaleFence)
	err = postgres.CheckFence(ctx, nil, `bad"schema`, "cursor/orders", 1)
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorIs(t, err, migrations.ErrInvalidSchema)
}

// TestCheckFenceHoldsOffATakeover shows why the check locks the row: while
// the holder's fenced transaction runs, a taker cannot replace the holding,
// even after it expired; the taker's acquire waits and succeeds only after
// the holder's write committed, so the two writes are ordered.
func TestCheckFenceHoldsOffATakeover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	alice, err := s.AcquireLease(ctx, "job", "alice", &store.AcquireLeaseParams{TTL: 200 * time.Millisecond})
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, s.CheckFence(ctx, tx, "job", alice.Fence))
	require.Eventually(t, func() bool {
		now, err := s.Now(ctx)
		return err == nil && !now.Before(alice.ExpiresAt)
	}, 10*time.Second, time.Millisecond)

	taken := make(chan error, 1)
	go func() {
		_, err := s.AcquireLease(context.WithoutCancel(ctx), "job", "bob", &store.AcquireLeaseParams{TTL: time.Minute})
		taken <- err
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%leases%'`, schema).Scan(&waiting)
		return err == nil && waiting > 0
	}, 10*time.Second, time.Millisecond, "the takeover must wait for the fenced transaction")
	select {
	case err := <-taken:
		t.Fatalf("the takeover did not wait: %v", err)
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-taken, "after the fenced transaction, the expired holding is taken over")
	got, err := s.GetLease(ctx, "job", nil)
	require.NoError(t, err)
	require.Equal(t, "bob", got.Owner)
}

// waitingForLock waits until a statement on schema's leases waits for a row
// lock.
func waitingForLock(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%leases%'`, schema).Scan(&waiting)
		return err == nil && waiting > 0
	}, 10*time.Second, time.Millisecond)
}

// freedSink passes on the names of Freed notices, and the Resets.
type freedSink struct{ freed, reset chan string }

func (s freedSink) Freed(name string)          { s.freed <- name }
func (s freedSink) Wanted(w store.LeaseWaiter) {}
func (s freedSink) Reset()                     { s.reset <- "reset" }

// TestAWaiterAndAReleaseCannotMissEachOther forces both orders of the race
// between a waiting acquire's mark and the holder's release, by holding one
// side's row lock in a transaction while the other runs. A release that
// commits while the mark waits for its lock: the mark sees the name ended
// and the waiter takes it. A mark that commits while the release waits: the
// release sees the mark and notifies.
func TestAWaiterAndAReleaseCannotMissEachOther(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	wait := &store.AcquireLeaseParams{TTL: time.Minute, Wait: time.Minute}

	t.Run("the release commits while the mark waits for the row", func(t *testing.T) {
		l, err := s.AcquireLease(ctx, "first", "holder", &store.AcquireLeaseParams{TTL: time.Hour})
		require.NoError(t, err)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		txs, err := postgres.New(tx, &postgres.Config{Schema: schema})
		require.NoError(t, err)
		require.NoError(t, txs.ReleaseLease(ctx, "first", "holder", l.Fence, nil))
		var syncCommit string
		require.NoError(t, tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit))
		require.Equal(t, "on", syncCommit, "a release in the caller's transaction leaves its durability alone")

		type result struct {
			l   store.NamedLease
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := s.AcquireLease(ctx, "first", "waiter", wait)
			got <- result{l, err}
		}()
		waitingForLock(t, pool, schema)
		require.NoError(t, tx.Commit(ctx))
		r := <-got
		require.NoError(t, r.err, "the waiter must see the release it waited behind")
		require.Equal(t, []any{"waiter", l.Fence + 1}, []any{r.l.Owner, r.l.Fence})
	})

	t.Run("the mark commits while the release waits for the row", func(t *testing.T) {
		wctx, stop := context.WithCancel(ctx)
		sink := freedSink{freed: make(chan string, 10), reset: make(chan string, 10)}
		watched := make(chan error, 1)
		go func() { watched <- s.WatchLeases(wctx, sink) }()
		defer func() {
			stop()
			<-watched
		}()
		<-sink.reset // listening
		l, err := s.AcquireLease(ctx, "second", "holder", &store.AcquireLeaseParams{TTL: time.Hour})
		require.NoError(t, err)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		txs, err := postgres.New(tx, &postgres.Config{Schema: schema})
		require.NoError(t, err)
		_, err = txs.AcquireLease(ctx, "second", "waiter", wait)
		require.ErrorIs(t, err, store.ErrHeld)
		require.NotNil(t, xid(t, tx), "the waiter marked the name")

		released := make(chan error, 1)
		go func() { released <- s.ReleaseLease(ctx, "second", "holder", l.Fence, nil) }()
		waitingForLock(t, pool, schema)
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, <-released)
		select {
		case name := <-sink.freed:
			require.Equal(t, "second", name)
		case <-time.After(10 * time.Second):
			t.Fatal("the release after the mark sent no notice")
		}
	})
}

// TestAcquireLeasesEarlySignalsDecided: AcquireLeasesEarly (the
// store.EarlyAcquirer capability) calls decided once, before it returns,
// when its statement's rows can come before its commit (a pool in pgx's
// default mode), and never otherwise (the simple protocol, a Store in a
// transaction); the outcomes are the same either way: a grant for each
// free name, the holder for a held one.
func TestAcquireLeasesEarlySignalsDecided(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		for _, inTx := range []bool{false, true} {
			t.Run(fmt.Sprintf("simple protocol %v, in a transaction %v", simple, inTx), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				pool := pgtest.Shared(t, simple)
				schema := pgtest.NewSchema(t, pool)
				s, err := postgres.New(pool, &postgres.Config{Schema: schema})
				require.NoError(t, err)
				held, err := s.AcquireLease(ctx, "held", "alice", &store.AcquireLeaseParams{TTL: time.Hour})
				require.NoError(t, err)
				var db postgres.DB = pool
				if inTx {
					tx, err := pool.Begin(ctx)
					require.NoError(t, err)
					defer func() { _ = tx.Rollback(ctx) }()
					db = tx
				}
				bs, err := postgres.New(db, &postgres.Config{Schema: schema})
				require.NoError(t, err)
				for round := range 3 { // statements prepared, then reused
					decided := 0
					reqs := []store.AcquireLeaseRequest{
						{Name: fmt.Sprint("c-", round), Owner: "bob", TTL: time.Minute},
						{Name: "held", Owner: "bob", TTL: time.Minute},
						{Name: fmt.Sprint("a-", round), Owner: "bob", TTL: time.Minute},
					}
					res := bs.AcquireLeasesEarly(ctx, reqs, nil, func() { decided++ })
					want := 1
					if simple || inTx {
						want = 0
					}
					require.Equal(t, want, decided, "round %d", round)
					for i, r := range res {
						if reqs[i].Name == "held" {
							var he *store.HeldError
							require.ErrorAs(t, r.Err, &he)
							require.Equal(t, []any{"alice", held.Fence}, []any{he.Owner, he.Fence})
							continue
						}
						require.NoError(t, r.Err)
						require.Equal(t, []any{reqs[i].Name, "bob", int64(1)}, []any{r.Lease.Name, r.Lease.Owner, r.Lease.Fence})
					}
				}
			})
		}
	}
}
