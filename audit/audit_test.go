package audit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func committed(n int64, ms int) store.Entry {
	return store.Entry{Number: n, State: store.Committed, ResolvedAt: at(ms), ExpiresAt: at(1000), Payload: []byte(fmt.Sprint(n))}
}

// bornAt is an entry born committed (appended) at ms, recorded at resolved.
func bornAt(n int64, ms, resolved int) store.Entry {
	return store.Entry{Number: n, State: store.Committed, LeasedAt: at(ms), ExpiresAt: at(ms), ResolvedAt: at(resolved), Payload: []byte("a")}
}

func gapAt(n int64, ms int) store.Entry {
	return store.Entry{Number: n, State: store.Gap, ResolvedAt: at(ms), ExpiresAt: at(ms), GapReason: store.ReasonExpired}
}

func leased(n int64) store.Entry {
	return store.Entry{Number: n, State: store.Leased, ExpiresAt: at(100)}
}

// invariants returns the invariants of a report's violations, in order.
func invariants(r *audit.Report) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, fmt.Sprint(v.Invariant, "@", v.Number))
	}
	return out
}

// TestCheck feeds the auditor ledgers that break one promise each and checks
// it reports exactly that, at the right number; a sound ledger passes.
func TestCheck(t *testing.T) {
	t.Parallel()
	moved := gapAt(2, 20)
	moved.GapReason, moved.RecoveredAs = store.ReasonRecovered, 4
	copyOf := committed(4, 40)
	copyOf.RecoveredFrom, copyOf.RecoveryType = 2, "retry"
	second := committed(5, 50)
	second.RecoveredFrom, second.RecoveryType = 2, "retry"
	filled := gapAt(2, 20)
	filled.State, filled.FilledAt, filled.FilledBy, filled.Payload = store.Committed, at(90), "ops", []byte("x")
	unfilledReason := committed(2, 20)
	unfilledReason.GapReason = store.ReasonReleased

	for _, c := range []struct {
		name string
		es   []store.Entry
		opts *audit.Options
		want []string
	}{
		{"sound", []store.Entry{committed(1, 10), moved, gapAt(3, 30), copyOf}, &audit.Options{Ordered: true}, nil},
		{"hole", []store.Entry{committed(1, 10), committed(3, 30)}, nil, []string{"I1@2"}},
		{"duplicate", []store.Entry{committed(1, 10), committed(1, 10)}, nil, []string{"I1@1"}},
		{"second copy of moved work", []store.Entry{committed(1, 10), moved, gapAt(3, 30), copyOf, second}, nil, []string{"I2@5"}},
		{"moved to nowhere", []store.Entry{committed(1, 10), moved, gapAt(3, 30)}, nil, []string{"I2@2"}},
		{"gap with payload", []store.Entry{{Number: 1, State: store.Gap, ResolvedAt: at(1), GapReason: "expired", Payload: []byte("p")}}, nil, []string{"I2@1"}},
		{"filled without filler", []store.Entry{committed(1, 10), func() store.Entry { f := filled; f.FilledBy = ""; return f }()}, nil, []string{"I2@2"}},
		{"filled, recorded", []store.Entry{committed(1, 10), filled}, &audit.Options{Ordered: true}, nil},
		{"reason on a commit", []store.Entry{committed(1, 10), unfilledReason}, nil, []string{"I2@2"}},
		{"committed before an earlier resolution", []store.Entry{gapAt(1, 50), committed(2, 20)}, &audit.Options{Ordered: true}, []string{"I4@2"}},
		{"committed past an unresolved", []store.Entry{leased(1), committed(2, 20)}, &audit.Options{Ordered: true}, []string{"I4@2"}},
		{"reader in order", []store.Entry{committed(1, 10), gapAt(2, 20), committed(3, 30), leased(4)}, &audit.Options{Observed: []int64{1, 3}}, nil},
		{"reader with gaps", []store.Entry{committed(1, 10), gapAt(2, 20)}, &audit.Options{Observed: []int64{1, 2}, ObservedGaps: true}, nil},
		{"reader skipped", []store.Entry{committed(1, 10), committed(2, 20), committed(3, 30)}, &audit.Options{Observed: []int64{1, 3}}, []string{"I5@2"}},
		{"reader went back", []store.Entry{committed(1, 10), committed(2, 20)}, &audit.Options{Observed: []int64{2, 1}}, []string{"I5@1"}},
		{"reader past the watermark", []store.Entry{committed(1, 10), leased(2), committed(3, 30)}, &audit.Options{Observed: []int64{1, 3}}, []string{"I5@3"}},
		{"acknowledged commit lost", []store.Entry{committed(1, 10), gapAt(2, 20)}, &audit.Options{Acknowledged: map[int64][]byte{1: []byte("1"), 2: nil}}, []string{"I6@2"}},
		{"acknowledged payload differs", []store.Entry{committed(1, 10)}, &audit.Options{Acknowledged: map[int64][]byte{1: []byte("other")}}, []string{"I6@1"}},
		{"unresolved too long", []store.Entry{committed(1, 10), leased(2)}, &audit.Options{MaxUnresolved: time.Second, Now: at(1200)}, []string{"I6@2"}},
		{"committed at its expiry", []store.Entry{committed(1, 10), committed(2, 1000)}, nil, []string{"I3@2"}},
		{"committed after its expiry", []store.Entry{committed(1, 1500)}, nil, []string{"I3@1"}},
		{"born committed", []store.Entry{bornAt(1, 10, 10)}, &audit.Options{Ordered: true}, nil},
		{"born committed, recorded later", []store.Entry{bornAt(1, 10, 20)}, nil, []string{"I3@1"}},
		{"unresolved in time", []store.Entry{committed(1, 10), leased(2)}, &audit.Options{MaxUnresolved: time.Second, Now: at(1000)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := audit.Check("s", 1, c.es, c.opts)
			require.Equal(t, c.want, invariants(r), "%v", r.Err())
			require.Equal(t, c.want == nil, r.OK())
		})
	}
}

