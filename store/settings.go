package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SettingType is the type of a setting's value.
type SettingType string

// The types of settings. Values are text in the table, parsed as Go does:
// durations by time.ParseDuration ("30s", "1m30s"), integers in base 10,
// shares as finite decimals, switches by strconv.ParseBool ("true", "false").
const (
	SettingDuration SettingType = "duration"
	SettingInt      SettingType = "int"
	SettingShare    SettingType = "share"
	SettingBool     SettingType = "bool"
	// SettingBoost is a TTL boost with its end: a factor in
	// 1..MaxTTLBoostFactor and an instant, "2 until 2026-01-02T15:04:05Z"
	// (FormatTTLBoost, ParseTTLBoost).
	SettingBoost SettingType = "boost"
)

// The known settings: the defaults a fleet shares through the settings
// table (Settings). Package lease applies the lease.* keys, package cleanup
// the cleanup.* keys; each names the Config field it stands in for.
const (
	SettingLeaseDefaultTTL       = "lease.default_ttl"       // duration: Config.DefaultTTL
	SettingLeaseRenewShare       = "lease.renew_share"       // share: Config.RenewShare
	SettingLeaseMaxRenewals      = "lease.max_renewals"      // int: Config.MaxRenewals
	SettingLeaseAcquireTimeout   = "lease.acquire_timeout"   // duration: Config.AcquireTimeout
	SettingLeaseCleanupInterval  = "lease.cleanup_interval"  // duration: Config.CleanupInterval
	SettingLeaseHistoryRetention = "lease.history_retention" // duration: Config.HistoryRetention
	SettingLeaseHistory          = "lease.history"           // bool: not Config.DisableHistory
	SettingLeaseAutoExpiry       = "lease.auto_expiry"       // bool: the maintenance loop runs
	SettingLeaseBlocking         = "lease.blocking"          // bool: not Config.DisableBlocking
	SettingCleanupInterval       = "cleanup.interval"        // duration: cleanup.Config.Interval
	// SettingTTLBoost is the fleet's TTL boost (package ttl): the cleanup
	// loop sets it when it enters cascade mode (a mass expiry), an
	// operator may set or delete it, and every ttl.Fleet multiplies the
	// TTLs its policies hand out by its factor until its end.
	SettingTTLBoost = "ttl.boost" // boost: no Config field
)

// settingTypes are the known settings and their types.
var settingTypes = map[string]SettingType{
	SettingLeaseDefaultTTL:       SettingDuration,
	SettingLeaseRenewShare:       SettingShare,
	SettingLeaseMaxRenewals:      SettingInt,
	SettingLeaseAcquireTimeout:   SettingDuration,
	SettingLeaseCleanupInterval:  SettingDuration,
	SettingLeaseHistoryRetention: SettingDuration,
	SettingLeaseHistory:          SettingBool,
	SettingLeaseAutoExpiry:       SettingBool,
	SettingLeaseBlocking:         SettingBool,
	SettingCleanupInterval:       SettingDuration,
	SettingTTLBoost:              SettingBoost,
}

