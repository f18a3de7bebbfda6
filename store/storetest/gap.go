package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// gapFixture is a stream with every kind of entry ListGaps must tell apart.
type gapFixture struct {
	stream string
	es     []store.Entry // as leased
	want   []store.Entry // as the store must show them, normalised (normGap)
}

// populateGaps leases eight entries at base and resolves some:
//
//	1 committed, 2 released, 3 leased, 4 expired gap, 5 committed,
//	6 gap "operator" recovered as 8, 7 released, 8 leased
func populateGaps(b *bundle) gapFixture {
	b.t.Helper()
	s := b.name("")
	reqs := make([]store.LeaseRequest, 8)
	for i := range reqs {
		reqs[i] = req(time.Minute, fmt.Sprint(i+1))
	}
	es := b.lease(s, 0, reqs...)
	want := normAll(es)
	at := b.time(time.Second)
	b.commit(es[0], time.Second, []byte("one"))
	want[0] = resolved(es[0], store.Committed, at, []byte("one"), "", 0)
	b.release(es[1], time.Second)
	want[1] = resolved(es[1], store.Gap, at, nil, store.ReasonReleased, 0)
	b.expire(es[3], time.Minute, nil)
	want[3] = resolved(es[3], store.Gap, b.time(time.Minute), nil, store.ReasonExpired, 0)
	b.commit(es[4], time.Second, []byte("five"))
	want[4] = resolved(es[4], store.Committed, at, []byte("five"), "", 0)
	b.expire(es[5], time.Minute, &store.ResolveExpiredParams{Reason: "operator", RecoveredAs: 8})
	want[5] = resolved(es[5], store.Gap, b.time(time.Minute), nil, "operator", 8)
	b.release(es[6], time.Second)
	want[6] = resolved(es[6], store.Gap, at, nil, store.ReasonReleased, 0)
	return gapFixture{stream: s, es: es, want: want}
}

// normGap is norm for entries that may have been filled.
func normGap(e store.Entry) store.Entry {
	e = norm(e)
	e.FilledAt = normTime(e.FilledAt)
	return e
}

// filled returns e as the store must show it after a fill.
func filled(e store.Entry, payload []byte, at time.Time, by string) store.Entry {
	e.State = store.Committed
	e.Payload = payload
	e.FilledAt = at
	e.FilledBy = by
	return normGap(e)
}

// pick returns the entries of want with the given numbers.
func pick(want []store.Entry, numbers ...int64) []store.Entry {
	var out []store.Entry
	for _, n := range numbers {
		out = append(out, want[n-1])
	}
	return out
}

// listGaps lists the gaps of stream and checks that it succeeded.
func (b *bundle) listGaps(stream string, p *store.ListGapsParams) []store.Entry {
	b.t.Helper()
	es, err := b.s.ListGaps(b.ctx, stream, p)
	require.NoError(b.t, err, "ListGaps %s %+v", stream, p)
	if len(es) == 0 {
		return nil
	}
	out := make([]store.Entry, len(es))
	for i, e := range es {
		out[i] = normGap(e)
	}
	return out
}

// countGaps counts the open gaps of stream and checks that it succeeded.
func (b *bundle) countGaps(stream string) int64 {
	b.t.Helper()
	n, err := b.s.CountGaps(b.ctx, stream)
	require.NoError(b.t, err, "CountGaps %s", stream)
	return n
}

// fill fills number of stream at base+at and checks that it succeeded.
func (b *bundle) fill(stream string, number int64, payload []byte, by string, at time.Duration) {
	b.t.Helper()
	err := b.s.FillGap(b.ctx, stream, number, &store.FillParams{Payload: payload, FilledBy: by, Now: b.at(at)})
	require.NoError(b.t, err, "FillGap %s/%d", stream, number)
}

