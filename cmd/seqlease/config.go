package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/store"
)

// settingRow is one setting of `config get`, `config set` and `config
// unset`: a known key with the table's value, or none when it is not set.
type settingRow struct {
	Key       string    `json:"key"`
	Type      string    `json:"type"`
	Value     string    `json:"value,omitempty"` // the table's; empty: not set
	Set       bool      `json:"set"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	UpdatedBy string    `json:"updated_by,omitempty"`
}

func newSettingRow(key string, st *store.Setting) settingRow {
	t, _ := store.SettingTypeOf(key)
	r := settingRow{Key: key, Type: string(t)}
	if st != nil {
		r.Value, r.Set, r.UpdatedAt, r.UpdatedBy = st.Value, true, st.UpdatedAt, st.UpdatedBy
	}
	return r
}

// settingDocs says what each known setting (store.SettingKeys) stands for,
// for the help of `config`; a test keeps its keys those of the store.
var settingDocs = map[string]string{
	store.SettingLeaseDefaultTTL:       "lease.Config.DefaultTTL",
	store.SettingLeaseRenewShare:       "lease.Config.RenewShare, in (0, 1)",
	store.SettingLeaseMaxRenewals:      "lease.Config.MaxRenewals, >= 0 (0: no limit)",
	store.SettingLeaseAcquireTimeout:   "lease.Config.AcquireTimeout",
	store.SettingLeaseCleanupInterval:  "lease.Config.CleanupInterval",
	store.SettingLeaseHistoryRetention: "lease.Config.HistoryRetention (negative: forever)",
	store.SettingLeaseHistory:          "false: lease.Config.DisableHistory",
	store.SettingLeaseAutoExpiry:       "false: expired holdings are no longer marked",
	store.SettingLeaseBlocking:         "false: lease.Config.DisableBlocking (a blocking acquire tries once)",
	store.SettingCleanupInterval:       "cleanup.Config.Interval, in (0, 24h]",
	store.SettingTTLBoost:              "the fleet's TTL boost (ttl.Fleet), raised in cascade mode",
}

// settingsHelp lists every known setting with its type, from the store's
// table of keys, so that the help lists each one.
func settingsHelp() string {
	var b strings.Builder
	for _, k := range store.SettingKeys() {
		t, _ := store.SettingTypeOf(k)
		fmt.Fprintf(&b, "\n  %-24s %-9s %s", k, t, settingDocs[k])
	}
	return b.String()
}

func (c *cli) config(ctx context.Context, args []string) error {
	fs := c.flags("config")
	by := fs.String("by", "", "set: who makes the change, kept with it")
	pos, err := c.positional(fs, args, 0, 3)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		pos = []string{"get"} // every setting
	}
	action, rest := pos[0], pos[1:]
	want := map[string][2]int{"get": {0, 1}, "list": {0, 0}, "set": {2, 2}, "unset": {1, 1}}
	n, ok := want[action]
	switch {
	case !ok:
		return usagef("config: unknown action %q (get, list, set or unset)", action)
	case len(rest) < n[0] || len(rest) > n[1]:
		return usagef("config %s: wrong number of arguments (config [get [KEY] | list], config set KEY VALUE, config unset KEY)", action)
	case *by != "" && action != "set":
		return usagef("config %s: -by is for set", action)
	}
	// Bad input is refused before connecting: nothing is changed.
	// cleanup.ValidateSetting checks every key, lease.* with package lease.
	if len(rest) > 0 {
		if _, err := store.SettingTypeOf(rest[0]); err != nil {
			return usagef("config %s: %v", action, err)
		}
	}
	if action == "set" {
		if _, err := cleanup.ValidateSetting(rest[0], rest[1]); err != nil {
			return usagef("config set: %v (nothing changed)", err)
		}
		if err := store.ValidateText("-by", *by); err != nil {
			return usagef("config set: %v", err)
		}
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	switch action {
	case "set":
		st, err := cleanup.SetSetting(ctx, c.store, rest[0], rest[1], *by)
		if err != nil {
			return c.explain(err, "")
		}
		return c.emitSettings([]settingRow{newSettingRow(st.Key, &st)}, true)
	case "unset":
		if _, err := c.store.DeleteSetting(ctx, rest[0]); err != nil {
			return c.explain(err, "")
		}
		return c.emitSettings([]settingRow{newSettingRow(rest[0], nil)}, true)
	}
	rows, err := c.store.ListSettings(ctx)
	if err != nil {
		return c.explain(err, "")
	}
	byKey := map[string]*store.Setting{}
	for i := range rows {
		byKey[rows[i].Key] = &rows[i]
	}
	keys := store.SettingKeys()
	if len(rest) == 1 {
		keys = rest
	}
	out := make([]settingRow, len(keys))
	for i, k := range keys {
		out[i] = newSettingRow(k, byKey[k])
	}
	return c.emitSettings(out, len(rest) == 1)
}

// emitSettings prints settings: one object when one was asked for, else a
// list.
func (c *cli) emitSettings(rs []settingRow, one bool) error {
	rows := make([][]string, len(rs))
	for i, r := range rs {
		value, at := r.Value, ""
		if !r.Set {
			value = "(not set: Go Config or default)"
		} else {
			at = r.UpdatedAt.UTC().Format(time.RFC3339)
		}
		rows[i] = []string{r.Key, r.Type, value, at, r.UpdatedBy}
	}
	head := []string{"KEY", "TYPE", "VALUE", "UPDATED", "BY"}
	if one {
		return c.emit(rs[0], head, rows)
	}
	return c.emit(rs, head, rows)
}
