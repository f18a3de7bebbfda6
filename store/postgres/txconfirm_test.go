package postgres_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// otherBarrier starts a barrier on a Store of b's schema on a pool of its
// own (another process, as far as the database can tell), whose safety
// poll is an hour: only a notice wakes it in time.
func otherBarrier(t *testing.T, b *txBundle) *barrier.Barrier {
	t.Helper()
	other, err := pgtest.NewPool(b.ctx, nil)
	require.NoError(t, err)
	t.Cleanup(other.Close)
	os, err := postgres.New(other, &postgres.Config{Schema: b.schema})
	require.NoError(t, err)
	bar, err := barrier.New(os, &barrier.Config{PollInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, bar.Start(b.ctx))
	t.Cleanup(bar.Stop)
	return bar
}

// TestInTxWatchStopsMidTransaction: a transaction hands its first
// resolution to the root's Watch, the Watch stops while the transaction
// runs, and the transaction resolves more, now notified in it. The other
// process hears of both when it commits (it once heard only of the
// second, and its barrier waited below the first until its safety poll).
func TestInTxWatchStopsMidTransaction(t *testing.T) {
	b := newTxBundle(t, false)
	bar := otherBarrier(t, b)
	woke := make(chan error, 1)
	go func() { woke <- bar.WaitFor(b.ctx, "s", 3) }() // the watermark reaches 2

	wctx, stopWatch := context.WithCancel(b.ctx)
	k := newTxSink()
	done := make(chan error, 1)
	go func() { done <- b.s.Watch(wctx, k) }()
	<-k.resets // listening

	tx := b.begin(t)
	ts := b.s.InTx(tx)
	require.Equal(t, int64(1), append1(t, ts, "s", "one").Number) // handed over
	stopWatch()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, int64(2), append1(t, ts, "s", "two").Number) // notified in tx, with 1
	require.NoError(t, tx.Commit(b.ctx))

	select {
	case err := <-woke:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the other process never heard of 1: its barrier waits for its safety poll")
	}
}

// TestInTxWatchRestartsMidTransaction: what a transaction handed over
// before the root's Watch stopped is confirmed by the next Watch, though
// the transaction resolved nothing more.
func TestInTxWatchRestartsMidTransaction(t *testing.T) {
	b := newTxBundle(t, false)
	wctx, stopWatch := context.WithCancel(b.ctx)
	first := newTxSink()
	done := make(chan error, 1)
	go func() { done <- b.s.Watch(wctx, first) }()
	<-first.resets

	tx := b.begin(t)
	require.Equal(t, int64(1), append1(t, b.s.InTx(tx), "s", "one").Number) // handed over
	stopWatch()
	require.ErrorIs(t, <-done, context.Canceled)
	txs, _ := postgres.AwaitedChecks(b.s)
	require.Equal(t, 1, txs, "kept for the next Watch")

	k := watchInto(t, b.s)
	require.NoError(t, tx.Commit(b.ctx))
	k.waitHeard(t, 1)
}

// TestInTxAwaitedChecksMerge: one long transaction that appends many
// times is one transaction awaited with one check per stream (there was
// one check per call, all sent at every confirm round), and numbers that
// do not merge into few ranges become a re-read of the stream.
func TestInTxAwaitedChecksMerge(t *testing.T) {
	b := newTxBundle(t, false)
	k := watchInto(t, b.s)
	tx := b.begin(t)
	ts := b.s.InTx(tx)
	const calls = 2000
	for range calls {
		_, err := ts.Append(b.ctx, "s", []store.AppendRequest{{Payload: []byte("x")}}, nil)
		require.NoError(t, err)
	}
	txs, checks := postgres.AwaitedChecks(b.s)
	require.LessOrEqual(t, txs, 1)
	require.LessOrEqual(t, checks, 1, "one transaction's consecutive appends of one stream need one check")

	// Scattered numbers of another stream, in the same transaction.
	var xid int64
	require.NoError(t, tx.QueryRow(b.ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&xid))
	for i := int64(1); i <= 1000; i++ {
		require.True(t, postgres.HandOver(b.s, xid, "t", 2*i))
	}
	_, checks = postgres.AwaitedChecks(b.s)
	require.LessOrEqual(t, checks, 2, "a check for s, a re-read of t")
	require.NoError(t, tx.Commit(b.ctx))
	k.waitHeard(t, calls)
	select {
	case <-k.resets: // "t" is re-read
	case <-time.After(30 * time.Second):
		t.Fatal("the scattered numbers were never noticed")
	}
}

// logSink is a slog handler that passes each message at or above level
// to msgs, without blocking.
type logSink struct {
	level slog.Level
	msgs  chan string
}

func (h logSink) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h logSink) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.msgs <- r.Message:
	default:
	}
	return nil
}
func (h logSink) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logSink) WithGroup(string) slog.Handler      { return h }

// logged waits for a message containing part.
func logged(t *testing.T, msgs <-chan string, part string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-msgs:
			if strings.Contains(m, part) {
				return
			}
		case <-deadline:
			t.Fatalf("never logged %q", part)
		}
	}
}

