package health_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/health"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

var (
	_ health.Pinger           = (*postgres.Store)(nil)
	_ health.Pinger           = (*memory.Store)(nil)
	_ health.StreamSource     = (*postgres.Store)(nil)
	_ health.StreamSource     = (*memory.Store)(nil)
	_ health.CheckpointSource = (*postgres.Store)(nil)
	_ health.CheckpointSource = (*memory.Store)(nil)
	_ health.Cleaner          = (*cleanup.Service)(nil)
	_ store.ListenChecker     = (*postgres.Store)(nil)
	_ http.Handler            = (*health.Checker)(nil)
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// backend is what the tests need of a store.
type backend interface {
	health.Pinger
	health.StreamSource
	health.CheckpointSource
	cleanup.Store
	Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error)
	Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error)
	SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error
}

// backends returns a fresh memory store and a store on a fresh PostgreSQL
// schema.
func backends(t *testing.T) map[string]backend {
	return map[string]backend{"memory": memory.New(nil), "postgres": newPostgres(t, nil)}
}

func newPostgres(t *testing.T, cfg *postgres.Config) *postgres.Store {
	t.Helper()
	pool := pgtest.Shared(t, false)
	c := postgres.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &c)
	require.NoError(t, err)
	return s
}

// commit leases n numbers of stream and commits them.
func commit(t *testing.T, s backend, stream string, n int) {
	t.Helper()
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Minute}
	}
	es, err := s.Lease(t.Context(), stream, reqs, nil)
	require.NoError(t, err)
	for _, e := range es {
		_, err := s.Commit(t.Context(), stream, e.Number, e.Token, nil)
		require.NoError(t, err)
	}
}

// serve runs one request through c and returns its status and the report
// it carried.
func serve(t *testing.T, c *health.Checker) (int, health.Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/healthz", nil))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var rep health.Report
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rep), rec.Body.String())
	return rec.Code, rep
}

// find returns the report's components of check (and stream or reader,
// when not empty).
func find(rep health.Report, check, subject string) []health.Component {
	var out []health.Component
	for _, c := range rep.Components {
		if c.Check == check && (subject == "" || c.Stream == subject || c.Reader == subject) {
			out = append(out, c)
		}
	}
	return out
}

// requireUnhealthy checks that the request failed with 503 because of
// exactly one component, check (about subject), whose message says want.
func requireUnhealthy(t *testing.T, c *health.Checker, check, subject, want string) health.Component {
	t.Helper()
	code, rep := serve(t, c)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.False(t, rep.Healthy)
	var bad []health.Component
	for _, comp := range rep.Components {
		if !comp.Healthy {
			bad = append(bad, comp)
		}
	}
	require.Len(t, bad, 1, "%+v", rep.Components)
	require.Equal(t, check, bad[0].Check)
	if subject != "" {
		require.Contains(t, []string{bad[0].Stream, bad[0].Reader}, subject)
	}
	require.Contains(t, bad[0].Message, want)
	return bad[0]
}

