package metrics_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/metrics"
)

// alerting is an Evaluator on a manual clock with the alerts it sent.
type alerting struct {
	e     *metrics.Evaluator
	clk   *clock
	alert []metrics.Alert
}

func newAlerting(t *testing.T, cfg metrics.EvaluatorConfig) *alerting {
	t.Helper()
	a := &alerting{clk: &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}}
	cfg.Now = a.clk.Now
	cfg.Sink = func(x metrics.Alert) { a.alert = append(a.alert, x) }
	e, err := metrics.NewEvaluator(&cfg)
	require.NoError(t, err)
	a.e = e
	return a
}

// take returns the alerts sent since the last take.
func (a *alerting) take() []metrics.Alert {
	out := a.alert
	a.alert = nil
	return out
}

func (a *alerting) firing(name string) bool {
	for _, x := range a.e.Alerts() {
		if x.Name == name {
			return x.Firing
		}
	}
	return false
}

func TestAlertExpirationRate(t *testing.T) {
	a := newAlerting(t, metrics.EvaluatorConfig{})
	a.e.Granted(100)
	a.e.Expired(5)
	require.Empty(t, a.take(), "5% is not above 5%")

	a.e.Expired(1)
	got := a.take()
	require.Len(t, got, 1)
	require.Equal(t, metrics.AlertExpirationRate, got[0].Name)
	require.Equal(t, metrics.LevelWarning, got[0].Level)
	require.True(t, got[0].Firing)
	require.InDelta(t, 0.06, got[0].Value, 1e-9)
	require.Equal(t, 0.05, got[0].Threshold)
	require.Contains(t, got[0].Message, "6.0% of the 100 leases")
	require.Equal(t, a.clk.Now(), got[0].At)

	a.e.Expired(3)
	a.e.Granted(10)
	require.Empty(t, a.take(), "no flood while it holds")

	a.e.Granted(90) // 9 of 200: 4.5%
	got = a.take()
	require.Len(t, got, 1)
	require.False(t, got[0].Firing)
	require.InDelta(t, 0.045, got[0].Value, 1e-9)
	require.False(t, a.firing(metrics.AlertExpirationRate))
}

func TestAlertExpirationRateWindowSlides(t *testing.T) {
	a := newAlerting(t, metrics.EvaluatorConfig{Window: time.Hour})
	a.e.Granted(20)
	a.e.Expired(2)
	require.Len(t, a.take(), 1)
	require.True(t, a.firing(metrics.AlertExpirationRate))

	a.clk.Advance(50 * time.Minute)
	a.e.Evaluate()
	require.Empty(t, a.take(), "still in the window")

	a.clk.Advance(11 * time.Minute) // the events are now older than the window
	a.e.Evaluate()
	got := a.take()
	require.Len(t, got, 1)
	require.False(t, got[0].Firing)
}

func TestAlertExpirationRateMinSamples(t *testing.T) {
	a := newAlerting(t, metrics.EvaluatorConfig{})
	a.e.Granted(19)
	a.e.Expired(10)
	require.Empty(t, a.take(), "fewer than MinSamples leases")
	a.e.Granted(1)
	require.Len(t, a.take(), 1)
}

func TestAlertMassExpiry(t *testing.T) {
	a := newAlerting(t, metrics.EvaluatorConfig{})
	a.e.Cycle(10)
	require.Empty(t, a.take(), "10 is not more than 10")
	a.e.Cycle(11)
	got := a.take()
	require.Len(t, got, 1)
	require.Equal(t, metrics.AlertMassExpiry, got[0].Name)
	require.Equal(t, metrics.LevelCritical, got[0].Level)
	require.True(t, got[0].Firing)
	require.Equal(t, 11.0, got[0].Value)
	require.Equal(t, 10.0, got[0].Threshold)
	a.e.Cycle(500)
	require.Empty(t, a.take(), "no flood while it holds")
	a.e.Cycle(10)
	got = a.take()
	require.Len(t, got, 1)
	require.False(t, got[0].Firing)
}

func TestAlertRecoveryFailureRate(t *testing.T) {
	a := newAlerting(t, metrics.EvaluatorConfig{})
	for range 99 {
		a.e.Recovery(true)
	}
	a.e.Recovery(false)
	require.Empty(t, a.take(), "1% is not above 1%")
	a.e.Recovery(false)
	got := a.take()
	require.Len(t, got, 1)
	require.Equal(t, metrics.AlertRecoveryFailureRate, got[0].Name)
	require.Equal(t, metrics.LevelWarning, got[0].Level)
	require.True(t, got[0].Firing)
	require.InDelta(t, 2.0/101, got[0].Value, 1e-9)
	require.Equal(t, 0.01, got[0].Threshold)
	for range 98 {
		a.e.Recovery(true)
	}
	require.Empty(t, a.take(), "2 of 199 is still above 1%")
	a.e.Recovery(true)
	got = a.take()
	require.Len(t, got, 1, "2 of 200 is 1%")
	require.False(t, got[0].Firing)
}