func testGaps(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("ListGaps returns the open gaps with every field", func(t *testing.T) {
		b := setup(t, newStore)
		f := populateGaps(b)
		require.Equal(t, pick(f.want, 2, 4, 6, 7), b.listGaps(f.stream, nil))
		require.Equal(t, pick(f.want, 2, 4, 6, 7), b.listGaps(f.stream, &store.ListGapsParams{}))
		require.Equal(t, int64(4), b.countGaps(f.stream))
	})

	t.Run("ListGaps: after, limit and reason", func(t *testing.T) {
		b := setup(t, newStore)
		f := populateGaps(b)
		for _, c := range []struct {
			p    store.ListGapsParams
			want []int64
		}{
			{store.ListGapsParams{After: 2}, []int64{4, 6, 7}},
			{store.ListGapsParams{After: 1}, []int64{2, 4, 6, 7}},
			{store.ListGapsParams{After: 7}, nil},
			{store.ListGapsParams{After: 1 << 40}, nil},
			{store.ListGapsParams{Limit: 1}, []int64{2}},
			{store.ListGapsParams{After: 2, Limit: 2}, []int64{4, 6}},
			{store.ListGapsParams{Limit: store.MaxListLimit}, []int64{2, 4, 6, 7}},
			{store.ListGapsParams{Reason: store.ReasonReleased}, []int64{2, 7}},
			{store.ListGapsParams{Reason: store.ReasonReleased, After: 2}, []int64{7}},
			{store.ListGapsParams{Reason: store.ReasonExpired}, []int64{4}},
			{store.ListGapsParams{Reason: "operator"}, []int64{6}},
			{store.ListGapsParams{Reason: "Operator"}, nil},
			{store.ListGapsParams{Reason: "no such reason"}, nil},
		} {
			got := b.listGaps(f.stream, &c.p)
			require.Equal(t, c.want, nilIfEmpty(numbers(got)), "%+v", c.p)
			for _, e := range got {
				require.Equal(t, f.want[e.Number-1], e, "%+v", c.p)
			}
		}
	})

	t.Run("ListGaps: default limit", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		reqs := make([]store.LeaseRequest, store.DefaultListLimit+1)
		for i := range reqs {
			reqs[i] = store.LeaseRequest{TTL: time.Second}
		}
		for _, e := range b.lease(s, 0, reqs...) {
			require.NoError(t, b.s.ResolveExpired(b.ctx, s, e.Number, &store.ResolveExpiredParams{Now: b.at(time.Second)}))
		}
		require.Equal(t, span(1, store.DefaultListLimit), numbers(b.listGaps(s, nil)))
		require.Len(t, b.listGaps(s, &store.ListGapsParams{Limit: store.DefaultListLimit + 1}), store.DefaultListLimit+1)
		require.Equal(t, int64(store.DefaultListLimit+1), b.countGaps(s))
	})

	t.Run("a stream without gaps lists none and counts zero", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "a"), req(time.Minute, "b"))
		b.commit(es[0], time.Second, nil)
		require.Nil(t, b.listGaps(s, nil))
		require.Nil(t, b.listGaps(s, &store.ListGapsParams{IncludeFilled: true}))
		require.Zero(t, b.countGaps(s))
	})

	t.Run("unknown stream", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease1(s, 0, time.Minute)
		other := s + "-other"
		_, err := b.s.ListGaps(b.ctx, other, nil)
		require.ErrorIs(t, err, store.ErrStreamNotFound, "ListGaps")
		_, err = b.s.ListGaps(b.ctx, other, &store.ListGapsParams{IncludeFilled: true, Reason: "r"})
		require.ErrorIs(t, err, store.ErrStreamNotFound, "ListGaps with filled")
		_, err = b.s.CountGaps(b.ctx, other)
		require.ErrorIs(t, err, store.ErrStreamNotFound, "CountGaps")
		err = b.s.FillGap(b.ctx, other, 1, &store.FillParams{FilledBy: "op", Now: b.at(0)})
		require.ErrorIs(t, err, store.ErrNotFound, "FillGap")
		b.requireNoStream(other)
	})

	t.Run("FillGap commits the gap and records the fill", func(t *testing.T) {
		b := setup(t, newStore)
		f := populateGaps(b)
		stats := b.stats(f.stream)
		b.fill(f.stream, 2, []byte("filler"), "operator alice", time.Hour)
		want := filled(f.want[1], []byte("filler"), b.time(time.Hour), "operator alice")
		require.Equal(t, store.ReasonReleased, want.GapReason, "the reason is kept")
		require.Equal(t, want, normGap(b.entry(f.stream, 2)))
		// An empty payload is no payload.
		b.fill(f.stream, 4, []byte{}, "tool", 2*time.Hour)
		require.Equal(t, filled(f.want[3], nil, b.time(2*time.Hour), "tool"), normGap(b.entry(f.stream, 4)))
		// A gap whose work moved to 8: filling it would make a second copy
		// of that work (I2), so the store refuses, whatever the policy.
		err := b.s.FillGap(b.ctx, f.stream, 6, &store.FillParams{Payload: []byte("copy"), FilledBy: "tool", Now: b.at(2 * time.Hour)})
		require.ErrorIs(t, err, store.ErrNotGap)
		require.Equal(t, stats, b.stats(f.stream), "a fill changes no resolution: the stats stay")
		for _, n := range []int64{1, 3, 5, 6, 7, 8} {
			require.Equal(t, f.want[n-1], normGap(b.entry(f.stream, n)), "entry %d", n)
		}
		require.Equal(t, pick(f.want, 6, 7), b.listGaps(f.stream, nil))
		require.Equal(t, int64(2), b.countGaps(f.stream))
	})

	t.Run("FillGap with nil Now uses the backend clock", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, time.Minute)
		require.NoError(t, b.s.Release(b.ctx, s, 1, e.Token, nil))
		require.NoError(t, b.s.FillGap(b.ctx, s, 1, &store.FillParams{FilledBy: "op"}))
		got := b.entry(s, 1)
		require.Equal(t, store.Committed, got.State)
		require.False(t, got.FilledAt.IsZero())
		require.False(t, got.FilledAt.Before(got.ResolvedAt), "FilledAt %v before ResolvedAt %v", got.FilledAt, got.ResolvedAt)
		require.NoError(t, b.s.Release(b.ctx, s, 1, e.Token, nil), "the holder's repeated release reports its outcome")
		_, err := b.s.Commit(b.ctx, s, 1, e.Token, nil)
		require.ErrorIs(t, err, store.ErrReleased, "a filled gap is not the holder's commit")
	})

	t.Run("ListGaps lists filled gaps only on request", func(t *testing.T) {
		b := setup(t, newStore)
		f := populateGaps(b)
		b.fill(f.stream, 4, []byte("four"), "op", time.Hour)
		want := append([]store.Entry(nil), f.want...)
		want[3] = filled(f.want[3], []byte("four"), b.time(time.Hour), "op")
		require.Equal(t, pick(want, 2, 6, 7), b.listGaps(f.stream, nil))
		require.Equal(t, pick(want, 2, 4, 6, 7), b.listGaps(f.stream, &store.ListGapsParams{IncludeFilled: true}))
		require.Equal(t, pick(want, 4), b.listGaps(f.stream, &store.ListGapsParams{IncludeFilled: true, Reason: store.ReasonExpired}))
		require.Nil(t, b.listGaps(f.stream, &store.ListGapsParams{Reason: store.ReasonExpired}))
		require.Equal(t, pick(want, 4, 6), b.listGaps(f.stream, &store.ListGapsParams{IncludeFilled: true, After: 2, Limit: 2}))
		require.Equal(t, int64(3), b.countGaps(f.stream))
	})

	t.Run("FillGap refusals change nothing", func(t *testing.T) {
		b := setup(t, newStore)
		f := populateGaps(b)
		b.fill(f.stream, 7, []byte("seven"), "first", time.Hour)
		before := b.readAll(f.stream)
		stats := b.stats(f.stream)
		for _, c := range []struct {
			desc   string
			number int64
			want   error
		}{
			{"leased", 3, store.ErrNotGap},
			{"leased, the last", 8, store.ErrNotGap},
			{"committed", 1, store.ErrNotGap},
			{"already filled", 7, store.ErrNotGap},
			{"never handed out", 9, store.ErrNotFound},
			{"far beyond the end", 1 << 40, store.ErrNotFound},
		} {
			err := b.s.FillGap(b.ctx, f.stream, c.number, &store.FillParams{Payload: []byte("x"), FilledBy: "second", Now: b.at(2 * time.Hour)})
			require.ErrorIs(t, err, c.want, c.desc)
			require.False(t, store.IsInvalid(err), c.desc)
		}
		require.Equal(t, before, b.readAll(f.stream))
		require.Equal(t, stats, b.stats(f.stream))
	})

	t.Run("the holder cannot commit a filled gap", func(t *testing.T) {
		// A holder that released, lost the answer and retries a commit must
		// not be told it committed: the entry holds the filler's payload.
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, time.Minute)
		b.release(e, time.Second)
		b.fill(s, 1, []byte("filler"), "op", 2*time.Second)
		want := normGap(b.entry(s, 1))
		_, err := b.s.Commit(b.ctx, s, 1, e.Token, &store.CommitParams{Payload: []byte("late"), Now: b.at(3 * time.Second)})
		require.Error(t, err)
		require.Equal(t, want, normGap(b.entry(s, 1)))
	})

	t.Run("concurrent fills of one gap: exactly one wins", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.release(b.lease1(s, 0, time.Minute), time.Second)
		const fillers = 8
		errs := make([]error, fillers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range fillers {
			wg.Go(func() {
				<-start
				errs[i] = b.s.FillGap(b.ctx, s, 1, &store.FillParams{
					Payload: fmt.Appendf(nil, "payload %d", i), FilledBy: fmt.Sprint("filler ", i), Now: b.at(time.Hour),
				})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "fillers %d and %d both won", winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, store.ErrNotGap, "filler %d", i)
		}
		require.NotEqual(t, -1, winner, "no filler won")
		got := b.entry(s, 1)
		require.Equal(t, fmt.Appendf(nil, "payload %d", winner), got.Payload)
		require.Equal(t, fmt.Sprint("filler ", winner), got.FilledBy)
		require.Zero(t, b.countGaps(s))
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		testGapBadInput(t, newStore)
	})
}

