package lease_test

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
)

// settingsManager returns a started Manager on s that signals on the
// returned channel each time it re-read the settings table.
func settingsManager(t *testing.T, s lease.Store, cfg *lease.Config) (*lease.Manager, <-chan struct{}) {
	t.Helper()
	m, err := lease.New(s, cfg)
	require.NoError(t, err)
	reread := make(chan struct{}, 1)
	lease.OnSettings(m, func() {
		select {
		case reread <- struct{}{}:
		default:
		}
	})
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(m.Stop)
	return m, reread
}

// awaitInForce waits, re-read by re-read, until ok holds of what m applies,
// failing t after 10 s.
func awaitInForce(t *testing.T, m *lease.Manager, reread <-chan struct{}, what string, ok func(c lease.Config, expiry bool) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		if ok(lease.InForce(m)) {
			return
		}
		select {
		case <-reread:
		case <-timeout:
			c, expiry := lease.InForce(m)
			t.Fatalf("%s: in force after 10 s: %+v, auto expiry %v", what, c, expiry)
		}
	}
}

func TestSettingsAFleetAgreesAndAnExplicitConfigWins(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s1, s2 := b.open(t), b.open(t)
		a, ra := settingsManager(t, s1, &lease.Config{Owner: "a"})
		bm, rb := settingsManager(t, s2, &lease.Config{Owner: "b", DefaultTTL: 5 * time.Second})
		cfgA, expiry := lease.InForce(a)
		require.Equal(t, lease.DefaultTTL, cfgA.DefaultTTL, "an empty table changes nothing")
		require.True(t, expiry)

		tbl := s1.(store.Settings)
		for k, v := range map[string]string{
			store.SettingLeaseDefaultTTL: "90s", store.SettingLeaseRenewShare: "0.5",
			store.SettingLeaseAutoExpiry: "false", store.SettingLeaseHistory: "false",
		} {
			_, err := lease.SetSetting(t.Context(), tbl, k, v, "operator")
			require.NoError(t, err)
		}
		applied := func(ttl time.Duration) func(lease.Config, bool) bool {
			return func(c lease.Config, expiry bool) bool {
				return c.DefaultTTL == ttl && c.RenewShare == 0.5 && c.DisableHistory && !expiry
			}
		}
		awaitInForce(t, a, ra, "a follows the table", applied(90*time.Second))
		awaitInForce(t, bm, rb, "b follows the table but for its explicit DefaultTTL", applied(5*time.Second))

		la, err := a.TryAcquire(t.Context(), "settings-a", nil)
		require.NoError(t, err)
		require.Equal(t, 90*time.Second, la.TTL(), "an acquire without a TTL takes the table's default")
		lb, err := bm.TryAcquire(t.Context(), "settings-b", nil)
		require.NoError(t, err)
		require.Equal(t, 5*time.Second, lb.TTL(), "the explicit Go Config wins")

		ok, err := tbl.DeleteSetting(t.Context(), store.SettingLeaseDefaultTTL)
		require.NoError(t, err)
		require.True(t, ok)
		awaitInForce(t, a, ra, "a deleted setting restores the default", applied(lease.DefaultTTL))
	})
}

func TestSettingsBadInputChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		tbl := b.open(t).(store.Settings)
		_, err := lease.SetSetting(t.Context(), tbl, store.SettingLeaseMaxRenewals, "7", "")
		require.NoError(t, err)
		before, err := tbl.ListSettings(t.Context())
		require.NoError(t, err)

		_, goErr := lease.New(b.open(t), &lease.Config{RenewShare: 1.5})
		require.Error(t, goErr)
		for _, c := range []struct {
			key, value string
			want       error
			text       string // the error's text holds it
		}{
			{store.SettingLeaseRenewShare, "1.5", store.ErrInvalidArgument, goErr.Error()},
			{store.SettingLeaseMaxRenewals, "-1", store.ErrInvalidArgument, "Config.MaxRenewals"},
			{store.SettingLeaseDefaultTTL, "2h", store.ErrInvalidArgument, "Config.DefaultTTL"},
			{store.SettingLeaseDefaultTTL, "-5s", store.ErrInvalidArgument, "Config.DefaultTTL"},
			{store.SettingLeaseAcquireTimeout, "-1s", store.ErrInvalidArgument, "Config.AcquireTimeout"},
			{store.SettingLeaseDefaultTTL, "0s", store.ErrInvalidSetting, "delete the setting"},
			{store.SettingLeaseCleanupInterval, "-1m", store.ErrInvalidSetting, "must be positive"},
			{store.SettingLeaseHistory, "yes please", store.ErrInvalidSetting, "lease.history"},
			{store.SettingLeaseBlocking, "sometimes", store.ErrInvalidSetting, "lease.blocking"},
			{"lease.ttl", "30s", store.ErrUnknownSetting, `"lease.ttl"`},
			{store.SettingCleanupInterval, "30s", store.ErrUnknownSetting, "not a setting of package lease"},
		} {
			_, err := lease.SetSetting(t.Context(), tbl, c.key, c.value, "")
			require.ErrorIs(t, err, c.want, "%s = %s", c.key, c.value)
			require.ErrorIs(t, err, store.ErrInvalidArgument)
			require.Contains(t, err.Error(), c.text)
		}
		after, err := tbl.ListSettings(t.Context())
		require.NoError(t, err)
		require.Equal(t, before, after, "refusals changed nothing")
	})
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestSettingsABadValueInTheTableKeepsTheValueInForce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s := b.open(t)
		tbl := s.(store.Settings)
		var logs syncBuffer
		m, reread := settingsManager(t, s, &lease.Config{MaxTTL: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		_, err := lease.SetSetting(t.Context(), tbl, store.SettingLeaseDefaultTTL, "20s", "")
		require.NoError(t, err)
		awaitInForce(t, m, reread, "the first value", func(c lease.Config, _ bool) bool { return c.DefaultTTL == 20*time.Second })

		// Valid for the fleet's default MaxTTL, not for this Manager's; and
		// a share no Config accepts, written past the validation.
		_, err = lease.SetSetting(t.Context(), tbl, store.SettingLeaseDefaultTTL, "2m", "")
		require.NoError(t, err)
		_, err = tbl.SetSetting(t.Context(), store.SettingLeaseRenewShare, "1.5", nil)
		require.NoError(t, err)
		_, err = tbl.SetSetting(t.Context(), store.SettingLeaseCleanupInterval, "-1s", nil)
		require.NoError(t, err)
		_, err = lease.SetSetting(t.Context(), tbl, store.SettingLeaseMaxRenewals, "3", "")
		require.NoError(t, err)
		awaitInForce(t, m, reread, "the good value applied", func(c lease.Config, _ bool) bool { return c.MaxRenewals == 3 })
		c, _ := lease.InForce(m)
		require.Equal(t, 20*time.Second, c.DefaultTTL, "a refused value keeps the one in force")
		require.Equal(t, lease.DefaultRenewShare, c.RenewShare)
		require.Equal(t, lease.DefaultCleanupInterval, c.CleanupInterval, "the maintenance loop keeps its pace")
		require.Contains(t, logs.String(), "lease.default_ttl")
		require.Contains(t, logs.String(), "lease.renew_share")
	})
}