func TestAlertOpenGaps(t *testing.T) {
	a := newAlerting(t, metrics.EvaluatorConfig{})
	a.e.OpenGaps(100)
	require.Empty(t, a.take())
	a.e.OpenGaps(101)
	got := a.take()
	require.Len(t, got, 1)
	require.Equal(t, metrics.AlertOpenGaps, got[0].Name)
	require.Equal(t, metrics.LevelWarning, got[0].Level)
	require.True(t, got[0].Firing)
	require.Equal(t, 101.0, got[0].Value)
	a.e.OpenGaps(150)
	require.Empty(t, a.take())
	a.e.OpenGaps(100)
	got = a.take()
	require.Len(t, got, 1)
	require.False(t, got[0].Firing)
}

func TestAlertThresholds(t *testing.T) {
	a := newAlerting(t, metrics.EvaluatorConfig{
		MinSamples: 1,
		Thresholds: metrics.Thresholds{ExpirationRate: 0.5, MassExpiry: -1, RecoveryFailureRate: 0.2, OpenGaps: 3},
	})
	a.e.Granted(2)
	a.e.Expired(1)
	require.Empty(t, a.take(), "50% is not above 50%")
	a.e.Expired(1)
	require.Len(t, a.take(), 1)
	a.e.Cycle(1000)
	require.Empty(t, a.take(), "a negative threshold turns the alert off")
	a.e.OpenGaps(4)
	require.Len(t, a.take(), 1)
	names := []string{}
	for _, x := range a.e.Alerts() {
		names = append(names, x.Name)
	}
	require.Equal(t, []string{metrics.AlertExpirationRate, metrics.AlertRecoveryFailureRate, metrics.AlertOpenGaps, metrics.AlertHistoryLost, metrics.AlertParked,
		metrics.AlertNamedLeaseTimeouts, metrics.AlertNamedLeaseLosses, metrics.AlertNamedLeaseLongHeld}, names)
}

// TestAlertHistoryLost checks that the lost history alert fires, critical,
// on the first refused stream or name, sends nothing more while some stay
// refused, resolves when none is, and can be turned off.
func TestAlertHistoryLost(t *testing.T) {
	a := newAlerting(t, metrics.EvaluatorConfig{})
	a.e.HistoryLost(0)
	require.Empty(t, a.take())
	a.e.HistoryLost(1)
	got := a.take()
	require.Len(t, got, 1)
	require.Equal(t, metrics.AlertHistoryLost, got[0].Name)
	require.Equal(t, metrics.LevelCritical, got[0].Level)
	require.True(t, got[0].Firing)
	require.Equal(t, 1.0, got[0].Value)
	require.Contains(t, got[0].Message, "lost history")
	a.e.HistoryLost(3)
	require.Empty(t, a.take())
	a.e.HistoryLost(0)
	got = a.take()
	require.Len(t, got, 1)
	require.False(t, got[0].Firing)

	off := newAlerting(t, metrics.EvaluatorConfig{Thresholds: metrics.Thresholds{HistoryLost: -1}})
	off.e.HistoryLost(5)
	require.Empty(t, off.take(), "a negative threshold turns the alert off")
	for _, x := range off.e.Alerts() {
		require.NotEqual(t, metrics.AlertHistoryLost, x.Name)
	}
}

// TestAlertNamedLeases: the named-lease timeouts and losses alerts count in
// the window and resolve as it slides past them; the long-held alert
// follows the Monitor's last check; negative thresholds turn them off.
func TestAlertNamedLeases(t *testing.T) {
	a := newAlerting(t, metrics.EvaluatorConfig{Thresholds: metrics.Thresholds{NamedLeaseTimeouts: 2}})
	a.e.NamedLeaseTimeout()
	a.e.NamedLeaseTimeout()
	require.Empty(t, a.take(), "2 timeouts are not above 2")
	a.e.NamedLeaseTimeout()
	got := a.take()
	require.Len(t, got, 1)
	require.Equal(t, metrics.AlertNamedLeaseTimeouts, got[0].Name)
	require.Equal(t, metrics.LevelWarning, got[0].Level)
	require.True(t, got[0].Firing)
	require.Equal(t, 3.0, got[0].Value)
	require.Contains(t, got[0].Message, "3 named-lease acquires timed out")

	a.e.NamedLeaseLost()
	got = a.take()
	require.Len(t, got, 1, "any loss fires by default")
	require.Equal(t, metrics.AlertNamedLeaseLosses, got[0].Name)
	require.True(t, got[0].Firing)

	a.clk.Advance(time.Hour + time.Hour/60)
	a.e.Evaluate()
	got = a.take()
	require.Len(t, got, 2, "both resolve when the window slides past")
	require.False(t, got[0].Firing)
	require.False(t, got[1].Firing)

	a.e.NamedLeasesLongHeld(0)
	require.Empty(t, a.take())
	a.e.NamedLeasesLongHeld(2)
	got = a.take()
	require.Len(t, got, 1)
	require.Equal(t, metrics.AlertNamedLeaseLongHeld, got[0].Name)
	require.True(t, got[0].Firing)
	require.Equal(t, 2.0, got[0].Value)
	a.e.NamedLeasesLongHeld(0)
	got = a.take()
	require.Len(t, got, 1)
	require.False(t, got[0].Firing)

	off := newAlerting(t, metrics.EvaluatorConfig{Thresholds: metrics.Thresholds{
		NamedLeaseTimeouts: -1, NamedLeaseLosses: -1, NamedLeaseLongHeld: -1}})
	off.e.NamedLeaseTimeout()
	off.e.NamedLeaseLost()
	off.e.NamedLeasesLongHeld(5)
	require.Empty(t, off.take(), "negative thresholds turn the alerts off")
}
