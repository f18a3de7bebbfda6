package barrier_test

import (
	"context"
	"testing"
	"time"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/internal/configtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// FuzzNewConfig builds Barriers from fuzzed configs. New must never panic; it
// fails with an error naming a guilty field (with that field at its default
// the config passes or another field is blamed), or returns a Barrier that
// starts, answers a watermark and stops.
func FuzzNewConfig(f *testing.F) {
	const maxInt64 = 1<<63 - 1
	for _, s := range [][3]int64{
		{0, 0, 0}, {int64(time.Millisecond), int64(time.Second), 1}, {-1, 0, 0}, {0, -1, 0}, {0, 0, -1},
		{maxInt64, maxInt64, store.MaxListLimit}, {1, 1, store.MaxListLimit + 1}, {-1 << 63, 0, 0},
	} {
		f.Add(s[0], s[1], int(s[2]))
	}
	f.Fuzz(func(t *testing.T, poll, query int64, limit int) {
		cfg := barrier.Config{PollInterval: time.Duration(poll), QueryTimeout: time.Duration(query), SnapshotLimit: limit}
		src := memory.New(nil)
		b, err := barrier.New(src, &cfg)
		if err != nil {
			configtest.RequireBlame(t, err, &cfg, func() error { _, err := barrier.New(src, &cfg); return err })
			return
		}
		if cfg.PollInterval < 0 || cfg.QueryTimeout < 0 || cfg.SnapshotLimit < 0 || cfg.SnapshotLimit > store.MaxListLimit {
			t.Fatalf("New accepted %+v", cfg)
		}
		ctx := context.Background()
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer b.Stop()
		es, err := src.Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Minute}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.Commit(ctx, "s", 1, es[0].Token, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.WaitFor(ctx, "s", 2); err != nil {
			t.Fatalf("New accepted %+v, but WaitFor fails: %v", cfg, err)
		}
		if w, err := b.Watermark(ctx, "s"); err != nil || w != 1 {
			t.Fatalf("New accepted %+v, but the watermark is %d, %v", cfg, w, err)
		}
	})
}
