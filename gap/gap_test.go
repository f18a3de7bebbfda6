package gap_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/store/storetest"
)

var (
	_ gap.Store = (*memory.Store)(nil)
	_ gap.Store = (*postgres.Store)(nil)
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// backends runs fn as a parallel subtest on each backend, with a fresh store.
func backends(t *testing.T, fn func(t *testing.T, s storetest.Store)) {
	t.Helper()
	for _, b := range []struct {
		name string
		new  func(t *testing.T) storetest.Store
	}{
		{"memory", func(*testing.T) storetest.Store { return memory.New(nil) }},
		{"postgres", func(t *testing.T) storetest.Store {
			pool := pgtest.Shared(t, false)
			s, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
			require.NoError(t, err)
			return s
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.new(t))
		})
	}
}

// fixture is a stream of six entries on a pinned clock:
//
//	1 committed, 2 released, 3 leased, 4 expired and recovered as 5,
//	5 committed (the recovered work), 6 expired with nothing to recover
type fixture struct {
	ctx    context.Context
	s      storetest.Store
	g      *gap.Gaps
	stream string
	es     []store.Entry
	base   time.Time
}

func setup(t *testing.T, s storetest.Store) *fixture {
	t.Helper()
	ctx := t.Context()
	now, err := s.Now(ctx)
	require.NoError(t, err)
	f := &fixture{ctx: ctx, s: s, stream: "orders", base: store.Micro(now)}
	f.g, err = gap.New(s, nil)
	require.NoError(t, err)
	reqs := make([]store.LeaseRequest, 6)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{OperationID: fmt.Sprintf("op-%d", i+1), Kind: "projection", TTL: time.Minute}
	}
	f.es, err = s.Lease(ctx, f.stream, reqs, &store.LeaseParams{Now: f.at(0)})
	require.NoError(t, err)
	_, err = s.Commit(ctx, f.stream, 1, f.es[0].Token, &store.CommitParams{Payload: []byte("one"), Now: f.at(time.Second)})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, f.stream, 2, f.es[1].Token, &store.ReleaseParams{Now: f.at(2 * time.Second)}))
	require.NoError(t, s.ResolveExpired(ctx, f.stream, 4, &store.ResolveExpiredParams{Reason: "recovered-partial", RecoveredAs: 5, Now: f.at(time.Minute)}))
	_, err = s.Commit(ctx, f.stream, 5, f.es[4].Token, &store.CommitParams{Payload: []byte("four, recovered"), Now: f.at(time.Second)})
	require.NoError(t, err)
	require.NoError(t, s.ResolveExpired(ctx, f.stream, 6, &store.ResolveExpiredParams{Now: f.at(2 * time.Minute)}))
	return f
}

func (f *fixture) at(d time.Duration) *time.Time {
	tm := f.base.Add(d)
	return &tm
}

// requireGap checks that got is the record of f.es[number-1] as a gap.
func (f *fixture) requireGap(t *testing.T, got gap.Gap, number int64, reason string, createdAt time.Duration, recoveredAs int64) {
	t.Helper()
	e := f.es[number-1]
	require.Equal(t, f.stream, got.Stream)
	require.Equal(t, number, got.Number)
	require.Equal(t, e.OperationID, got.OperationID)
	require.Equal(t, "projection", got.Kind)
	require.Equal(t, reason, got.Reason)
	require.True(t, e.ExpiresAt.Equal(got.OriginalExpiry), "OriginalExpiry %v, want %v", got.OriginalExpiry, e.ExpiresAt)
	require.True(t, f.base.Add(createdAt).Equal(got.CreatedAt), "CreatedAt %v, want %v", got.CreatedAt, f.base.Add(createdAt))
	require.Equal(t, recoveredAs, got.RecoveredAs)
}

