package sequence_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is a settable clock shared by a memory store (its "database clock")
// and a Leaser (the holder's clock).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// backend is one store under test, with a way to make time pass for it.
type backend struct {
	name    string
	store   sequence.Store
	barrier *barrier.Barrier
	// expire makes every lease with a TTL of at most shortTTL expire.
	expire func(t *testing.T)
	now    func() time.Time // the Leaser's clock
}

// shortTTL is the lease duration the tests use when they want leases to
// expire: the backends' precision, over before any round trip arrives.
const shortTTL = time.Microsecond

// backends returns a fresh memory store (on a manual clock) and a fresh
// PostgreSQL store (on its own schema).
func backends(t *testing.T) []backend {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	pool := pgtest.Shared(t, false)
	pg, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
	require.NoError(t, err)
	mem := memory.New(&memory.Config{Now: c.Now})
	return []backend{
		{name: "memory", store: mem, barrier: startBarrier(t, mem), expire: func(*testing.T) { c.Advance(shortTTL) }, now: c.Now},
		// A round trip takes far longer than shortTTL: by the next
		// statement the database's clock is past the expiry.
		{name: "postgres", store: pg, barrier: startBarrier(t, pg), expire: func(*testing.T) {}, now: time.Now},
	}
}

// startBarrier starts a barrier on src, stopped when the test ends.
func startBarrier(t testing.TB, src barrier.Source) *barrier.Barrier {
	b, err := barrier.New(src, nil)
	require.NoError(t, err)
	require.NoError(t, b.Start(context.Background()))
	t.Cleanup(b.Stop)
	return b
}

func newLeaser(t *testing.T, b backend) *sequence.Leaser {
	l, err := sequence.New(b.store, &sequence.Config{Barrier: b.barrier, Now: b.now, MaxPayload: 64})
	require.NoError(t, err)
	return l
}

func TestLeaseCommitRelease(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			l := newLeaser(t, b)
			a, err := l.Lease(ctx, "orders", &sequence.LeaseOpts{OperationID: "op-1", Kind: "projection", TTL: time.Minute})
			require.NoError(t, err)
			require.Equal(t, int64(1), a.Number())
			require.Equal(t, "orders", a.Stream())
			require.Equal(t, "op-1", a.OperationID())
			require.Equal(t, "projection", a.Kind())
			require.Equal(t, time.Minute, a.ExpiresAt().Sub(a.LeasedAt()))
			require.False(t, a.IsExpired())
			require.LessOrEqual(t, a.Remaining(), time.Minute)
			require.Greater(t, a.Remaining(), 50*time.Second)

			batch, err := l.LeaseN(ctx, "orders", 3, nil)
			require.NoError(t, err)
			require.Len(t, batch, 3)
			for i, x := range batch {
				require.Equal(t, int64(2+i), x.Number())
				require.Equal(t, sequence.DefaultTTL, x.ExpiresAt().Sub(x.LeasedAt()))
			}

			require.NoError(t, a.Commit(ctx, []byte("one")))
			require.NoError(t, a.Commit(ctx, []byte("one")), "the holder's retry reports the same outcome")
			require.NoError(t, batch[0].Release(ctx))
			require.NoError(t, batch[0].Release(ctx), "releasing twice is not an error")
			require.ErrorIs(t, batch[0].Commit(ctx, nil), sequence.ErrReleased)
			require.ErrorIs(t, a.Release(ctx), sequence.ErrCommitted)

			before := batch[1].ExpiresAt()
			require.NoError(t, batch[1].Extend(ctx, 2*time.Hour/3))
			require.True(t, batch[1].ExpiresAt().After(before))
			require.NoError(t, batch[1].Commit(ctx, nil))
		})
	}
}