// TestHealthy checks every component of a working setup, on both backends
// (PostgreSQL with a started barrier, whose watch hears): 200 and a
// healthy report with the figures; and Check from many goroutines at once.
func TestHealthy(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			commit(t, s, "orders", 3)
			require.NoError(t, s.SaveCheckpoint(t.Context(), "projection", "orders", 3, nil))
			// An explicit interval: the loop then opens no watch of its own
			// for the settings table, and the barrier's is the only one.
			cl, err := cleanup.New(s, &cleanup.Config{Interval: cleanup.DefaultInterval})
			require.NoError(t, err)
			require.NoError(t, cl.Start(t.Context()))
			defer cl.Stop()
			require.Eventually(t, func() bool { return !cl.Status().LastPass.IsZero() }, 10*time.Second, time.Millisecond)
			cfg := &health.Config{Database: s, Cleanup: cl, Streams: s, Checkpoints: s, MaxLag: 10, MaxReaderLag: 10}
			want := []string{health.CheckDatabase, health.CheckCleanup, health.CheckStream, health.CheckReader}
			if pg, ok := s.(*postgres.Store); ok {
				b, err := barrier.New(pg, nil)
				require.NoError(t, err)
				require.NoError(t, b.Start(t.Context()))
				defer b.Stop()
				require.Eventually(t, func() bool { return pg.ListenHealth().Hearing == 1 }, 10*time.Second, time.Millisecond)
				cfg.Listen = pg
				want = []string{health.CheckDatabase, health.CheckListen, health.CheckCleanup, health.CheckStream, health.CheckReader}
			}
			c, err := health.New(cfg)
			require.NoError(t, err)
			code, rep := serve(t, c)
			require.Equal(t, http.StatusOK, code, "%+v", rep)
			require.True(t, rep.Healthy)
			var checks []string
			for _, comp := range rep.Components {
				require.True(t, comp.Healthy, "%+v", comp)
				checks = append(checks, comp.Check)
			}
			require.Equal(t, want, checks)

			st := find(rep, health.CheckStream, "orders")[0]
			require.Equal(t, "watermark 3: every number handed out is resolved", st.Message)
			require.EqualValues(t, 3, st.Observed["watermark"])
			require.EqualValues(t, 0, st.Observed["lag"])
			rd := find(rep, health.CheckReader, "projection")[0]
			require.Equal(t, "orders", rd.Stream)
			require.Equal(t, "at the watermark 3", rd.Message)
			require.Contains(t, find(rep, health.CheckCleanup, "")[0].Message, "last full pass")
			require.Contains(t, find(rep, health.CheckDatabase, "")[0].Message, "reachable and writable")
			if cfg.Listen != nil {
				require.Contains(t, find(rep, health.CheckListen, "")[0].Message, "1 of 1 watches hear")
			}

			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if !c.Check(t.Context()).Healthy {
						t.Error("a concurrent Check found the setup unhealthy")
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestCleanupNotRunning: a loop never started, then one stopped, fails
// the cleanup check.
func TestCleanupNotRunning(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	cl, err := cleanup.New(s, nil)
	require.NoError(t, err)
	c, err := health.New(&health.Config{Database: s, Cleanup: cl})
	require.NoError(t, err)
	requireUnhealthy(t, c, health.CheckCleanup, "", "not started")
	require.NoError(t, cl.Start(t.Context()))
	code, _ := serve(t, c)
	require.Equal(t, http.StatusOK, code)
	cl.Stop()
	comp := requireUnhealthy(t, c, health.CheckCleanup, "", "stopped")
	require.Equal(t, false, comp.Observed["running"])
}

// fakeCleaner reports a fixed status.
type fakeCleaner cleanup.Status

func (f fakeCleaner) Status() cleanup.Status { return cleanup.Status(f) }

// TestCleanupStale: a running loop without a full pass for longer than
// CleanupStale (default three intervals) fails, saying why the listings
// failed.
func TestCleanupStale(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st := fakeCleaner{Running: true, Interval: 10 * time.Second, Started: now.Add(-time.Hour), LastPass: now.Add(-29 * time.Second)}
	c, err := health.New(&health.Config{Cleanup: st, Now: clock})
	require.NoError(t, err)
	code, rep := serve(t, c)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "last full pass 29s ago (max 30s)", rep.Components[0].Message)

	st.LastPass = now.Add(-31 * time.Second)
	st.Failures, st.LastError = 4, io.ErrUnexpectedEOF
	c, err = health.New(&health.Config{Cleanup: st, Now: clock})
	require.NoError(t, err)
	comp := requireUnhealthy(t, c, health.CheckCleanup, "", "no full pass for 31s (max 30s); the last 4 cycles could not list the expired leases: unexpected EOF")
	require.EqualValues(t, 31, comp.Observed["last_pass_age_seconds"])
	require.EqualValues(t, 4, comp.Observed["failures"])

	c, err = health.New(&health.Config{Cleanup: st, Now: clock, CleanupStale: time.Minute})
	require.NoError(t, err)
	code, _ = serve(t, c)
	require.Equal(t, http.StatusOK, code, "CleanupStale overrides the default")

	st.LastPass = time.Time{}
	c, err = health.New(&health.Config{Cleanup: st, Now: clock})
	require.NoError(t, err)
	requireUnhealthy(t, c, health.CheckCleanup, "", "no full pass for 1h0m0s")

	// Three short intervals are too short a default: it is at least
	// DefaultCleanupStaleMin.
	st = fakeCleaner{Running: true, Interval: cleanup.DefaultInterval, Started: now.Add(-time.Hour), LastPass: now.Add(-29 * time.Second)}
	c, err = health.New(&health.Config{Cleanup: st, Now: clock})
	require.NoError(t, err)
	code, rep = serve(t, c)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "last full pass 29s ago (max 30s)", rep.Components[0].Message)
}

