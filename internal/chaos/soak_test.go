package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/chaos"
	"github.com/seqlease/seqlease/internal/pgtest"
)

// EnvSoak sets how long TestSoak's load runs (a Go duration, e.g. 10m);
// `make soak` sets it from SOAK. Unset, the soak runs for shortSoak, so
// that `make test` exercises the whole harness once.
const EnvSoak = "SEQLEASE_SOAK"

// shortSoak is the soak's load time in `make test`.
const shortSoak = 15 * time.Second

// Soak settings.
const (
	soakSlots = 4 // worker processes running at a time
	// soakCheckEvery is the longest period of the mid-run audit and
	// progress check; a soak shorter than three periods checks every third
	// of its duration (checkPeriod), so that even the short run of make
	// test audits at least twice while the load runs.
	soakCheckEvery = 30 * time.Second
	// soakMaxUnresolved bounds, in the mid-run audits, how long past its
	// expiry a lease may stay unresolved: the cleaner's stream lease may
	// have to expire (1 s) and a cycle run, several times over if faults
	// keep hitting the cleaners.
	soakMaxUnresolved = 20 * time.Second
)

// checkPeriod is the period of the soak's mid-run checks for a soak of
// dur: soakCheckEvery, or a third of dur if that is shorter.
func checkPeriod(dur time.Duration) time.Duration { return min(soakCheckEvery, dur/3) }

