package hostile_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Store is everything the tests call on a backend.
type Store interface {
	storetest.Store
	storetest.NamedLeaseStore
}

// backend is a fresh store and a way to capture its whole state.
type backend struct {
	name  string
	s     Store
	state func(t *testing.T, at time.Time) any // everything a refused call must leave as it was
}

// backends returns a fresh memory store and a fresh PostgreSQL schema.
func backends(t *testing.T) []backend {
	mem := memory.New(nil)
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	pg, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	dump := dumper(t, pool, schema)
	return []backend{
		{name: "memory", s: mem, state: func(t *testing.T, at time.Time) any { return readAll(t, mem, at) }},
		{name: "postgres", s: pg, state: func(t *testing.T, _ time.Time) any { return dump(t) }},
	}
}

// memoryState is everything the memory store tells.
type memoryState struct {
	Streams     []string
	Entries     map[string][]store.Entry
	Stats       map[string]store.StreamStats
	Leases      []store.NamedLease
	History     []store.LeaseEvent
	Inbox       map[string]time.Time // the fixture's inbox records: consumer/id -> received at
	Records     int64                // every inbox record
	Checkpoints []store.Checkpoint
}

func readAll(t *testing.T, s Store, at time.Time) memoryState {
	t.Helper()
	ctx := t.Context()
	st := memoryState{Entries: map[string][]store.Entry{}, Stats: map[string]store.StreamStats{}}
	var err error
	st.Streams, err = s.Streams(ctx, "", store.MaxListLimit)
	require.NoError(t, err)
	for _, name := range st.Streams {
		st.Entries[name], err = s.Read(ctx, name, 0, store.MaxListLimit)
		require.NoError(t, err)
		st.Stats[name], err = s.Stats(ctx, name)
		require.NoError(t, err)
	}
	st.Leases, err = s.ListLeases(ctx, &store.ListLeasesParams{Limit: store.MaxListLimit, Now: &at})
	require.NoError(t, err)
	st.History, err = s.LeaseHistory(ctx, "", &store.LeaseHistoryParams{Limit: store.MaxListLimit})
	require.NoError(t, err)
	st.Inbox = map[string]time.Time{}
	for _, id := range []string{"m-1", "m-2"} {
		at, ok, err := s.Received(ctx, "payments", id)
		require.NoError(t, err)
		if ok {
			st.Inbox["payments/"+id] = at
		}
	}
	st.Records, err = s.CountReceived(ctx, "")
	require.NoError(t, err)
	st.Checkpoints, err = s.ListCheckpoints(ctx, &store.ListCheckpointsParams{Limit: store.MaxListLimit})
	require.NoError(t, err)
	return st
}