// muting is a pool that swallows every LISTEN self-check notice: it
// answers as if it sent them, so each watch's check hears nothing.
type muting struct{ *pgxpool.Pool }

func (m muting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(args) == 2 {
		if p, ok := args[1].(string); ok && strings.HasPrefix(p, "c\t") {
			return pgconn.NewCommandTag("SELECT 1"), nil
		}
	}
	return m.Pool.Exec(ctx, sql, args...)
}

// TestListenDeaf: a watch whose self-check heard nothing fails the listen
// check at once, naming the fix.
func TestListenDeaf(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	s, err := postgres.New(muting{pool}, &postgres.Config{Schema: pgtest.NewSchema(t, pool),
		ListenCheckTimeout: 100 * time.Millisecond, DeafRecheckInterval: time.Hour})
	require.NoError(t, err)
	b, err := barrier.New(s, nil)
	require.NoError(t, err)
	require.NoError(t, b.Start(t.Context()))
	defer b.Stop()
	require.Eventually(t, func() bool { return s.ListenHealth().Deaf == 1 }, 10*time.Second, time.Millisecond)
	c, err := health.New(&health.Config{Database: s, Listen: s})
	require.NoError(t, err)
	comp := requireUnhealthy(t, c, health.CheckListen, "", "1 of 1 watches are deaf")
	require.Contains(t, comp.Message, "ListenDSN")
	require.EqualValues(t, 1, comp.Observed["deaf"])
	require.EqualValues(t, 0, comp.Observed["hearing"])
}

// TestListenNotHearing: no watch at all fails the listen check; so does a
// watch that cannot connect, once it has not heard for ListenGrace.
func TestListenNotHearing(t *testing.T) {
	t.Parallel()
	s := newPostgres(t, &postgres.Config{ListenDSN: closedPortURL(t)})
	c, err := health.New(&health.Config{Listen: s})
	require.NoError(t, err)
	requireUnhealthy(t, c, health.CheckListen, "", "no watch runs")

	b, err := barrier.New(s, nil)
	require.NoError(t, err)
	require.NoError(t, b.Start(t.Context()))
	defer b.Stop()
	require.Eventually(t, func() bool { return s.ListenHealth().Watches == 1 }, 10*time.Second, time.Millisecond)
	code, rep := serve(t, c)
	require.Equal(t, http.StatusOK, code, "within the grace period: %+v", rep)
	require.Contains(t, rep.Components[0].Message, "1 connecting")

	later := func() time.Time { return time.Now().Add(time.Minute) }
	c, err = health.New(&health.Config{Listen: s, Now: later})
	require.NoError(t, err)
	comp := requireUnhealthy(t, c, health.CheckListen, "", "1 of 1 watches have not heard for 1m")
	require.Contains(t, comp.Message, "last heard never")
}

// closedPortURL returns the test database's URL with a port nothing
// listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "postgres://postgres@" + addr + "/test?sslmode=disable&connect_timeout=2"
}

