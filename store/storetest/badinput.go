package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// badFixture is the state every bad-input case runs against. Each call would
// succeed but for its one bad argument (or its cancelled context), so the
// error can only come from the check under test.
type badFixture struct {
	stream  string      // exists: 1 committed, 2 live, 3 expired at now
	fresh   string      // never created, one per case
	live    store.Entry // number 2: Commit, Release and Extend at now succeed
	expired store.Entry // number 3: ResolveExpired at now succeeds
	now     *time.Time  // the pinned clock of every case
}

// badCase is one call with one bad argument.
type badCase struct {
	name string
	// want is the specific sentinel, or context.Canceled.
	want error
	call func(ctx context.Context, s Store, f *badFixture) error
}

// snapshot is everything a refused call must leave as it was.
type snapshot struct {
	entries []store.Entry
	stats   store.StreamStats
	leased  []store.Entry // every leased entry of the store
}

func (b *bundle) snapshot(f *badFixture) snapshot {
	b.t.Helper()
	far := b.time(10 * store.MaxTTL)
	leased, err := b.s.ListExpired(b.ctx, &store.ListExpiredParams{Limit: store.MaxListLimit, Now: &far})
	require.NoError(b.t, err, "ListExpired")
	b.requireNoStream(f.fresh)
	return snapshot{entries: b.readAll(f.stream), stats: b.stats(f.stream), leased: normAll(leased)}
}

