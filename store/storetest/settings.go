package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// settingsNotices is a LeaseSink that hears of settings changes too.
type settingsNotices struct{ *leaseNotices }

func (r settingsNotices) SettingsChanged() { r.add("settings") }

// settings returns b's store as a store.Settings.
func (b *nlBundle) settings() store.Settings { return b.s.(store.Settings) }

// listSettings returns the settings, their times normalized.
func (b *nlBundle) listSettings() []store.Setting {
	b.t.Helper()
	got, err := b.settings().ListSettings(b.ctx)
	require.NoError(b.t, err, "ListSettings")
	for i := range got {
		got[i].UpdatedAt = normTime(got[i].UpdatedAt)
	}
	return got
}

// testSettings checks store.Settings: the table of shared defaults, its
// refusals, and its notices to the watchers of WatchLeases.
func testSettings(t *testing.T, newStore func(t *testing.T) NamedLeaseStore) {
	t.Run("set, list in key order, overwrite, delete", func(t *testing.T) {
		b := nlSetup(t, newStore)
		require.Empty(t, b.listSettings(), "a fresh store has no settings")
		s := b.settings()
		got, err := s.SetSetting(b.ctx, store.SettingLeaseRenewShare, "0.50", &store.SetSettingParams{By: "alice", Now: b.at(0)})
		require.NoError(t, err)
		share := store.Setting{Key: store.SettingLeaseRenewShare, Value: "0.5", UpdatedAt: b.time(0), UpdatedBy: "alice"}
		got.UpdatedAt = normTime(got.UpdatedAt)
		require.Equal(t, share, got, "the value is kept in canonical form")
		_, err = s.SetSetting(b.ctx, store.SettingLeaseDefaultTTL, "90s", &store.SetSettingParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		ttl := store.Setting{Key: store.SettingLeaseDefaultTTL, Value: "1m30s", UpdatedAt: b.time(time.Second)}
		require.Equal(t, []store.Setting{ttl, share}, b.listSettings())

		_, err = s.SetSetting(b.ctx, store.SettingLeaseDefaultTTL, "2m", &store.SetSettingParams{By: "bob", Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		ttl = store.Setting{Key: store.SettingLeaseDefaultTTL, Value: "2m0s", UpdatedAt: b.time(2 * time.Second), UpdatedBy: "bob"}
		require.Equal(t, []store.Setting{ttl, share}, b.listSettings(), "a set overwrites")

		ok, err := s.DeleteSetting(b.ctx, store.SettingLeaseRenewShare)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.DeleteSetting(b.ctx, store.SettingLeaseRenewShare)
		require.NoError(t, err)
		require.False(t, ok, "nothing left to delete")
		require.Equal(t, []store.Setting{ttl}, b.listSettings())
	})

	t.Run("a TTL boost is kept with its end, in UTC", func(t *testing.T) {
		b := nlSetup(t, newStore)
		got, err := b.settings().SetSetting(b.ctx, store.SettingTTLBoost, "2.50 until 2026-01-02T16:04:05.5+01:00", nil)
		require.NoError(t, err)
		require.Equal(t, "2.5 until 2026-01-02T15:04:05.5Z", got.Value)
		f, until, err := store.ParseTTLBoost(b.listSettings()[0].Value)
		require.NoError(t, err)
		require.Equal(t, 2.5, f)
		require.True(t, until.Equal(time.Date(2026, 1, 2, 15, 4, 5, 5e8, time.UTC)), "until %v", until)
	})

	t.Run("bad input is refused with a typed error and changes nothing", func(t *testing.T) {
		b := nlSetup(t, newStore)
		s := b.settings()
		_, err := s.SetSetting(b.ctx, store.SettingLeaseHistory, "false", nil)
		require.NoError(t, err)
		before := b.listSettings()
		for _, c := range []struct {
			key, value, by string
			want           error
		}{
			{"lease.nope", "1", "", store.ErrUnknownSetting},
			{"", "1", "", store.ErrUnknownSetting},
			{"LEASE.HISTORY", "true", "", store.ErrUnknownSetting},
			{store.SettingLeaseHistory, "maybe", "", store.ErrInvalidSetting},
			{store.SettingLeaseDefaultTTL, "30", "", store.ErrInvalidSetting},
			{store.SettingLeaseMaxRenewals, "1.5", "", store.ErrInvalidSetting},
			{store.SettingLeaseRenewShare, "NaN", "", store.ErrInvalidSetting},
			{store.SettingTTLBoost, "2", "", store.ErrInvalidSetting},
			{store.SettingTTLBoost, "0.5 until 2026-01-02T15:04:05Z", "", store.ErrInvalidSetting},
			{store.SettingTTLBoost, "101 until 2026-01-02T15:04:05Z", "", store.ErrInvalidSetting},
			{store.SettingTTLBoost, "2 until tomorrow", "", store.ErrInvalidSetting},
			{store.SettingLeaseHistory, "true", "bad\x00by", store.ErrInvalidText},
			{store.SettingLeaseHistory, "true", strings.Repeat("x", store.MaxTextLen+1), store.ErrInvalidText},
		} {
			_, err := s.SetSetting(b.ctx, c.key, c.value, &store.SetSettingParams{By: c.by})
			require.ErrorIs(t, err, c.want, "%q = %q by %q", c.key, c.value, c.by)
			require.ErrorIs(t, err, store.ErrInvalidArgument)
		}
		_, err = s.DeleteSetting(b.ctx, "lease.nope")
		require.ErrorIs(t, err, store.ErrUnknownSetting)
		require.Equal(t, before, b.listSettings(), "refusals changed nothing")
	})

	t.Run("a set and a delete are reported to the watchers", func(t *testing.T) {
		b := nlSetup(t, newStore)
		sink := settingsNotices{newLeaseNotices()}
		ctx, cancel := context.WithCancel(b.ctx)
		done := make(chan error, 1)
		go func() { done <- b.s.WatchLeases(ctx, sink) }()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		require.Equal(t, "reset", sink.next(t))
		_, err := b.settings().SetSetting(b.ctx, store.SettingLeaseMaxRenewals, "3", nil)
		require.NoError(t, err)
		require.Equal(t, "settings", sink.next(t))
		_, err = b.settings().DeleteSetting(b.ctx, store.SettingLeaseMaxRenewals)
		require.NoError(t, err)
		require.Equal(t, "settings", sink.next(t))
	})
}
