package ttl_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/ttl"
)

var (
	_ ttl.FleetStore     = (*memory.Store)(nil)
	_ ttl.FleetStore     = (*postgres.Store)(nil)
	_ ttl.Booster        = (*ttl.Fleet)(nil)
	_ store.SettingsSink = (*ttl.Fleet)(nil)
)

func newFleet(t *testing.T, s ttl.FleetStore, cfg *ttl.FleetConfig) *ttl.Fleet {
	t.Helper()
	f, err := ttl.NewFleet(s, cfg)
	require.NoError(t, err)
	t.Cleanup(f.Stop)
	return f
}

// TestFleetMemory: on one memory Store (the in-process equivalent of a
// fleet on one schema), a raise in one Fleet boosts the other's policy
// until its end, then no more.
func TestFleetMemory(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		a := newFleet(t, s, nil)
		b := newFleet(t, s, &ttl.FleetConfig{Poll: time.Hour})
		require.NoError(t, b.Start(t.Context()))
		p := ttl.Policy{Min: 10 * time.Second, Max: time.Minute, Boost: b}
		require.Equal(t, 10*time.Second, p.TTL(), "no boost yet")

		require.NoError(t, a.Raise(t.Context(), 2, 5*time.Minute))
		require.Equal(t, 2.0, a.Factor(), "the raiser knows at once")
		b.SettingsChanged() // the notice WatchLeases would deliver
		synctest.Wait()
		require.Equal(t, 20*time.Second, p.TTL(), "the other process follows")

		require.NoError(t, a.Raise(t.Context(), 1.5, time.Minute))
		b.SettingsChanged()
		synctest.Wait()
		require.Equal(t, 2.0, b.Factor(), "a smaller, shorter raise does not cut the boost in force")

		time.Sleep(5*time.Minute - time.Nanosecond)
		require.Equal(t, 2.0, b.Factor(), "in force until its end")
		time.Sleep(time.Nanosecond)
		require.Equal(t, 1.0, b.Factor(), "ended on time, with no read")
		require.Equal(t, 10*time.Second, p.TTL(), "back to normal")
	})
}

// TestFleetPollsWithoutNotices: a running Fleet finds a boost, and its
// removal by an operator, by its poll.
func TestFleetPollsWithoutNotices(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(nil)
		b := newFleet(t, s, &ttl.FleetConfig{Poll: time.Second})
		require.NoError(t, b.Start(t.Context()))
		end := time.Now().Add(time.Hour)
		_, err := s.SetSetting(t.Context(), store.SettingTTLBoost, store.FormatTTLBoost(3, end), nil)
		require.NoError(t, err)
		require.Equal(t, 1.0, b.Factor(), "not read yet")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 3.0, b.Factor())
		_, err = s.DeleteSetting(t.Context(), store.SettingTTLBoost)
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 1.0, b.Factor(), "an operator's unset ends it")
	})
}

func TestFleetRefusals(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for _, cfg := range []*ttl.FleetConfig{{Poll: -1}, {Poll: ttl.MaxPoll + 1}, {QueryTimeout: -1}} {
		_, err := ttl.NewFleet(s, cfg)
		require.ErrorIs(t, err, store.ErrInvalidArgument, "%+v", cfg)
	}
	f := newFleet(t, s, nil)
	for _, c := range []struct {
		factor float64
		hold   time.Duration
	}{{0.5, time.Minute}, {store.MaxTTLBoostFactor + 1, time.Minute}, {2, 0}, {2, -time.Second}, {2, store.MaxTTL + 1}} {
		require.ErrorIs(t, f.Raise(t.Context(), c.factor, c.hold), store.ErrInvalidArgument, "%+v", c)
	}
	rows, err := s.ListSettings(t.Context())
	require.NoError(t, err)
	require.Empty(t, rows, "refusals wrote nothing")
}

// TestFleetStartStop: Start and Stop in any order, concurrently, leave no
// goroutine behind (goleak in TestMain).
func TestFleetStartStop(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for range 50 {
		f, err := ttl.NewFleet(s, &ttl.FleetConfig{Poll: time.Millisecond})
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Go(func() { _ = f.Start(context.Background()) })
		wg.Go(f.Stop)
		wg.Go(f.SettingsChanged)
		wg.Wait()
		f.Stop()
		f.Stop()
	}
}

