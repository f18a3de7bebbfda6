package cleanup_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// warnLog keeps the messages logged at WARN level or above.
type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *warnLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *warnLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		l.mu.Lock()
		l.msgs = append(l.msgs, r.Message)
		l.mu.Unlock()
	}
	return nil
}
func (l *warnLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *warnLog) WithGroup(string) slog.Handler      { return l }

func (l *warnLog) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// TestHistoryLostRefusesQuietly: a stream the PostgreSQL store refuses
// because the database lost its history (store.ErrHistoryLost) is no
// failing recovery: the loop leaves it for a later cycle without counting
// a failure (so MaxRecoveryAttempts never turns its move-planned entries
// into gaps), logs it once per refusal, and recovers the other streams.
func TestHistoryLostRefusesQuietly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)

	// lost: 1 and 2 expired, 3..5 leased, then the server forgets 3..5
	// and the next lease is refused.
	leaseExpired(t, s, "lost", 2)
	_, err = s.Lease(ctx, "lost", []store.LeaseRequest{{TTL: time.Hour}, {TTL: time.Hour}, {TTL: time.Hour}}, nil)
	require.NoError(t, err)
	q := pgx.Identifier{schema}.Sanitize()
	_, err = pool.Exec(ctx, `DELETE FROM `+q+`.entries WHERE stream = 'lost' AND number > 2`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE `+q+`.streams SET last_number = 2 WHERE name = 'lost'`)
	require.NoError(t, err)
	_, err = s.Lease(ctx, "lost", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	require.ErrorIs(t, err, store.ErrHistoryLost)
	leaseExpired(t, s, "ok", 1)

	log := &warnLog{}
	rec := &recorder{}
	pipeline, err := recovery.New(s, &recovery.Config{OperationTracker: completed, MaxAttempts: 1})
	require.NoError(t, err)
	sv, err := cleanup.New(s, &cleanup.Config{Pipeline: pipeline, Observer: rec, Logger: slog.New(log)})
	require.NoError(t, err)
	defer sv.Stop()

	for cycle := range 3 {
		res, err := sv.RunOnce(ctx)
		require.NoError(t, err, "cycle %d", cycle)
		require.Zero(t, res.Failed, "cycle %d: a refusal is no failure", cycle)
		if cycle == 0 {
			require.Equal(t, 1, res.Resolved[recovery.MethodRetry], "the other stream goes on")
		}
	}
	left, err := s.ListExpired(ctx, &store.ListExpiredParams{Stream: "lost"})
	require.NoError(t, err)
	require.Len(t, left, 2, "still expired: not declared gaps")
	for _, e := range left {
		require.Equal(t, store.Leased, e.State)
	}
	rec.mu.Lock()
	for i, e := range rec.handled {
		require.NotEqual(t, "lost", e.Stream, "reported: %v", rec.errs[i])
	}
	rec.mu.Unlock()
	require.Len(t, log.messages(), 1, "logged once for the refusal: %q", log.messages())
	require.Equal(t, 1, cleanup.RefusedStreams(sv))

	// Accepted: the next cycle moves them, and the refusal is forgotten.
	require.NoError(t, s.AcceptHistory("lost"))
	res, err := sv.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Resolved[recovery.MethodRetry])
	require.Zero(t, cleanup.RefusedStreams(sv), "a stream whose write went through is no longer held as refused")
}
