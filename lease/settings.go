package lease

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/seqlease/seqlease/store"
)

// tuning is what of a Manager's configuration the settings table may
// retune while it runs: the Config with the table's values applied, and
// the maintenance switch, which has no Config field of its own.
type tuning struct {
	cfg      Config
	noExpiry bool // lease.auto_expiry is false: the loop marks no expiry
}

// initTuning records the Go Config as given (cfg, before the defaults)
// and puts it in force until Start reads the settings table.
func (m *Manager) initTuning(cfg *Config) {
	m.given = *cfg
	m.tuned.Store(&tuning{cfg: m.cfg})
	m.retuned = make(chan struct{}, 1)
	m.settingsWake = make(chan struct{}, 1)
}

// withAcquireTimeout returns opts with Timeout set to the AcquireTimeout
// in force when it sets none.
func (m *Manager) withAcquireTimeout(opts *AcquireOpts) *AcquireOpts {
	if d := m.conf().AcquireTimeout; opts.Timeout == 0 && d > 0 {
		o := *opts
		o.Timeout = d
		return &o
	}
	return opts
}

// conf returns the Manager's configuration as it is now: Config with the
// settings table's values applied (Start and every change).
func (m *Manager) conf() *Config { return &m.tuned.Load().cfg }

// settingFields maps each setting to the Config field it stands in for, to
// read and write it on a Config, and to tell whether the Go Config set it
// explicitly (it then wins over the table).
var settingFields = map[string]struct {
	field    string
	explicit func(c *Config) bool
	apply    func(t *tuning, v string) // v is canonical (store.NormalizeSetting)
}{
	store.SettingLeaseDefaultTTL: {"DefaultTTL", func(c *Config) bool { return c.DefaultTTL != 0 || c.AdaptiveTTL != nil },
		func(t *tuning, v string) { t.cfg.DefaultTTL = mustDuration(v) }},
	store.SettingLeaseRenewShare: {"RenewShare", func(c *Config) bool { return c.RenewShare != 0 },
		func(t *tuning, v string) { t.cfg.RenewShare, _ = strconv.ParseFloat(v, 64) }},
	store.SettingLeaseMaxRenewals: {"MaxRenewals", func(c *Config) bool { return c.MaxRenewals != 0 },
		func(t *tuning, v string) { t.cfg.MaxRenewals, _ = strconv.Atoi(v) }},
	store.SettingLeaseAcquireTimeout: {"AcquireTimeout", func(c *Config) bool { return c.AcquireTimeout != 0 },
		func(t *tuning, v string) { t.cfg.AcquireTimeout = mustDuration(v) }},
	store.SettingLeaseCleanupInterval: {"CleanupInterval", func(c *Config) bool { return c.CleanupInterval != 0 },
		func(t *tuning, v string) { t.cfg.CleanupInterval = mustDuration(v) }},
	store.SettingLeaseHistoryRetention: {"HistoryRetention", func(c *Config) bool { return c.HistoryRetention != 0 },
		func(t *tuning, v string) { t.cfg.HistoryRetention = mustDuration(v) }},
	store.SettingLeaseHistory: {"DisableHistory", func(c *Config) bool { return c.DisableHistory },
		func(t *tuning, v string) { t.cfg.DisableHistory = v == "false" }},
	store.SettingLeaseBlocking: {"DisableBlocking", func(c *Config) bool { return c.DisableBlocking },
		func(t *tuning, v string) { t.cfg.DisableBlocking = v == "false" }},
	// A negative CleanupInterval turns the loop off in Go; the table
	// cannot turn it back on.
	store.SettingLeaseAutoExpiry: {"CleanupInterval", func(c *Config) bool { return c.CleanupInterval < 0 },
		func(t *tuning, v string) { t.noExpiry = v == "false" }},
}

func mustDuration(v string) time.Duration {
	d, _ := time.ParseDuration(v)
	return d
}