func testBadInput(t *testing.T, newStore func(t *testing.T) Store) {
	b := newBundle(t, newStore)
	shared := badFixture{stream: b.name(""), now: b.at(time.Minute)}
	es := b.lease(shared.stream, 0, req(time.Hour, "c"), req(time.Hour, "live"), req(time.Second, "expired"))
	b.commit(es[0], time.Second, []byte("committed"))
	shared.live, shared.expired = es[1], es[2]

	for _, c := range badCases() {
		t.Run(c.name, func(t *testing.T) {
			cb := *b
			cb.t, cb.ctx = t, t.Context()
			f := shared
			f.fresh = cb.name("-never")
			before := cb.snapshot(&f)
			ctx := cb.ctx
			if c.want == context.Canceled {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			err := c.call(ctx, cb.s, &f)
			require.Error(t, err)
			if c.want == context.Canceled {
				require.ErrorIs(t, err, context.Canceled)
				require.ErrorIs(t, err, store.ErrNotSent, "a call whose context had ended is not sent")
				require.False(t, store.IsInvalid(err), "a cancelled context is not bad input: %v", err)
			} else {
				require.ErrorIs(t, err, store.ErrInvalidArgument)
				require.ErrorIs(t, err, c.want)
			}
			require.Equal(t, before, cb.snapshot(&f), "the refused call changed something")
		})
	}

	// The control: without the bad argument, each call succeeds.
	t.Run("control: the same calls with good arguments succeed", func(t *testing.T) {
		cb := *b
		cb.t, cb.ctx = t, t.Context()
		ctx, s, f := cb.ctx, cb.s, shared
		f.fresh = cb.name("-never")
		_, err := s.Lease(ctx, f.fresh, goodReqs(), &store.LeaseParams{Owner: "o", Now: f.now})
		require.NoError(t, err, "Lease")
		_, _, err = s.Extend(ctx, f.stream, 2, f.live.Token, &store.ExtendParams{TTL: time.Minute, Now: f.now})
		require.NoError(t, err, "Extend")
		_, err = s.Commit(ctx, f.stream, 2, f.live.Token, &store.CommitParams{Now: f.now})
		require.NoError(t, err, "Commit")
		require.NoError(t, s.ResolveExpired(ctx, f.stream, 3, &store.ResolveExpiredParams{Reason: "r", RecoveredAs: 4, Now: f.now}), "ResolveExpired")
		e := cb.lease1(f.stream, time.Minute, time.Minute)
		require.NoError(t, s.Release(ctx, f.stream, e.Number, e.Token, &store.ReleaseParams{Now: f.now}), "Release")
	})
}

func goodReqs() []store.LeaseRequest {
	return []store.LeaseRequest{{OperationID: "op", Kind: "kind", TTL: time.Minute}}
}

// badCases lists every bad-input case. The names are the record of what the
// suite checks.
func badCases() []badCase {
	var cases []badCase
	add := func(name string, want error, call func(ctx context.Context, s Store, f *badFixture) error) {
		cases = append(cases, badCase{name: name, want: want, call: call})
	}

	// Stream names, on every method that takes one.
	badNames := []struct{ desc, name string }{
		{"empty stream name", ""},
		{"stream name of MaxNameLen+1 bytes", strings.Repeat("s", store.MaxNameLen+1)},
		{"stream name of MaxNameLen+1 bytes but fewer runes", strings.Repeat("é", store.MaxNameLen/2) + "s"},
		{"stream name of invalid UTF-8", "bad-\xff-name"},
		{"stream name with a NUL byte", "nul-\x00-name"},
		{"stream name with a control character (newline)", "ctl-\n-name"},
		{"stream name with a control character (DEL)", "del-\x7f-name"},
	}
	for _, n := range badNames {
		name := n.name
		add("Lease: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Lease(ctx, name, goodReqs(), &store.LeaseParams{Now: f.now})
			return err
		})
		add("Commit: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Commit(ctx, name, 2, f.live.Token, &store.CommitParams{Now: f.now})
			return err
		})
		add("Release: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			return s.Release(ctx, name, 2, f.live.Token, &store.ReleaseParams{Now: f.now})
		})
		add("Extend: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			_, _, err := s.Extend(ctx, name, 2, f.live.Token, &store.ExtendParams{TTL: time.Minute, Now: f.now})
			return err
		})
		add("ResolveExpired: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			return s.ResolveExpired(ctx, name, 3, &store.ResolveExpiredParams{Now: f.now})
		})
		if name != "" { // an empty filter means every stream
			add("ListExpired: filter by "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
				_, err := s.ListExpired(ctx, &store.ListExpiredParams{Stream: name, Now: f.now})
				return err
			})
		}
		add("Read: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Read(ctx, name, 0, 0)
			return err
		})
		add("Stats: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Stats(ctx, name)
			return err
		})
	}

	// Lease arguments, on a new and on an existing stream.
	long := strings.Repeat("x", store.MaxTextLen+1)
	longRunes := strings.Repeat("ü", store.MaxTextLen/2) + "x"
	leaseCases := []struct {
		desc  string
		want  error
		reqs  func() []store.LeaseRequest
		owner string
	}{
		{"TTL 0", store.ErrInvalidTTL, withReq(func(r *store.LeaseRequest) { r.TTL = 0 }), ""},
		{"negative TTL", store.ErrInvalidTTL, withReq(func(r *store.LeaseRequest) { r.TTL = -time.Second }), ""},
		{"TTL under a microsecond", store.ErrInvalidTTL, withReq(func(r *store.LeaseRequest) { r.TTL = time.Microsecond - 1 }), ""},
		{"TTL above MaxTTL", store.ErrInvalidTTL, withReq(func(r *store.LeaseRequest) { r.TTL = store.MaxTTL + time.Microsecond }), ""},
		{"TTL 0 in the last request of a batch", store.ErrInvalidTTL, func() []store.LeaseRequest {
			rs := append(goodReqs(), goodReqs()...)
			return append(rs, store.LeaseRequest{OperationID: "op", TTL: 0})
		}, ""},
		{"batch of 0 requests", store.ErrInvalidCount, func() []store.LeaseRequest { return []store.LeaseRequest{} }, ""},
		{"nil requests", store.ErrInvalidCount, func() []store.LeaseRequest { return nil }, ""},
		{"batch of MaxBatch+1 requests", store.ErrInvalidCount, func() []store.LeaseRequest {
			rs := make([]store.LeaseRequest, store.MaxBatch+1)
			for i := range rs {
				rs[i] = store.LeaseRequest{TTL: time.Minute}
			}
			return rs
		}, ""},
		{"operation id of MaxTextLen+1 bytes", store.ErrInvalidText, withReq(func(r *store.LeaseRequest) { r.OperationID = long }), ""},
		{"operation id of invalid UTF-8", store.ErrInvalidText, withReq(func(r *store.LeaseRequest) { r.OperationID = "op-\xc3" }), ""},
		{"kind of MaxTextLen+1 bytes", store.ErrInvalidText, withReq(func(r *store.LeaseRequest) { r.Kind = long }), ""},
		{"kind with a control character", store.ErrInvalidText, withReq(func(r *store.LeaseRequest) { r.Kind = "kind\r\n" }), ""},
		{"owner of MaxTextLen+1 bytes", store.ErrInvalidText, goodReqs, long},
		{"owner of MaxTextLen+1 bytes but fewer runes", store.ErrInvalidText, goodReqs, longRunes},
		{"owner with a NUL byte", store.ErrInvalidText, goodReqs, "own\x00er"},
	}
	for _, lc := range leaseCases {
		add("Lease: "+lc.desc+" (new stream)", lc.want, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Lease(ctx, f.fresh, lc.reqs(), &store.LeaseParams{Owner: lc.owner, Now: f.now})
			return err
		})
		add("Lease: "+lc.desc+" (existing stream)", lc.want, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Lease(ctx, f.stream, lc.reqs(), &store.LeaseParams{Owner: lc.owner, Now: f.now})
			return err
		})
	}

	// The (number, token) of Commit, Release and Extend.
	holding := []struct {
		desc   string
		want   error
		number int64
		zero   bool
	}{
		{"zero token", store.ErrInvalidToken, 2, true},
		{"number 0", store.ErrInvalidNumber, 0, false},
		{"negative number", store.ErrInvalidNumber, -2, false},
	}
	for _, h := range holding {
		tok := func(f *badFixture) store.Token {
			if h.zero {
				return store.Token{}
			}
			return f.live.Token
		}
		add("Commit: "+h.desc, h.want, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Commit(ctx, f.stream, h.number, tok(f), &store.CommitParams{Payload: []byte("p"), Now: f.now})
			return err
		})
		add("Release: "+h.desc, h.want, func(ctx context.Context, s Store, f *badFixture) error {
			return s.Release(ctx, f.stream, h.number, tok(f), &store.ReleaseParams{Now: f.now})
		})
		add("Extend: "+h.desc, h.want, func(ctx context.Context, s Store, f *badFixture) error {
			_, _, err := s.Extend(ctx, f.stream, h.number, tok(f), &store.ExtendParams{TTL: time.Minute, Now: f.now})
			return err
		})
	}

	// Extend's TTL.
	for _, e := range []struct {
		desc string
		p    func(f *badFixture) *store.ExtendParams
	}{
		{"nil params (no TTL)", func(*badFixture) *store.ExtendParams { return nil }},
		{"TTL 0", func(f *badFixture) *store.ExtendParams { return &store.ExtendParams{Now: f.now} }},
		{"negative TTL", func(f *badFixture) *store.ExtendParams { return &store.ExtendParams{TTL: -time.Minute, Now: f.now} }},
		{"TTL under a microsecond", func(f *badFixture) *store.ExtendParams { return &store.ExtendParams{TTL: 999, Now: f.now} }},
		{"TTL above MaxTTL", func(f *badFixture) *store.ExtendParams {
			return &store.ExtendParams{TTL: store.MaxTTL + time.Microsecond, Now: f.now}
		}},
	} {
		add("Extend: "+e.desc, store.ErrInvalidTTL, func(ctx context.Context, s Store, f *badFixture) error {
			_, _, err := s.Extend(ctx, f.stream, 2, f.live.Token, e.p(f))
			return err
		})
	}

	// ResolveExpired.
	for _, r := range []struct {
		desc   string
		want   error
		number int64
		p      store.ResolveExpiredParams
	}{
		{"number 0", store.ErrInvalidNumber, 0, store.ResolveExpiredParams{}},
		{"negative number", store.ErrInvalidNumber, -3, store.ResolveExpiredParams{}},
		{"negative RecoveredAs", store.ErrInvalidNumber, 3, store.ResolveExpiredParams{RecoveredAs: -1}},
		{"reason of MaxTextLen+1 bytes", store.ErrInvalidText, 3, store.ResolveExpiredParams{Reason: long}},
		{"reason of invalid UTF-8", store.ErrInvalidText, 3, store.ResolveExpiredParams{Reason: "\xff"}},
		{"reason with a control character", store.ErrInvalidText, 3, store.ResolveExpiredParams{Reason: "a\tb"}},
		{"reason \"released\", reserved for holders", store.ErrInvalidText, 3, store.ResolveExpiredParams{Reason: store.ReasonReleased}},
	} {
		add("ResolveExpired: "+r.desc, r.want, func(ctx context.Context, s Store, f *badFixture) error {
			p := r.p
			p.Now = f.now
			return s.ResolveExpired(ctx, f.stream, r.number, &p)
		})
	}

	// Listings.
	for _, l := range []struct {
		desc string
		want error
		p    store.ListExpiredParams
	}{
		{"negative limit", store.ErrInvalidCount, store.ListExpiredParams{Limit: -1}},
		{"limit of MaxListLimit+1", store.ErrInvalidCount, store.ListExpiredParams{Limit: store.MaxListLimit + 1}},
		{"negative AfterNumber", store.ErrInvalidNumber, store.ListExpiredParams{AfterNumber: -1}},
	} {
		add("ListExpired: "+l.desc, l.want, func(ctx context.Context, s Store, f *badFixture) error {
			p := l.p
			p.Now = f.now
			_, err := s.ListExpired(ctx, &p)
			return err
		})
	}
	for _, l := range []struct {
		desc  string
		limit int
	}{
		{"negative limit", -1},
		{"limit of MaxListLimit+1", store.MaxListLimit + 1},
	} {
		add("Read: "+l.desc, store.ErrInvalidCount, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Read(ctx, f.stream, 0, l.limit)
			return err
		})
	}
	add("Read: negative after", store.ErrInvalidNumber, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.Read(ctx, f.stream, -1, 0)
		return err
	})

	// A cancelled context, on every method.
	canceled := context.Canceled
	add("Lease: cancelled context (new stream)", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.Lease(ctx, f.fresh, goodReqs(), &store.LeaseParams{Now: f.now})
		return err
	})
	add("Lease: cancelled context (existing stream)", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.Lease(ctx, f.stream, goodReqs(), &store.LeaseParams{Now: f.now})
		return err
	})
	add("Commit: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.Commit(ctx, f.stream, 2, f.live.Token, &store.CommitParams{Payload: []byte("p"), Now: f.now})
		return err
	})
	add("Release: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		return s.Release(ctx, f.stream, 2, f.live.Token, &store.ReleaseParams{Now: f.now})
	})
	add("Extend: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, _, err := s.Extend(ctx, f.stream, 2, f.live.Token, &store.ExtendParams{TTL: time.Minute, Now: f.now})
		return err
	})
	add("ResolveExpired: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		return s.ResolveExpired(ctx, f.stream, 3, &store.ResolveExpiredParams{Now: f.now})
	})
	add("ListExpired: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.ListExpired(ctx, &store.ListExpiredParams{Now: f.now})
		return err
	})
	add("Read: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.Read(ctx, f.stream, 0, 0)
		return err
	})
	add("Stats: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.Stats(ctx, f.stream)
		return err
	})
	add("Now: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.Now(ctx)
		return err
	})
	return cases
}

// withReq returns a batch of one good request changed by mod.
func withReq(mod func(r *store.LeaseRequest)) func() []store.LeaseRequest {
	return func() []store.LeaseRequest {
		rs := goodReqs()
		mod(&rs[0])
		return rs
	}
}
