package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

var _ store.Settings = (*Store)(nil)

// The statements of the settings table (migration 000008), as templates
// with {s} for the quoted schema. A change and its notice ("g<TAB>key" on
// the schema's channel) are one statement: settings change seldom, so the
// NOTIFY's serialized commit costs nothing that matters (see Notices).
const (
	listSettingsSQL = `SELECT key, value, updated_at, updated_by FROM {s}.settings ORDER BY key`

	setSettingSQL = `
WITH u AS (
	INSERT INTO {s}.settings AS t (key, value, updated_at, updated_by)
	VALUES ($1, $2, COALESCE($3::timestamptz, clock_timestamp()), $4)
	ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by
	RETURNING key, value, updated_at, updated_by)
SELECT u.key, u.value, u.updated_at, u.updated_by FROM u, LATERAL pg_notify($5, 'g' || chr(9) || u.key) n`

	deleteSettingSQL = `
WITH d AS (DELETE FROM {s}.settings WHERE key = $1 RETURNING key)
SELECT count(*) FROM d, LATERAL pg_notify($2, 'g' || chr(9) || d.key) n`
)

// settingsSQL returns a statement of the settings or the recovery_stats
// table for this Store's schema.
func (s *Store) settingsSQL(tmpl string) string {
	return strings.ReplaceAll(tmpl, "{s}", pgx.Identifier{s.channel}.Sanitize())
}

// ListSettings implements store.Settings.
func (s *Store) ListSettings(ctx context.Context) ([]store.Setting, error) {
	rows, err := s.db.Query(ctx, s.settingsSQL(listSettingsSQL))
	if err != nil {
		return nil, interpretError("list settings", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Setting, error) {
		var st store.Setting
		err := r.Scan(&st.Key, &st.Value, &st.UpdatedAt, &st.UpdatedBy)
		return st, err
	})
	if err != nil {
		return nil, interpretError("list settings", err)
	}
	return out, nil
}

// SetSetting implements store.Settings: one upsert that notifies the
// watchers of WatchLeases.
func (s *Store) SetSetting(ctx context.Context, key, value string, p *store.SetSettingParams) (store.Setting, error) {
	v, err := store.ValidateSetSetting(key, value, p)
	if err != nil {
		return store.Setting{}, fmt.Errorf("set setting: %w", err)
	}
	if p == nil {
		p = &store.SetSettingParams{}
	}
	var st store.Setting
	err = s.db.QueryRow(ctx, s.settingsSQL(setSettingSQL), key, v, p.Now, p.By, s.channel).
		Scan(&st.Key, &st.Value, &st.UpdatedAt, &st.UpdatedBy)
	if err != nil {
		return store.Setting{}, interpretError("set setting", err)
	}
	return st, nil
}

// DeleteSetting implements store.Settings.
func (s *Store) DeleteSetting(ctx context.Context, key string) (bool, error) {
	if _, err := store.SettingTypeOf(key); err != nil {
		return false, fmt.Errorf("delete setting: %w", err)
	}
	var n int64
	if err := s.db.QueryRow(ctx, s.settingsSQL(deleteSettingSQL), key, s.channel).Scan(&n); err != nil {
		return false, interpretError("delete setting", err)
	}
	return n > 0, nil
}