// TestStreamStalled: a stream whose watermark waits behind an unexpired
// lease taken longer ago than MaxStall fails, naming the number; more
// numbers beyond it than MaxLag fail it too; another stream stays healthy.
func TestStreamStalled(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			now, err := s.Now(t.Context())
			require.NoError(t, err)
			hourAgo := now.Add(-time.Hour)
			_, err = s.Lease(t.Context(), "stuck", []store.LeaseRequest{{TTL: 2 * time.Hour}}, &store.LeaseParams{Now: &hourAgo})
			require.NoError(t, err)
			commit(t, s, "stuck", 3)
			commit(t, s, "fine", 2)

			c, err := health.New(&health.Config{Streams: s})
			require.NoError(t, err)
			comp := requireUnhealthy(t, c, health.CheckStream, "stuck", "watermark 0: stalled: number 1, leased 1h0m")
			require.Contains(t, comp.Message, "(max stall 5m0s); 1 in flight")
			require.EqualValues(t, 1, comp.Observed["oldest_unresolved"])
			require.EqualValues(t, 4, comp.Observed["lag"], "1..4 are beyond the watermark 0")
			require.EqualValues(t, 300, comp.Observed["max_stall_seconds"])
			require.GreaterOrEqual(t, comp.Observed["oldest_unresolved_age_seconds"], 3600.0)

			c, err = health.New(&health.Config{Streams: s, MaxStall: 2 * time.Hour, MaxLag: 2})
			require.NoError(t, err)
			requireUnhealthy(t, c, health.CheckStream, "stuck", "watermark 0: 4 numbers handed out beyond it (max lag 2)")

			c, err = health.New(&health.Config{Streams: s, MaxStall: -1, MaxLag: 4, StreamNames: []string{"stuck", "new"}})
			require.NoError(t, err)
			code, rep := serve(t, c)
			require.Equal(t, http.StatusOK, code, "%+v", rep)
			require.Len(t, rep.Components, 2, "only the streams named")
			require.Equal(t, "new", rep.Components[0].Stream)
			require.Equal(t, "no number leased yet", rep.Components[0].Message)
			require.Contains(t, rep.Components[1].Message, "watermark 0, 4 numbers beyond it, 1 in flight; number 1, leased 1h0m")
		})
	}
}

// TestStreamListingCapped: with more streams than MaxStreams, the first
// are checked and a healthy "streams" result says there are more.
func TestStreamListingCapped(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for _, name := range []string{"a", "b", "c"} {
		commit(t, s, name, 1)
	}
	c, err := health.New(&health.Config{Streams: s, MaxStreams: 2})
	require.NoError(t, err)
	code, rep := serve(t, c)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, rep.Components, 3)
	require.Equal(t, []string{"a", "b"}, []string{rep.Components[0].Stream, rep.Components[1].Stream})
	require.Equal(t, health.CheckStreams, rep.Components[2].Check)
	require.Contains(t, rep.Components[2].Message, "checked the first 2 streams in name order; more exist")
}

// TestReaderListingCapped: with more checkpoints than MaxCheckpoints, the
// first are checked and a healthy "readers" result says there are more;
// with exactly MaxCheckpoints, no note.
func TestReaderListingCapped(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	commit(t, s, "orders", 1)
	for _, r := range []string{"a", "b", "c"} {
		require.NoError(t, s.SaveCheckpoint(t.Context(), r, "orders", 1, nil))
	}
	c, err := health.New(&health.Config{Checkpoints: s, MaxCheckpoints: 2})
	require.NoError(t, err)
	code, rep := serve(t, c)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, rep.Components, 3)
	require.Equal(t, []string{"a", "b"}, []string{rep.Components[0].Reader, rep.Components[1].Reader})
	require.Equal(t, health.CheckReaders, rep.Components[2].Check)
	require.Contains(t, rep.Components[2].Message, "checked the first 2 checkpoints")

	c, err = health.New(&health.Config{Checkpoints: s, MaxCheckpoints: 3, Readers: []string{"c", "a", "b", "a"}})
	require.NoError(t, err)
	_, rep = serve(t, c)
	require.Len(t, rep.Components, 3)
	for i, r := range []string{"a", "b", "c"} {
		require.Equal(t, health.CheckReader, rep.Components[i].Check)
		require.Equal(t, r, rep.Components[i].Reader)
	}
}

