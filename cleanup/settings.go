package cleanup

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
)

// ValidateSetting checks a value for the settings table, as seqlease config
// set does before it writes, for every key: the cleanup.* keys here, with
// the very error New gives their Config field (cleanup.interval:
// Config.Interval, in (0, MaxInterval]; zero, "the default" in Go, is
// refused: delete the setting instead), the others with
// lease.ValidateSetting. Errors match store.ErrInvalidArgument. It returns
// the value in canonical form.
func ValidateSetting(key, value string) (string, error) {
	if !strings.HasPrefix(key, "cleanup.") {
		return lease.ValidateSetting(key, value)
	}
	v, err := store.NormalizeSetting(key, value)
	if err != nil {
		return "", err
	}
	if _, err := intervalSetting(v); err != nil {
		return "", err
	}
	return v, nil
}

// SetSetting validates a setting of any key (ValidateSetting) and writes it
// to the settings table of s, by the operator or tool named by. Refused
// input changes nothing.
func SetSetting(ctx context.Context, s store.Settings, key, value, by string) (store.Setting, error) {
	v, err := ValidateSetting(key, value)
	if err != nil {
		return store.Setting{}, fmt.Errorf("cleanup: set %s: %w", key, err)
	}
	return s.SetSetting(ctx, key, v, &store.SetSettingParams{By: by})
}

// intervalSetting parses a canonical value of cleanup.interval and checks
// it with New's checks of Config.Interval.
func intervalSetting(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil { // not canonical: a table written past SetSetting's checks
		return 0, fmt.Errorf("%w: %s = %s is not a duration", store.ErrInvalidSetting, store.SettingCleanupInterval, store.QuoteInput(v))
	}
	if d == 0 {
		return 0, fmt.Errorf("%w: %s = 0s: zero means the default; delete the setting instead", store.ErrInvalidSetting, store.SettingCleanupInterval)
	}
	if err := (&Config{Interval: d}).validate(); err != nil {
		return 0, err
	}
	return d, nil
}

// settingsWatcher is what of a store the Service needs to hear of changes
// to the settings table (lease.Store's WatchLeases).
type settingsWatcher interface {
	WatchLeases(ctx context.Context, sink store.LeaseSink) error
}

// applySettings reads cleanup.interval from the settings table and puts it
// in force: its value, or DefaultInterval when it is not set. A value New
// would refuse (48h, -1s) is logged and the interval in force kept. It
// reports whether the interval changed. It does nothing when Config set
// the interval (explicit wins) or the store keeps no table.
func (sv *Service) applySettings(ctx context.Context) bool {
	if sv.settings == nil {
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, sv.qTimeout)
	rows, err := sv.settings.ListSettings(qctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			sv.logger.Warn("cleanup: reading the settings failed; the interval in force stays", slog.Any("error", err))
		}
		return false
	}
	prev := sv.period()
	next := DefaultInterval
	for _, r := range rows {
		if r.Key != store.SettingCleanupInterval {
			continue
		}
		d, err := intervalSetting(r.Value)
		if err != nil {
			sv.logger.Error("cleanup: a setting is refused; the interval in force stays", slog.String("key", r.Key),
				slog.String("value", store.QuoteInput(r.Value)), slog.Any("error", err))
			d = prev
		}
		next = d
	}
	if next == prev {
		return false
	}
	sv.interval.Store(int64(next))
	sv.logger.Info("cleanup: settings applied", slog.Duration("interval", next))
	return true
}

// period returns the interval in force.
func (sv *Service) period() time.Duration { return time.Duration(sv.interval.Load()) }

// watchSettings runs the store's watch of notices until ctx ends, for its
// settings notices.
func (sv *Service) watchSettings(ctx context.Context) {
	err := sv.watcher.WatchLeases(ctx, settingsSink{sv.retune})
	if err != nil && ctx.Err() == nil {
		sv.logger.Error("cleanup: watch of the settings ended; a change applies at the next start", slog.Any("error", err))
	}
}

// settingsSink hears the settings notices of a watch: a change, or a
// (re)connect that may have missed one, asks the loop to re-read the
// table. It ignores the named-lease notices.
type settingsSink struct{ retune chan struct{} }

func (s settingsSink) SettingsChanged() {
	select {
	case s.retune <- struct{}{}:
	default: // a re-read is due already
	}
}

func (s settingsSink) Reset()                 { s.SettingsChanged() }
func (settingsSink) Freed(string)             {}
func (settingsSink) Wanted(store.LeaseWaiter) {}

// Poll is called every few tens of milliseconds while the watch hears
// nothing (store.Poller): re-reading the table that often would cost more
// than a late change, so a change waits for the watch's next (re)connect
// (its Reset) or the next Start.
func (settingsSink) Poll() {}
