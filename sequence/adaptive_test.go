package sequence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/ttl"
)

// loadSignal is a settable load.
type loadSignal struct{ bits atomic.Int64 } // the load in thousandths

func (s *loadSignal) set(v float64) { s.bits.Store(int64(v * 1000)) }
func (s *loadSignal) load() float64 { return float64(s.bits.Load()) / 1000 }

type fixedBoost float64

func (f fixedBoost) Factor() float64 { return float64(f) }

// TestAdaptiveTTL: a lease whose call names no TTL gets the policy's, which
// follows the load and the boost; a TTL named by the call wins.
func TestAdaptiveTTL(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			var sig loadSignal
			var boost atomic.Value
			boost.Store(fixedBoost(1))
			p := &ttl.Policy{Min: 10 * time.Second, Max: 50 * time.Second, Signal: sig.load,
				Boost: ttl.Booster(boosterFunc(func() float64 { return float64(boost.Load().(fixedBoost)) }))}
			l, err := sequence.New(b.store, &sequence.Config{Barrier: b.barrier, Now: b.now, MaxTTL: time.Minute, AdaptiveTTL: p})
			require.NoError(t, err)
			p.Min = time.Hour // the Leaser keeps a copy
			ttlOf := func(opts *sequence.LeaseOpts) time.Duration {
				x, err := l.Lease(ctx, "policy", opts)
				require.NoError(t, err)
				require.NoError(t, x.Release(ctx))
				return x.ExpiresAt().Sub(x.LeasedAt())
			}
			require.Equal(t, 10*time.Second, ttlOf(nil), "idle: Min")
			sig.set(0.5)
			require.Equal(t, 30*time.Second, ttlOf(nil), "half loaded: half way")
			sig.set(1)
			require.Equal(t, 50*time.Second, ttlOf(nil), "saturated: Max")
			sig.set(0)
			boost.Store(fixedBoost(2))
			require.Equal(t, 20*time.Second, ttlOf(nil), "boosted")
			require.Equal(t, 7*time.Second, ttlOf(&sequence.LeaseOpts{TTL: 7 * time.Second}), "the call's TTL wins")
			boost.Store(fixedBoost(1))
			l.BoostTTL(3)
			require.Equal(t, 30*time.Second, ttlOf(nil), "the in-process boost multiplies the policy's TTL")
			l.BoostTTL(100)
			require.Equal(t, 50*time.Second, ttlOf(nil), "capped at the policy's Max")
			l.BoostTTL(1)
			xs, err := l.LeaseN(ctx, "policy", 2, nil)
			require.NoError(t, err)
			for _, x := range xs {
				require.Equal(t, 10*time.Second, x.ExpiresAt().Sub(x.LeasedAt()), "LeaseN too")
				require.NoError(t, x.Release(ctx))
			}
		})
	}
}

type boosterFunc func() float64

func (f boosterFunc) Factor() float64 { return f() }

func TestAdaptiveTTLRefusals(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for _, c := range []struct {
		name  string
		cfg   sequence.Config
		field string
	}{
		{"no Min", sequence.Config{AdaptiveTTL: &ttl.Policy{Max: time.Minute}}, "Min"},
		{"Max below Min", sequence.Config{AdaptiveTTL: &ttl.Policy{Min: time.Minute, Max: time.Second}}, "Max"},
		{"Max above MaxTTL", sequence.Config{MaxTTL: time.Minute, AdaptiveTTL: &ttl.Policy{Min: time.Second, Max: 2 * time.Minute}}, "Max"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.UnorderedOnly = true
			_, err := sequence.New(s, &c.cfg)
			require.ErrorIs(t, err, store.ErrInvalidArgument)
			var fe *ttl.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, c.field, fe.Field)
			require.ErrorContains(t, err, "Config.AdaptiveTTL: ttl: Policy."+c.field)
		})
	}
	_, err := sequence.New(s, &sequence.Config{DefaultTTL: time.Second, AdaptiveTTL: &ttl.Policy{Min: time.Second, Max: time.Minute}, UnorderedOnly: true})
	require.ErrorIs(t, err, store.ErrInvalidArgument)
	require.ErrorContains(t, err, "Config.AdaptiveTTL", "DefaultTTL and AdaptiveTTL are exclusive")
}