func TestSettingsNoSettingsIgnoresTheTable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s := b.open(t)
		_, err := lease.SetSetting(t.Context(), s.(store.Settings), store.SettingLeaseDefaultTTL, "45s", "")
		require.NoError(t, err)
		m := newManager(t, s, &lease.Config{NoSettings: true})
		c, _ := lease.InForce(m)
		require.Equal(t, lease.DefaultTTL, c.DefaultTTL)
		m2 := newManager(t, s, nil)
		c, _ = lease.InForce(m2)
		require.Equal(t, 45*time.Second, c.DefaultTTL, "Start reads the table before it returns")
	})
}

// TestBlockingOff: with blocking off, by Config.DisableBlocking or the
// settings table's lease.blocking = false, the blocking acquires (Acquire,
// Hold, AcquireAll) of a held name fail at once with its *HeldError, as
// the try-acquires do, and take a free name as before; turned back on,
// Acquire waits again.
func TestBlockingOff(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		s := b.open(t)
		holder := newManager(t, b.open(t), &lease.Config{Owner: "holder"})
		p := t.Name() + "/"
		held, err := holder.TryAcquire(ctx, p+"held", &lease.AcquireOpts{TTL: time.Hour})
		require.NoError(t, err)
		defer held.Close(ctx)

		wait := &lease.AcquireOpts{TTL: time.Minute, Timeout: time.Hour}
		failsAtOnce := func(t *testing.T, m *lease.Manager) {
			t.Helper()
			for what, acquire := range map[string]func() error{
				"Acquire": func() error { _, err := m.Acquire(ctx, p+"held", wait); return err },
				"Hold":    func() error { _, err := m.Hold(ctx, p+"held", wait); return err },
				"AcquireAll": func() error {
					_, err := m.AcquireAll(ctx, []string{p + "free", p + "held"}, wait)
					return err
				},
			} {
				err := within(t, what, acquire) // an hour's Timeout: it did not wait
				var he *lease.HeldError
				require.ErrorAs(t, err, &he, what)
				require.Equal(t, "holder", he.Owner, what)
				require.NotErrorIs(t, err, lease.ErrTimeout, what)
			}
			isHeld, err := m.IsHeld(ctx, p+"free")
			require.NoError(t, err)
			require.False(t, isHeld, "AcquireAll released what it took")
			l, err := m.Hold(ctx, p+"free", wait)
			require.NoError(t, err, "a free name is taken")
			require.NoError(t, l.Close(ctx))
		}

		t.Run("Config", func(t *testing.T) {
			failsAtOnce(t, newManager(t, s, &lease.Config{Owner: "go", DisableBlocking: true}))
		})
		t.Run("settings table", func(t *testing.T) {
			m, reread := settingsManager(t, s, &lease.Config{Owner: "table"})
			_, err := lease.SetSetting(ctx, s.(store.Settings), store.SettingLeaseBlocking, "false", "operator")
			require.NoError(t, err)
			awaitInForce(t, m, reread, "blocking off", func(c lease.Config, _ bool) bool { return c.DisableBlocking })
			failsAtOnce(t, m)

			_, err = lease.SetSetting(ctx, s.(store.Settings), store.SettingLeaseBlocking, "true", "operator")
			require.NoError(t, err)
			awaitInForce(t, m, reread, "blocking on", func(c lease.Config, _ bool) bool { return !c.DisableBlocking })
			_, err = m.Acquire(ctx, p+"held", &lease.AcquireOpts{Timeout: 50 * time.Millisecond})
			require.ErrorIs(t, err, lease.ErrTimeout, "Acquire waits again")
		})
	})
}