// dumper returns a function that returns every row of every table of
// schema as JSON text, in one statement.
func dumper(t *testing.T, pool *pgxpool.Pool, schema string) func(t *testing.T) string {
	rows, err := pool.Query(t.Context(), `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	parts := make([]string, len(tables))
	for i, table := range tables {
		require.Regexp(t, `^[a-z_]+$`, table) // our own tables: safe as a literal
		parts[i] = fmt.Sprintf(`SELECT '%s' AS t, coalesce(jsonb_agg(to_jsonb(x) ORDER BY to_jsonb(x)::text), '[]')::text AS rows FROM %s x`,
			table, pgx.Identifier{schema, table}.Sanitize())
	}
	sql := `SELECT string_agg(t || ': ' || rows, E'\n' ORDER BY t) FROM (` + strings.Join(parts, " UNION ALL ") + `) d`
	return func(t *testing.T) string {
		t.Helper()
		var out string
		require.NoError(t, pool.QueryRow(t.Context(), sql).Scan(&out))
		return out
	}
}

// fixture is the state every case runs against. Each call would succeed
// but for its one bad argument.
type fixture struct {
	s       Store
	at      time.Time   // the backend's clock when the fixture was made
	live    store.Entry // orders/2: Commit, Release and Extend succeed
	expired store.Entry // orders/3: ResolveExpired and RecoverExpired succeed
	gap     int64       // orders/4: a released gap, fillable
	leader  store.NamedLease
	handle  *sequence.Lease // handles/1, leased through leaser
	leaser  *sequence.Leaser
	gaps    *gap.Gaps
	manager *lease.Manager
	barrier *barrier.Barrier
}

// limit is the payload limit of the fixture's Leaser and Gaps.
const limit = 1024

func newFixture(t *testing.T, s Store) *fixture {
	ctx := t.Context()
	at, err := s.Now(ctx)
	require.NoError(t, err)
	at = store.Micro(at)
	es, err := s.Lease(ctx, "orders", []store.LeaseRequest{{TTL: time.Hour, OperationID: "a"}, {TTL: time.Hour, OperationID: "b"}}, nil)
	require.NoError(t, err)
	_, err = s.Commit(ctx, "orders", 1, es[0].Token, &store.CommitParams{Payload: []byte("one")})
	require.NoError(t, err)
	past := at.Add(-time.Hour)
	old, err := s.Lease(ctx, "orders", []store.LeaseRequest{{TTL: time.Second, OperationID: "c"}, {TTL: time.Hour}},
		&store.LeaseParams{Now: &past})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "orders", 4, old[1].Token, nil))
	leader, err := s.AcquireLease(ctx, "leader", "owner-1", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	for _, id := range []string{"m-1", "m-2"} { // received an hour ago: any purge of the past would take them
		_, err := s.MarkReceived(ctx, "payments", id, &store.ReceiveParams{Now: &past})
		require.NoError(t, err)
	}
	require.NoError(t, s.SaveCheckpoint(ctx, "projection", "orders", 1, nil)) // the watermark is 1

	leaser, err := sequence.New(s, &sequence.Config{MaxPayload: limit, MaxLeaseBatch: 1, Owner: "leaser", UnorderedOnly: true})
	require.NoError(t, err)
	h, err := leaser.Lease(ctx, "handles", &sequence.LeaseOpts{TTL: time.Hour})
	require.NoError(t, err)
	gaps, err := gap.New(s, &gap.Config{MaxPayload: limit})
	require.NoError(t, err)
	m, err := lease.New(s, &lease.Config{Owner: "manager", CleanupInterval: -1})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	b, err := barrier.New(s, nil)
	require.NoError(t, err)
	at, err = s.Now(ctx) // after every holding began, so listings pinned here see them
	require.NoError(t, err)
	return &fixture{s: s, at: at, live: es[1], expired: old[0], gap: 4, leader: leader, handle: h, leaser: leaser, gaps: gaps, manager: m, barrier: b}
}

// hostile is one call with one hostile argument.
type hostile struct {
	name string
	want error // the specific sentinel; every one also matches store.ErrInvalidArgument
	call func(ctx context.Context, f *fixture) error
}

// Hostile text.
var (
	kb10      = strings.Repeat("x", 10<<10)
	mb1       = strings.Repeat("x", 1<<20)
	mb10      = strings.Repeat("\x1b", 10<<20)
	badTexts  = map[string]string{"NUL byte": "a\x00b", "10 KB": kb10, "1 MB": mb1, "10 MB of ESC": mb10, "escape codes": "a\n\x1b[31m", "invalid UTF-8": "\xff\xfe", "overlong UTF-8 '/'": "\xc0\xaf", "UTF-16 surrogate": "\xed\xa0\x80", "newline": "a\nb", "C1 control": "a\u0085b"}
	badNames  = map[string]string{"empty": "", "201 bytes": strings.Repeat("n", store.MaxNameLen+1)}
	badTTLs   = map[string]time.Duration{"zero": 0, "-1ns": -1, "MinInt64": math.MinInt64, "MaxInt64": math.MaxInt64, "999ns": 999, "MaxTTL+1µs": store.MaxTTL + time.Microsecond}
	sqlNames  = []string{`x'); DROP TABLE entries; --`, `x"; DROP SCHEMA public CASCADE; --`, `'; SELECT pg_sleep(10); --`, `\'; --`, "$1", "%s%n", "a;b", "Robert'); DROP TABLE leases;--"}
	okStrange = []string{"日本語", "emoji 🚀", "\u202eRTL override", "zero\u200bwidth", "\ufeffBOM"}
)

func init() {
	for k, v := range badTexts {
		badNames[k] = v
	}
}

