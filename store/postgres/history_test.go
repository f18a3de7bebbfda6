package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// historyBundle is a Store on a schema of its own, with its error log.
type historyBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	s      *postgres.Store
	log    *errorLog
}

// errorLog keeps the messages logged at ERROR level, and counts those at
// WARN.
type errorLog struct {
	mu    sync.Mutex
	msgs  []string
	warns int
}

func (l *errorLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case r.Level >= slog.LevelError:
		l.msgs = append(l.msgs, r.Message)
	case r.Level >= slog.LevelWarn:
		l.warns++
	}
	return nil
}

func (l *errorLog) warnings() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.warns
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.msgs)
}

func newHistoryBundle(t *testing.T) *historyBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	log := &errorLog{}
	s, err := postgres.New(pool, &postgres.Config{Schema: schema, Logger: slog.New(log)})
	require.NoError(t, err)
	return &historyBundle{ctx: ctx, pool: pool, schema: schema, s: s, log: log}
}

// rewind makes the server forget stream's numbers above keep, as a
// promoted asynchronous standby that had not received them would: the
// counter goes back and the entries are gone.
func (b *historyBundle) rewind(t *testing.T, stream string, keep int64) {
	t.Helper()
	s := pgx.Identifier{b.schema}.Sanitize()
	_, err := b.pool.Exec(b.ctx, `UPDATE `+s+`.streams SET last_number = $2 WHERE name = $1`, stream, keep)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `DELETE FROM `+s+`.entries WHERE stream = $1 AND number > $2`, stream, keep)
	require.NoError(t, err)
}

