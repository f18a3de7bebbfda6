package gap_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/internal/configtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// filled counts the gaps its Observer hears of.
type filled struct{ n int }

func (o *filled) Filled(context.Context, gap.Gap) { o.n++ }

// FuzzNewConfig builds Gaps from fuzzed configs. New must never panic; it
// fails with an error naming a guilty field (with that field at its default
// the config passes or another field is blamed), or returns Gaps whose
// documented range holds and that work on the memory backend: a payload of
// up to MaxPayload bytes fills a released gap (and the Observer hears of
// it); one byte more is refused with store.ErrPayloadTooLarge and changes
// nothing.
func FuzzNewConfig(f *testing.F) {
	for _, s := range [][2]int{{0, 0}, {0, 100}, {1, 1}, {1, 0}, {-1, 0}, {math.MinInt, 0}, {math.MaxInt, 7},
		{gap.DefaultMaxPayload, gap.DefaultMaxPayload}, {1 << 16, 1 << 16}, {100, 101}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, maxPayload, size int) {
		s := memory.New(nil)
		obs := &filled{}
		cfg := gap.Config{MaxPayload: maxPayload, Observer: obs}
		g, err := gap.New(s, &cfg)
		if err != nil {
			configtest.RequireBlame(t, err, &cfg, func() error { _, err := gap.New(s, &cfg); return err })
			return
		}
		if cfg.MaxPayload < 0 {
			t.Fatalf("New accepted %+v", cfg)
		}
		limit := cfg.MaxPayload
		if limit == 0 {
			limit = gap.DefaultMaxPayload
		}

		// Two released gaps.
		ctx := context.Background()
		es, err := s.Lease(ctx, "s", []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if err := s.Release(ctx, "s", e.Number, e.Token, nil); err != nil {
				t.Fatal(err)
			}
		}
		opts := &gap.FillOpts{FilledBy: "fuzz", Policy: gap.FillReasons(store.ReasonReleased)}

		// A payload of up to the limit (and of at most 64 KiB, to keep each
		// run short) fills the first.
		fits := min(limit, 1<<16)
		payload := make([]byte, uint(size)%uint(fits+1))
		if err := g.Fill(ctx, "s", 1, payload, opts); err != nil {
			t.Fatalf("New accepted %+v, but a payload of %d bytes does not fill a gap: %v", cfg, len(payload), err)
		}
		if obs.n != 1 {
			t.Fatalf("New accepted %+v, but the Observer heard of %d fills", cfg, obs.n)
		}
		// One byte over the limit is refused, and the gap stays open.
		if limit < 1<<16 {
			err := g.Fill(ctx, "s", 2, make([]byte, limit+1), opts)
			if !errors.Is(err, store.ErrPayloadTooLarge) || !store.IsInvalid(err) {
				t.Fatalf("New accepted %+v; a payload of %d bytes: %v, want ErrPayloadTooLarge", cfg, limit+1, err)
			}
			if open, err := g.IsGap(ctx, "s", 2); err != nil || !open {
				t.Fatalf("a refused fill changed the gap: open %v, %v", open, err)
			}
		}
		if n, err := g.Count(ctx, "s"); err != nil || n != 1 {
			t.Fatalf("Count = %d, %v; want the one gap left open", n, err)
		}
	})
}