// cases lists every hostile call. The names are the record of what was
// tried.
func cases() []hostile {
	var cs []hostile
	add := func(name string, want error, call func(ctx context.Context, f *fixture) error) {
		cs = append(cs, hostile{name, want, call})
	}
	good := []store.LeaseRequest{{TTL: time.Minute, OperationID: "op", Kind: "k"}}
	for desc, n := range badNames {
		add("Lease: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, err := f.s.Lease(ctx, n, good, nil)
			return err
		})
		add("Commit: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, err := f.s.Commit(ctx, n, 2, f.live.Token, nil)
			return err
		})
		add("CommitBatch: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, err := f.s.CommitBatch(ctx, n, []store.CommitItem{{Number: 2, Token: f.live.Token}}, nil)
			return err
		})
		add("Release: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			return f.s.Release(ctx, n, 2, f.live.Token, nil)
		})
		add("Extend: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, _, err := f.s.Extend(ctx, n, 2, f.live.Token, &store.ExtendParams{TTL: time.Minute})
			return err
		})
		add("ResolveExpired: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			return f.s.ResolveExpired(ctx, n, 3, nil)
		})
		add("RecoverExpired: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, err := f.s.RecoverExpired(ctx, n, 3, &store.RecoverParams{RecoveryType: "retry"})
			return err
		})
		add("FillGap: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			return f.s.FillGap(ctx, n, 4, &store.FillParams{FilledBy: "op"})
		})
		add("Trim: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, err := f.s.Trim(ctx, n, 2)
			return err
		})
		add("Read: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, err := f.s.Read(ctx, n, 0, 0)
			return err
		})
		add("ListGaps: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, err := f.s.ListGaps(ctx, n, nil)
			return err
		})
		add("SaveCheckpoint: reader "+desc, store.ErrInvalidReader, func(ctx context.Context, f *fixture) error {
			return f.s.SaveCheckpoint(ctx, n, "orders", 1, nil)
		})
		add("SaveCheckpoint: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			return f.s.SaveCheckpoint(ctx, "projection", n, 0, nil)
		})
		add("DeleteCheckpoint: reader "+desc, store.ErrInvalidReader, func(ctx context.Context, f *fixture) error {
			return f.s.DeleteCheckpoint(ctx, n, "orders")
		})
		add("DeleteCheckpoint: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			return f.s.DeleteCheckpoint(ctx, "projection", n)
		})
		add("sequence Lease: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, err := f.leaser.Lease(ctx, n, nil)
			return err
		})
		add("AcquireLease: name "+desc, store.ErrInvalidLeaseName, func(ctx context.Context, f *fixture) error {
			_, err := f.s.AcquireLease(ctx, n, "owner-2", &store.AcquireLeaseParams{TTL: time.Minute})
			return err
		})
		add("RenewLease: name "+desc, store.ErrInvalidLeaseName, func(ctx context.Context, f *fixture) error {
			_, err := f.s.RenewLease(ctx, n, "owner-1", f.leader.Fence, &store.RenewLeaseParams{TTL: time.Minute})
			return err
		})
		add("ReleaseLease: name "+desc, store.ErrInvalidLeaseName, func(ctx context.Context, f *fixture) error {
			return f.s.ReleaseLease(ctx, n, "owner-1", f.leader.Fence, nil)
		})
		add("GetLease: name "+desc, store.ErrInvalidLeaseName, func(ctx context.Context, f *fixture) error {
			_, err := f.s.GetLease(ctx, n, nil)
			return err
		})
		add("gap Count: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			_, err := f.gaps.Count(ctx, n)
			return err
		})
		add("gap Fill: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			return f.gaps.Fill(ctx, n, 4, []byte("x"), &gap.FillOpts{FilledBy: "op", Policy: gap.FillReasons(store.ReasonReleased)})
		})
		add("barrier Entries: stream "+desc, store.ErrInvalidStream, func(ctx context.Context, f *fixture) error {
			for _, err := range f.barrier.Entries(ctx, n, nil) {
				if err != nil {
					return err
				}
			}
			return nil
		})
		if n != "" { // an empty reader means none
			add("barrier Entries: reader "+desc, store.ErrInvalidReader, func(ctx context.Context, f *fixture) error {
				for _, err := range f.barrier.Entries(ctx, "orders", &barrier.ReadOpts{Reader: n}) {
					if err != nil {
						return err
					}
				}
				return nil
			})
		}
		add("lease Acquire: name "+desc, store.ErrInvalidLeaseName, func(ctx context.Context, f *fixture) error {
			_, err := f.manager.Acquire(ctx, n, nil)
			return err
		})
		add("lease TryAcquire: name "+desc, store.ErrInvalidLeaseName, func(ctx context.Context, f *fixture) error {
			_, err := f.manager.TryAcquire(ctx, n, nil)
			return err
		})
		add("AcquireLease: owner "+desc, store.ErrInvalidOwner, func(ctx context.Context, f *fixture) error {
			_, err := f.s.AcquireLease(ctx, "other", n, &store.AcquireLeaseParams{TTL: time.Minute})
			return err
		})
		add("RenewLease: owner "+desc, store.ErrInvalidOwner, func(ctx context.Context, f *fixture) error {
			_, err := f.s.RenewLease(ctx, "leader", n, f.leader.Fence, &store.RenewLeaseParams{TTL: time.Minute})
			return err
		})
		add("ReleaseLease: owner "+desc, store.ErrInvalidOwner, func(ctx context.Context, f *fixture) error {
			return f.s.ReleaseLease(ctx, "leader", n, f.leader.Fence, nil)
		})
		if n != "" { // an empty owner filter means every owner
			add("ListLeases: owner "+desc, store.ErrInvalidOwner, func(ctx context.Context, f *fixture) error {
				_, err := f.s.ListLeases(ctx, &store.ListLeasesParams{Owner: n})
				return err
			})
		}
		add("ForceReleaseLeases: owner "+desc, store.ErrInvalidOwner, func(ctx context.Context, f *fixture) error {
			_, err := f.s.ForceReleaseLeases(ctx, n, nil)
			return err
		})
	}

	for desc, s := range badTexts {
		add("Lease: operation id "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			_, err := f.s.Lease(ctx, "orders", []store.LeaseRequest{{TTL: time.Minute, OperationID: s}}, nil)
			return err
		})
		add("Lease: kind "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			_, err := f.s.Lease(ctx, "orders", []store.LeaseRequest{{TTL: time.Minute, Kind: s}}, nil)
			return err
		})
		add("Lease: owner "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			_, err := f.s.Lease(ctx, "fresh", good, &store.LeaseParams{Owner: s})
			return err
		})
		add("ResolveExpired: gap reason "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			return f.s.ResolveExpired(ctx, "orders", 3, &store.ResolveExpiredParams{Reason: s})
		})
		add("ListGaps: reason "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			_, err := f.s.ListGaps(ctx, "orders", &store.ListGapsParams{Reason: s})
			return err
		})
		add("RecoverExpired: gap reason "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			_, err := f.s.RecoverExpired(ctx, "orders", 3, &store.RecoverParams{RecoveryType: "retry", Reason: s})
			return err
		})
		add("RecoverExpired: recovery type "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			_, err := f.s.RecoverExpired(ctx, "orders", 3, &store.RecoverParams{RecoveryType: s})
			return err
		})
		add("FillGap: filled by "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			return f.s.FillGap(ctx, "orders", 4, &store.FillParams{FilledBy: s})
		})
		add("sequence Lease: operation id "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			_, err := f.leaser.Lease(ctx, "orders", &sequence.LeaseOpts{OperationID: s})
			return err
		})
		add("sequence Lease: kind "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			_, err := f.leaser.Lease(ctx, "orders", &sequence.LeaseOpts{Kind: s})
			return err
		})
		add("lease TryAcquire: kind "+desc, store.ErrInvalidText, func(ctx context.Context, f *fixture) error {
			_, err := f.manager.TryAcquire(ctx, "other", &lease.AcquireOpts{Kind: s})
			return err
		})
	}

	for desc, d := range badTTLs {
		add("Lease: TTL "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
			_, err := f.s.Lease(ctx, "orders", []store.LeaseRequest{{TTL: d}}, nil)
			return err
		})
		add("Extend: TTL "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
			_, _, err := f.s.Extend(ctx, "orders", 2, f.live.Token, &store.ExtendParams{TTL: d})
			return err
		})
		add("AcquireLease: TTL "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
			_, err := f.s.AcquireLease(ctx, "other", "owner-2", &store.AcquireLeaseParams{TTL: d})
			return err
		})
		add("RenewLease: TTL "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
			_, err := f.s.RenewLease(ctx, "leader", "owner-1", f.leader.Fence, &store.RenewLeaseParams{TTL: d})
			return err
		})
		if d != 0 { // zero means the default
			add("sequence Lease: TTL "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
				_, err := f.leaser.Lease(ctx, "orders", &sequence.LeaseOpts{TTL: d})
				return err
			})
			add("sequence Extend: TTL "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
				return f.handle.Extend(ctx, d)
			})
			add("sequence KeepAlive: TTL "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
				return f.handle.KeepAlive(&sequence.KeepAliveOpts{TTL: d})
			})
			add("lease TryAcquire: TTL "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
				_, err := f.manager.TryAcquire(ctx, "other", &lease.AcquireOpts{TTL: d})
				return err
			})
		}
	}
	for desc, d := range map[string]time.Duration{"-1ns": -1, "MinInt64": math.MinInt64, "MaxInt64": math.MaxInt64} {
		add("ListLeases: HeldFor "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
			_, err := f.s.ListLeases(ctx, &store.ListLeasesParams{HeldFor: d})
			return err
		})
		if d < 0 {
			add("lease Acquire: Timeout "+desc, store.ErrInvalidTTL, func(ctx context.Context, f *fixture) error {
				_, err := f.manager.Acquire(ctx, "other", &lease.AcquireOpts{Timeout: d})
				return err
			})
			add("sequence KeepAlive: MaxJitter "+desc, store.ErrInvalidArgument, func(ctx context.Context, f *fixture) error {
				return f.handle.KeepAlive(&sequence.KeepAliveOpts{MaxJitter: d})
			})
		}
	}
	add("sequence KeepAlive: MaxJitter MaxInt64", store.ErrInvalidArgument, func(ctx context.Context, f *fixture) error {
		return f.handle.KeepAlive(&sequence.KeepAliveOpts{MaxJitter: math.MaxInt64})
	})
	for desc, share := range map[string]float64{"1": 1, "-1": -1, "+Inf": math.Inf(1), "-Inf": math.Inf(-1)} {
		add("sequence KeepAlive: RenewShare "+desc, store.ErrInvalidArgument, func(ctx context.Context, f *fixture) error {
			return f.handle.KeepAlive(&sequence.KeepAliveOpts{RenewShare: share})
		})
	}
	for desc, pos := range map[string]int64{"-1": -1, "MinInt64": math.MinInt64} {
		add("SaveCheckpoint: position "+desc, store.ErrInvalidNumber, func(ctx context.Context, f *fixture) error {
			return f.s.SaveCheckpoint(ctx, "projection", "orders", pos, nil)
		})
	}
	add("AcquireLease: MaxRenewals -1", store.ErrInvalidCount, func(ctx context.Context, f *fixture) error {
		_, err := f.s.AcquireLease(ctx, "other", "owner-2", &store.AcquireLeaseParams{TTL: time.Minute, MaxRenewals: -1})
		return err
	})
	add("lease TryAcquire: MaxRenewals -2", store.ErrInvalidCount, func(ctx context.Context, f *fixture) error {
		_, err := f.manager.TryAcquire(ctx, "other", &lease.AcquireOpts{MaxRenewals: -2})
		return err
	})

	// Inbox records: consumers and message ids, and purges that would
	// delete the fixture's records but for one bad parameter.
	badIDs := map[string]string{"empty": "", "513 bytes": strings.Repeat("i", store.MaxMessageIDLen+1)}
	for k, v := range badTexts {
		badIDs[k] = v
	}
	for desc, n := range badNames {
		add("MarkReceived: consumer "+desc, store.ErrInvalidConsumer, func(ctx context.Context, f *fixture) error {
			_, err := f.s.MarkReceived(ctx, n, "m-3", nil)
			return err
		})
		add("Received: consumer "+desc, store.ErrInvalidConsumer, func(ctx context.Context, f *fixture) error {
			_, _, err := f.s.Received(ctx, n, "m-1")
			return err
		})
		if n != "" { // "" counts and purges every consumer's
			add("CountReceived: consumer "+desc, store.ErrInvalidConsumer, func(ctx context.Context, f *fixture) error {
				_, err := f.s.CountReceived(ctx, n)
				return err
			})
			add("PurgeReceived: consumer "+desc, store.ErrInvalidConsumer, func(ctx context.Context, f *fixture) error {
				_, err := f.s.PurgeReceived(ctx, &store.PurgeReceivedParams{Consumer: n})
				return err
			})
		}
	}
	for desc, id := range badIDs {
		add("MarkReceived: message id "+desc, store.ErrInvalidMessageID, func(ctx context.Context, f *fixture) error {
			_, err := f.s.MarkReceived(ctx, "payments", id, nil)
			return err
		})
	}
	for desc, p := range map[string]store.PurgeReceivedParams{
		"OlderThan -1ns":        {OlderThan: -1},
		"OlderThan MinInt64":    {OlderThan: math.MinInt64},
		"Before and OlderThan":  {Before: time.Now().Add(time.Hour), OlderThan: time.Second},
		"Limit -1":              {Limit: -1},
		"Limit MaxPurgeLimit+1": {Limit: store.MaxPurgeLimit + 1},
		"Limit MinInt":          {Limit: math.MinInt},
		"Consumer with a NUL":   {Consumer: "pay\x00ments"},
		"Consumer of 201 bytes": {Consumer: strings.Repeat("c", store.MaxConsumerLen+1)},
	} {
		want := store.ErrInvalidCutoff
		switch {
		case p.Limit != 0:
			want = store.ErrInvalidCount
		case p.Consumer != "":
			want = store.ErrInvalidConsumer
		}
		add("PurgeReceived: "+desc, want, func(ctx context.Context, f *fixture) error {
			_, err := f.s.PurgeReceived(ctx, &p)
			return err
		})
	}

	// Payloads one byte over the limit (the limit itself is in
	// TestPayloadAtTheLimit).
	add("sequence Complete: payload limit+1", store.ErrPayloadTooLarge, func(ctx context.Context, f *fixture) error {
		return f.handle.Complete(ctx, make([]byte, limit+1))
	})
	add("gap Fill: payload limit+1", store.ErrPayloadTooLarge, func(ctx context.Context, f *fixture) error {
		return f.gaps.Fill(ctx, "orders", 4, make([]byte, limit+1), &gap.FillOpts{FilledBy: "op", Policy: gap.FillReasons(store.ReasonReleased)})
	})
	return cs
}

