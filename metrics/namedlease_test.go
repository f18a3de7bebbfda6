package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/metrics"
	"github.com/seqlease/seqlease/store/memory"
)

// TestNamedLeaseMonitorGaugeAndAlerts drives a lease.Manager and its
// Monitor with the named-lease observer: a timed-out acquire counts as
// result timeout and fires NamedLeaseTimeouts, a force-released lease
// fires NamedLeaseLosses, and the Monitor's checks feed the holdings gauge
// by status and the NamedLeaseLongHeld alert, which resolves when the
// stuck holding is gone.
func TestNamedLeaseMonitorGaugeAndAlerts(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(ctx)) })
	b := &bundle{reader: reader}
	a := newAlerting(t, metrics.EvaluatorConfig{})
	m, err := metrics.New(&metrics.Config{MeterProvider: mp, Alerts: a.e})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	nl := m.NamedLeases()

	s := memory.New(nil)
	bob, err := lease.New(s, &lease.Config{Owner: "bob", Observer: nl})
	require.NoError(t, err)
	defer bob.Stop()
	alice, err := lease.New(s, &lease.Config{Owner: "alice", Observer: nl})
	require.NoError(t, err)
	defer alice.Stop()

	_, err = bob.TryAcquire(ctx, "x", &lease.AcquireOpts{TTL: time.Hour, Kind: "job"})
	require.NoError(t, err)
	for range metrics.DefaultNamedLeaseTimeouts + 1 {
		_, err = alice.Acquire(ctx, "x", &lease.AcquireOpts{Timeout: time.Millisecond, Kind: "job"})
		require.ErrorIs(t, err, lease.ErrTimeout)
	}
	acq := points(t, b.collect(t)[metrics.NameNamedLeaseAcquisitions])
	require.Equal(t, int64(metrics.DefaultNamedLeaseTimeouts+1), acq["kind=job,result=timeout"])
	require.True(t, a.firing(metrics.AlertNamedLeaseTimeouts))
	require.False(t, a.firing(metrics.AlertNamedLeaseLosses))

	young, err := alice.TryAcquire(ctx, "y", &lease.AcquireOpts{TTL: time.Hour, Kind: "job"})
	require.NoError(t, err)
	_, err = bob.ForceRelease(ctx, "bob", nil) // its own Manager: the lease ends at once
	require.NoError(t, err)
	require.True(t, a.firing(metrics.AlertNamedLeaseLosses), "bob's lease was lost")

	_, ok := b.collect(t)[metrics.NameNamedLeaseHoldings]
	require.False(t, ok, "no gauge before a Monitor checked")
	mo, err := alice.NewMonitor(&lease.MonitorConfig{StuckAfter: time.Nanosecond, Observer: nl})
	require.NoError(t, err)
	_, err = mo.Check(ctx)
	require.NoError(t, err)
	got := b.collect(t)[metrics.NameNamedLeaseHoldings]
	require.Equal(t, "{lease}", got.Unit)
	require.NotEmpty(t, got.Description)
	// (pending: alice's timed-out acquires may still be announced; see
	// TestNamedLeaseHoldingsByStatus)
	require.Equal(t, map[string]int64{"status=active": 0, "status=long-held": 1, "status=expired": 0}, withoutPending(points(t, got)))
	require.True(t, a.firing(metrics.AlertNamedLeaseLongHeld))

	calm, err := alice.NewMonitor(&lease.MonitorConfig{StuckAfter: time.Hour, Observer: nl})
	require.NoError(t, err)
	_, err = calm.Check(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"status=active": 1, "status=long-held": 0, "status=expired": 0},
		withoutPending(points(t, b.collect(t)[metrics.NameNamedLeaseHoldings])))
	require.False(t, a.firing(metrics.AlertNamedLeaseLongHeld), "resolved")
	require.NoError(t, young.Close(ctx))
}

// TestNamedLeaseHoldingsByStatus: a Monitor's check feeds the holdings
// gauge with every status it counted: active (live, under StuckAfter),
// long-held, expired (not yet marked) and pending (the waiters), the last
// left out when the store lists no waiters.
func TestNamedLeaseHoldingsByStatus(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(ctx)) })
	b := &bundle{reader: reader}
	m, err := metrics.New(&metrics.Config{MeterProvider: mp})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	nl := m.NamedLeases()

	nl.Checked(ctx, lease.MonitorResult{Active: 3, Stuck: []lease.Info{{Name: "old"}}, Expired: 2, Pending: 4})
	require.Equal(t, map[string]int64{"status=active": 2, "status=long-held": 1, "status=expired": 2, "status=pending": 4},
		points(t, b.collect(t)[metrics.NameNamedLeaseHoldings]))
	nl.Checked(ctx, lease.MonitorResult{Active: 1, Pending: -1})
	require.Equal(t, map[string]int64{"status=active": 1, "status=long-held": 0, "status=expired": 0},
		points(t, b.collect(t)[metrics.NameNamedLeaseHoldings]), "no waiters listed: no pending point")
}

func withoutPending(p map[string]int64) map[string]int64 {
	delete(p, "status=pending")
	return p
}
