package postgres_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// muting is a pool that swallows the listeners' first self-check notices:
// it answers as if it sent them.
type muting struct {
	*pgxpool.Pool
	mute atomic.Int64 // self-checks left to swallow
}

func (m *muting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(args) == 2 {
		if p, ok := args[1].(string); ok && strings.HasPrefix(p, "c\t") && m.mute.Add(-1) >= 0 {
			return pgconn.NewCommandTag("SELECT 1"), nil
		}
	}
	return m.Pool.Exec(ctx, sql, args...)
}

// pollSink counts Poll and Reset calls.
type pollSink struct{ polls, resets atomic.Int64 }

func (p *pollSink) Resolved(string, int64)        {}
func (p *pollSink) ResolvedThrough(string, int64) {}
func (p *pollSink) Reset()                        { p.resets.Add(1) }
func (p *pollSink) Poll()                         { p.polls.Add(1) }

// TestListenerDeafThenHears has a Watch whose first self-check is not
// heard (its notice swallowed): it logs the ERROR, counts a deaf listener,
// polls its sink with Poll (a store.Poller) rather than Reset, and once
// the check after a reconnect hears, logs that it hears again, is deaf no
// more and stops polling.
func TestListenerDeafThenHears(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	db := &muting{Pool: pool}
	db.mute.Store(1)
	logs := &records{}
	s, err := postgres.New(db, &postgres.Config{Schema: pgtest.NewSchema(t, pool), Logger: slog.New(logs),
		ListenCheckTimeout: 200 * time.Millisecond, DeafRecheckInterval: 500 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	sink := &pollSink{}
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, sink) }()
	defer func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		h := s.ListenHealth()
		require.Zero(t, h.Deaf)
		require.Zero(t, h.Watches, "a watch that ended is no longer counted")
	}()

	require.Eventually(t, func() bool { return len(logs.find("postgres: LISTEN hears again; polling stopped")) == 1 },
		30*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"ERROR listener=resolutions"}, logs.find(postgres.ListenDeafMessage))
	h := s.ListenHealth()
	require.Equal(t, 0, h.Deaf)
	require.Equal(t, int64(1), h.DeafChecks)
	require.Equal(t, 1, h.Watches)
	require.Equal(t, 1, h.Hearing, "the watch hears again")
	require.True(t, h.NotHearingSince.IsZero())
	require.False(t, h.LastHeard.IsZero())
	require.Positive(t, sink.polls.Load(), "a deaf listener polls its sink")
	require.Equal(t, int64(2), sink.resets.Load(), "one Reset per connection, none to poll a Poller")
	polls := sink.polls.Load()
	require.Never(t, func() bool { return sink.polls.Load() > polls+1 }, 300*time.Millisecond, 50*time.Millisecond,
		"a listener that hears again stops polling")
}

// TestListenConfig checks the listeners' settings: a negative duration or
// a ListenDSN pgx cannot parse is refused with ErrInvalidArgument, naming
// the field; a ListenDSN lets a Store whose DB is no pool Watch.
func TestListenConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	for name, cfg := range map[string]postgres.Config{
		"Config.ListenCheckTimeout":  {ListenCheckTimeout: -time.Second},
		"Config.DeafPollInterval":    {DeafPollInterval: -time.Millisecond},
		"Config.DeafRecheckInterval": {DeafRecheckInterval: -time.Minute},
		"Config.ListenDSN":           {ListenDSN: "postgres://u:secret@[::1"},
	} {
		_, err := postgres.New(pool, &cfg)
		require.ErrorIs(t, err, store.ErrInvalidArgument, name)
		require.ErrorContains(t, err, name)
		require.NotContains(t, err.Error(), "secret", "the password stays out of the error")
	}

	schema := pgtest.NewSchema(t, pool)
	noPool, err := postgres.New(plainDB{pool}, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	require.ErrorIs(t, noPool.Watch(t.Context(), &pollSink{}), store.ErrUnsupported, "no pool, no ListenDSN")

	dialled, err := postgres.New(plainDB{pool}, &postgres.Config{Schema: schema, ListenDSN: pgtest.URL()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	sink := &resetSignal{make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() { done <- dialled.Watch(ctx, sink) }()
	select {
	case <-sink.reset:
	case err := <-done:
		t.Fatalf("Watch with a ListenDSN on a DB that is no pool: %v", err)
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// plainDB hides the pool's Acquire: a DB that is no pool.
type plainDB struct{ postgres.DB }

// resetSignal signals its Resets.
type resetSignal struct{ reset chan struct{} }

func (r *resetSignal) Resolved(string, int64)        {}
func (r *resetSignal) ResolvedThrough(string, int64) {}
func (r *resetSignal) Reset() {
	select {
	case r.reset <- struct{}{}:
	default:
	}
}