func TestGetAndIsGap(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s storetest.Store) {
		f := setup(t, s)
		g, err := f.g.Get(f.ctx, f.stream, 2)
		require.NoError(t, err)
		f.requireGap(t, g, 2, store.ReasonReleased, 2*time.Second, 0)
		require.False(t, g.Filled())
		require.Empty(t, g.FilledBy)
		g, err = f.g.Get(f.ctx, f.stream, 4)
		require.NoError(t, err)
		f.requireGap(t, g, 4, "recovered-partial", time.Minute, 5)
		g, err = f.g.Get(f.ctx, f.stream, 6)
		require.NoError(t, err)
		f.requireGap(t, g, 6, store.ReasonExpired, 2*time.Minute, 0)

		for n, want := range map[int64]bool{1: false, 2: true, 3: false, 4: true, 5: false, 6: true} {
			is, err := f.g.IsGap(f.ctx, f.stream, n)
			require.NoError(t, err, "IsGap %d", n)
			require.Equal(t, want, is, "IsGap %d", n)
			if !want {
				_, err = f.g.Get(f.ctx, f.stream, n)
				require.ErrorIs(t, err, gap.ErrNotGap, "Get %d", n)
				require.ErrorIs(t, err, store.ErrNotGap, "Get %d", n)
			}
		}
		for _, n := range []int64{7, 1 << 40} {
			_, err = f.g.Get(f.ctx, f.stream, n)
			require.ErrorIs(t, err, store.ErrNotFound, "Get %d", n)
			_, err = f.g.IsGap(f.ctx, f.stream, n)
			require.ErrorIs(t, err, store.ErrNotFound, "IsGap %d", n)
		}
		for _, n := range []int64{0, -1} {
			_, err = f.g.Get(f.ctx, f.stream, n)
			require.ErrorIs(t, err, store.ErrInvalidNumber, "Get %d", n)
			_, err = f.g.IsGap(f.ctx, f.stream, n)
			require.ErrorIs(t, err, store.ErrInvalidNumber, "IsGap %d", n)
		}
		_, err = f.g.Get(f.ctx, "no-such-stream", 1)
		require.ErrorIs(t, err, store.ErrStreamNotFound)
		_, err = f.g.Get(f.ctx, "", 1)
		require.ErrorIs(t, err, store.ErrInvalidStream)
	})
}

func TestListAndCount(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s storetest.Store) {
		f := setup(t, s)
		numbers := func(opts *gap.ListOpts) []int64 {
			t.Helper()
			gs, err := f.g.List(f.ctx, f.stream, opts)
			require.NoError(t, err, "%+v", opts)
			var out []int64
			for _, g := range gs {
				out = append(out, g.Number)
			}
			return out
		}
		require.Equal(t, []int64{2, 4, 6}, numbers(nil))
		require.Equal(t, []int64{4, 6}, numbers(&gap.ListOpts{After: 2}))
		require.Equal(t, []int64{2}, numbers(&gap.ListOpts{Limit: 1}))
		require.Equal(t, []int64{6}, numbers(&gap.ListOpts{Reason: store.ReasonExpired}))
		require.Nil(t, numbers(&gap.ListOpts{After: 6}))
		gs, err := f.g.List(f.ctx, f.stream, &gap.ListOpts{Reason: "recovered-partial"})
		require.NoError(t, err)
		require.Len(t, gs, 1)
		f.requireGap(t, gs[0], 4, "recovered-partial", time.Minute, 5)

		n, err := f.g.Count(f.ctx, f.stream)
		require.NoError(t, err)
		require.Equal(t, int64(3), n)

		_, err = f.g.List(f.ctx, f.stream, &gap.ListOpts{Limit: -1})
		require.ErrorIs(t, err, store.ErrInvalidCount)
		_, err = f.g.List(f.ctx, "no-such-stream", nil)
		require.ErrorIs(t, err, store.ErrStreamNotFound)
		_, err = f.g.Count(f.ctx, "no-such-stream")
		require.ErrorIs(t, err, store.ErrStreamNotFound)
	})
}

// countingPolicy is a FillPolicy that records its calls.
type countingPolicy struct {
	calls  atomic.Int64
	answer bool
	err    error
	seen   gap.Gap
}

func (p *countingPolicy) CanBeFilled(_ context.Context, g gap.Gap) (bool, error) {
	p.calls.Add(1)
	p.seen = g
	return p.answer, p.err
}

