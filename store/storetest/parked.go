package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// parker returns b's store as a store.Parker.
func (b *bundle) parker() store.Parker { return b.s.(store.Parker) }

// fail records a failed recovery of stream/number at base+at, parking after
// parkAfter attempts, and checks that it was counted.
func (b *bundle) fail(stream string, number int64, at time.Duration, msg string, parkAfter int) store.Entry {
	b.t.Helper()
	e, err := b.parker().RecordRecoveryFailure(b.ctx, stream, number,
		&store.RecoveryFailureParams{Error: msg, ParkAfter: parkAfter, Now: b.at(at)})
	require.NoError(b.t, err, "RecordRecoveryFailure %s/%d", stream, number)
	return norm(e)
}

// parked lists the parked entries p selects.
func (b *bundle) parked(p *store.ListParkedParams) []store.Entry {
	b.t.Helper()
	es, err := b.parker().ListParked(b.ctx, p)
	require.NoError(b.t, err, "ListParked")
	return normAll(es)
}

// countParked counts the parked entries.
func (b *bundle) countParked() int64 {
	b.t.Helper()
	n, err := b.parker().CountParked(b.ctx)
	require.NoError(b.t, err, "CountParked")
	return n
}

func testParked(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("failures are counted on the entry and park it at ParkAfter", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "a"), req(time.Second, "b"))
		got := b.fail(s, 1, 2*time.Second, "tracker down", 3)
		want := norm(es[0])
		want.RecoveryAttempts, want.LastRecoveryError = 1, "tracker down"
		require.Equal(t, want, got)
		require.Equal(t, want, b.entry(s, 1), "Read shows the record")
		require.False(t, got.Parked())

		b.fail(s, 1, 3*time.Second, "still down", 3)
		got = b.fail(s, 1, 4*time.Second, "down again", 3)
		want.RecoveryAttempts, want.LastRecoveryError, want.ParkedAt = 3, "down again", b.time(4*time.Second)
		require.Equal(t, want, got, "parked at the third attempt, at the backend's now")
		require.True(t, got.Parked())
		require.Equal(t, want, b.entry(s, 1))
		require.Equal(t, []store.Entry{want}, b.parked(nil))
		require.Equal(t, int64(1), b.countParked())

		expired, err := b.s.ListExpired(b.ctx, &store.ListExpiredParams{Stream: s, Now: b.at(5 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, []store.Entry{want, norm(es[1])}, normAll(expired), "a parked entry is still expired and listed")
		st := b.stats(s)
		require.Equal(t, int64(0), st.Watermark, "the stream still waits behind it")

		_, err = b.parker().RecordRecoveryFailure(b.ctx, s, 1, &store.RecoveryFailureParams{Error: "x", Now: b.at(6 * time.Second)})
		require.ErrorIs(t, err, store.ErrParked)
		require.Equal(t, want, b.entry(s, 1), "refused: nothing counted")
	})

	t.Run("ParkAfter 0 counts without parking; the error is cut and cleaned", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		b.lease1(s, 0, time.Second)
		long := strings.Repeat("é", store.MaxRecoveryError) // 2 bytes each
		for i := range 5 {
			b.fail(s, 1, time.Duration(i+1)*time.Second, "x", 0)
		}
		got := b.fail(s, 1, 10*time.Second, "bad\x00\xff"+long, 0)
		require.Equal(t, 6, got.RecoveryAttempts)
		require.True(t, got.ParkedAt.IsZero())
		require.LessOrEqual(t, len(got.LastRecoveryError), store.MaxRecoveryError)
		require.True(t, strings.HasPrefix(got.LastRecoveryError, "bad\uFFFDé"), "NUL dropped, invalid UTF-8 replaced: %q", got.LastRecoveryError[:8])
		require.Equal(t, store.CutRecoveryError("bad\x00\xff"+long), got.LastRecoveryError)
		require.Empty(t, b.parked(nil))
		require.Zero(t, b.countParked())
	})

	t.Run("refused for live, resolved and unknown entries, changing nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Minute, "live"), req(time.Second, "c"), req(time.Second, "g"))
		b.commit(es[1], 0, []byte("p"))
		b.expire(es[2], 2*time.Second, nil)
		p := func() *store.RecoveryFailureParams {
			return &store.RecoveryFailureParams{Error: "e", ParkAfter: 1, Now: b.at(3 * time.Second)}
		}
		_, err := b.parker().RecordRecoveryFailure(b.ctx, s, 1, p())
		require.ErrorIs(t, err, store.ErrNotExpired)
		_, err = b.parker().RecordRecoveryFailure(b.ctx, s, 2, p())
		require.ErrorIs(t, err, store.ErrCommitted)
		_, err = b.parker().RecordRecoveryFailure(b.ctx, s, 3, p())
		require.ErrorIs(t, err, store.ErrExpired)
		_, err = b.parker().RecordRecoveryFailure(b.ctx, s, 4, p())
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.parker().RecordRecoveryFailure(b.ctx, b.name("none"), 1, p())
		require.ErrorIs(t, err, store.ErrNotFound)
		b.requireUnchanged(es[0])
		require.Empty(t, b.parked(nil))
	})

	t.Run("unpark: tried again from zero attempts, the last error kept", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "a"), req(time.Second, "b"))
		b.fail(s, 1, 2*time.Second, "e1", 2)
		b.fail(s, 1, 3*time.Second, "e2", 2)
		require.ErrorIs(t, b.parker().UnparkEntry(b.ctx, s, 2), store.ErrNotParked, "leased, not parked")
		require.NoError(t, b.parker().UnparkEntry(b.ctx, s, 1))
		want := norm(es[0])
		want.LastRecoveryError = "e2"
		require.Equal(t, want, b.entry(s, 1))
		require.Empty(t, b.parked(nil))
		require.ErrorIs(t, b.parker().UnparkEntry(b.ctx, s, 1), store.ErrNotParked, "twice")

		got := b.fail(s, 1, 4*time.Second, "e3", 2)
		require.Equal(t, 1, got.RecoveryAttempts, "counted from zero again")
		require.False(t, got.Parked())
	})

	t.Run("give up: ResolveExpired resolves a parked entry and ends its record", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		es := b.lease(s, 0, req(time.Second, "a"), req(time.Second, "b"))
		b.fail(s, 1, 2*time.Second, "e", 1)
		b.fail(s, 2, 2*time.Second, "e", 1)
		b.expire(es[0], 3*time.Second, &store.ResolveExpiredParams{Reason: "given-up"})
		require.Equal(t, resolved(es[0], store.Gap, b.time(3*time.Second), nil, "given-up", 0), b.entry(s, 1),
			"no record on the resolved entry")
		require.Equal(t, int64(1), b.stats(s).Watermark, "the watermark moves")
		require.Equal(t, []int64{2}, numbers(b.parked(nil)))
		require.ErrorIs(t, b.parker().UnparkEntry(b.ctx, s, 1), store.ErrGap, "a gap refuses")

		moved, err := b.s.RecoverExpired(b.ctx, s, 2, &store.RecoverParams{Payload: []byte("w"), RecoveryType: "operator", Now: b.at(4 * time.Second)})
		require.NoError(t, err, "fill: the operator's work moves to a new number")
		require.Equal(t, int64(3), moved)
		require.Empty(t, b.parked(nil))
		require.Zero(t, b.countParked())
		require.Zero(t, b.entry(s, 2).RecoveryAttempts)
		require.ErrorIs(t, b.parker().UnparkEntry(b.ctx, s, 2), store.ErrGap)
	})

	t.Run("ListParked pages in (stream, number) order, per stream or all", func(t *testing.T) {
		b := setup(t, newStore)
		s1, s2 := b.name("a"), b.name("b")
		for _, s := range []string{s1, s2} {
			b.lease(s, 0, req(time.Second, "1"), req(time.Second, "2"), req(time.Second, "3"))
			b.fail(s, 1, 2*time.Second, "e", 1)
			b.fail(s, 3, 2*time.Second, "e", 1)
			b.fail(s, 2, 2*time.Second, "e", 5) // counted, not parked
		}
		ref := func(es []store.Entry) []string {
			var out []string
			for _, e := range es {
				out = append(out, e.Stream+"/"+string(rune('0'+e.Number)))
			}
			return out
		}
		require.Equal(t, []string{s1 + "/1", s1 + "/3", s2 + "/1", s2 + "/3"}, ref(b.parked(nil)))
		require.Equal(t, []string{s1 + "/1", s1 + "/3"}, ref(b.parked(&store.ListParkedParams{Limit: 2})))
		require.Equal(t, []string{s1 + "/3", s2 + "/1"}, ref(b.parked(&store.ListParkedParams{AfterStream: s1, AfterNumber: 1, Limit: 2})))
		require.Equal(t, []string{s2 + "/1", s2 + "/3"}, ref(b.parked(&store.ListParkedParams{Stream: s2})))
		require.Equal(t, []string{s2 + "/3"}, ref(b.parked(&store.ListParkedParams{Stream: s2, AfterStream: s2, AfterNumber: 1})))
		require.Empty(t, b.parked(&store.ListParkedParams{Stream: s1, AfterStream: s2}))
		require.Empty(t, b.parked(&store.ListParkedParams{Stream: b.name("none")}))
		require.Equal(t, int64(4), b.countParked())
	})

	t.Run("bad input is refused with ErrInvalidArgument, changing nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		e := b.lease1(s, 0, time.Second)
		at := b.at(2 * time.Second)
		for _, c := range []struct {
			stream string
			number int64
			p      *store.RecoveryFailureParams
		}{
			{"", 1, nil},
			{s, 0, nil},
			{s, -1, nil},
			{"bad\x00name", 1, nil},
			{s, 1, &store.RecoveryFailureParams{ParkAfter: -1, Now: at}},
		} {
			_, err := b.parker().RecordRecoveryFailure(b.ctx, c.stream, c.number, c.p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%q %d %+v", c.stream, c.number, c.p)
		}
		for _, p := range []*store.ListParkedParams{
			{Limit: -1}, {Limit: store.MaxListLimit + 1}, {AfterNumber: -1}, {Stream: "bad\x00"}, {AfterStream: "bad\x00"},
		} {
			_, err := b.parker().ListParked(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", p)
		}
		require.ErrorIs(t, b.parker().UnparkEntry(b.ctx, "", 1), store.ErrInvalidArgument)
		require.ErrorIs(t, b.parker().UnparkEntry(b.ctx, s, 0), store.ErrInvalidArgument)
		b.requireUnchanged(e)
	})
}