// backend is a store the auditor reads and the test writes.
type backend interface {
	audit.Source
	Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error)
	Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error)
	Release(ctx context.Context, stream string, number int64, token store.Token, p *store.ReleaseParams) error
	RecoverExpired(ctx context.Context, stream string, number int64, p *store.RecoverParams) (int64, error)
}

// TestStream audits real ledgers on both backends: a sound one passes, with
// its counts right; on PostgreSQL, a ledger damaged behind the library's
// back (a deleted entry, a second copy of moved work) is caught.
func TestStream(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	pg, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	ctx := context.Background()
	for name, s := range map[string]backend{"memory": memory.New(nil), "postgres": pg} {
		t.Run(name, func(t *testing.T) {
			es, err := s.Lease(ctx, "a", []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}, {TTL: time.Microsecond, OperationID: "op"}, {TTL: time.Minute}}, nil)
			require.NoError(t, err)
			_, err = s.Commit(ctx, "a", 1, es[0].Token, &store.CommitParams{Payload: []byte("one"), Ordered: true})
			require.NoError(t, err)
			require.NoError(t, s.Release(ctx, "a", 2, es[1].Token, nil))
			time.Sleep(time.Millisecond) // 3 expires
			moved, err := s.RecoverExpired(ctx, "a", 3, &store.RecoverParams{Payload: []byte("w"), RecoveryType: "retry"})
			require.NoError(t, err)
			require.Equal(t, int64(5), moved)

			r, err := audit.Stream(ctx, s, "a", &audit.Options{
				Ordered:      true,
				Observed:     []int64{1},
				Acknowledged: map[int64][]byte{1: []byte("one")},
			})
			require.NoError(t, err)
			require.NoError(t, r.Err())
			require.Equal(t, int64(5), r.Last)
			require.Equal(t, [4]int{2, 2, 1, 1}, [4]int{r.Committed, r.Gaps, r.Leased, r.Recovered})

			if name != "postgres" {
				return
			}
			entries := pgx.Identifier{schema, "entries"}.Sanitize()
			streams := pgx.Identifier{schema, "streams"}.Sanitize()
			for _, sql := range []string{
				// a second copy of the work moved from 3 to 5, as entry 6
				`INSERT INTO ` + entries + ` (stream, number, state, token, leased_at, expires_at, resolved_at, payload, recovered_from, recovery_type)
				 SELECT stream, 6, state, gen_random_uuid(), leased_at, expires_at, resolved_at, payload, recovered_from, recovery_type
				 FROM ` + entries + ` WHERE stream = 'a' AND number = 5`,
				`UPDATE ` + streams + ` SET last_number = 6 WHERE name = 'a'`,
				// a hole
				`DELETE FROM ` + entries + ` WHERE stream = 'a' AND number = 2`,
			} {
				_, err := pool.Exec(ctx, sql)
				require.NoError(t, err)
			}
			r, err = audit.Stream(ctx, s, "a", nil)
			require.NoError(t, err)
			require.Equal(t, []string{"I1@2", "I2@6"}, invariants(r), "%v", r.Err())
		})
	}
}