// TestHostileInputsChangeNothing runs every hostile call against a fixture
// on each backend: each must fail with its sentinel (and
// store.ErrInvalidArgument) and leave the whole state as it was.
func TestHostileInputsChangeNothing(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b.s)
			before := b.state(t, f.at)
			for _, c := range cases() {
				t.Run(c.name, func(t *testing.T) {
					err := c.call(t.Context(), f)
					require.Error(t, err)
					require.ErrorIs(t, err, store.ErrInvalidArgument)
					require.ErrorIs(t, err, c.want)
					requireShortText(t, err)
					require.Equal(t, before, b.state(t, f.at), "the refused call changed something")
				})
			}
			require.NoError(t, f.handle.Err(), "the refused calls ended the handle")
		})
	}
}

// requireShortText checks that err's text is fit for a log line whatever
// input caused it: short, valid UTF-8, no control character (a newline or
// an escape code of the input shows escaped).
func requireShortText(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	require.Less(t, len(msg), 300, "error text %.300q...", msg)
	require.True(t, utf8.ValidString(msg), "error text %q", msg)
	for _, r := range msg {
		require.False(t, unicode.IsControl(r), "error text %q has control character %U", msg, r)
	}
}

// TestStrangeButValidNamesRoundTrip uses names that are valid but look like
// SQL, format verbs or exotic Unicode: each works as a stream name, lease
// name, owner, operation id, kind and gap reason, and reads back unchanged,
// and the fixture's own state is untouched (no injected statement ran).
func TestStrangeButValidNamesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			f := newFixture(t, b.s)
			orders, err := b.s.Read(ctx, "orders", 0, 0)
			require.NoError(t, err)
			for _, name := range append(append([]string{}, sqlNames...), okStrange...) {
				es, err := b.s.Lease(ctx, name, []store.LeaseRequest{{TTL: time.Minute, OperationID: name, Kind: name}},
					&store.LeaseParams{Owner: name})
				require.NoError(t, err, name)
				require.NoError(t, b.s.ResolveExpired(ctx, name, 1, &store.ResolveExpiredParams{Reason: name, Now: ptr(f.at.Add(time.Hour))}))
				got, err := b.s.Read(ctx, name, 0, 0)
				require.NoError(t, err)
				require.Len(t, got, 1)
				e := got[0]
				require.Equal(t, []string{name, name, name, name, name}, []string{e.Stream, e.Owner, e.OperationID, e.Kind, e.GapReason})
				require.Equal(t, es[0].Token, e.Token)

				l, err := b.s.AcquireLease(ctx, name, name, &store.AcquireLeaseParams{TTL: time.Minute})
				require.NoError(t, err, name)
				g, err := b.s.GetLease(ctx, name, nil)
				require.NoError(t, err)
				require.Equal(t, []string{name, name}, []string{g.Name, g.Owner})
				require.NoError(t, b.s.ReleaseLease(ctx, name, name, l.Fence, nil))

				first, err := b.s.MarkReceived(ctx, name, name, nil)
				require.NoError(t, err, name)
				require.True(t, first, name)
				_, ok, err := b.s.Received(ctx, name, name)
				require.NoError(t, err)
				require.True(t, ok, name)
				n, err := b.s.CountReceived(ctx, name)
				require.NoError(t, err)
				require.Equal(t, int64(1), n, name)
				require.NoError(t, b.s.SaveCheckpoint(ctx, name, name, 1, nil), name) // the gap resolved 1
				cs, err := b.s.ListCheckpoints(ctx, &store.ListCheckpointsParams{Reader: name, Stream: name})
				require.NoError(t, err)
				require.Len(t, cs, 1)
				require.Equal(t, []any{name, name, int64(1), int64(1)}, []any{cs[0].Reader, cs[0].Stream, cs[0].Position, cs[0].Watermark})
			}
			after, err := b.s.Read(ctx, "orders", 0, 0)
			require.NoError(t, err)
			require.Equal(t, orders, after)
			held, err := b.s.GetLease(ctx, "leader", nil)
			require.NoError(t, err)
			require.True(t, held.Held())
			require.Equal(t, f.leader.Fence, held.Fence)
			pos, err := b.s.Checkpoint(ctx, "projection", "orders")
			require.NoError(t, err)
			require.Equal(t, int64(1), pos)
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestPayloadAtTheLimit: a payload of exactly the limit commits (and fills);
// the one-byte-over case is in the hostile table.
func TestPayloadAtTheLimit(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			f := newFixture(t, b.s)
			full := []byte(strings.Repeat("p", limit))
			require.NoError(t, f.handle.Complete(ctx, full))
			require.NoError(t, f.gaps.Fill(ctx, "orders", 4, full, &gap.FillOpts{FilledBy: "op", Policy: gap.FillReasons(store.ReasonReleased)}))
			for stream, n := range map[string]int64{"handles": 1, "orders": 4} {
				es, err := b.s.Read(ctx, stream, n-1, 1)
				require.NoError(t, err)
				require.Equal(t, full, es[0].Payload, "%s/%d", stream, n)
			}
		})
	}
}