// ValidateSetting checks a value for the settings table, as seqlease config
// set does before it writes: the key must be known (store.ErrUnknownSetting),
// the value of its type (store.ErrInvalidSetting), and in the range its
// Config field accepts, refused with the very error New gives that field
// (against the default MaxTTL). A zero duration, which in Go means "the
// default", is refused: delete the setting instead. It returns the value in
// canonical form. A key of another package (cleanup.interval) is
// store.ErrUnknownSetting here: cleanup.ValidateSetting checks every key.
func ValidateSetting(key, value string) (string, error) {
	v, err := store.NormalizeSetting(key, value)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(key, "cleanup.") { // checked by the cleanup package's own rules
		return "", fmt.Errorf("%w: %s is not a setting of package lease (cleanup.ValidateSetting checks every key)", store.ErrUnknownSetting, store.QuoteInput(key))
	}
	if err := checkSetting(key, v); err != nil {
		return "", err
	}
	f, ok := settingFields[key]
	if !ok {
		return v, nil // not a lease setting (ttl.boost): its type says it all
	}
	t := tuning{}
	f.apply(&t, v)
	if err := checkTuned(&Config{}, &t.cfg); err != nil {
		return "", err
	}
	return v, nil
}

// checkSetting refuses what the table may not hold though a Config may: a
// zero (in Go, "the default": delete the setting instead), and a negative
// cleanup interval (lease.auto_expiry turns the loop off). v is canonical.
func checkSetting(key, v string) error {
	t, _ := store.SettingTypeOf(key)
	switch {
	case (t == store.SettingDuration && v == "0s") || (t == store.SettingShare && v == "0"):
		return fmt.Errorf("%w: %s = %s: zero means the default; delete the setting instead", store.ErrInvalidSetting, key, v)
	case key == store.SettingLeaseCleanupInterval && v[0] == '-':
		return fmt.Errorf("%w: %s = %s must be positive (lease.auto_expiry false stops the expiry)", store.ErrInvalidSetting, key, v)
	}
	return nil
}

// SetSetting validates a setting (ValidateSetting) and writes it to the
// settings table of s, by the operator or tool named by. Refused input
// changes nothing.
func SetSetting(ctx context.Context, s store.Settings, key, value, by string) (store.Setting, error) {
	v, err := ValidateSetting(key, value)
	if err != nil {
		return store.Setting{}, fmt.Errorf("lease: set %s: %w", key, err)
	}
	return s.SetSetting(ctx, key, v, &store.SetSettingParams{By: by})
}

// checkTuned checks what a setting made of a Config, base (the Go Config
// as given) with the tuned fields of tuned, with New's checks and errors.
func checkTuned(base, tuned *Config) error {
	c := *base
	c.DefaultTTL, c.RenewShare, c.MaxRenewals = tuned.DefaultTTL, tuned.RenewShare, tuned.MaxRenewals
	c.AcquireTimeout, c.CleanupInterval, c.HistoryRetention = tuned.AcquireTimeout, tuned.CleanupInterval, tuned.HistoryRetention
	if c.AdaptiveTTL != nil {
		c.DefaultTTL = 0 // not in use: the policy chooses
	}
	_, err := New(noStore{}, &c)
	return err
}

// noStore is a Store for checkTuned: New does not call it.
type noStore struct{ Store }

// settingsStore returns the Manager's store as a store.Settings, if it is.
func (m *Manager) settingsStore() (store.Settings, bool) {
	s, ok := m.store.(store.Settings)
	return s, ok && !m.cfg.NoSettings
}

