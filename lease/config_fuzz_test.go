package lease_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/seqlease/seqlease/internal/configtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// FuzzNewConfig builds Managers from fuzzed configs. New must never panic; it
// fails with an error naming a guilty field (with that field at its default
// the config passes or another field is blamed), or returns a Manager whose
// documented ranges hold and that can acquire, renew and release a lease
// with its default options on the memory backend (whose clock stands still).
func FuzzNewConfig(f *testing.F) {
	type seed struct {
		owner                                      string
		defaultTTL, maxTTL                         int64
		maxRenewals                                int
		renewShare                                 float64
		maxJitter, safetyMargin, poll, handoff     int64
		cleanup, retention, queryTimeout, release_ int64
	}
	const maxInt64 = 1<<63 - 1
	for _, s := range []seed{
		{},
		{owner: "o", defaultTTL: int64(time.Second), maxTTL: int64(time.Minute), maxRenewals: 3, renewShare: 0.5},
		{owner: "bad\x00"}, {owner: string(make([]byte, store.MaxNameLen+1))}, {defaultTTL: -1}, {defaultTTL: 999},
		{maxTTL: int64(store.MaxTTL) + 1}, {maxTTL: maxInt64}, {defaultTTL: maxInt64}, {maxRenewals: -1},
		{renewShare: 1}, {renewShare: -0.5}, {renewShare: 1e-300}, {maxJitter: -1}, {safetyMargin: -1}, {poll: -1},
		{handoff: -1}, {cleanup: -1}, {cleanup: maxInt64}, {retention: -1}, {retention: maxInt64},
		{queryTimeout: -1}, {release_: -1}, {poll: maxInt64}, {maxJitter: maxInt64}, {safetyMargin: maxInt64},
	} {
		f.Add(s.owner, s.defaultTTL, s.maxTTL, s.maxRenewals, s.renewShare, s.maxJitter, s.safetyMargin, s.poll,
			s.handoff, s.cleanup, s.retention, s.queryTimeout, s.release_)
	}
	f.Fuzz(func(t *testing.T, owner string, defaultTTL, maxTTL int64, maxRenewals int, renewShare float64,
		maxJitter, safetyMargin, poll, handoff, cleanup, retention, queryTimeout, release int64) {
		frozen := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
		cfg := lease.Config{
			Owner: owner, DefaultTTL: time.Duration(defaultTTL), MaxTTL: time.Duration(maxTTL), MaxRenewals: maxRenewals,
			RenewShare: renewShare, MaxJitter: time.Duration(maxJitter), SafetyMargin: time.Duration(safetyMargin),
			PollInterval: time.Duration(poll), HandoffGrace: time.Duration(handoff), CleanupInterval: time.Duration(cleanup),
			HistoryRetention: time.Duration(retention), QueryTimeout: time.Duration(queryTimeout),
			ReleaseTimeout: time.Duration(release), Now: frozen,
		}
		s := memory.New(&memory.Config{Now: frozen})
		m, err := lease.New(s, &cfg)
		if err != nil {
			configtest.RequireBlame(t, err, &cfg, func() error { _, err := lease.New(s, &cfg); return err })
			return
		}
		defer m.Stop()
		// The documented ranges.
		switch {
		case cfg.MaxTTL < 0 || cfg.MaxTTL > store.MaxTTL,
			cfg.DefaultTTL < 0, cfg.MaxRenewals < 0,
			cfg.RenewShare != 0 && !(cfg.RenewShare > 0 && cfg.RenewShare < 1), // NaN is not in (0, 1)
			math.IsNaN(cfg.RenewShare), cfg.MaxJitter < 0, cfg.SafetyMargin < 0, cfg.PollInterval < 0,
			cfg.HandoffGrace < 0, cfg.QueryTimeout < 0, cfg.ReleaseTimeout < 0:
			t.Fatalf("New accepted %+v", cfg)
		}
		ctx := context.Background()
		l, err := m.TryAcquire(ctx, "name", nil)
		if err != nil {
			t.Fatalf("New accepted %+v, but TryAcquire with the default options fails: %v", cfg, err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("New accepted %+v, but Renew fails: %v", cfg, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("New accepted %+v, but Release fails: %v", cfg, err)
		}
	})
}
