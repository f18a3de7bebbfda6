package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/chaos"
)

// TestKill9 kills worker processes with SIGKILL while they lease, work and
// commit in order on two streams, each running a cleanup loop: at random
// moments (from outside, so the victim is wherever it happens to be), at
// each exact point of an operation (the worker kills itself there: just
// leased; halfway through its work; inside CommitTx's transaction after the
// conditional write; while a batch of commits of both streams is in flight;
// after a successful commit, before acknowledging it),
// and every worker at once. After each fault the pipeline must go on and
// the audit of the load find nothing wrong (afterFault); at the end the
// ledger, the side rows, the fenced writes and the named-lease history must
// be clean.
func TestKill9(t *testing.T) {
	h := newHarness(t, "kill-a", "kill-b")
	require.NoError(t, h.Follow(t.Context()))
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	procs := make([]*chaos.Proc, 3)
	for i := range procs {
		procs[i] = spawn(t, h, load())
	}
	progress(t, h, 20)

	for range 2 {
		for _, phase := range chaos.Phases {
			i := rng.IntN(len(procs))
			procs[i].Kill()
			h.Fault("kill -9 at a random moment")
			afterFault(t, h, "kill -9 at a random moment", 5, 0)

			cfg := load()
			cfg.Die = fmt.Sprintf("%s@%d", phase, 1+rng.IntN(8))
			if phase == chaos.PhaseBatch {
				// Batches span both streams when commits of both are
				// ready together: more goroutines, shorter work.
				cfg.Concurrency, cfg.MaxWork = 8, time.Millisecond
				cfg.Die = fmt.Sprintf("%s@%d", phase, 1+rng.IntN(3))
			}
			p, err := h.Spawn(cfg)
			require.NoError(t, err)
			select {
			case <-p.Exited():
			case <-time.After(progressTimeout):
				t.Fatalf("worker with Die %s still alive", cfg.Die)
			}
			require.True(t, p.Killed(), "worker with Die %s: %v", cfg.Die, p.State())
			h.Fault("kill -9 at " + phase)
			procs[i] = spawn(t, h, load())
			afterFault(t, h, "kill -9 at "+phase, 10, 0)
		}
	}

	killed := time.Now()
	for _, p := range procs {
		p.Kill()
	}
	h.Fault("kill -9 of every worker at once")
	// Nobody cleans while every worker is dead: the age of unresolved
	// leases is judged after the new workers made progress.
	ctx, cancel := context.WithTimeout(t.Context(), progressTimeout)
	defer cancel()
	require.NoError(t, auditLoad(ctx, t, h, 0).Err(), "with every worker dead")
	for i := range procs {
		procs[i] = spawn(t, h, load())
	}
	afterFault(t, h, "kill -9 of every worker at once", 20, time.Since(killed))

	v := finish(t, h, 5)
	require.Positive(t, v.Ledger.Gaps, "the killed workers' leases became gaps")
}