// applySettings reads the settings table and retunes the Manager: each
// known setting whose Config field the Go Config left unset replaces the
// value in force; a missing setting restores the Go Config's value (its
// default). A value this Manager's Config refuses (a DefaultTTL above its
// MaxTTL) is logged, and the value in force kept.
func (m *Manager) applySettings(ctx context.Context) {
	s, ok := m.settingsStore()
	if !ok {
		return
	}
	qctx, cancel := m.queryContext(ctx)
	rows, err := s.ListSettings(qctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			m.cfg.Logger.Warn("lease: reading the settings failed; the values in force stay", slog.Any("error", err))
		}
		return
	}
	prev := m.tuned.Load()
	next := &tuning{cfg: m.cfg}
	for _, r := range rows {
		f, known := settingFields[r.Key]
		if !known || f.explicit(&m.given) {
			continue
		}
		v, err := store.NormalizeSetting(r.Key, r.Value)
		if err == nil {
			err = checkSetting(r.Key, v)
		}
		if err == nil {
			try := *next
			f.apply(&try, v)
			if err = checkTuned(&m.given, &try.cfg); err == nil {
				next = &try
				continue
			}
		}
		m.cfg.Logger.Error("lease: a setting is refused; the value in force stays", slog.String("key", r.Key),
			slog.String("value", store.QuoteInput(r.Value)), slog.Any("error", err))
		keepField(next, prev, r.Key)
	}
	if next.values() == prev.values() {
		return
	}
	m.tuned.Store(next)
	m.cfg.Logger.Info("lease: settings applied", slog.Duration("default_ttl", next.cfg.DefaultTTL),
		slog.Float64("renew_share", next.cfg.RenewShare), slog.Int("max_renewals", next.cfg.MaxRenewals),
		slog.Duration("acquire_timeout", next.cfg.AcquireTimeout), slog.Duration("cleanup_interval", next.cfg.CleanupInterval),
		slog.Duration("history_retention", next.cfg.HistoryRetention), slog.Bool("history", !next.cfg.DisableHistory),
		slog.Bool("blocking", !next.cfg.DisableBlocking), slog.Bool("auto_expiry", !next.noExpiry))
	select {
	case m.retuned <- struct{}{}:
	default:
	}
}

// tunedValues are the fields of a tuning the settings table sets.
type tunedValues struct {
	defaultTTL, acquireTimeout, cleanupInterval, historyRetention time.Duration
	renewShare                                                    float64
	maxRenewals                                                   int
	noHistory, noBlocking, noExpiry                               bool
}

func (t *tuning) values() tunedValues {
	c := &t.cfg
	return tunedValues{c.DefaultTTL, c.AcquireTimeout, c.CleanupInterval, c.HistoryRetention, c.RenewShare, c.MaxRenewals,
		c.DisableHistory, c.DisableBlocking, t.noExpiry}
}

// keepField copies the field of key from prev into t: a refused setting
// keeps the value in force.
func keepField(t *tuning, prev *tuning, key string) {
	switch key {
	case store.SettingLeaseDefaultTTL:
		t.cfg.DefaultTTL = prev.cfg.DefaultTTL
	case store.SettingLeaseRenewShare:
		t.cfg.RenewShare = prev.cfg.RenewShare
	case store.SettingLeaseMaxRenewals:
		t.cfg.MaxRenewals = prev.cfg.MaxRenewals
	case store.SettingLeaseAcquireTimeout:
		t.cfg.AcquireTimeout = prev.cfg.AcquireTimeout
	case store.SettingLeaseCleanupInterval:
		t.cfg.CleanupInterval = prev.cfg.CleanupInterval
	case store.SettingLeaseHistoryRetention:
		t.cfg.HistoryRetention = prev.cfg.HistoryRetention
	case store.SettingLeaseHistory:
		t.cfg.DisableHistory = prev.cfg.DisableHistory
	case store.SettingLeaseBlocking:
		t.cfg.DisableBlocking = prev.cfg.DisableBlocking
	case store.SettingLeaseAutoExpiry:
		t.noExpiry = prev.noExpiry
	}
}

// followSettings re-reads the settings table whenever the watch reports a
// change, or that changes may have been missed, until ctx ends.
func (m *Manager) followSettings(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.settingsWake:
		}
		m.applySettings(ctx)
		if m.testHooks.settings != nil {
			m.testHooks.settings()
		}
	}
}

// wakeSettings asks followSettings to re-read the table. It never blocks.
func (m *Manager) wakeSettings() {
	select {
	case m.settingsWake <- struct{}{}:
	default: // a re-read is due already
	}
}

// SettingsChanged implements store.SettingsSink: re-read the table.
func (s sink) SettingsChanged() { s.m.wakeSettings() }
