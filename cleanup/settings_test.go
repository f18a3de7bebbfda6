package cleanup_test

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// settingsBackend is a store with the settings table.
type settingsBackend interface {
	backend
	store.Settings
}

// TestSettingsInterval: cleanup.interval in the settings table is the
// interval of every Service on the store that sets none in its Config, read
// at Start and on every change; an explicit Config.Interval wins; a value
// New would refuse is refused at set time, and, written past the checks,
// logged and ignored.
func TestSettingsInterval(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) (settingsBackend, settingsBackend){
		"memory": func(*testing.T) (settingsBackend, settingsBackend) { s := memory.New(nil); return s, s },
		"postgres": func(t *testing.T) (settingsBackend, settingsBackend) { // two processes on one schema
			pool := pgtest.Shared(t, false)
			schema := pgtest.NewSchema(t, pool)
			a, err := postgres.New(pool, &postgres.Config{Schema: schema})
			require.NoError(t, err)
			b, err := postgres.New(pool, &postgres.Config{Schema: schema})
			require.NoError(t, err)
			return a, b
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			sa, sb := open(t)
			log, rec := &warnLog{}, &recorder{}
			start := func(s settingsBackend, cfg *cleanup.Config) *cleanup.Service {
				sv, err := cleanup.New(s, cfg)
				require.NoError(t, err)
				t.Cleanup(sv.Stop)
				require.NoError(t, sv.Start(ctx))
				return sv
			}
			a := start(sa, &cleanup.Config{Logger: slog.New(log), Observer: rec})
			b := start(sb, nil)
			explicit := start(sb, &cleanup.Config{Interval: 3 * time.Minute})
			require.Equal(t, cleanup.DefaultInterval, a.Status().Interval)
			agree := func(want time.Duration, svs ...*cleanup.Service) {
				t.Helper()
				require.Eventually(t, func() bool {
					for _, sv := range svs {
						if sv.Status().Interval != want {
							return false
						}
					}
					return true
				}, 10*time.Second, time.Millisecond, "every Service follows the table: %v", want)
			}
			fullCycles := func() int {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return len(slices.DeleteFunc(slices.Clone(rec.cycles), func(c cleanup.CycleResult) bool { return !c.Full }))
			}

			// A change reaches every Service that sets no interval, and
			// the loop that waited the default 30 s cycles at once at the
			// new pace.
			require.Eventually(t, func() bool { return fullCycles() == 1 }, 10*time.Second, time.Millisecond, "the cycle at Start")
			_, err := cleanup.SetSetting(ctx, sa, store.SettingCleanupInterval, "20ms", "alice")
			require.NoError(t, err)
			agree(20*time.Millisecond, a, b)
			require.Eventually(t, func() bool { return fullCycles() >= 3 }, 10*time.Second, time.Millisecond,
				"full cycles every 20 ms, not every 30 s")
			require.Equal(t, 3*time.Minute, explicit.Status().Interval, "an explicit Config.Interval wins")

			// A Service started now reads the table before Start returns.
			require.Equal(t, 20*time.Millisecond, start(sb, nil).Status().Interval)

			// Refused at set time, with New's own error; nothing written.
			_, newErr := cleanup.New(sa, &cleanup.Config{Interval: 48 * time.Hour})
			require.ErrorIs(t, newErr, store.ErrInvalidArgument)
			for value, msg := range map[string]string{"48h": newErr.Error(), "-1s": "Config.Interval -1s must be in", "0s": "zero means the default",
				"soon": "is not a duration"} {
				_, err := cleanup.SetSetting(ctx, sa, store.SettingCleanupInterval, value, "")
				require.ErrorIs(t, err, store.ErrInvalidArgument, value)
				require.ErrorContains(t, err, msg, value)
			}
			rows, err := sa.ListSettings(ctx)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Equal(t, "20ms", rows[0].Value)

			// Written past the checks (the store checks only the type):
			// logged, and the interval in force stays.
			_, err = sa.SetSetting(ctx, store.SettingCleanupInterval, "48h", nil)
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				return slices.Contains(log.messages(), "cleanup: a setting is refused; the interval in force stays")
			}, 10*time.Second, time.Millisecond)
			require.Equal(t, 20*time.Millisecond, a.Status().Interval)
			require.Equal(t, 20*time.Millisecond, b.Status().Interval)

			// Unset: back to the default.
			_, err = sa.DeleteSetting(ctx, store.SettingCleanupInterval)
			require.NoError(t, err)
			agree(cleanup.DefaultInterval, a, b)
			require.Equal(t, 3*time.Minute, explicit.Status().Interval)
		})
	}
}

// TestValidateSettingAnyKey: cleanup.ValidateSetting checks every key of
// the table, the lease.* ones with lease.ValidateSetting.
func TestValidateSettingAnyKey(t *testing.T) {
	t.Parallel()
	v, err := cleanup.ValidateSetting(store.SettingCleanupInterval, "90s")
	require.NoError(t, err)
	require.Equal(t, "1m30s", v)
	_, err = cleanup.ValidateSetting(store.SettingLeaseRenewShare, "1.5")
	require.ErrorContains(t, err, "Config.RenewShare 1.5 must be in (0, 1)")
	_, err = cleanup.ValidateSetting("cleanup.intervall", "1s")
	require.ErrorIs(t, err, store.ErrUnknownSetting)
}