// ledgerBackend is a store whose ledger TestCommitTime builds: holders'
// commits, appended entries and a filled gap.
type ledgerBackend interface {
	backend
	store.Appender
	Now(ctx context.Context) (time.Time, error)
	FillGap(ctx context.Context, stream string, number int64, p *store.FillParams) error
	ResolveExpired(ctx context.Context, stream string, number int64, p *store.ResolveExpiredParams) error
}

// TestCommitTime audits I3 on real ledgers: commits just before expiry,
// appended entries and a filled gap pass on both backends; on PostgreSQL a
// commit whose recorded time is moved to or past its expiry is caught.
func TestCommitTime(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	pg, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	ctx := context.Background()
	for name, s := range map[string]ledgerBackend{"memory": memory.New(nil), "postgres": pg} {
		t.Run(name, func(t *testing.T) {
			now, err := s.Now(ctx)
			require.NoError(t, err)
			pin := func(d time.Duration) *time.Time { tm := store.Micro(now).Add(d); return &tm }
			es, err := s.Lease(ctx, "a", []store.LeaseRequest{{TTL: time.Second}, {TTL: time.Second}, {TTL: time.Second}}, &store.LeaseParams{Now: pin(0)})
			require.NoError(t, err)
			_, err = s.Commit(ctx, "a", 1, es[0].Token, &store.CommitParams{Payload: []byte("1"), Now: pin(time.Millisecond)})
			require.NoError(t, err)
			_, err = s.Commit(ctx, "a", 2, es[1].Token, &store.CommitParams{Payload: []byte("2"), Now: pin(time.Second - time.Microsecond)})
			require.NoError(t, err)
			// 3 expires: a gap, filled long after its expiry
			require.NoError(t, s.ResolveExpired(ctx, "a", 3, &store.ResolveExpiredParams{Now: pin(2 * time.Second)}))
			require.NoError(t, s.FillGap(ctx, "a", 3, &store.FillParams{Payload: []byte("f"), FilledBy: "ops", Now: pin(time.Hour)}))
			_, err = s.Append(ctx, "a", []store.AppendRequest{{Payload: []byte("4")}, {Payload: []byte("5")}}, &store.AppendParams{Now: pin(time.Hour)})
			require.NoError(t, err)

			r, err := audit.Stream(ctx, s, "a", &audit.Options{Ordered: true})
			require.NoError(t, err)
			require.NoError(t, r.Err())
			require.Contains(t, r.Checks, "I3 committed before expiry")
			require.Equal(t, [3]int{5, 0, 1}, [3]int{r.Committed, r.Gaps, r.Filled})

			if name != "postgres" {
				return
			}
			entries := pgx.Identifier{schema, "entries"}.Sanitize()
			for _, sql := range []string{
				`UPDATE ` + entries + ` SET resolved_at = expires_at WHERE stream = 'a' AND number = 1`,
				`UPDATE ` + entries + ` SET resolved_at = expires_at + interval '1 second' WHERE stream = 'a' AND number = 2`,
				`UPDATE ` + entries + ` SET resolved_at = resolved_at + interval '1 microsecond' WHERE stream = 'a' AND number = 5`,
			} {
				_, err := pool.Exec(ctx, sql)
				require.NoError(t, err)
			}
			r, err = audit.Stream(ctx, s, "a", nil)
			require.NoError(t, err)
			require.Equal(t, []string{"I3@1", "I3@2", "I3@5"}, invariants(r), "%v", r.Err())
		})
	}
}
