package cleanup_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// downTracker is a WorkTracker whose tracker is down for op-1 while down
// is set; it counts the calls for op-1.
type downTracker struct {
	down  atomic.Bool
	calls atomic.Int64
}

func (d *downTracker) tracker() recovery.WorkTrackerFunc {
	return func(ctx context.Context, e store.Entry) ([]byte, bool, error) {
		if e.OperationID == "op-1" {
			d.calls.Add(1)
			if d.down.Load() {
				return nil, false, errors.New("tracker down")
			}
		}
		return partialFor()(ctx, e)
	}
}

// parkingService returns a cleanup Service on s that parks after 3 failed
// attempts.
func parkingService(t *testing.T, s backend, d *downTracker) *cleanup.Service {
	t.Helper()
	sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{
		WorkTracker: d.tracker(), MaxAttempts: 3, OnExhausted: recovery.ExhaustedPark})})
	require.NoError(t, err)
	t.Cleanup(sv.Stop)
	return sv
}

// TestParkAfterMaxAttempts: with OnExhausted park, a tracker that stays
// down parks its entry at the third failure; the stream waits, the loop no
// longer calls the tracker, across a restart too; unparked, it is tried
// again from zero attempts, and once the tracker is back both entries move
// in order.
func TestParkAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := &downTracker{}
			d.down.Store(true)
			sv := parkingService(t, s, d)
			leaseExpired(t, s, "p", 2)
			for i := range 3 {
				res, err := sv.RunOnce(ctx)
				require.ErrorContains(t, err, "tracker down", "attempt %d", i+1)
				require.Equal(t, 1, res.Failed)
				require.Equal(t, i == 2, errors.Is(err, store.ErrParked), "parked at the third attempt: %v", err)
				e := readAll(t, s, "p")[0]
				require.Equal(t, store.Leased, e.State)
				require.Equal(t, i+1, e.RecoveryAttempts)
				require.Contains(t, e.LastRecoveryError, "tracker down")
				require.Equal(t, i == 2, e.Parked())
			}
			require.Equal(t, int64(3), d.calls.Load())

			for _, sv := range []*cleanup.Service{sv, parkingService(t, s, d)} { // and after a restart
				res, err := sv.RunOnce(ctx)
				require.NoError(t, err, "a parked entry is no failure")
				require.Equal(t, 1, res.Parked)
				require.Zero(t, res.Failed)
				require.Empty(t, res.Resolved, "the entry behind it waits")
			}
			require.Equal(t, int64(3), d.calls.Load(), "a parked entry is not tried")
			st, err := s.Stats(ctx, "p")
			require.NoError(t, err)
			require.Zero(t, st.Watermark, "the stream waits")
			parked, err := s.(store.Parker).ListParked(ctx, nil)
			require.NoError(t, err)
			require.Equal(t, []int64{1}, []int64{parked[0].Number})

			require.NoError(t, s.(store.Parker).UnparkEntry(ctx, "p", 1))
			res, err := sv.RunOnce(ctx)
			require.Error(t, err)
			require.False(t, errors.Is(err, store.ErrParked))
			require.Equal(t, 1, res.Failed)
			require.Equal(t, int64(4), d.calls.Load(), "tried again")
			require.Equal(t, 1, readAll(t, s, "p")[0].RecoveryAttempts, "from zero attempts")

			d.down.Store(false)
			res, err = sv.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, map[string]int{"partial-work": 2}, res.Resolved)
			es := readAll(t, s, "p")
			require.Equal(t, []int64{3, 4}, []int64{es[0].RecoveredAs, es[1].RecoveredAs}, "in order")
			require.Zero(t, es[0].RecoveryAttempts, "the resolution ended the record")
		})
	}
}

// TestParkedGivenUp: an operator gives a parked entry up as a gap (the
// store's ResolveExpired): the next cycle recovers the entry behind it and
// the watermark moves.
func TestParkedGivenUp(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := &downTracker{}
			d.down.Store(true)
			sv := parkingService(t, s, d)
			leaseExpired(t, s, "g", 2)
			for range 3 {
				_, _ = sv.RunOnce(ctx)
			}
			require.True(t, readAll(t, s, "g")[0].Parked())
			require.NoError(t, s.ResolveExpired(ctx, "g", 1, &store.ResolveExpiredParams{Reason: "given-up"}))
			res, err := sv.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, map[string]int{"partial-work": 1}, res.Resolved)
			require.Zero(t, res.Parked)
			es := readAll(t, s, "g")
			require.Equal(t, "given-up", es[0].GapReason)
			require.Equal(t, int64(3), es[1].RecoveredAs)
			st, err := s.Stats(ctx, "g")
			require.NoError(t, err)
			require.Equal(t, int64(3), st.Watermark, "the watermark moved past both")
			n, err := s.(store.Parker).CountParked(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
		})
	}
}

// TestAttemptsSurviveRestart: with the default gap at MaxAttempts, the
// attempts are counted on the entry, so a new Service (a restart) goes on
// counting where the last one stopped.
func TestAttemptsSurviveRestart(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := &downTracker{}
			d.down.Store(true)
			newService := func() *cleanup.Service {
				sv, err := cleanup.New(s, &cleanup.Config{Pipeline: newPipeline(t, s, &recovery.Config{WorkTracker: d.tracker(), MaxAttempts: 3})})
				require.NoError(t, err)
				t.Cleanup(sv.Stop)
				return sv
			}
			leaseExpired(t, s, "r", 1)
			sv := newService()
			for range 2 {
				_, err := sv.RunOnce(ctx)
				require.Error(t, err)
			}
			sv.Stop()
			res, err := newService().RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, map[string]int{"gap": 1}, res.Resolved, "the third attempt in all")
			require.Equal(t, recovery.ReasonRecoveryFailed, readAll(t, s, "r")[0].GapReason)
		})
	}
}

// TestParkNeedsAParker: parking on a store that keeps no attempts is
// refused.
func TestParkNeedsAParker(t *testing.T) {
	t.Parallel()
	s := struct{ backend }{memory.New(nil)}
	p := newPipeline(t, s, &recovery.Config{MaxAttempts: 1, OnExhausted: recovery.ExhaustedPark})
	_, err := cleanup.New(s, &cleanup.Config{Pipeline: p})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorIs(t, err, store.ErrUnsupported)
}