// TestFleetPostgres: two processes on one schema, each with a pool of its
// own: a raise in one boosts the TTL the other's policy hands out, and the
// boost ends by itself at its end, on the database's clock.
func TestFleetPostgres(t *testing.T) {
	t.Parallel()
	schema := pgtest.NewSchema(t, pgtest.Shared(t, false))
	open := func() *postgres.Store {
		pool, err := pgtest.NewPool(t.Context(), &pgtest.Options{MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := postgres.New(pool, &postgres.Config{Schema: schema})
		require.NoError(t, err)
		return s
	}
	a := newFleet(t, open(), nil)
	bs := open()
	b := newFleet(t, bs, &ttl.FleetConfig{Poll: time.Hour})
	require.NoError(t, b.Start(t.Context()))
	p := ttl.Policy{Min: 10 * time.Second, Max: time.Minute, Boost: b}

	// b hears of the change on the schema's channel, as a lease.Manager
	// would forward it.
	ctx, cancel := context.WithCancel(t.Context())
	watched := make(chan error, 1)
	sink := &settingsSink{fleet: b, reset: make(chan struct{}, 1)}
	go func() { watched <- bs.WatchLeases(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		<-watched
	})
	<-sink.reset // listening

	require.NoError(t, a.Raise(t.Context(), 3, 2*time.Second))
	require.Eventually(t, func() bool { return p.TTL() == 30*time.Second }, 10*time.Second, 5*time.Millisecond,
		"the notice brings the boost to the other process")
	require.Eventually(t, func() bool { return p.TTL() == 10*time.Second }, 10*time.Second, 20*time.Millisecond,
		"the boost ends by itself")
	rows, err := bs.ListSettings(t.Context())
	require.NoError(t, err)
	require.Len(t, rows, 1, "the ended boost stays in the table, harmless")
}

// settingsSink forwards WatchLeases's settings notices to a Fleet.
type settingsSink struct {
	fleet *ttl.Fleet
	reset chan struct{}
}

func (s *settingsSink) Freed(string)             {}
func (s *settingsSink) Wanted(store.LeaseWaiter) {}
func (s *settingsSink) SettingsChanged()         { s.fleet.SettingsChanged() }
func (s *settingsSink) Reset() {
	select {
	case s.reset <- struct{}{}:
	default:
	}
}

// heldRead is a memory store whose next ListSettings, once armed, reads
// and then waits to answer until released: a Refresh caught between its
// read and its cache.
type heldRead struct {
	*memory.Store
	mu      sync.Mutex
	armed   bool
	read    chan struct{} // closed once the held read has read
	release chan struct{} // closed to let it answer
}

func (h *heldRead) ListSettings(ctx context.Context) ([]store.Setting, error) {
	rows, err := h.Store.ListSettings(ctx)
	h.mu.Lock()
	armed := h.armed
	h.armed = false
	h.mu.Unlock()
	if armed {
		close(h.read)
		<-h.release
	}
	return rows, err
}

// TestFleetRefreshDoesNotUndoARaise: a Refresh that read the table before
// a Raise and answers after it leaves the raised boost in the cache: the
// older read is dropped, not cached over the newer boost.
func TestFleetRefreshDoesNotUndoARaise(t *testing.T) {
	t.Parallel()
	s := &heldRead{Store: memory.New(nil), armed: true, read: make(chan struct{}), release: make(chan struct{})}
	f := newFleet(t, s, nil)
	refreshed := make(chan error, 1)
	go func() { refreshed <- f.Refresh(t.Context()) }()
	<-s.read // the Refresh read "no boost"
	require.NoError(t, f.Raise(t.Context(), 2, 10*time.Minute))
	require.Equal(t, 2.0, f.Factor())
	close(s.release)
	require.NoError(t, <-refreshed)
	require.Equal(t, 2.0, f.Factor(), "the Refresh begun before the Raise did not undo it")
}
