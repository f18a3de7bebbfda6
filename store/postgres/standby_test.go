package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// A Standby is a barrier.Source with checkpoints.
var (
	_ barrier.Source          = (*postgres.Standby)(nil)
	_ barrier.CheckpointSaver = (*postgres.Standby)(nil)
	_ barrier.Checkpoints     = (*postgres.Standby)(nil)
)

// recorder is a DB that records every statement it is sent. The tests of
// the Standby put it over a pool whose sessions are read-only
// (default_transaction_read_only), a stand-in for a hot standby that
// refuses every write (a hot standby also refuses LISTEN and NOTIFY,
// which a read-only session allows: the recorded statements show that
// none is sent).
type recorder struct {
	postgres.DB
	mu  sync.Mutex
	sql []string
}

func (r *recorder) note(sql string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sql = append(r.sql, sql)
}

func (r *recorder) statements() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sql...)
}

func (r *recorder) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r.note(sql)
	return r.DB.QueryRow(ctx, sql, args...)
}

func (r *recorder) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.note(sql)
	return r.DB.Query(ctx, sql, args...)
}

func (r *recorder) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.note(sql)
	return r.DB.Exec(ctx, sql, args...)
}

func (r *recorder) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		r.note(q.SQL)
	}
	return r.DB.SendBatch(ctx, b)
}

func (r *recorder) Begin(ctx context.Context) (pgx.Tx, error) {
	r.note("BEGIN")
	return r.DB.Begin(ctx)
}

// writes matches a statement that writes, or that a hot standby refuses.
var writes = regexp.MustCompile(`(?i)\b(insert|update|delete|listen|notify|pg_notify|set_config|begin|truncate|create|drop|alter)\b`)

// requireOnlyReads fails if rec was sent a statement that writes.
func requireOnlyReads(t *testing.T, rec *recorder) {
	t.Helper()
	sent := rec.statements()
	require.NotEmpty(t, sent, "the Standby sent nothing at all")
	for _, sql := range sent {
		require.NotRegexp(t, writes, sql, "a statement a hot standby refuses")
	}
}

// standbySetup is a schema with a Store on the test database (the
// primary), and a recorder over a read-only pool of the same database (the
// standby's stand-in).
type standbySetup struct {
	schema  string
	primary *postgres.Store
	rec     *recorder
}

func newStandbySetup(t *testing.T) *standbySetup {
	t.Helper()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	primary, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	q := u.Query()
	q.Set("default_transaction_read_only", "on") // pgx sends unknown parameters as settings
	u.RawQuery = q.Encode()
	ro, err := pgtest.NewPool(t.Context(), &pgtest.Options{URL: u.String(), MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(ro.Close)
	var setting string
	require.NoError(t, ro.QueryRow(t.Context(), "SHOW default_transaction_read_only").Scan(&setting))
	require.Equal(t, "on", setting, "the stand-in pool is not read-only")
	return &standbySetup{schema: schema, primary: primary, rec: &recorder{DB: ro}}
}

// lease leases n numbers of stream on the primary.
func (su *standbySetup) lease(t *testing.T, stream string, n int) []store.Entry {
	t.Helper()
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Hour}
	}
	es, err := su.primary.Lease(t.Context(), stream, reqs, nil)
	require.NoError(t, err)
	return es
}

func (su *standbySetup) commit(t *testing.T, e store.Entry) {
	t.Helper()
	_, err := su.primary.Commit(t.Context(), e.Stream, e.Number, e.Token, &store.CommitParams{Payload: []byte{byte(e.Number)}})
	require.NoError(t, err)
}

// started returns a started barrier over src, stopped when t ends.
func started(t *testing.T, src barrier.Source, cfg *barrier.Config) *barrier.Barrier {
	t.Helper()
	b, err := barrier.New(src, cfg)
	require.NoError(t, err)
	require.NoError(t, b.Start(t.Context()))
	t.Cleanup(b.Stop)
	return b
}

// collect reads at most n entries of stream through b.
func collect(ctx context.Context, t *testing.T, b *barrier.Barrier, stream string, opts *barrier.ReadOpts, n int) ([]store.Entry, error) {
	t.Helper()
	var out []store.Entry
	if n == 0 {
		return nil, nil
	}
	for e, err := range b.Entries(ctx, stream, opts) {
		if err != nil {
			return out, err
		}
		out = append(out, e)
		if len(out) == n {
			break
		}
	}
	return out, nil
}