// counter returns stream's last number on the server.
func (b *historyBundle) counter(t *testing.T, stream string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT last_number FROM `+pgx.Identifier{b.schema}.Sanitize()+`.streams WHERE name = $1`, stream).Scan(&n))
	return n
}

func (b *historyBundle) lease(stream string, n int) ([]store.Entry, error) {
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Hour}
	}
	return b.s.Lease(b.ctx, stream, reqs, nil)
}

// requireLost checks that err is a *store.HistoryLostError with these
// fields.
func requireLost(t *testing.T, err error, want store.HistoryLostError) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrHistoryLost)
	require.False(t, store.IsInvalid(err))
	var lost *store.HistoryLostError
	require.True(t, errors.As(err, &lost), "%v", err)
	require.False(t, lost.At.IsZero())
	lost.At = time.Time{}
	require.Equal(t, want, *lost)
}

// TestHistoryLostLease leases and commits 1..5, makes the server forget
// 3..5, and checks that the next lease hands out nothing (3 again would be
// a number handed out twice), is logged and counted, that the stream stays
// refused (for leases and appends, without a statement) until
// AcceptHistory, and that other streams go on.
func TestHistoryLostLease(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	es, err := b.lease("a", 5)
	require.NoError(t, err)
	for _, e := range es {
		_, err := b.s.Commit(b.ctx, "a", e.Number, e.Token, &store.CommitParams{Ordered: true})
		require.NoError(t, err)
	}
	_, err = b.lease("other", 1)
	require.NoError(t, err)
	b.rewind(t, "a", 2)

	_, err = b.lease("a", 1)
	requireLost(t, err, store.HistoryLostError{Stream: "a", What: store.LostNumber, Seen: 5, Got: 3})
	require.Contains(t, err.Error(), `stream "a"`)
	require.Equal(t, 1, b.log.count(), "logged at ERROR")
	require.Equal(t, int64(3), b.counter(t, "a"), "the refused lease took 3 on the server")

	// Refused from now on, with no statement sent.
	for range 3 {
		_, err = b.lease("a", 2)
		requireLost(t, err, store.HistoryLostError{Stream: "a", What: store.LostNumber, Seen: 5, Got: 3})
	}
	_, err = b.s.Append(b.ctx, "a", []store.AppendRequest{{Payload: []byte("x")}}, nil)
	require.ErrorIs(t, err, store.ErrHistoryLost)
	require.Equal(t, int64(3), b.counter(t, "a"), "refusals touch nothing")
	_, err = b.lease("other", 1)
	require.NoError(t, err, "another stream goes on")

	h := b.s.HistoryHealth()
	require.Len(t, h.Refused, 1)
	require.Equal(t, "a", h.Refused[0].Stream)
	require.Equal(t, []store.HistoryLoss{{Stream: "a", Count: 1}}, h.Losses)

	require.NoError(t, b.s.AcceptHistory("a"))
	es, err = b.lease("a", 1)
	require.NoError(t, err)
	require.Equal(t, int64(4), es[0].Number, "after AcceptHistory, the server's numbers")
	h = b.s.HistoryHealth()
	require.Empty(t, h.Refused)
	require.Equal(t, []store.HistoryLoss{{Stream: "a", Count: 1}}, h.Losses, "the count stays")
}

// TestHistoryLostAppendAndRecover checks appends and recoveries: both
// hand out numbers.
func TestHistoryLostAppendAndRecover(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	_, err := b.s.Append(b.ctx, "ap", []store.AppendRequest{{}, {}, {}}, nil)
	require.NoError(t, err)
	b.rewind(t, "ap", 1)
	_, err = b.s.Append(b.ctx, "ap", []store.AppendRequest{{}}, nil)
	requireLost(t, err, store.HistoryLostError{Stream: "ap", What: store.LostNumber, Seen: 3, Got: 2})

	// A recovery takes the stream's next number.
	now := time.Now()
	es, err := b.s.Lease(b.ctx, "rc", []store.LeaseRequest{{TTL: time.Second}, {TTL: time.Second}, {TTL: time.Second}}, &store.LeaseParams{Now: &now})
	require.NoError(t, err)
	_, err = b.s.Commit(b.ctx, "rc", es[0].Number, es[0].Token, nil)
	require.NoError(t, err)
	b.rewind(t, "rc", 2) // 3 is gone; 2 is leased and expires
	later := now.Add(time.Minute)
	_, err = b.s.RecoverExpired(b.ctx, "rc", 2, &store.RecoverParams{Now: &later, RecoveryType: "retry"})
	requireLost(t, err, store.HistoryLostError{Stream: "rc", What: store.LostNumber, Seen: 3, Got: 3})
}

// TestHistoryLostBatch leases over two streams in one statement after the
// server forgot one stream's numbers: only that stream's item fails.
func TestHistoryLostBatch(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	items := []store.StreamLeases{
		{Stream: "x", Requests: []store.LeaseRequest{{TTL: time.Hour}, {TTL: time.Hour}}},
		{Stream: "y", Requests: []store.LeaseRequest{{TTL: time.Hour}}},
	}
	for _, r := range b.s.LeaseMulti(b.ctx, items, nil) {
		require.NoError(t, r.Err)
	}
	b.rewind(t, "x", 0)
	res := b.s.LeaseMulti(b.ctx, items, nil)
	requireLost(t, res[0].Err, store.HistoryLostError{Stream: "x", What: store.LostNumber, Seen: 2, Got: 1})
	require.Empty(t, res[0].Entries)
	require.NoError(t, res[1].Err)
	require.Equal(t, int64(2), res[1].Entries[0].Number)

	// The next batch refuses x before the statement; y goes on.
	res = b.s.LeaseMulti(b.ctx, items, nil)
	require.ErrorIs(t, res[0].Err, store.ErrHistoryLost)
	require.NoError(t, res[1].Err)
	require.Equal(t, int64(3), res[1].Entries[0].Number)
	require.Equal(t, int64(2), b.counter(t, "x"), "x was not sent again")
}

// TestHistoryLostConcurrentLeases leases one stream from many goroutines
// of one Store: their answers come back in any order, and none may look
// like a loss.
func TestHistoryLostConcurrentLeases(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, err := b.lease("c", 1+len(errs)%3); err != nil {
					errs <- err
					return
				}
				if res := b.s.LeaseMulti(b.ctx, []store.StreamLeases{{Stream: "c", Requests: []store.LeaseRequest{{TTL: time.Hour}}},
					{Stream: "d", Requests: []store.LeaseRequest{{TTL: time.Hour}}}}, nil); res[0].Err != nil || res[1].Err != nil {
					errs <- errors.Join(res[0].Err, res[1].Err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, b.s.HistoryHealth().Losses)
}

// TestHistoryInCallersTransaction checks that a lease rolled back with the
// caller's transaction is no history: its number is rightly handed out
// again. A refused stream is refused in transactions too.
func TestHistoryInCallersTransaction(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	_, err := b.lease("t", 1)
	require.NoError(t, err)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	es, err := b.s.InTx(tx).Lease(b.ctx, "t", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), es[0].Number)
	require.NoError(t, tx.Rollback(b.ctx))
	es, err = b.lease("t", 1)
	require.NoError(t, err)
	require.Equal(t, int64(2), es[0].Number, "the rolled-back 2, handed out again")

	b.rewind(t, "t", 0)
	_, err = b.lease("t", 1)
	require.ErrorIs(t, err, store.ErrHistoryLost)
	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = b.s.InTx(tx).Lease(b.ctx, "t", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	require.ErrorIs(t, err, store.ErrHistoryLost)
}

// TestHistoryLostWatermark checks that a read of the barrier's starting
// point (Snapshot) that sees the watermark go back refuses nothing (reads
// may go to a replica that is behind), but is logged at WARN and counted
// once; the next write, which reaches the primary, is refused.
func TestHistoryLostWatermark(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	es, err := b.lease("w", 4)
	require.NoError(t, err)
	for _, e := range es {
		_, err := b.s.Commit(b.ctx, "w", e.Number, e.Token, nil)
		require.NoError(t, err)
	}
	// Another Store (another process) leased them: this one saw only the
	// watermark.
	log := &errorLog{}
	other, err := postgres.New(b.pool, &postgres.Config{Schema: b.schema, Logger: slog.New(log)})
	require.NoError(t, err)
	snap, err := other.Snapshot(b.ctx, "w", 0)
	require.NoError(t, err)
	require.Equal(t, int64(4), snap.Watermark)
	b.rewind(t, "w", 1)
	for range 2 {
		snap, err = other.Snapshot(b.ctx, "w", 0)
		require.NoError(t, err)
		require.Equal(t, int64(1), snap.Watermark, "the read returns what the server has")
	}
	h := other.HistoryHealth()
	require.Empty(t, h.Refused, "a read refuses nothing")
	require.Equal(t, []store.HistoryLoss{{Stream: "w", Count: 1}}, h.Losses, "counted once")
	require.Equal(t, 1, log.warnings())
	require.Zero(t, log.count())

	_, err = other.Lease(b.ctx, "w", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	requireLost(t, err, store.HistoryLostError{Stream: "w", What: store.LostNumber, Seen: 4, Got: 2})
	require.Equal(t, 1, log.count(), "the write's finding, at ERROR")
	require.Len(t, other.HistoryHealth().Refused, 1)
}

// gateDB holds the next snapshot statement (two arguments, stream and
// limit) until open is closed, telling held when it is held.
type gateDB struct {
	postgres.DB
	armed      chan struct{} // receive: the next snapshot is held
	held, open chan struct{}
}

func (g *gateDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if len(args) == 2 {
		select {
		case <-g.armed:
			close(g.held)
			<-g.open
		default:
		}
	}
	return g.DB.QueryRow(ctx, sql, args...)
}

// TestAcceptHistoryStaleAnswers checks that an answer to a statement sent
// before AcceptHistory is not checked against the marks accepted: a
// snapshot sent before, answered after, finds no second loss.
func TestAcceptHistoryStaleAnswers(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	g := &gateDB{DB: b.pool, armed: make(chan struct{}, 1), held: make(chan struct{}), open: make(chan struct{})}
	s, err := postgres.New(g, &postgres.Config{Schema: b.schema, Logger: slog.New(b.log)})
	require.NoError(t, err)
	es, err := s.Lease(b.ctx, "g", []store.LeaseRequest{{TTL: time.Hour}, {TTL: time.Hour}, {TTL: time.Hour}}, nil)
	require.NoError(t, err)
	for _, e := range es {
		_, err := s.Commit(b.ctx, "g", e.Number, e.Token, nil)
		require.NoError(t, err)
	}
	_, err = s.Snapshot(b.ctx, "g", 0)
	require.NoError(t, err)
	b.rewind(t, "g", 1)

	g.armed <- struct{}{}
	done := make(chan error, 1)
	go func() {
		_, err := s.Snapshot(b.ctx, "g", 0) // sent with the marks 3, 3
		done <- err
	}()
	<-g.held
	_, err = s.Lease(b.ctx, "g", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	require.ErrorIs(t, err, store.ErrHistoryLost)
	require.NoError(t, s.AcceptHistory("g"))
	close(g.open)
	require.NoError(t, <-done)

	h := s.HistoryHealth()
	require.Empty(t, h.Refused)
	require.Equal(t, []store.HistoryLoss{{Stream: "g", Count: 1}}, h.Losses, "no second finding")
	require.Zero(t, b.log.warnings())
	es, err = s.Lease(b.ctx, "g", []store.LeaseRequest{{TTL: time.Hour}}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(3), es[0].Number)
}

// TestAcceptHistoryResetsBarrier checks that AcceptHistory has a barrier
// started on the Store drop the lost watermark and take the server's: an
// ordered commit of a number handed out again must wait for the numbers
// before it.
func TestAcceptHistoryResetsBarrier(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	es, err := b.lease("s", 5)
	require.NoError(t, err)
	for _, e := range es {
		_, err := b.s.Commit(b.ctx, "s", e.Number, e.Token, nil)
		require.NoError(t, err)
	}
	bar, err := barrier.New(b.s, nil)
	require.NoError(t, err)
	require.NoError(t, bar.Start(b.ctx))
	defer bar.Stop()
	require.Eventually(t, func() bool { return postgres.Watching(b.s) == 1 }, 10*time.Second, time.Millisecond)
	w, err := bar.Watermark(b.ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(5), w)

	b.rewind(t, "s", 2)
	_, err = b.lease("s", 1)
	require.ErrorIs(t, err, store.ErrHistoryLost)
	require.NoError(t, b.s.AcceptHistory("s"))
	w, err = bar.Watermark(b.ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(2), w, "the server's watermark (3 is leased by nobody)")
	require.False(t, bar.Reached("s", 4))
}

// TestHistoryMarksBounded checks that the marks are bounded by
// Config.HistoryLimit (the names of one-off leases, one per inbox
// message, do not pile up), that a name in use keeps its mark, and that
// a bad limit is refused.
func TestHistoryMarksBounded(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	s, err := postgres.New(b.pool, &postgres.Config{Schema: b.schema, HistoryLimit: 100})
	require.NoError(t, err)
	p := &store.AcquireLeaseParams{TTL: time.Hour}
	l, err := s.AcquireLease(b.ctx, "leader", "o", p)
	require.NoError(t, err)
	require.NoError(t, s.ReleaseLease(b.ctx, "leader", "o", l.Fence, nil))
	for i := range 10 {
		reqs := make([]store.AcquireLeaseRequest, 100)
		for j := range reqs {
			reqs[j] = store.AcquireLeaseRequest{Name: fmt.Sprintf("inbox/%04d", i*100+j), Owner: "o", TTL: time.Minute}
		}
		for _, r := range s.AcquireLeases(b.ctx, reqs, nil) {
			require.NoError(t, r.Err)
		}
		_, err := s.AcquireLease(b.ctx, "leader", "o", p) // in use: kept
		require.NoError(t, err)
		require.NoError(t, s.ReleaseLease(b.ctx, "leader", "o", l.Fence+int64(i)+1, nil))
		items := make([]store.StreamLeases, 100)
		for j := range items {
			items[j] = store.StreamLeases{Stream: fmt.Sprintf("st/%04d", i*100+j), Requests: []store.LeaseRequest{{TTL: time.Hour}}}
		}
		for _, r := range s.LeaseMulti(b.ctx, items, nil) {
			require.NoError(t, r.Err)
		}
	}
	streams, names := postgres.HistoryMarks(s)
	require.LessOrEqual(t, streams, 100)
	require.LessOrEqual(t, names, 100)
	_, err = b.pool.Exec(b.ctx, `UPDATE `+pgx.Identifier{b.schema}.Sanitize()+`.leases SET fence = 1 WHERE name = 'leader'`)
	require.NoError(t, err)
	_, err = s.AcquireLease(b.ctx, "leader", "o", p)
	require.ErrorIs(t, err, store.ErrHistoryLost, "a name in use is still checked")

	_, err = postgres.New(b.pool, &postgres.Config{Schema: b.schema, HistoryLimit: -1})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
}

// TestStandbyTracksNoHistory checks that a Standby's reads, which lag
// the primary by design, leave no marks and find no loss.
func TestStandbyTracksNoHistory(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	_, err := b.lease("sb", 3)
	require.NoError(t, err)
	sb, err := postgres.NewStandby(b.pool, &postgres.StandbyConfig{Schema: b.schema})
	require.NoError(t, err)
	_, err = sb.Snapshot(b.ctx, "sb", 0)
	require.NoError(t, err)
	b.rewind(t, "sb", 1)
	_, err = sb.Snapshot(b.ctx, "sb", 0)
	require.NoError(t, err)
	streams, names := postgres.StandbyMarks(sb)
	require.Zero(t, streams+names)
}

// TestHistoryLostFence acquires and releases a name twice (fences 1 and
// 2), makes the server forget the second holding, and checks that the next
// acquire, which would issue fence 2 again, fails; that the name stays
// refused until AcceptLeaseHistory; and that the metric and the alert
// report it.
func TestHistoryLostFence(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	ev, err := metrics.NewEvaluator(nil)
	require.NoError(t, err)
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Gaps: b.s, Alerts: ev})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()

	p := &store.AcquireLeaseParams{TTL: time.Hour}
	for fence := int64(1); fence <= 2; fence++ {
		l, err := b.s.AcquireLease(b.ctx, "leader", "o", p)
		require.NoError(t, err)
		require.Equal(t, fence, l.Fence)
		require.NoError(t, b.s.ReleaseLease(b.ctx, "leader", "o", l.Fence, nil))
	}
	_, err = b.pool.Exec(b.ctx, `UPDATE `+pgx.Identifier{b.schema}.Sanitize()+`.leases SET fence = 1 WHERE name = 'leader'`)
	require.NoError(t, err)

	_, err = b.s.AcquireLease(b.ctx, "leader", "o", p)
	requireLost(t, err, store.HistoryLostError{Name: "leader", What: store.LostFence, Seen: 2, Got: 2})
	require.Contains(t, err.Error(), `lease "leader"`)
	_, err = b.s.AcquireLease(b.ctx, "leader", "o2", p)
	require.ErrorIs(t, err, store.ErrHistoryLost, "refused until accepted")
	l, err := b.s.AcquireLease(b.ctx, "other", "o", p)
	require.NoError(t, err, "another name goes on")
	require.Equal(t, int64(1), l.Fence)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(b.ctx, &rm))
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name == metrics.NameHistoryLost {
				dp := mt.Data.(metricdata.Sum[int64]).DataPoints
				require.Len(t, dp, 1)
				v, ok := dp[0].Attributes.Value(metrics.KeyLease)
				require.True(t, ok)
				require.Equal(t, "leader", v.AsString())
				require.Equal(t, int64(1), dp[0].Value)
				found = true
			}
		}
	}
	require.True(t, found, "the lost history counter")
	alert := func() metrics.Alert {
		for _, a := range ev.Alerts() {
			if a.Name == metrics.AlertHistoryLost {
				return a
			}
		}
		t.Fatal("no HistoryLost alert")
		return metrics.Alert{}
	}
	require.True(t, alert().Firing)
	require.Equal(t, metrics.LevelCritical, alert().Level)

	require.NoError(t, b.s.AcceptLeaseHistory("leader"))
	// The refused acquire holds the name on the server, for nobody.
	_, err = b.s.ForceReleaseLeases(b.ctx, "o", nil)
	require.NoError(t, err)
	l, err = b.s.AcquireLease(b.ctx, "leader", "o", p)
	require.NoError(t, err)
	require.Equal(t, int64(3), l.Fence)
	require.NoError(t, reader.Collect(b.ctx, &rm))
	require.False(t, alert().Firing, "accepted: the alert resolves")
}

// TestAcceptHistoryBadInput checks that bad names fail with typed,
// quoted, bounded errors.
func TestAcceptHistoryBadInput(t *testing.T) {
	t.Parallel()
	b := newHistoryBundle(t)
	long := strings.Repeat("x\n", 1<<20)
	for _, name := range []string{"", long, "a\x00b", string([]byte{0xff})} {
		err := b.s.AcceptHistory(name)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		require.ErrorIs(t, err, store.ErrInvalidStream)
		require.Less(t, len(err.Error()), 1000)
		require.NotContains(t, err.Error(), "\n")
		err = b.s.AcceptLeaseHistory(name)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		require.ErrorIs(t, err, store.ErrInvalidLeaseName)
		require.Less(t, len(err.Error()), 1000)
	}
	require.NoError(t, b.s.AcceptHistory("never-seen"), "accepting a stream not refused forgets nothing harmful")
}