// nilIfEmpty returns nil for an empty slice.
func nilIfEmpty(ns []int64) []int64 {
	if len(ns) == 0 {
		return nil
	}
	return ns
}

// testGapBadInput is the bad-input table of ListGaps, CountGaps, FillGap and
// Trim, run like BadInput: in sequence, on one store and one fixture (1
// committed, 2 released, 3 leased), each case checking that it changed
// nothing.
func testGapBadInput(t *testing.T, newStore func(t *testing.T) Store) {
	b := setup(t, newStore)
	shared := badFixture{stream: b.name(""), now: b.at(time.Minute)}
	es := b.lease(shared.stream, 0, req(time.Hour, "c"), req(time.Hour, "gap"), req(time.Hour, "live"))
	b.commit(es[0], time.Second, []byte("committed"))
	b.release(es[1], time.Second)

	type gapCase struct {
		name string
		want error // the specific sentinel, or context.Canceled
		call func(ctx context.Context, s Store, f *badFixture) error
	}
	var cases []gapCase
	add := func(name string, want error, call func(ctx context.Context, s Store, f *badFixture) error) {
		cases = append(cases, gapCase{name: name, want: want, call: call})
	}
	long := strings.Repeat("x", store.MaxTextLen+1)

	for _, n := range []struct{ desc, name string }{
		{"empty stream name", ""},
		{"stream name of MaxNameLen+1 bytes", strings.Repeat("s", store.MaxNameLen+1)},
		{"stream name of invalid UTF-8", "bad-\xff-name"},
		{"stream name with a control character", "ctl-\n-name"},
	} {
		add("ListGaps: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.ListGaps(ctx, n.name, nil)
			return err
		})
		add("CountGaps: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.CountGaps(ctx, n.name)
			return err
		})
		add("FillGap: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			return s.FillGap(ctx, n.name, 2, &store.FillParams{FilledBy: "op", Now: f.now})
		})
		add("Trim: "+n.desc, store.ErrInvalidStream, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Trim(ctx, n.name, 2)
			return err
		})
	}

	for _, l := range []struct {
		desc string
		want error
		p    store.ListGapsParams
	}{
		{"negative after", store.ErrInvalidNumber, store.ListGapsParams{After: -1}},
		{"negative limit", store.ErrInvalidCount, store.ListGapsParams{Limit: -1}},
		{"limit of MaxListLimit+1", store.ErrInvalidCount, store.ListGapsParams{Limit: store.MaxListLimit + 1}},
		{"reason of MaxTextLen+1 bytes", store.ErrInvalidText, store.ListGapsParams{Reason: long}},
		{"reason of invalid UTF-8", store.ErrInvalidText, store.ListGapsParams{Reason: "\xff"}},
		{"reason with a control character", store.ErrInvalidText, store.ListGapsParams{Reason: "a\x00b"}},
	} {
		add("ListGaps: "+l.desc, l.want, func(ctx context.Context, s Store, f *badFixture) error {
			p := l.p
			_, err := s.ListGaps(ctx, f.stream, &p)
			return err
		})
	}

	for _, c := range []struct {
		desc   string
		want   error
		number int64
		p      *store.FillParams
	}{
		{"number 0", store.ErrInvalidNumber, 0, &store.FillParams{FilledBy: "op"}},
		{"negative number", store.ErrInvalidNumber, -2, &store.FillParams{FilledBy: "op"}},
		{"nil params (no FilledBy)", store.ErrInvalidText, 2, nil},
		{"empty FilledBy", store.ErrInvalidText, 2, &store.FillParams{Payload: []byte("p")}},
		{"FilledBy of MaxTextLen+1 bytes", store.ErrInvalidText, 2, &store.FillParams{FilledBy: long}},
		{"FilledBy of invalid UTF-8", store.ErrInvalidText, 2, &store.FillParams{FilledBy: "op-\xc3"}},
		{"FilledBy with a control character", store.ErrInvalidText, 2, &store.FillParams{FilledBy: "op\n"}},
	} {
		add("FillGap: "+c.desc, c.want, func(ctx context.Context, s Store, f *badFixture) error {
			var p *store.FillParams
			if c.p != nil {
				cp := *c.p
				cp.Now = f.now
				p = &cp
			}
			return s.FillGap(ctx, f.stream, c.number, p)
		})
	}

	for _, below := range []int64{0, -1, -1 << 40} {
		add(fmt.Sprintf("Trim: below %d", below), store.ErrInvalidNumber, func(ctx context.Context, s Store, f *badFixture) error {
			_, err := s.Trim(ctx, f.stream, below)
			return err
		})
	}

	canceled := context.Canceled
	add("ListGaps: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.ListGaps(ctx, f.stream, nil)
		return err
	})
	add("CountGaps: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.CountGaps(ctx, f.stream)
		return err
	})
	add("FillGap: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		return s.FillGap(ctx, f.stream, 2, &store.FillParams{FilledBy: "op", Now: f.now})
	})
	add("Trim: cancelled context", canceled, func(ctx context.Context, s Store, f *badFixture) error {
		_, err := s.Trim(ctx, f.stream, 3)
		return err
	})

	for _, c := range cases {
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

	t.Run("control: the same calls with good arguments succeed", func(t *testing.T) {
		cb := *b
		cb.t, cb.ctx = t, t.Context()
		ctx, s, f := cb.ctx, cb.s, shared
		_, err := s.ListGaps(ctx, f.stream, &store.ListGapsParams{After: 1, Limit: store.MaxListLimit, Reason: store.ReasonReleased})
		require.NoError(t, err, "ListGaps")
		_, err = s.CountGaps(ctx, f.stream)
		require.NoError(t, err, "CountGaps")
		require.NoError(t, s.FillGap(ctx, f.stream, 2, &store.FillParams{FilledBy: "op", Now: f.now}), "FillGap")
		low, err := s.Trim(ctx, f.stream, 3)
		require.NoError(t, err, "Trim")
		require.Equal(t, int64(3), low)
		err = s.FillGap(ctx, f.stream, 2, &store.FillParams{FilledBy: "op", Now: f.now})
		require.True(t, errors.Is(err, store.ErrTrimmed), "FillGap below the low point: %v", err)
	})
}