// TestSoak runs multi-process load with faults for $SEQLEASE_SOAK against
// the test database, then prints the auditor's verdict and the load held;
// it fails on any violation. Without SEQLEASE_SOAK it runs for shortSoak
// (make test runs it so; make soak sets SEQLEASE_SOAK).
//
// Four worker processes at a time (four goroutines each, 1 s leases kept
// alive, half the commits through CommitTx, 30% of the results recorded for
// the Retry step, 2% releases, each process cleaning and campaigning for
// the singleton lease, clocks right, 10 min fast or 10 min slow) lease,
// work and commit in order on two streams, while every 1-3 s a fault hits:
// kill -9 of one worker at a random moment, or at an exact point of an
// operation, or of every worker; pg_terminate_backend of every connection,
// of the listeners or of the busy ones; SIGSTOP of a worker for 1.5-3 s,
// past its leases' TTL, then SIGCONT. Every 30 s (every third of the run if
// it is shorter than 90 s) the streams are audited (I1, I2, I4, I5, I6 with
// no lease unresolved 20 s past its expiry, the fenced writes and I8) and
// the pipeline must have progressed; a run of at least 15 s must hold at
// least two such checks.
func TestSoak(t *testing.T) {
	dur := shortSoak
	if d := os.Getenv(EnvSoak); d != "" {
		var err error
		dur, err = time.ParseDuration(d)
		require.NoError(t, err, EnvSoak)
	}
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	h, err := chaos.NewHarness(t.Context(), pgtest.URL(), schema, []string{"soak-a", "soak-b"})
	require.NoError(t, err)
	t.Cleanup(h.Close)
	require.NoError(t, h.Follow(t.Context()))
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	say := func(format string, args ...any) { fmt.Printf("soak: "+format+"\n", args...) }
	say("%v on %s (schema %s), streams soak-a and soak-b, %d worker processes at a time, seed %d", dur, redactURL(pgtest.URL()), schema, soakSlots, seed)

	skews := []time.Duration{0, 10 * time.Minute, -10 * time.Minute}
	config := func() chaos.WorkerConfig {
		return chaos.WorkerConfig{
			Concurrency: 4, TTL: time.Second, MaxWork: 20 * time.Millisecond, Interval: 200 * time.Millisecond,
			TxShare: 0.5, ResultShare: 0.3, ReleaseShare: 0.02, Contend: true, Skew: skews[rng.IntN(len(skews))],
		}
	}
	slots := make([]*chaos.Proc, soakSlots)
	start := func(i int, cfg chaos.WorkerConfig) {
		p, err := h.Spawn(cfg)
		require.NoError(t, err)
		slots[i] = p
	}
	for i := range slots {
		start(i, config())
	}

	period := checkPeriod(dur)
	began := time.Now()
	end := began.Add(dur)
	nextCheck := began.Add(period)
	lastAcks, lastCheck := int64(0), began
	audits := 0
	var violations []string
	ctx := t.Context()
	for time.Now().Before(end) {
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		for i, p := range slots { // a worker that ended by itself: killed at its phase, or failed
			select {
			case <-p.Exited():
				if p.Config.Die != "" && p.Killed() {
					h.Fault("kill -9 of a worker at " + strings.Split(p.Config.Die, "@")[0])
				}
				start(i, config())
			default:
			}
		}
		switch k := rng.IntN(100); {
		case k < 30:
			i := rng.IntN(len(slots))
			slots[i].Kill()
			h.Fault("kill -9 of a worker at a random moment")
			start(i, config())
		case k < 40:
			i := rng.IntN(len(slots))
			slots[i].Kill()
			cfg := config()
			phase := chaos.Phases[rng.IntN(len(chaos.Phases))]
			cfg.Die = fmt.Sprintf("%s@%d", phase, 1+rng.IntN(20))
			start(i, cfg) // it kills itself there soon, and is counted then
		case k < 43:
			for i := range slots {
				slots[i].Kill()
			}
			h.Fault("kill -9 of every worker at once")
			for i := range slots {
				start(i, config())
			}
		case k < 80:
			target := []string{chaos.TargetAll, chaos.TargetListeners, chaos.TargetBusy}[rng.IntN(3)]
			if n, err := h.Terminate(ctx, target); err == nil && n > 0 {
				h.Fault("pg_terminate_backend: " + target)
			}
		default:
			p := slots[rng.IntN(len(slots))]
			if p.Pause() == nil {
				h.Fault("SIGSTOP 1.5-3 s (past the TTL), then SIGCONT")
				time.Sleep(time.Duration(1500+rng.IntN(1500)) * time.Millisecond)
				require.NoError(t, p.Resume())
			}
		}
		if now := time.Now(); now.After(nextCheck) {
			// On a fixed schedule: a check delayed by a long fault (a
			// sleep and a pause take up to 6 s) does not push the next one
			// back, so a run of 3 periods of at least 5 s checks twice.
			nextCheck = nextCheck.Add(period)
			acks := h.Acks()
			v, err := h.Audit(ctx, soakMaxUnresolved)
			switch {
			case err != nil:
				say("mid-run audit failed to read (retried at the next check): %v", err)
			default:
				audits++
				violations = append(violations, v.Violations...)
			}
			if acks == lastAcks {
				violations = append(violations, fmt.Sprintf("no progress: no commit acknowledged in the check before %v", now.Sub(began).Round(time.Second)))
			}
			say("%v: %d commits acknowledged (%.0f/s in the last check), %d processes, %d faults, %d violations",
				now.Sub(began).Round(time.Second), acks, float64(acks-lastAcks)/now.Sub(lastCheck).Seconds(), h.Procs(), total(h.Faults()), len(violations))
			lastAcks, lastCheck = acks, now
		}
	}
	loadTime := time.Since(began)
	if dur >= shortSoak && audits < 2 {
		violations = append(violations, fmt.Sprintf("only %d mid-run audits in %v (every %v): want at least 2", audits, loadTime.Round(time.Second), period))
	}

	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := h.ShutdownAll(fctx); err != nil {
		violations = append(violations, err.Error())
	}
	violations = append(violations, h.Unexpected()...)
	require.NoError(t, h.Drain(fctx))
	h.StopFollow()
	v, err := h.Verify(fctx, 0)
	require.NoError(t, err)
	violations = append(violations, v.Violations...)

	say("load held for %v, then stopped, drained and verified", loadTime.Round(time.Second))
	fmt.Print(indent(summary(h, v)))
	c := v.Ledger
	say("throughput: %.0f entries leased/s, %.0f committed/s (%d acknowledged by the workers: %.0f/s)",
		float64(c.Entries)/loadTime.Seconds(), float64(c.Committed)/loadTime.Seconds(), h.Acks(), float64(h.Acks())/loadTime.Seconds())
	if len(violations) == 0 {
		checks := []string{}
		for _, r := range v.Audits {
			checks = append(checks, r.Stream+": "+strings.Join(r.Checks, ", "))
		}
		say("verdict: no violation (%s; CommitTx side rows; fenced writes; I8 on %d named-lease events; %d mid-run audits, every %v)",
			strings.Join(checks, "; "), v.LeaseEvents, audits, period)
		return
	}
	say("verdict: %d violations", len(violations))
	for _, x := range violations {
		say("  %s", x)
	}
	t.Fail()
}

func total(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

// redactURL hides a password in a URL.
func redactURL(u string) string {
	if i, j := strings.Index(u, "://"), strings.Index(u, "@"); i >= 0 && j > i {
		if k := strings.Index(u[i+3:j], ":"); k >= 0 {
			return u[:i+3+k] + ":xxx" + u[j:]
		}
	}
	return u
}