// newLoggedStore is a Store of b's schema logging into msgs.
func newLoggedStore(t *testing.T, b *txBundle, level slog.Level) (*postgres.Store, chan string) {
	t.Helper()
	msgs := make(chan string, 100)
	s, err := postgres.New(b.pool, &postgres.Config{Schema: b.schema, Logger: slog.New(logSink{level: level, msgs: msgs})})
	require.NoError(t, err)
	return s, msgs
}

// TestInTxAwaitedAgeLimit: a transaction idle past the age limit is no
// longer asked about (it was asked about forever); it is logged, and its
// notice is left to the safety poll.
func TestInTxAwaitedAgeLimit(t *testing.T) {
	b := newTxBundle(t, false)
	s, msgs := newLoggedStore(t, b, slog.LevelWarn)
	postgres.SetAwaitLimits(s, time.Millisecond, 0)
	watchInto(t, s)
	tx := b.begin(t)
	require.Equal(t, int64(1), append1(t, s.InTx(tx), "s", "one").Number)
	logged(t, msgs, "awaited too long")
	txs, _ := postgres.AwaitedChecks(s)
	require.Zero(t, txs)
}

// TestInTxAwaitedCap: beyond the cap of transactions awaited, a Store in
// a transaction notifies in it; the root counts it and warns once in a
// while (it once did so silently).
func TestInTxAwaitedCap(t *testing.T) {
	b := newTxBundle(t, false)
	s, msgs := newLoggedStore(t, b, slog.LevelWarn)
	postgres.SetAwaitLimits(s, 0, 1)
	watchInto(t, s)
	bar := otherBarrier(t, b)

	var xid int64
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&xid))
	require.True(t, postgres.HandOver(s, xid+1_000_000, "u", 1)) // awaited until the test ends

	tx := b.begin(t)
	require.Equal(t, int64(1), append1(t, s.InTx(tx), "s", "over").Number) // beyond the cap
	logged(t, msgs, "too many callers' transactions awaited")
	require.Equal(t, int64(1), postgres.AwaitOverflows(s))
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, bar.WaitFor(b.ctx, "s", 1), "noticed in the transaction")
}

// TestInTxBadXidStallsNothing: one transaction id the server cannot judge
// (one from its future, as after a failover to a replica that lagged)
// once failed the confirm statement of every transaction awaited with it,
// and a committed append was never heard while it stayed.
func TestInTxBadXidStallsNothing(t *testing.T) {
	b := newTxBundle(t, false)
	k := watchInto(t, b.s)
	tx := b.begin(t)
	require.Equal(t, int64(1), append1(t, b.s.InTx(tx), "s", "x").Number) // handed over
	require.NoError(t, tx.Commit(b.ctx))
	var next int64
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&next))
	require.True(t, postgres.HandOver(b.s, next+1_000_000, "other", 1))
	require.NoError(t, postgres.ConfirmAll(b.ctx, b.s), "asked about with the bad id in one statement")
	k.waitHeard(t, 1)
	txs, _ := postgres.AwaitedChecks(b.s)
	require.Equal(t, 1, txs, "the bad id is still running, as far as the server can tell")
}

// failingTx is the caller's transaction whose statements beginning with
// prefix fail on the server (division by zero), aborting it.
type failingTx struct {
	pgx.Tx
	prefix string
}

func (f failingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.HasPrefix(strings.TrimSpace(sql), f.prefix) {
		return f.Tx.QueryRow(ctx, "SELECT 1/0")
	}
	return f.Tx.QueryRow(ctx, sql, args...)
}

// TestInTxNoticeFailureIsReturned: when a statement the Store runs in the
// caller's transaction for its notices fails (the NOTIFY without a
// Watch, the query of the transaction's id with one), that transaction is
// aborted: the call says so (it once returned nil, only logging it), and
// nothing of it commits.
func TestInTxNoticeFailureIsReturned(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(map[bool]string{false: "notify", true: "hand over"}[watched], func(t *testing.T) {
			b := newTxBundle(t, false)
			if watched {
				watchInto(t, b.s)
			}
			es, err := b.s.Lease(b.ctx, "s", []store.LeaseRequest{{TTL: time.Minute}}, nil)
			require.NoError(t, err)
			tx := b.begin(t)
			if watched {
				ts := b.s.InTx(failingTx{Tx: tx, prefix: "SELECT pg_current_xact_id()"})
				later := time.Now().Add(time.Hour)
				_, err = ts.ResolveExpiredBatch(b.ctx, "s", []int64{1}, &store.ResolveExpiredParams{Now: &later})
			} else {
				ts := b.s.InTx(failingTx{Tx: tx, prefix: "WITH c AS"}) // the notices statement
				err = ts.Release(b.ctx, "s", 1, es[0].Token, nil)
			}
			require.ErrorContains(t, err, "aborted")
			require.Error(t, tx.Commit(b.ctx), "the transaction was aborted")
			got, err := b.s.Read(b.ctx, "s", 0, 0)
			require.NoError(t, err)
			require.Equal(t, store.Leased, got[0].State, "nothing of the call committed")
		})
	}
}
