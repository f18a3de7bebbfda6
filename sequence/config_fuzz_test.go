package sequence_test

import (
	"context"
	"testing"
	"time"

	"github.com/seqlease/seqlease/internal/configtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// FuzzNewConfig builds Leasers from fuzzed configs. New must never panic; it
// fails with an error naming a guilty field, or returns a Leaser that works:
// a lease with the default options, its Extend and Complete succeed on the
// memory backend (its clock stands still). A config New accepts is one the
// Leaser can use.
func FuzzNewConfig(f *testing.F) {
	type seed struct {
		defaultTTL, maxTTL int64
		maxPayload         int
		owner              string
		maxGroup           int
		groupDelay         int64
		maxLeaseBatch      int
		writeTimeout       int64
		margin             int64
	}
	const maxInt64 = 1<<63 - 1
	for _, s := range []seed{
		{},
		{defaultTTL: int64(time.Second), maxTTL: int64(time.Minute), maxPayload: 10, owner: "w", maxGroup: 1, maxLeaseBatch: 1},
		{defaultTTL: -1}, {maxTTL: -1}, {maxTTL: int64(store.MaxTTL) + 1}, {maxTTL: maxInt64}, {defaultTTL: maxInt64},
		{maxTTL: int64(time.Millisecond)}, {defaultTTL: int64(time.Microsecond)},
		{maxPayload: -1}, {maxGroup: store.MaxBatch + 1}, {maxGroup: -1}, {groupDelay: -1},
		{maxLeaseBatch: store.MaxBatch + 1}, {writeTimeout: -1}, {margin: -1}, {margin: int64(time.Hour)},
		{owner: "bad\x00owner"}, {owner: "\xff"},
	} {
		f.Add(s.defaultTTL, s.maxTTL, s.maxPayload, s.owner, s.maxGroup, s.groupDelay, s.maxLeaseBatch, s.writeTimeout, s.margin)
	}
	f.Fuzz(func(t *testing.T, defaultTTL, maxTTL int64, maxPayload int, owner string, maxGroup int, groupDelay int64,
		maxLeaseBatch int, writeTimeout, margin int64) {
		cfg := sequence.Config{
			DefaultTTL: time.Duration(defaultTTL), MaxTTL: time.Duration(maxTTL), MaxPayload: maxPayload, Owner: owner,
			MaxGroup: maxGroup, GroupDelay: time.Duration(groupDelay), MaxLeaseBatch: maxLeaseBatch,
			WriteTimeout: time.Duration(writeTimeout), Margin: time.Duration(margin), UnorderedOnly: true,
		}
		// The clock stands still: a lease of the shortest TTL stays live.
		frozen := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
		cfg.Now = frozen
		l, err := sequence.New(memory.New(&memory.Config{Now: frozen}), &cfg)
		if err != nil {
			configtest.RequireBlame(t, err, &cfg, func() error {
				_, err := sequence.New(memory.New(&memory.Config{Now: frozen}), &cfg)
				return err
			})
			return
		}
		// Documented ranges that an accepted config must respect.
		switch {
		case cfg.MaxTTL < 0 || cfg.MaxTTL > store.MaxTTL,
			cfg.MaxPayload < 0, cfg.MaxGroup < 0 || cfg.MaxGroup > store.MaxBatch, cfg.GroupDelay < 0,
			cfg.MaxLeaseBatch < 0 || cfg.MaxLeaseBatch > store.MaxBatch, cfg.WriteTimeout < 0, cfg.Margin < 0:
			t.Fatalf("New accepted %+v", cfg)
		}
		if cfg.WriteTimeout > 0 && cfg.WriteTimeout < time.Second {
			return // a coalesced lease may not finish in so short a time: the caller's choice
		}
		ctx := context.Background()
		x, err := l.Lease(ctx, "s", nil)
		if err != nil {
			t.Fatalf("New accepted %+v, but a lease with the default options fails: %v", cfg, err)
		}
		if err := x.Extend(ctx, 0); err != nil {
			t.Fatalf("New accepted %+v, but Extend with the default TTL fails: %v", cfg, err)
		}
		if err := x.Complete(ctx, make([]byte, min(cfg.MaxPayload, 16))); err != nil {
			t.Fatalf("New accepted %+v, but Complete fails: %v", cfg, err)
		}
	})
}
