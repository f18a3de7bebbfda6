package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/seqlease/seqlease/store"
)

var _ store.Settings = (*Store)(nil)

// settings is the memory equivalent of the settings table: values of the
// Store, shared by every Manager on it, announced to the Store's own
// watchers of WatchLeases (store.SettingsSink).
type settings struct {
	mu   sync.Mutex
	rows map[string]store.Setting
}

// ListSettings implements store.Settings.
func (s *Store) ListSettings(ctx context.Context) ([]store.Setting, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list settings: %w", store.NotSent(err))
	}
	s.conf.mu.Lock()
	defer s.conf.mu.Unlock()
	out := make([]store.Setting, 0, len(s.conf.rows))
	for _, k := range slices.Sorted(maps.Keys(s.conf.rows)) {
		out = append(out, s.conf.rows[k])
	}
	return out, nil
}

// SetSetting implements store.Settings.
func (s *Store) SetSetting(ctx context.Context, key, value string, p *store.SetSettingParams) (store.Setting, error) {
	v, err := store.ValidateSetSetting(key, value, p)
	if err != nil {
		return store.Setting{}, fmt.Errorf("set setting: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return store.Setting{}, fmt.Errorf("set setting: %w", store.NotSent(err))
	}
	if p == nil {
		p = &store.SetSettingParams{}
	}
	st := store.Setting{Key: key, Value: v, UpdatedAt: s.clock(p.Now), UpdatedBy: p.By}
	s.conf.mu.Lock()
	if s.conf.rows == nil {
		s.conf.rows = map[string]store.Setting{}
	}
	s.conf.rows[key] = st
	s.conf.mu.Unlock()
	s.settingsChanged()
	return st, nil
}

// DeleteSetting implements store.Settings.
func (s *Store) DeleteSetting(ctx context.Context, key string) (bool, error) {
	if _, err := store.SettingTypeOf(key); err != nil {
		return false, fmt.Errorf("delete setting: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("delete setting: %w", store.NotSent(err))
	}
	s.conf.mu.Lock()
	_, ok := s.conf.rows[key]
	delete(s.conf.rows, key)
	s.conf.mu.Unlock()
	if ok {
		s.settingsChanged()
	}
	return ok, nil
}

// settingsChanged tells the watchers of WatchLeases that want it.
func (s *Store) settingsChanged() {
	for _, sink := range s.named.loadSinks() {
		if ss, ok := sink.(store.SettingsSink); ok {
			ss.SettingsChanged()
		}
	}
}