func TestFill(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s storetest.Store) {
		f := setup(t, s)
		before, err := s.Read(f.ctx, f.stream, 0, 0)
		require.NoError(t, err)
		yes := &countingPolicy{answer: true}
		fill := func(number int64, payload []byte, opts *gap.FillOpts) error {
			return f.g.Fill(f.ctx, f.stream, number, payload, opts)
		}

		// Refusals, each changing nothing.
		require.ErrorIs(t, fill(2, []byte("x"), nil), gap.ErrNoPolicy)
		require.ErrorIs(t, fill(2, []byte("x"), &gap.FillOpts{FilledBy: "op"}), gap.ErrNoPolicy)
		require.ErrorIs(t, fill(2, []byte("x"), &gap.FillOpts{FilledBy: "op", Policy: gap.NeverFill}), gap.ErrFillRefused)
		require.ErrorIs(t, fill(2, []byte("x"), &gap.FillOpts{FilledBy: "op", Policy: gap.FillReasons(store.ReasonExpired)}), gap.ErrFillRefused)
		require.ErrorIs(t, fill(2, []byte("x"), &gap.FillOpts{FilledBy: "op", Policy: gap.FillReasons()}), gap.ErrFillRefused)
		boom := errors.New("approval service down")
		err = fill(2, []byte("x"), &gap.FillOpts{FilledBy: "op", Policy: &countingPolicy{answer: true, err: boom}})
		require.ErrorIs(t, err, boom)
		require.NotErrorIs(t, err, gap.ErrFillRefused)
		for _, c := range []struct {
			desc   string
			number int64
			opts   *gap.FillOpts
			want   error
		}{
			{"recovered gap, policy says yes", 4, &gap.FillOpts{FilledBy: "op", Policy: yes}, gap.ErrRecovered},
			{"recovered gap, FillReasons names its reason", 4, &gap.FillOpts{FilledBy: "op", Policy: gap.FillReasons("recovered-partial")}, gap.ErrRecovered},
			{"committed", 1, &gap.FillOpts{FilledBy: "op", Policy: yes}, gap.ErrNotGap},
			{"leased", 3, &gap.FillOpts{FilledBy: "op", Policy: yes}, gap.ErrNotGap},
			{"never handed out", 7, &gap.FillOpts{FilledBy: "op", Policy: yes}, store.ErrNotFound},
			{"no FilledBy", 2, &gap.FillOpts{Policy: yes}, store.ErrInvalidText},
			{"FilledBy with a control character", 2, &gap.FillOpts{FilledBy: "op\n", Policy: yes}, store.ErrInvalidText},
			{"number 0", 0, &gap.FillOpts{FilledBy: "op", Policy: yes}, store.ErrInvalidNumber},
		} {
			require.ErrorIs(t, fill(c.number, []byte("x"), c.opts), c.want, c.desc)
		}
		require.ErrorIs(t, gap.ErrRecovered, gap.ErrFillRefused, "a recovered gap is a refusal too")
		require.Zero(t, yes.calls.Load(), "the policy is not consulted when Fill refuses on its own")
		small, err := gap.New(s, &gap.Config{MaxPayload: 4})
		require.NoError(t, err)
		err = small.Fill(f.ctx, f.stream, 2, []byte("12345"), &gap.FillOpts{FilledBy: "op", Policy: yes})
		require.ErrorIs(t, err, store.ErrPayloadTooLarge)
		after, err := s.Read(f.ctx, f.stream, 0, 0)
		require.NoError(t, err)
		require.Equal(t, before, after, "refused fills changed something")

		// The fill, with the policy seeing the gap as Get shows it.
		want, err := f.g.Get(f.ctx, f.stream, 6)
		require.NoError(t, err)
		require.NoError(t, fill(6, []byte("replacement"), &gap.FillOpts{FilledBy: "operator bob", Policy: yes}))
		require.Equal(t, int64(1), yes.calls.Load())
		require.Equal(t, want, yes.seen)
		g, err := f.g.Get(f.ctx, f.stream, 6)
		require.NoError(t, err)
		require.True(t, g.Filled())
		require.Equal(t, "operator bob", g.FilledBy)
		require.False(t, g.FilledAt.IsZero())
		g.FilledAt, g.FilledBy = time.Time{}, ""
		require.Equal(t, want, g, "the rest of the record is kept")
		is, err := f.g.IsGap(f.ctx, f.stream, 6)
		require.NoError(t, err)
		require.False(t, is, "a filled gap is no longer an open gap")
		es, err := s.Read(f.ctx, f.stream, 5, 1)
		require.NoError(t, err)
		require.Equal(t, store.Committed, es[0].State)
		require.Equal(t, []byte("replacement"), es[0].Payload)

		n, err := f.g.Count(f.ctx, f.stream)
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		all, err := f.g.List(f.ctx, f.stream, &gap.ListOpts{IncludeFilled: true})
		require.NoError(t, err)
		require.Len(t, all, 3)
		require.True(t, all[2].Filled())

		err = fill(6, []byte("again"), &gap.FillOpts{FilledBy: "op", Policy: yes})
		require.ErrorIs(t, err, gap.ErrNotGap)
		require.ErrorContains(t, err, "operator bob")
		require.Equal(t, int64(1), yes.calls.Load(), "an already filled gap does not reach the policy")

		// Below the low point the gap is gone.
		low, err := s.Trim(f.ctx, f.stream, 3)
		require.NoError(t, err)
		require.Equal(t, int64(3), low)
		require.ErrorIs(t, fill(2, nil, &gap.FillOpts{FilledBy: "op", Policy: yes}), store.ErrTrimmed)
		_, err = f.g.Get(f.ctx, f.stream, 2)
		require.ErrorIs(t, err, store.ErrTrimmed)
	})
}