// TestStandbyReadsAsThePrimary reads a stream through a Standby on a
// read-only session, replaying and following, and checks that it yields
// what the primary's barrier yields, never past the watermark, without
// sending a statement a hot standby would refuse.
func TestStandbyReadsAsThePrimary(t *testing.T) {
	t.Parallel()
	su := newStandbySetup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	es := su.lease(t, "s", 6)
	su.commit(t, es[0])
	su.commit(t, es[1])
	require.NoError(t, su.primary.Release(ctx, "s", 3, es[2].Token, nil))
	su.commit(t, es[4]) // 5: behind 4, still leased
	su.commit(t, es[5])

	sb, err := postgres.NewStandby(su.rec, &postgres.StandbyConfig{Schema: su.schema, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	onStandby := started(t, sb, nil)
	onPrimary := started(t, su.primary, nil)
	for _, gaps := range []bool{false, true} {
		want, err := collect(ctx, t, onPrimary, "s", &barrier.ReadOpts{IncludeGaps: gaps}, -1)
		require.NoError(t, err)
		got, err := collect(ctx, t, onStandby, "s", &barrier.ReadOpts{IncludeGaps: gaps}, -1)
		require.NoError(t, err)
		require.Equal(t, want, got, "a replay with gaps %v", gaps)
		require.Len(t, got, map[bool]int{false: 2, true: 3}[gaps], "stops below 4, leased")
	}
	w, err := onStandby.Watermark(ctx, "s")
	require.NoError(t, err)
	require.EqualValues(t, 3, w)

	// A follower wakes on the poll when 4 resolves on the primary.
	type result struct {
		es  []store.Entry
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := collect(ctx, t, onStandby, "s", &barrier.ReadOpts{After: 3, Follow: true, IncludeGaps: true}, 3)
		done <- result{got, err}
	}()
	su.commit(t, es[3])
	r := <-done
	require.NoError(t, r.err)
	want, err := collect(ctx, t, onPrimary, "s", &barrier.ReadOpts{After: 3, IncludeGaps: true}, -1)
	require.NoError(t, err)
	require.Equal(t, want, r.es)
	require.Equal(t, []int64{4, 5, 6}, numbers(r.es))

	st, err := sb.Stats(ctx, "s")
	require.NoError(t, err)
	require.EqualValues(t, 6, st.Watermark)
	read, err := sb.Read(ctx, "s", 0, 10)
	require.NoError(t, err)
	require.Len(t, read, 6)
	names, err := sb.Streams(ctx, "", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"s"}, names)
	requireOnlyReads(t, su.rec)
}

func numbers(es []store.Entry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.Number
	}
	return out
}

// TestStandbyRefusesWrites checks that a Standby without a Primary
// refuses checkpoint writes with store.ErrReadOnly (bad input first with
// store.ErrInvalidArgument), sending nothing, and that a reader saving
// its checkpoint (SaveEvery) on it ends with that error at its first save.
func TestStandbyRefusesWrites(t *testing.T) {
	t.Parallel()
	su := newStandbySetup(t)
	ctx := t.Context()
	sb, err := postgres.NewStandby(su.rec, &postgres.StandbyConfig{Schema: su.schema})
	require.NoError(t, err)

	err = sb.SaveCheckpoint(ctx, "r", "s", 1, nil)
	require.ErrorIs(t, err, store.ErrReadOnly)
	require.NotErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorIs(t, sb.DeleteCheckpoint(ctx, "r", "s"), store.ErrReadOnly)
	require.ErrorIs(t, sb.SaveCheckpoint(ctx, "", "s", 1, nil), store.ErrInvalidArgument)
	require.ErrorIs(t, sb.SaveCheckpoint(ctx, "r", "s", -1, nil), store.ErrInvalidArgument)
	require.ErrorIs(t, sb.DeleteCheckpoint(ctx, "r", "\x00"), store.ErrInvalidArgument)
	require.Empty(t, su.rec.statements(), "a refused write sent something")

	// The checkpoint saved on the primary is read on the standby.
	es := su.lease(t, "s", 3)
	for _, e := range es {
		su.commit(t, e)
	}
	require.NoError(t, su.primary.SaveCheckpoint(ctx, "r", "s", 1, nil))
	pos, err := sb.Checkpoint(ctx, "r", "s")
	require.NoError(t, err)
	require.EqualValues(t, 1, pos)

	b := started(t, sb, nil)
	var got []int64
	var last error
	for e, err := range b.Entries(ctx, "s", &barrier.ReadOpts{Reader: "r", SaveEvery: 1}) {
		if err != nil {
			last = err
			break
		}
		got = append(got, e.Number)
	}
	require.ErrorIs(t, last, store.ErrReadOnly)
	require.Equal(t, []int64{2}, got, "the first save ends the reader")
	pos, err = su.primary.Checkpoint(ctx, "r", "s")
	require.NoError(t, err)
	require.EqualValues(t, 1, pos)
	requireOnlyReads(t, su.rec)
}