func TestExpiredLeaseCannotCommitOrExtend(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			l := newLeaser(t, b)
			x, err := l.Lease(ctx, "s", &sequence.LeaseOpts{TTL: shortTTL})
			require.NoError(t, err)
			b.expire(t)
			require.True(t, x.IsExpired())
			require.Zero(t, x.Remaining())
			require.ErrorIs(t, x.Commit(ctx, []byte("late")), sequence.ErrExpired)
			require.ErrorIs(t, x.Extend(ctx, time.Minute), sequence.ErrExpired)
			// Releasing an expired, unresolved lease is how a holder gives up
			// quickly; it resolves the number as a released gap.
			require.NoError(t, x.Release(ctx))
		})
	}
}

// TestBadInput lists each bad input the Leaser and its handles refuse: each
// gets a typed error and changes nothing, which is checked after every case
// (the streams, every entry of the stream with all its fields, and the held
// handle), so that a call that went through despite its error shows at once.
func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			l := newLeaser(t, b)
			held, err := l.Lease(ctx, "bad", &sequence.LeaseOpts{TTL: time.Hour})
			require.NoError(t, err)
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			before := snapshotOf(t, b.store)
			require.Len(t, before.entries, 1)

			cases := []struct {
				name string
				call func() error
				want error
			}{
				{"empty stream name", func() error { _, err := l.Lease(ctx, "", nil); return err }, sequence.ErrInvalidStream},
				{"over-long stream name", func() error { _, err := l.Lease(ctx, strings.Repeat("s", store.MaxNameLen+1), nil); return err }, sequence.ErrInvalidStream},
				{"stream name with NUL", func() error { _, err := l.Lease(ctx, "a\x00b", nil); return err }, sequence.ErrInvalidStream},
				{"stream name not UTF-8", func() error { _, err := l.Lease(ctx, "\xff\xfe", nil); return err }, sequence.ErrInvalidStream},
				{"negative TTL", func() error { _, err := l.Lease(ctx, "bad", &sequence.LeaseOpts{TTL: -time.Second}); return err }, sequence.ErrInvalidTTL},
				{"TTL above MaxTTL", func() error {
					_, err := l.Lease(ctx, "bad", &sequence.LeaseOpts{TTL: sequence.DefaultMaxTTL + time.Second})
					return err
				}, sequence.ErrInvalidTTL},
				{"batch of zero", func() error { _, err := l.LeaseN(ctx, "bad", 0, nil); return err }, sequence.ErrInvalidCount},
				{"negative batch", func() error { _, err := l.LeaseN(ctx, "bad", -1, nil); return err }, sequence.ErrInvalidCount},
				{"absurd batch", func() error { _, err := l.LeaseN(ctx, "bad", store.MaxBatch+1, nil); return err }, sequence.ErrInvalidCount},
				{"over-long kind", func() error {
					_, err := l.Lease(ctx, "bad", &sequence.LeaseOpts{Kind: strings.Repeat("k", store.MaxTextLen+1)})
					return err
				}, store.ErrInvalidText},
				{"oversized payload", func() error { return held.Commit(ctx, make([]byte, 65)) }, sequence.ErrPayloadTooLarge},
				{"extend TTL above MaxTTL", func() error { return held.Extend(ctx, 2*sequence.DefaultMaxTTL) }, sequence.ErrInvalidTTL},
				{"extend negative TTL", func() error { return held.Extend(ctx, -time.Second) }, sequence.ErrInvalidTTL},
				{"lease with cancelled context", func() error { _, err := l.Lease(cancelled, "bad", nil); return err }, context.Canceled},
				{"commit with cancelled context", func() error { return held.Commit(cancelled, nil) }, context.Canceled},
				{"release with cancelled context", func() error { return held.Release(cancelled) }, context.Canceled},
				{"extend with cancelled context", func() error { return held.Extend(cancelled, time.Minute) }, context.Canceled},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					err := c.call()
					require.ErrorIs(t, err, c.want)
					if c.want != context.Canceled {
						require.ErrorIs(t, err, sequence.ErrInvalidArgument)
					}
					require.Equal(t, before, snapshotOf(t, b.store), "the refused call changed the store")
					require.NoError(t, held.Err(), "the refused call ended the holding")
				})
			}
			// The held lease still commits, and the next number is 2.
			next, err := l.Lease(ctx, "bad", nil)
			require.NoError(t, err)
			require.Equal(t, int64(2), next.Number())
			require.NoError(t, held.Commit(ctx, []byte("ok")))
		})
	}
}