func TestConcurrentFillsOneWins(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s storetest.Store) {
		f := setup(t, s)
		const fillers = 8
		errs := make([]error, fillers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range fillers {
			wg.Go(func() {
				<-start
				errs[i] = f.g.Fill(f.ctx, f.stream, 2, fmt.Appendf(nil, "payload %d", i),
					&gap.FillOpts{FilledBy: fmt.Sprint("filler ", i), Policy: gap.FillReasons(store.ReasonReleased)})
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
			require.ErrorIs(t, err, gap.ErrNotGap, "filler %d", i)
		}
		require.NotEqual(t, -1, winner)
		g, err := f.g.Get(f.ctx, f.stream, 2)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint("filler ", winner), g.FilledBy)
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := gap.New(nil, nil)
	require.Error(t, err)
	_, err = gap.New(memory.New(nil), &gap.Config{MaxPayload: -1})
	require.ErrorContains(t, err, "Config.MaxPayload")
	g, err := gap.New(memory.New(nil), &gap.Config{})
	require.NoError(t, err)
	require.NotNil(t, g)
}

func TestFromEntry(t *testing.T) {
	t.Parallel()
	for _, e := range []store.Entry{
		{State: store.Leased},
		{State: store.Committed},
	} {
		_, err := gap.FromEntry(e)
		require.ErrorIs(t, err, gap.ErrNotGap, "%s", e.State)
	}
	at := time.Unix(1, 0)
	g, err := gap.FromEntry(store.Entry{Stream: "s", Number: 3, State: store.Committed, GapReason: "released", FilledAt: at, FilledBy: "op"})
	require.NoError(t, err)
	require.True(t, g.Filled())
	require.Equal(t, "released", g.Reason)
}

// TestReaderSeesAFilledGapAsCommitted: the ordered reader (barrier.Entries)
// yields a gap as a gap until it is filled, and from then on as a committed
// entry with the filler's payload, FilledAt and FilledBy, and its gap reason
// kept; without IncludeGaps it now yields it among the committed entries.
func TestReaderSeesAFilledGapAsCommitted(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s storetest.Store) {
		f := setup(t, s)
		b, err := barrier.New(s, nil)
		require.NoError(t, err)
		require.NoError(t, b.Start(f.ctx))
		t.Cleanup(b.Stop)
		_, err = s.Commit(f.ctx, f.stream, 3, f.es[2].Token, &store.CommitParams{Payload: []byte("three"), Now: f.at(time.Second)})
		require.NoError(t, err)
		read := func(opts *barrier.ReadOpts) []store.Entry {
			t.Helper()
			var out []store.Entry
			for e, err := range b.Entries(f.ctx, f.stream, opts) {
				require.NoError(t, err)
				out = append(out, e)
			}
			return out
		}
		before := read(&barrier.ReadOpts{IncludeGaps: true})
		require.Len(t, before, 6)
		require.Equal(t, store.Gap, before[5].State)
		require.Zero(t, before[5].FilledAt)

		require.NoError(t, f.g.Fill(f.ctx, f.stream, 6, []byte("replacement"),
			&gap.FillOpts{FilledBy: "operator bob", Policy: gap.FillReasons(store.ReasonExpired)}))
		after := read(&barrier.ReadOpts{IncludeGaps: true})
		require.Len(t, after, 6)
		filled := after[5]
		require.Equal(t, int64(6), filled.Number)
		require.Equal(t, store.Committed, filled.State)
		require.Equal(t, []byte("replacement"), filled.Payload)
		require.Equal(t, "operator bob", filled.FilledBy)
		require.False(t, filled.FilledAt.IsZero())
		require.Equal(t, store.ReasonExpired, filled.GapReason, "the gap reason is kept")
		require.Equal(t, before[:5], after[:5], "the fill changed other entries")

		var committed []int64
		for _, e := range read(nil) {
			committed = append(committed, e.Number)
			if e.Number == 6 {
				require.Equal(t, filled, e)
			}
		}
		require.Equal(t, []int64{1, 3, 5, 6}, committed)
	})
}