// TestHostileSchemaNames: postgres.New and migrations.New refuse schema names
// that are not plain identifiers, before touching the database; the empty
// name means the default. Nothing is created or dropped.
func TestHostileSchemaNames(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Shared(t, false)
	schemaExists := func(name string) bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, name).Scan(&n))
		return n > 0
	}
	require.True(t, schemaExists("public"))
	for _, name := range []string{`x"; DROP SCHEMA public CASCADE; --`, `public"; DROP TABLE x; --`, "pg_catalog", "pg_toast",
		"pg_temp", "information_schema", strings.Repeat("s", 64), strings.Repeat("é", 20), "schéma", "Seqlease", "a.b",
		"public.x", "a;b", "a b", "a-b", "1abc", "a\x00b", "\xff", "\"quoted\"", "$1", kb10, mb10, "a\n\x1b[31m"} {
		_, err := postgres.New(pool, &postgres.Config{Schema: name})
		require.ErrorIs(t, err, migrations.ErrInvalidSchema, "%q", name)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "%q", name)
		require.ErrorContains(t, err, "Config.Schema")
		requireShortText(t, err)
		m, err := migrations.New(&migrations.Config{Schema: name})
		require.ErrorIs(t, err, migrations.ErrInvalidSchema, "%q", name)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "%q", name)
		requireShortText(t, err)
		require.Nil(t, m)
		if utf8.ValidString(name) && !strings.ContainsRune(name, 0) && len(name) < 64 {
			require.False(t, schemaExists(name) && !strings.HasPrefix(name, "pg_") && name != "information_schema", "%q exists", name)
		}
	}
	m, err := migrations.New(&migrations.Config{Schema: ""})
	require.NoError(t, err)
	require.Equal(t, migrations.DefaultSchema, m.Schema())
	_, err = postgres.New(pool, &postgres.Config{Schema: strings.Repeat("s", 63)})
	require.NoError(t, err, "63 bytes is PostgreSQL's limit and allowed")
	require.True(t, schemaExists("public"))
}