// TestReaderBehind: a reader more than MaxReaderLag behind its stream's
// watermark fails; so does one behind whose checkpoint has not moved for
// MaxReaderStall; a reader named but without a checkpoint is reported.
func TestReaderBehind(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			commit(t, s, "orders", 5)
			require.NoError(t, s.SaveCheckpoint(t.Context(), "slow", "orders", 1, nil))
			require.NoError(t, s.SaveCheckpoint(t.Context(), "quick", "orders", 5, nil))

			c, err := health.New(&health.Config{Checkpoints: s, MaxReaderLag: 3})
			require.NoError(t, err)
			comp := requireUnhealthy(t, c, health.CheckReader, "slow", "4 behind the watermark 5 (max lag 3)")
			require.Equal(t, "orders", comp.Stream)
			require.EqualValues(t, 1, comp.Observed["position"])
			require.EqualValues(t, 4, comp.Observed["lag"])

			c, err = health.New(&health.Config{Checkpoints: s, Readers: []string{"slow", "ghost"}})
			require.NoError(t, err)
			code, rep := serve(t, c)
			require.Equal(t, http.StatusOK, code, "behind but moving: %+v", rep)
			require.Equal(t, "no checkpoint saved", find(rep, health.CheckReader, "ghost")[0].Message)
			require.Contains(t, find(rep, health.CheckReader, "slow")[0].Message, "4 behind the watermark 5; checkpoint saved")

			now, err := s.Now(t.Context())
			require.NoError(t, err)
			hourAgo := now.Add(-time.Hour)
			require.NoError(t, s.SaveCheckpoint(t.Context(), "stuck", "orders", 2, &store.SaveCheckpointParams{Now: &hourAgo}))
			c, err = health.New(&health.Config{Checkpoints: s})
			require.NoError(t, err)
			requireUnhealthy(t, c, health.CheckReader, "stuck", "stalled: behind, and its checkpoint 2 has not moved for 1h0m")
		})
	}
}

// TestDatabaseUnreachable: a server nobody listens at, and a closed pool,
// fail the database check.
func TestDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), closedPortURL(t))
	require.NoError(t, err)
	defer pool.Close()
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	c, err := health.New(&health.Config{Database: s})
	require.NoError(t, err)
	requireUnhealthy(t, c, health.CheckDatabase, "", "not reachable or not writable: ping:")

	closed, err := pgxpool.New(t.Context(), pgtest.URL())
	require.NoError(t, err)
	closed.Close()
	s, err = postgres.New(closed, nil)
	require.NoError(t, err)
	c, err = health.New(&health.Config{Database: s})
	require.NoError(t, err)
	requireUnhealthy(t, c, health.CheckDatabase, "", "closed pool")
}

// TestDatabaseReadOnly: a read-only session (as a standby's are) fails
// the database check, saying the server refuses writes.
func TestDatabaseReadOnly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	ro, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer ro.Close()
	s, err := postgres.New(ro, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	c, err := health.New(&health.Config{Database: s, Streams: s})
	require.NoError(t, err)
	requireUnhealthy(t, c, health.CheckDatabase, "", "read-only: writes refused: the session is read-only")
}

// blockingPinger answers only when its context ends.
type blockingPinger struct{ calls atomic.Int64 }