// ledger is what a store holds: its streams and every entry of each.
type ledger struct {
	streams []string
	entries []store.Entry
}

// snapshotOf reads the whole ledger of s (a memory or PostgreSQL store on a
// schema of its own).
func snapshotOf(t *testing.T, s sequence.Store) ledger {
	t.Helper()
	r := s.(interface {
		Streams(ctx context.Context, after string, limit int) ([]string, error)
		Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
	})
	ctx := context.Background()
	var l ledger
	var err error
	l.streams, err = r.Streams(ctx, "", store.MaxListLimit)
	require.NoError(t, err)
	for _, name := range l.streams {
		es, err := r.Read(ctx, name, 0, store.MaxListLimit)
		require.NoError(t, err)
		l.entries = append(l.entries, es...)
	}
	return l
}

// TestRefusedHoldings lists the calls on a holding that are refused with a
// typed error (a foreign or zero token, a number never handed out, a commit
// after release or after expiry) and the double commit and release that
// report the first outcome again; after each case the ledger is checked
// unchanged. Tokens reach the store as 16-byte values, so a malformed token
// exists only as text: store.ParseToken refuses it before any call can be
// made, which the end of the test checks as the parser check it is.
func TestRefusedHoldings(t *testing.T) {
	t.Parallel()
	for name, s := range realBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l, _ := leaserOn(t, s, sequence.Config{})
			xs, err := l.LeaseN(ctx, "held", 3, &sequence.LeaseOpts{TTL: time.Minute})
			require.NoError(t, err)
			committed, released, open := xs[0], xs[1], xs[2]
			expiring, err := l.Lease(ctx, "held", &sequence.LeaseOpts{TTL: 50 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, committed.Commit(ctx, []byte("once")))
			require.NoError(t, released.Release(ctx))
			waitExpired(t, s, "held", expiring.Number())

			cases := []struct {
				name string
				call func() error
				want error // nil: succeeds
			}{
				{"foreign token", func() error {
					_, err := s.Commit(ctx, "held", open.Number(), store.NewToken(), nil)
					return err
				}, sequence.ErrTokenMismatch},
				{"foreign token release", func() error {
					return s.Release(ctx, "held", open.Number(), store.NewToken(), nil)
				}, sequence.ErrTokenMismatch},
				{"zero token", func() error {
					_, err := s.Commit(ctx, "held", open.Number(), store.Token{}, nil)
					return err
				}, store.ErrInvalidToken},
				{"number never handed out", func() error {
					_, err := s.Commit(ctx, "held", 99, open.Token(), nil)
					return err
				}, sequence.ErrNotFound},
				{"commit after release", func() error { return released.Commit(ctx, []byte("x")) }, sequence.ErrReleased},
				{"commit after expiry", func() error { return expiring.Commit(ctx, []byte("x")) }, sequence.ErrExpired},
				{"extend after expiry", func() error { return expiring.Extend(ctx, time.Minute) }, sequence.ErrExpired},
				{"release a committed number", func() error { return committed.Release(ctx) }, sequence.ErrCommitted},
				{"double commit, same outcome", func() error { return committed.Commit(ctx, []byte("once")) }, nil},
				{"double release, same outcome", func() error { return released.Release(ctx) }, nil},
			}
			before := readAll(t, s, "held")
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					err := c.call()
					if c.want == nil {
						require.NoError(t, err)
					} else {
						require.ErrorIs(t, err, c.want)
					}
					require.Equal(t, before, readAll(t, s, "held"), "the call changed the ledger")
				})
			}
			_, err = store.ParseToken("not-a-token")
			require.ErrorIs(t, err, store.ErrInvalidToken)
			require.ErrorIs(t, err, store.ErrInvalidArgument)
			es := readAll(t, s, "held")
			require.Len(t, es, 4, "nothing leased")
			require.Equal(t, store.Committed, es[0].State)
			require.Equal(t, []byte("once"), es[0].Payload, "committed once, never overwritten")
			require.Equal(t, store.Gap, es[1].State)
			require.Equal(t, store.ReasonReleased, es[1].GapReason)
			require.Equal(t, store.Leased, es[2].State, "untouched by the foreign tokens")
			require.Equal(t, store.Leased, es[3].State, "a refused late commit changes nothing")
			require.NoError(t, open.Commit(ctx, []byte("still mine")))
		})
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for _, c := range []struct {
		name  string
		cfg   sequence.Config
		field string
	}{
		{"negative MaxTTL", sequence.Config{MaxTTL: -1}, "MaxTTL"},
		{"MaxTTL above the store limit", sequence.Config{MaxTTL: store.MaxTTL + 1}, "MaxTTL"},
		{"DefaultTTL above MaxTTL", sequence.Config{DefaultTTL: 2 * time.Hour, MaxTTL: time.Hour}, "DefaultTTL"},
		{"negative DefaultTTL", sequence.Config{DefaultTTL: -1}, "DefaultTTL"},
		{"negative MaxPayload", sequence.Config{MaxPayload: -1}, "MaxPayload"},
		{"owner with control character", sequence.Config{Owner: "a\nb"}, "Owner"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.UnorderedOnly = true
			_, err := sequence.New(s, &c.cfg)
			require.ErrorContains(t, err, "Config."+c.field)
		})
	}
	_, err := sequence.New(nil, nil)
	require.Error(t, err)
	_, err = sequence.New(s, &sequence.Config{UnorderedOnly: true})
	require.NoError(t, err)
}