// configErr checks a constructor's error for a hostile field value: it names
// the field. (Constructor errors carry no sentinel: see
// docs/internals/reliability.md.)
func configErr(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorContains(t, err, "Config."+field)
}

// TestHostileConfigDurations gives every duration of the constructors'
// configs negative and minimal values (refused, naming the field) and
// MaxInt64 (refused, or accepted and then started and stopped without
// trouble), and the float shares out-of-range values. No constructor may
// panic.
func TestHostileConfigDurations(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for _, d := range []time.Duration{-1, math.MinInt64} {
		for field, cfg := range map[string]sequence.Config{
			"DefaultTTL": {DefaultTTL: d}, "MaxTTL": {MaxTTL: d}, "GroupDelay": {GroupDelay: d},
			"WriteTimeout": {WriteTimeout: d}, "Margin": {Margin: d},
		} {
			cfg.UnorderedOnly = true
			_, err := sequence.New(s, &cfg)
			configErr(t, err, field)
		}
		for field, cfg := range map[string]lease.Config{
			"DefaultTTL": {DefaultTTL: d}, "MaxTTL": {MaxTTL: d}, "MaxJitter": {MaxJitter: d},
			"SafetyMargin": {SafetyMargin: d}, "PollInterval": {PollInterval: d}, "HandoffGrace": {HandoffGrace: d},
			"QueryTimeout": {QueryTimeout: d}, "ReleaseTimeout": {ReleaseTimeout: d},
		} {
			_, err := lease.New(s, &cfg)
			configErr(t, err, field)
		}
		for field, cfg := range map[string]barrier.Config{"PollInterval": {PollInterval: d}, "QueryTimeout": {QueryTimeout: d}} {
			_, err := barrier.New(s, &cfg)
			configErr(t, err, field)
		}
		for field, cfg := range map[string]cleanup.Config{
			"Interval": {Interval: d}, "LeaseTTL": {LeaseTTL: d}, "Cascade.Delay": {Cascade: &cleanup.CascadeConfig{Delay: d}},
			"Hooks.Timeout": {Hooks: &cleanup.HooksConfig{Timeout: d}}, "MaxBackoff": {MaxBackoff: d}, "QueryTimeout": {QueryTimeout: d},
		} {
			_, err := cleanup.New(s, &cfg)
			configErr(t, err, field)
		}
	}
	for field, cfg := range map[string]sequence.Config{"MaxTTL": {MaxTTL: math.MaxInt64}, "DefaultTTL": {DefaultTTL: math.MaxInt64},
		"Margin": {Margin: math.MaxInt64}} {
		cfg.UnorderedOnly = true
		_, err := sequence.New(s, &cfg)
		configErr(t, err, field)
	}
	for field, cfg := range map[string]lease.Config{"MaxTTL": {MaxTTL: math.MaxInt64}, "DefaultTTL": {DefaultTTL: math.MaxInt64},
		"RenewShare": {RenewShare: 1}, "RenewShare ": {RenewShare: math.Inf(1)}, "RenewShare  ": {RenewShare: -0.5}} {
		_, err := lease.New(s, &cfg)
		configErr(t, err, strings.TrimSpace(field))
	}
	for field, cfg := range map[string]cleanup.Config{"LeaseTTL": {LeaseTTL: math.MaxInt64},
		"Cascade.TTLFactor": {Cascade: &cleanup.CascadeConfig{TTLFactor: 0.5}}} {
		_, err := cleanup.New(s, &cfg)
		configErr(t, err, field)
	}
	_, err := recovery.New(s, &recovery.Config{MinStepSuccessRate: 2})
	configErr(t, err, "MinStepSuccessRate")

	// MaxInt64 where the config accepts it: the component starts and stops.
	ctx := t.Context()
	b, err := barrier.New(s, &barrier.Config{PollInterval: math.MaxInt64, QueryTimeout: math.MaxInt64})
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	b.Stop()
	m, err := lease.New(s, &lease.Config{Owner: "m", MaxJitter: math.MaxInt64, SafetyMargin: math.MaxInt64, HandoffGrace: math.MaxInt64,
		QueryTimeout: math.MaxInt64, ReleaseTimeout: math.MaxInt64, HistoryRetention: math.MaxInt64, CleanupInterval: -1})
	require.NoError(t, err)
	require.NoError(t, m.Start(ctx))
	l, err := m.TryAcquire(ctx, "x", &lease.AcquireOpts{KeepAlive: true, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	_, err = m.Maintain(ctx) // trims the history before now - MaxInt64
	require.NoError(t, err)
	m.Stop()
	leaser, err := sequence.New(s, &sequence.Config{WriteTimeout: math.MaxInt64, MaxPayload: math.MaxInt, MaxLeaseBatch: 2, UnorderedOnly: true})
	require.NoError(t, err)
	x, err := leaser.Lease(ctx, "s", nil)
	require.NoError(t, err)
	require.NoError(t, x.Complete(ctx, nil))
}

// callCounter counts calls of some store methods.
type callCounter struct {
	*memory.Store
	listExpired, renewLease, extend counter
}

type counter struct{ n atomic.Int64 }

func (s *callCounter) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	s.listExpired.n.Add(1)
	return s.Store.ListExpired(ctx, p)
}

func (s *callCounter) RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error) {
	s.renewLease.n.Add(1)
	return s.Store.RenewLease(ctx, name, owner, fence, p)
}