func (b *blockingPinger) Ping(ctx context.Context) error {
	b.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestTimeout: a check that does not answer within Timeout fails, saying
// so, and the report still comes.
func TestTimeout(t *testing.T) {
	t.Parallel()
	p := &blockingPinger{}
	c, err := health.New(&health.Config{Database: p, Streams: memory.New(nil), Timeout: 20 * time.Millisecond})
	require.NoError(t, err)
	requireUnhealthy(t, c, health.CheckDatabase, "", "not reachable or not writable: timed out after 20ms: context deadline exceeded")
	require.Equal(t, int64(1), p.calls.Load())
}

// TestHTTP checks the handler's protocol: 405 with Allow for other
// methods, HEAD without a body, and the JSON's snake_case names.
func TestHTTP(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	commit(t, s, "orders", 1)
	c, err := health.New(&health.Config{Database: s, Streams: s})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()

	resp, err := http.Post(srv.URL, "text/plain", nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))

	resp, err = http.Head(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, body)

	resp, err = http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	var raw map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&raw))
	require.ElementsMatch(t, []string{"healthy", "checked_at", "duration_seconds", "components"}, keys(raw))
	comps := raw["components"].([]any)
	require.Len(t, comps, 2)
	require.ElementsMatch(t, []string{"check", "healthy", "message", "observed"}, keys(comps[0].(map[string]any)))
	stream := comps[1].(map[string]any)
	require.ElementsMatch(t, []string{"check", "stream", "healthy", "message", "observed"}, keys(stream))
	require.ElementsMatch(t, []string{"watermark", "next_number", "lag", "in_flight", "max_stall_seconds"},
		keys(stream["observed"].(map[string]any)))
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestConfig: a Config that checks nothing, or a bad field, is refused
// with ErrInvalidArgument naming the field.
func TestConfig(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	_, err := health.New(nil)
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorContains(t, err, "checks nothing")
	for field, cfg := range map[string]health.Config{
		"Config.Timeout":        {Database: s, Timeout: -time.Second},
		"Config.ListenGrace":    {Database: s, ListenGrace: -1},
		"Config.CleanupStale":   {Database: s, CleanupStale: -1},
		"Config.MaxLag":         {Database: s, MaxLag: -1},
		"Config.MaxReaderLag":   {Database: s, MaxReaderLag: -1},
		"Config.MaxStreams":     {Database: s, MaxStreams: health.MaxItems + 1},
		"Config.MaxCheckpoints": {Database: s, MaxCheckpoints: -1},
		"Config.StreamNames[1]": {Streams: s, StreamNames: []string{"ok", ""}},
		"Config.Readers[0]":     {Checkpoints: s, Readers: []string{"bad\nname"}},
	} {
		_, err := health.New(&cfg)
		require.ErrorIs(t, err, store.ErrInvalidArgument, field)
		require.ErrorContains(t, err, field)
	}
}

// TestHistoryLost checks the history component on PostgreSQL: healthy
// while the database keeps its history; unhealthy, naming the stream,
// once the server went back on numbers it had handed out (what a promoted
// asynchronous standby does, made here by rewinding the stream in SQL);
// healthy again, counting the accepted refusal, after AcceptHistory.
func TestHistoryLost(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	c, err := health.New(&health.Config{History: s})
	require.NoError(t, err)
	commit(t, s, "h<1>", 3)
	code, rep := serve(t, c)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "no stream or named lease refused for lost history", find(rep, health.CheckHistory, "")[0].Message)

	q := pgx.Identifier{schema}.Sanitize()
	_, err = pool.Exec(t.Context(), `UPDATE `+q+`.streams SET last_number = 1 WHERE name = $1`, "h<1>")
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), `DELETE FROM `+q+`.entries WHERE stream = $1 AND number > 1`, "h<1>")
	require.NoError(t, err)
	_, err = s.Lease(t.Context(), "h<1>", []store.LeaseRequest{{TTL: time.Minute}}, nil)
	require.ErrorIs(t, err, store.ErrHistoryLost)

	comp := requireUnhealthy(t, c, health.CheckHistory, "", `1 refused because the database lost history`)
	require.Contains(t, comp.Message, `stream "h<1>": number 2 after 3`)
	require.Equal(t, float64(1), comp.Observed["refused"])

	require.NoError(t, s.AcceptHistory("h<1>"))
	code, rep = serve(t, c)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, find(rep, health.CheckHistory, "")[0].Message, "(1 refusals accepted since start)")
}