// SettingKeys returns the known settings' keys, sorted.
func SettingKeys() []string {
	keys := make([]string, 0, len(settingTypes))
	for k := range settingTypes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// SettingTypeOf returns the type of a known setting, or ErrUnknownSetting.
func SettingTypeOf(key string) (SettingType, error) {
	t, ok := settingTypes[key]
	if !ok {
		return "", fmt.Errorf("%w: %s (known: %v)", ErrUnknownSetting, QuoteInput(key), SettingKeys())
	}
	return t, nil
}

// Errors of settings.
var (
	// ErrUnknownSetting reports a key that is not one of SettingKeys.
	ErrUnknownSetting = newInvalid("unknown setting")
	// ErrInvalidSetting reports a value that does not parse as its
	// setting's type. (A value of the right type out of its field's range
	// is refused by package lease with the error of its Config field.)
	ErrInvalidSetting = newInvalid("invalid setting value")
)

// Setting is one row of the settings table.
type Setting struct {
	Key       string    `json:"key"`
	Value     string    `json:"value"` // canonical: as NormalizeSetting returns it
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by,omitempty"`
}

// SetSettingParams are the options of SetSetting. A nil *SetSettingParams
// means the defaults.
type SetSettingParams struct {
	// By names who made the change (an operator, a tool), kept as
	// UpdatedBy: optional text (ValidateText).
	By  string
	Now *time.Time
}

// Settings is implemented by a backend that keeps the settings table: the
// defaults a fleet of processes shares and an operator retunes without a
// redeploy (package lease reads them at Start and again on every change).
// On PostgreSQL it is the table settings of the schema, and every change
// is announced on the schema's channel to the watchers of WatchLeases
// (SettingsSink); in memory it is values of the Store, announced to the
// Store's own watchers, with the same API.
type Settings interface {
	// ListSettings returns the settings set, in key order.
	ListSettings(ctx context.Context) ([]Setting, error)
	// SetSetting sets a known setting (NormalizeSetting) and returns it as
	// stored. Refusals change nothing: ErrUnknownSetting,
	// ErrInvalidSetting, ErrInvalidText (By).
	SetSetting(ctx context.Context, key, value string, p *SetSettingParams) (Setting, error)
	// DeleteSetting removes a setting, so the processes fall back to their
	// Go Config or the library default; it reports whether one was set.
	// An unknown key is ErrUnknownSetting.
	DeleteSetting(ctx context.Context, key string) (bool, error)
}

// SettingsSink is implemented by a LeaseSink that wants to hear of changes
// to the settings table: WatchLeases calls SettingsChanged after every
// SetSetting or DeleteSetting, of this process or another. A Reset means
// changes may have been missed too. SettingsChanged must not block.
type SettingsSink interface {
	// SettingsChanged reports that the settings may have changed: re-read
	// them with ListSettings.
	SettingsChanged()
}

// NormalizeSetting checks a setting's key and value and returns the value
// in canonical form (a duration as time.Duration.String, a switch as
// "true" or "false"), as SetSetting keeps it.
func NormalizeSetting(key, value string) (string, error) {
	t, err := SettingTypeOf(key)
	if err != nil {
		return "", err
	}
	bad := func(want string) error {
		return fmt.Errorf("%w: %s = %s is not %s", ErrInvalidSetting, key, QuoteInput(value), want)
	}
	switch t {
	case SettingDuration:
		d, err := time.ParseDuration(value)
		if err != nil {
			return "", bad(`a duration (like "30s" or "1m30s")`)
		}
		return d.String(), nil
	case SettingInt:
		n, err := strconv.Atoi(value)
		if err != nil {
			return "", bad("an integer")
		}
		return strconv.Itoa(n), nil
	case SettingShare:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return "", bad("a finite decimal number")
		}
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	case SettingBoost:
		f, until, err := ParseTTLBoost(value)
		if err != nil {
			return "", bad(fmt.Sprintf(`a factor in 1..%g and its end (like "2 until 2026-01-02T15:04:05Z")`, MaxTTLBoostFactor))
		}
		return FormatTTLBoost(f, until), nil
	default:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return "", bad(`"true" or "false"`)
		}
		return strconv.FormatBool(b), nil
	}
}

// ValidateSetSetting checks a SetSetting call and returns the value as
// kept.
func ValidateSetSetting(key, value string, p *SetSettingParams) (string, error) {
	v, err := NormalizeSetting(key, value)
	if err != nil {
		return "", err
	}
	if p != nil {
		if err := ValidateText("by", p.By); err != nil {
			return "", err
		}
	}
	return v, nil
}

// MaxTTLBoostFactor bounds the factor of a TTL boost (SettingTTLBoost).
const MaxTTLBoostFactor = 100.0

// boostSep separates a boost's factor from its end.
const boostSep = " until "

// FormatTTLBoost returns the value of SettingTTLBoost for a boost by factor
// until the instant until (kept in UTC, to the nanosecond).
func FormatTTLBoost(factor float64, until time.Time) string {
	return strconv.FormatFloat(factor, 'g', -1, 64) + boostSep + until.UTC().Format(time.RFC3339Nano)
}

// ParseTTLBoost parses a value of SettingTTLBoost: a factor in
// 1..MaxTTLBoostFactor, " until ", and an RFC 3339 instant. A bad value
// matches ErrInvalidSetting.
func ParseTTLBoost(v string) (factor float64, until time.Time, err error) {
	fs, us, ok := strings.Cut(v, boostSep)
	if ok {
		factor, err = strconv.ParseFloat(fs, 64)
	}
	if ok && err == nil {
		until, err = time.Parse(time.RFC3339Nano, us)
	}
	if !ok || err != nil || !(factor >= 1 && factor <= MaxTTLBoostFactor) { // also NaN
		return 0, time.Time{}, fmt.Errorf("%w: %s = %s is not a factor in 1..%g and its end", ErrInvalidSetting,
			SettingTTLBoost, QuoteInput(v), MaxTTLBoostFactor)
	}
	return factor, until, nil
}