// TestNewRefusesNoBarrier checks that a Leaser without a Barrier is refused
// at New, before any work, unless it declares that it never commits in
// order; such a Leaser completes, and its Commit fails at once.
func TestNewRefusesNoBarrier(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for _, cfg := range []*sequence.Config{nil, {}, {DefaultTTL: time.Minute}} {
		_, err := sequence.New(s, cfg)
		require.ErrorIs(t, err, sequence.ErrNoBarrier)
		require.ErrorIs(t, err, sequence.ErrInvalidArgument)
		require.ErrorContains(t, err, "Config.Barrier")
	}
	l, err := sequence.New(s, &sequence.Config{UnorderedOnly: true})
	require.NoError(t, err)
	ctx := context.Background()
	x, err := l.Lease(ctx, "unordered", nil)
	require.NoError(t, err)
	require.ErrorIs(t, x.Commit(ctx, []byte("p")), sequence.ErrNoBarrier)
	require.NoError(t, x.Complete(ctx, []byte("p")))
	_, err = l.Append(ctx, "unordered", nil, []byte("q"))
	require.NoError(t, err)
}

func TestBoostTTL(t *testing.T) {
	t.Parallel()
	l, err := sequence.New(memory.New(nil), &sequence.Config{DefaultTTL: time.Minute, MaxTTL: 3 * time.Minute, UnorderedOnly: true})
	require.NoError(t, err)
	ctx := context.Background()
	ttlOf := func() time.Duration {
		x, err := l.Lease(ctx, "boost", nil)
		require.NoError(t, err)
		return x.ExpiresAt().Sub(x.LeasedAt())
	}
	require.Equal(t, time.Minute, ttlOf())
	l.BoostTTL(2)
	require.Equal(t, 2*time.Minute, l.DefaultTTL())
	require.Equal(t, 2*time.Minute, ttlOf())
	l.BoostTTL(10)
	require.Equal(t, 3*time.Minute, ttlOf(), "capped at MaxTTL")
	l.BoostTTL(1)
	require.Equal(t, time.Minute, ttlOf())
}
