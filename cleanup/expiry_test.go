package cleanup_test

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// expiryRecorder is a recorder that is also told the expiry watch's
// windows.
type expiryRecorder struct {
	recorder
	shareMu sync.Mutex
	shares  []cleanup.ExpiryShare
}

func (r *expiryRecorder) ExpiryShare(s cleanup.ExpiryShare) {
	r.shareMu.Lock()
	defer r.shareMu.Unlock()
	r.shares = append(r.shares, s)
}

func (r *expiryRecorder) last() cleanup.ExpiryShare {
	r.shareMu.Lock()
	defer r.shareMu.Unlock()
	return r.shares[len(r.shares)-1]
}

// TestExpiryWarning: when half the numbers handed out on a stream expire,
// the Service warns once, at the end of the window (the first cycle that
// resolves expired leases of a stream only starts its count), says so to
// an ExpiryObserver every window, and warns again only 10 minutes later.
// Below the threshold it does not warn.
func TestExpiryWarning(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New(nil)
		log := &warnLog{}
		rec := &expiryRecorder{}
		sv, err := cleanup.New(s, &cleanup.Config{Elector: cleanup.NewLocalElector(), Logger: slog.New(log), Observer: rec})
		require.NoError(t, err)
		// round leases 20 numbers of stream with a TTL of a second, commits
		// done of them, lets the others expire and runs a cycle of sv.
		round := func(sv *cleanup.Service, stream string, done int) {
			reqs := make([]store.LeaseRequest, 20)
			for i := range reqs {
				reqs[i] = store.LeaseRequest{TTL: time.Second}
			}
			es, err := s.Lease(ctx, stream, reqs, nil)
			require.NoError(t, err)
			for _, e := range es[:done] {
				_, err := s.Commit(ctx, stream, e.Number, e.Token, nil)
				require.NoError(t, err)
			}
			time.Sleep(2 * time.Second)
			_, err = sv.RunOnce(ctx)
			require.NoError(t, err)
		}
		warnings := func(l *warnLog) int {
			n := 0
			for _, m := range l.messages() {
				if strings.Contains(m, "many leases expire") {
					n++
				}
			}
			return n
		}

		round(sv, "slow", 10) // starts the count of the stream
		round(sv, "slow", 10)
		require.Zero(t, warnings(log), "not before the window ends")
		time.Sleep(cleanup.ExpiryWindow)
		round(sv, "slow", 20)
		require.Equal(t, 1, warnings(log))
		got := rec.last()
		require.Equal(t, int64(10), got.Expired)
		require.Equal(t, int64(20), got.HandedOut)
		require.Equal(t, 0.5, got.Share())
		require.Equal(t, time.Second, got.TTL)
		require.GreaterOrEqual(t, got.Window, cleanup.ExpiryWindow)

		round(sv, "slow", 10) // 10 expired of the 40 handed out since
		time.Sleep(cleanup.ExpiryWindow)
		round(sv, "slow", 20)
		require.Equal(t, 0.25, rec.last().Share())
		require.Equal(t, 1, warnings(log), "at most one warning in 10 minutes")

		time.Sleep(10 * time.Minute)
		round(sv, "slow", 10)
		time.Sleep(cleanup.ExpiryWindow)
		round(sv, "slow", 20)
		require.Equal(t, 2, warnings(log))

		qlog := &warnLog{}
		quiet, err := cleanup.New(s, &cleanup.Config{Elector: cleanup.NewLocalElector(), Logger: slog.New(qlog), ExpiryWarnShare: 0.6})
		require.NoError(t, err)
		round(quiet, "other", 10)
		round(quiet, "other", 10)
		time.Sleep(cleanup.ExpiryWindow)
		round(quiet, "other", 20)
		require.Zero(t, warnings(qlog), "50% is below its threshold of 60%")
	})
}

// TestExpiryWarnShareRefusals: a share above 1, or NaN, is refused,
// naming the field.
func TestExpiryWarnShareRefusals(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{1.5, math.NaN(), math.Inf(1)} {
		_, err := cleanup.New(memory.New(nil), &cleanup.Config{ExpiryWarnShare: share})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		require.ErrorContains(t, err, "Config.ExpiryWarnShare")
	}
	for _, share := range []float64{1, -1, 0.2} {
		_, err := cleanup.New(memory.New(nil), &cleanup.Config{ExpiryWarnShare: share})
		require.NoError(t, err)
	}
}