// TestStandbyWithPrimary checks a Standby with a Primary: its followers
// wake on the primary's notices alone (the polls are an hour apart), and
// its checkpoints are read and saved on the primary.
func TestStandbyWithPrimary(t *testing.T) {
	t.Parallel()
	su := newStandbySetup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sb, err := postgres.NewStandby(su.rec, &postgres.StandbyConfig{Schema: su.schema, Primary: su.primary, PollInterval: time.Hour})
	require.NoError(t, err)
	b := started(t, sb, &barrier.Config{PollInterval: time.Hour})

	const n = 20
	entries := make(chan store.Entry)
	errc := make(chan error, 1)
	go func() {
		defer close(entries)
		for e, err := range b.Entries(ctx, "s", &barrier.ReadOpts{Reader: "relay", Follow: true, SaveEvery: 5}) {
			if err != nil {
				errc <- err
				return
			}
			select {
			case entries <- e:
			case <-ctx.Done():
				return
			}
			if e.Number == n {
				return
			}
		}
	}()
	for i := int64(1); i <= n; i++ {
		es := su.lease(t, "s", 1)
		su.commit(t, es[0])
		select {
		case e := <-entries:
			require.Equal(t, i, e.Number)
			require.Equal(t, []byte{byte(i)}, e.Payload)
		case err := <-errc:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("the follower did not wake for %d: the primary's notices did not reach it", i)
		}
	}
	_, open := <-entries
	require.False(t, open)
	pos, err := su.primary.Checkpoint(ctx, "relay", "s")
	require.NoError(t, err)
	require.EqualValues(t, n-1, pos, "saved on the primary up to the entry before the break")
	pos, err = sb.Checkpoint(ctx, "relay", "s")
	require.NoError(t, err)
	require.EqualValues(t, n-1, pos)
	require.NoError(t, sb.SaveCheckpoint(ctx, "relay", "s", n, nil))
	pos, err = su.primary.Checkpoint(ctx, "relay", "s")
	require.NoError(t, err)
	require.EqualValues(t, n, pos)
	require.NoError(t, sb.DeleteCheckpoint(ctx, "relay", "s"))
	requireOnlyReads(t, su.rec)
	replayChecks := 0
	for _, sql := range su.rec.statements() {
		if regexp.MustCompile(`pg_last_wal_replay_lsn`).MatchString(sql) {
			replayChecks++
		}
	}
	require.Positive(t, replayChecks, "no notice waited for the standby's replay")
}

// noPool is a DB that cannot hand out a connection to LISTEN on.
type noPool struct{ postgres.DB }

// TestNewStandbyConfig checks that bad config is refused with
// store.ErrInvalidArgument.
func TestNewStandbyConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	primary, err := postgres.New(pool, &postgres.Config{Schema: "a"})
	require.NoError(t, err)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	onTx, err := postgres.New(&noPool{pool}, &postgres.Config{Schema: "a"}) // cannot LISTEN
	require.NoError(t, err)
	for name, cfg := range map[string]*postgres.StandbyConfig{
		"negative poll":         {PollInterval: -1},
		"negative replay poll":  {ReplayPollInterval: -time.Second},
		"bad schema":            {Schema: "a\x00b"},
		"other schema":          {Schema: "b", Primary: primary},
		"primary in a tx":       {Schema: "a", Primary: primary.InTx(tx)},
		"primary cannot listen": {Schema: "a", Primary: onTx},
	} {
		_, err := postgres.NewStandby(pool, cfg)
		require.ErrorIs(t, err, store.ErrInvalidArgument, name)
	}
	sb, err := postgres.NewStandby(pool, nil)
	require.NoError(t, err)
	require.NotNil(t, sb)
	_, err = postgres.NewStandby(pool, &postgres.StandbyConfig{Schema: "a", Primary: primary})
	require.NoError(t, err)
	require.False(t, errors.Is(err, store.ErrReadOnly))
}