// TestFillPolicySeesOperation: a RequestPolicy sees the operation that
// wants to fill the gap, its FilledBy and payload, and decides on them; a
// bad Operation is refused before the policy is asked, changing nothing.
func TestFillPolicySeesOperation(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s storetest.Store) {
		f := setup(t, s)
		var asked []gap.FillRequest
		policy := gap.RequestPolicyFunc(func(_ context.Context, r gap.FillRequest) (bool, error) {
			asked = append(asked, r)
			return r.Operation.Kind == r.Gap.Kind && r.Gap.Reason == store.ReasonReleased, nil
		})
		fill := func(op gap.Operation) error {
			return f.g.Fill(f.ctx, f.stream, 2, []byte("redo"), &gap.FillOpts{FilledBy: "replayer", Policy: policy, Operation: op})
		}
		for desc, op := range map[string]gap.Operation{
			"id with a control character":   {ID: "re\x00do", Kind: "projection"},
			"kind with a control character": {ID: "redo-2", Kind: "pro\njection"},
			"id too long":                   {ID: strings.Repeat("i", store.MaxTextLen+1)},
		} {
			require.ErrorIs(t, fill(op), store.ErrInvalidArgument, desc)
		}
		require.Empty(t, asked, "bad input is refused before the policy")

		require.ErrorIs(t, fill(gap.Operation{ID: "redo-2", Kind: "billing"}), gap.ErrFillRefused, "another kind of work")
		require.Len(t, asked, 1)
		require.Equal(t, gap.Operation{ID: "redo-2", Kind: "billing"}, asked[0].Operation)
		require.Equal(t, "replayer", asked[0].FilledBy)
		require.Equal(t, []byte("redo"), asked[0].Payload)
		f.requireGap(t, asked[0].Gap, 2, store.ReasonReleased, 2*time.Second, 0)
		open, err := f.g.IsGap(f.ctx, f.stream, 2)
		require.NoError(t, err)
		require.True(t, open, "refused: still open")

		require.NoError(t, fill(gap.Operation{ID: "redo-2", Kind: "projection"}))
		g, err := f.g.Get(f.ctx, f.stream, 2)
		require.NoError(t, err)
		require.Equal(t, "replayer", g.FilledBy)

		// A plain FillPolicy is still asked with the gap alone.
		old := &countingPolicy{answer: true}
		require.NoError(t, f.g.Fill(f.ctx, f.stream, 6, []byte("six"), &gap.FillOpts{FilledBy: "op", Policy: old, Operation: gap.Operation{ID: "x"}}))
		require.Equal(t, int64(1), old.calls.Load())
	})
}
