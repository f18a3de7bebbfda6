package cleanup_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/ttl"
)

var _ cleanup.FleetBooster = (*ttl.Fleet)(nil)

// twoProcesses returns two handles on one store: on PostgreSQL two Stores
// on one schema, each with a pool of its own (two processes, as far as the
// database can tell); in memory the same Store (the in-process
// equivalent).
func twoProcesses(t *testing.T) map[string][2]backend {
	mem := memory.New(nil)
	schema := pgtest.NewSchema(t, pgtest.Shared(t, false))
	open := func() backend {
		pool, err := pgtest.NewPool(t.Context(), &pgtest.Options{MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := postgres.New(pool, &postgres.Config{Schema: schema})
		require.NoError(t, err)
		return s
	}
	return map[string][2]backend{"memory": {mem, mem}, "postgres": {open(), open()}}
}

// TestCascadeBoostsTheFleet: a mass expiry that puts process A's cleanup
// in cascade mode raises the TTL process B's Leaser hands out (B's Fleet
// reads the boost by its poll); once the boost's Hold is over, B is back
// to its normal TTL.
func TestCascadeBoostsTheFleet(t *testing.T) {
	t.Parallel()
	for name, ps := range twoProcesses(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, b := ps[0], ps[1]
			raiser, err := ttl.NewFleet(a.(ttl.FleetStore), nil)
			require.NoError(t, err)
			sv, err := cleanup.New(a, &cleanup.Config{
				Cascade: &cleanup.CascadeConfig{Threshold: 10, TTLFactor: 3, Fleet: raiser, Hold: 2 * time.Second},
			})
			require.NoError(t, err)
			defer sv.Stop()

			fleet, err := ttl.NewFleet(b.(ttl.FleetStore), &ttl.FleetConfig{Poll: 5 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, fleet.Start(t.Context()))
			defer fleet.Stop()
			l, err := sequence.New(b.(sequence.Store), &sequence.Config{AdaptiveTTL: &ttl.Policy{Min: 10 * time.Second, Max: time.Minute, Boost: fleet}, UnorderedOnly: true})
			require.NoError(t, err)
			ttlOf := func() time.Duration {
				x, err := l.Lease(t.Context(), "b-work", nil)
				require.NoError(t, err)
				require.NoError(t, x.Release(context.Background()))
				return x.ExpiresAt().Sub(x.LeasedAt())
			}
			require.Equal(t, 10*time.Second, ttlOf(), "before the cascade")

			leaseExpired(t, a, "mass", 50)
			res, err := sv.RunOnce(t.Context())
			require.NoError(t, err)
			require.True(t, res.Cascade, "a mass expiry: cascade mode")
			rows, err := b.(store.Settings).ListSettings(t.Context())
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Equal(t, store.SettingTTLBoost, rows[0].Key, "the boost is in the table")
			require.Eventually(t, func() bool { return l.DefaultTTL() == 30*time.Second }, 10*time.Second, time.Millisecond,
				"process B follows the boost")
			require.Equal(t, 30*time.Second, ttlOf(), "B's leases get the boosted TTL")
			require.Eventually(t, func() bool { return l.DefaultTTL() == 10*time.Second }, 10*time.Second, 5*time.Millisecond,
				"the boost ends at its Hold")
			require.Equal(t, 10*time.Second, ttlOf(), "after the boost")
		})
	}
}

func TestCascadeHoldRefused(t *testing.T) {
	t.Parallel()
	for _, hold := range []time.Duration{-time.Second, store.MaxTTL + 1} {
		_, err := cleanup.New(memory.New(nil), &cleanup.Config{Cascade: &cleanup.CascadeConfig{Hold: hold}})
		require.ErrorIs(t, err, store.ErrInvalidArgument)
		require.ErrorContains(t, err, "Cascade.Hold")
	}
}