func (s *callCounter) Extend(ctx context.Context, stream string, number int64, token store.Token, p *store.ExtendParams) (time.Time, time.Time, error) {
	s.extend.n.Add(1)
	return s.Store.Extend(ctx, stream, number, token, p)
}

// TestEnormousAndNaNValuesBehave covers enormous and NaN values that the
// constructors once accepted and the components then mishandled (found by
// these tests and the fuzzers; docs/internals/reliability.md): each is now refused, or
// accepted and handled.
func TestEnormousAndNaNValuesBehave(t *testing.T) {
	t.Parallel()
	// A window in which a component with a one-minute (or longer) period
	// may act at most once, at its start.
	const window = 300 * time.Millisecond

	t.Run("lease errors do not repeat a 1 MB name", func(t *testing.T) {
		m, err := lease.New(memory.New(nil), &lease.Config{Owner: "m", CleanupInterval: -1})
		require.NoError(t, err)
		defer m.Stop()
		_, err = m.TryAcquire(t.Context(), mb1, nil)
		require.ErrorIs(t, err, store.ErrInvalidLeaseName)
		require.Less(t, len(err.Error()), 4<<10, "the error repeats the hostile input")
	})

	t.Run("cleanup Interval MaxInt64 is refused", func(t *testing.T) {
		_, err := cleanup.New(memory.New(nil), &cleanup.Config{Interval: math.MaxInt64})
		configErr(t, err, "Interval")
	})

	t.Run("cleanup at its longest Interval runs one cycle, at start", func(t *testing.T) {
		s := &callCounter{Store: memory.New(nil)}
		sv, err := cleanup.New(s, &cleanup.Config{Interval: cleanup.MaxInterval})
		require.NoError(t, err)
		require.NoError(t, sv.Start(t.Context()))
		time.Sleep(window)
		sv.Stop()
		require.LessOrEqual(t, s.listExpired.n.Load(), int64(2), "cycles in %v with a one-day interval", window)
	})

	t.Run("lease RenewShare NaN never renews back to back", func(t *testing.T) {
		s := &callCounter{Store: memory.New(nil)}
		m, err := lease.New(s, &lease.Config{Owner: "m", RenewShare: math.NaN(), CleanupInterval: -1})
		if err != nil {
			configErr(t, err, "RenewShare")
			return
		}
		defer m.Stop()
		l, err := m.TryAcquire(t.Context(), "x", &lease.AcquireOpts{TTL: time.Minute, KeepAlive: true})
		require.NoError(t, err)
		time.Sleep(window)
		require.NoError(t, l.Release(t.Context()))
		require.LessOrEqual(t, s.renewLease.n.Load(), int64(1), "renewals in %v of a one-minute lease", window)
	})

	t.Run("sequence KeepAliveOpts RenewShare NaN never renews back to back", func(t *testing.T) {
		s := &callCounter{Store: memory.New(nil)}
		l, err := sequence.New(s, &sequence.Config{UnorderedOnly: true})
		require.NoError(t, err)
		x, err := l.Lease(t.Context(), "s", &sequence.LeaseOpts{TTL: time.Minute})
		require.NoError(t, err)
		if err := x.KeepAlive(&sequence.KeepAliveOpts{RenewShare: math.NaN()}); err != nil {
			require.ErrorIs(t, err, store.ErrInvalidArgument)
			return
		}
		time.Sleep(window)
		x.StopKeepAlive()
		require.LessOrEqual(t, s.extend.n.Load(), int64(1), "renewals in %v of a one-minute lease", window)
	})

	for _, factor := range []float64{1e300, math.Inf(1), math.NaN()} {
		t.Run(fmt.Sprintf("sequence BoostTTL(%v) keeps the default TTL valid", factor), func(t *testing.T) {
			l, err := sequence.New(memory.New(nil), &sequence.Config{UnorderedOnly: true})
			require.NoError(t, err)
			l.BoostTTL(factor)
			require.Greater(t, l.DefaultTTL(), time.Duration(0))
			require.LessOrEqual(t, l.DefaultTTL(), sequence.DefaultMaxTTL)
			_, err = l.Lease(t.Context(), "s", nil)
			require.NoError(t, err, "a lease with the default TTL during a boost")
		})
	}

	t.Run("cleanup Cascade.TTLFactor NaN and +Inf are refused", func(t *testing.T) {
		for _, factor := range []float64{math.NaN(), math.Inf(1)} {
			_, err := cleanup.New(memory.New(nil), &cleanup.Config{Cascade: &cleanup.CascadeConfig{TTLFactor: factor}})
			configErr(t, err, "Cascade.TTLFactor")
		}
	})

	t.Run("sequence GroupDelay MaxInt64 is refused", func(t *testing.T) {
		_, err := sequence.New(memory.New(nil), &sequence.Config{GroupDelay: math.MaxInt64, UnorderedOnly: true})
		configErr(t, err, "GroupDelay")
		require.ErrorIs(t, err, store.ErrInvalidArgument)
	})
}
