package lease_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/ttl"
)

// TestAdaptiveTTL: an acquire that names no TTL gets the one AdaptiveTTL
// chooses, which follows the load and the fleet's boost raised by another
// process; the settings table's lease.default_ttl does not override it;
// a TTL named by the call wins.
func TestAdaptiveTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		sa, sb := b.open(t), b.open(t)
		raiser, err := ttl.NewFleet(sa.(ttl.FleetStore), nil)
		require.NoError(t, err)
		fleet, err := ttl.NewFleet(sb.(ttl.FleetStore), nil)
		require.NoError(t, err)
		var load atomic.Int64 // in percent
		p := &ttl.Policy{Min: 10 * time.Second, Max: 50 * time.Second, Boost: fleet,
			Signal: func() float64 { return float64(load.Load()) / 100 }}
		_, err = sb.(store.Settings).SetSetting(ctx, store.SettingLeaseDefaultTTL, "5s", nil)
		require.NoError(t, err)
		m := newManager(t, sb, &lease.Config{AdaptiveTTL: p})
		ttlOf := func(opts *lease.AcquireOpts) time.Duration {
			l, err := m.TryAcquire(ctx, "adaptive", opts)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
			return l.TTL()
		}
		require.Equal(t, 10*time.Second, ttlOf(nil), "idle: Min, not the table's default_ttl")
		load.Store(50)
		require.Equal(t, 30*time.Second, ttlOf(nil), "half loaded")
		load.Store(0)

		require.NoError(t, raiser.Raise(ctx, 2, time.Minute))
		require.NoError(t, fleet.Refresh(ctx))
		require.Equal(t, 20*time.Second, ttlOf(nil), "boosted by the other process")
		require.Equal(t, 3*time.Second, ttlOf(&lease.AcquireOpts{TTL: 3 * time.Second}), "the call's TTL wins")

		_, err = sa.(store.Settings).DeleteSetting(ctx, store.SettingTTLBoost)
		require.NoError(t, err)
		require.NoError(t, fleet.Refresh(ctx))
		require.Equal(t, 10*time.Second, ttlOf(nil), "the boost gone, back to normal")
	})
}

func TestAdaptiveTTLRefusals(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for _, c := range []struct {
		cfg   lease.Config
		field string
	}{
		{lease.Config{AdaptiveTTL: &ttl.Policy{Max: time.Minute}}, "Min"},
		{lease.Config{AdaptiveTTL: &ttl.Policy{Min: time.Minute, Max: time.Second}}, "Max"},
		{lease.Config{MaxTTL: time.Minute, AdaptiveTTL: &ttl.Policy{Min: time.Second, Max: 2 * time.Minute}}, "Max"},
	} {
		_, err := lease.New(s, &c.cfg)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		var fe *ttl.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		require.Equal(t, c.field, fe.Field)
		require.ErrorContains(t, err, "lease: Config.AdaptiveTTL: ttl: Policy."+c.field)
	}
	_, err := lease.New(s, &lease.Config{DefaultTTL: time.Second, AdaptiveTTL: &ttl.Policy{Min: time.Second, Max: time.Minute}})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorContains(t, err, "Config.AdaptiveTTL and Config.DefaultTTL")
}

// TestValidateSettingTTLBoost: the boost, no lease field, is checked by its
// type alone, so seqlease config set can raise it by hand.
func TestValidateSettingTTLBoost(t *testing.T) {
	t.Parallel()
	v, err := lease.ValidateSetting(store.SettingTTLBoost, "3 until 2026-01-02T16:00:00+01:00")
	require.NoError(t, err)
	require.Equal(t, "3 until 2026-01-02T15:00:00Z", v)
	for _, bad := range []string{"3", "0.9 until 2026-01-02T15:00:00Z", "NaN until 2026-01-02T15:00:00Z", "3 until soon\x00"} {
		_, err := lease.ValidateSetting(store.SettingTTLBoost, bad)
		require.ErrorIs(t, err, store.ErrInvalidSetting, "%q", bad)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
	}
}
