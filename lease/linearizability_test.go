package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
)

// The history of named-lease operations is checked for linearizability
// against a model of one name (porcupine, partitioned by name).
//
// The database clock decides expiry, and the client cannot read it; so the
// model never guesses it. Every operation that reaches the backend returns
// the backend's clock reading of its decision: an acquire its AcquiredAt
// (and ExpiresAt), a refused acquire the *HeldError's AsOf (and the
// holder's ExpiresAt), a renewal its RenewedAt (and the new ExpiresAt). The
// model judges each operation with its own reading against the expiry the
// earlier operations reported:
//
//   - acquired by X with fence F at t: F is the last fence + 1, and the
//     name was free: never held, released, or t >= its expiry;
//   - held by (O, F, E) at t: the holding is exactly (O, F, E), not
//     released, and t < E;
//   - renewed by (X, F) at t: (X, F) is the holding, not released, t < its
//     expiry; the expiry becomes the new one;
//   - released by (X, F): the holding ends if it is (X, F); a superseded
//     fence is left alone.
//
// An operation whose outcome the caller cannot know (an error other than
// the backend's refusal, or a renewal that failed: Lease.Renew may fail
// locally after the backend renewed, when the local deadline passes
// meanwhile) may or may not have taken effect: the model is
// nondeterministic there, and a holding whose expiry is unknown accepts the
// next report of it. Such operations are pending until the end of the
// history.

type linKind int

const (
	linAcquire linKind = iota
	linRenew
	linRelease
)

// linInput is one call: the name, the caller's owner and, for renew and
// release, the fence it holds.
type linInput struct {
	kind  linKind
	name  string
	owner string
	fence int64
}

type linResult int

const (
	linAcquired linResult = iota // fence, at, expires
	linHeld                      // owner, fence, at, expires of the holder
	linRenewed                   // at, expires
	linReleased
	linFailed  // a renewal the backend or the handle refused
	linUnknown // the outcome is unknown
)

type linOutput struct {
	result      linResult
	owner       string
	fence       int64
	at, expires int64 // the backend's clock, in microseconds
}

// linState is the holding of one name as the model knows it.
type linState struct {
	fence   int64 // 0: never acquired
	owner   string
	expires int64
	ended   bool // released
	unknown bool // the expiry is unknown: an operation of unknown outcome may have moved it
}

func (s linState) holds(owner string, fence int64) bool {
	return s.fence == fence && s.owner == owner && !s.ended
}

func linStep(state, input, output any) []any {
	s, in, out := state.(linState), input.(linInput), output.(linOutput)
	switch in.kind {
	case linAcquire:
		switch out.result {
		case linAcquired:
			free := s.fence == 0 || s.ended || s.unknown || out.at >= s.expires
			if out.fence == s.fence+1 && free {
				return []any{linState{fence: out.fence, owner: in.owner, expires: out.expires}}
			}
		case linHeld:
			if s.holds(out.owner, out.fence) && out.at < out.expires && (s.unknown || s.expires == out.expires) {
				s.expires, s.unknown = out.expires, false
				return []any{s}
			}
		case linUnknown:
			return []any{s, linState{fence: s.fence + 1, owner: in.owner, unknown: true}}
		}
	case linRenew:
		switch out.result {
		case linRenewed:
			if s.holds(in.owner, in.fence) && (s.unknown || out.at < s.expires) {
				s.expires, s.unknown = out.expires, false
				return []any{s}
			}
		case linFailed, linUnknown:
			if s.holds(in.owner, in.fence) {
				moved := s
				moved.unknown = true
				return []any{s, moved}
			}
			return []any{s}
		}
	case linRelease:
		ended := s
		ended.ended, ended.unknown = true, false
		switch {
		case s.fence < in.fence: // never issued to the caller
		case out.result == linReleased && s.fence == in.fence:
			return []any{ended}
		case out.result == linReleased:
			return []any{s} // superseded: left alone
		case s.fence == in.fence:
			return []any{s, ended}
		default:
			return []any{s}
		}
	}
	return nil
}

var linModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byName := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range history {
			name := op.Input.(linInput).name
			if _, ok := byName[name]; !ok {
				names = append(names, name)
			}
			byName[name] = append(byName[name], op)
		}
		out := make([][]porcupine.Operation, len(names))
		for i, name := range names {
			out[i] = byName[name]
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: linStep,
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		op := [...]string{"acquire", "renew", "release"}[in.kind]
		res := [...]string{"acquired", "held by", "renewed", "released", "failed", "unknown"}[out.result]
		return fmt.Sprintf("%s(%s, %s, #%d) -> %s %s #%d at %d until %d", op, in.name, in.owner, in.fence, res,
			out.owner, out.fence, out.at, out.expires)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(linState)) },
}).ToModel()

// recorder collects the operations of a run, on one monotonic clock.
type recorder struct {
	base    time.Time
	mu      sync.Mutex
	ops     []porcupine.Operation
	pending []int // indexes of operations of unknown outcome
}

func (r *recorder) now() int64 { return time.Since(r.base).Nanoseconds() }

func (r *recorder) add(client int, in linInput, call int64, out linOutput) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if out.result == linUnknown || out.result == linFailed {
		r.pending = append(r.pending, len(r.ops))
	}
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: r.now()})
}

// history returns the operations, those of unknown outcome pending until
// after the last one returned.
func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.now() + 1
	for _, i := range r.pending {
		r.ops[i].Return = end
	}
	return r.ops
}

// linWorkload has clients (goroutines) of the managers fight for a few names
// for d or until each made maxOps operations: try-acquire with short TTLs,
// sometimes renew, hold a little (sometimes past the TTL), then release or
// abandon the lease so that others take it over at its expiry.
// With strict, errors of acquire and release fail t (on a sound backend
// they do not happen).
func linWorkload(t *testing.T, managers []*lease.Manager, perManager int, d time.Duration, maxOps int, strict bool) (*recorder, map[string]int) {
	r := &recorder{base: time.Now()}
	names := []string{"a", "b", "c"}
	ttls := []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}
	ctx := t.Context()
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	counts := map[string]int{}
	count := func(what string) { mu.Lock(); counts[what]++; mu.Unlock() }
	var wg sync.WaitGroup
	for mi, m := range managers {
		// A grant that arrives past its local deadline (a TTL of a few
		// milliseconds, a slow round trip) is released at once and its
		// TryAcquire fails with ErrExpired: the release, as a client of its
		// own, whose outcome is unknown.
		lateClient := len(managers)*perManager + mi
		lease.OnLate(m, func(name string, fence int64) {
			r.add(lateClient, linInput{kind: linRelease, name: name, owner: m.Owner(), fence: fence}, r.now(), linOutput{result: linUnknown})
		})
		// A holding whose renewal had an unknown outcome (or landed after
		// its lease ended) is released in the background: a release of
		// unknown outcome too.
		lease.OnCleanup(m, func(name string, fence int64) {
			r.add(lateClient, linInput{kind: linRelease, name: name, owner: m.Owner(), fence: fence}, r.now(), linOutput{result: linUnknown})
		})
		for g := range perManager {
			client := mi*perManager + g
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(client), 42))
				for ops := 0; ops < maxOps && time.Now().Before(deadline); ops++ {
					name := names[rng.IntN(len(names))]
					ttl := ttls[rng.IntN(len(ttls))]
					in := linInput{kind: linAcquire, name: name, owner: m.Owner()}
					call := r.now()
					l, err := m.TryAcquire(ctx, name, &lease.AcquireOpts{TTL: ttl})
					var held *lease.HeldError
					switch {
					case err == nil:
						r.add(client, in, call, linOutput{result: linAcquired, fence: l.Fence(),
							at: l.AcquiredAt().UnixMicro(), expires: l.ExpiresAt().UnixMicro()})
						count("acquired")
					case errors.As(err, &held):
						r.add(client, in, call, linOutput{result: linHeld, owner: held.Owner, fence: held.Fence,
							at: held.AsOf.UnixMicro(), expires: held.ExpiresAt.UnixMicro()})
						count("held")
						time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
						continue
					case errors.Is(err, lease.ErrExpired):
						// Granted past its local deadline, then released
						// (OnLate): unknown to the caller.
						r.add(client, in, call, linOutput{result: linUnknown})
						count("expired on arrival")
						continue
					default:
						r.add(client, in, call, linOutput{result: linUnknown})
						assert(t, !strict, "TryAcquire %s: %v", name, err)
						continue
					}
					for range rng.IntN(3) {
						time.Sleep(time.Duration(rng.Int64N(int64(ttl / 2))))
						in := linInput{kind: linRenew, name: name, owner: m.Owner(), fence: l.Fence()}
						call := r.now()
						if err := l.Renew(ctx); err != nil {
							r.add(client, in, call, linOutput{result: linFailed})
							count("renew failed")
						} else {
							r.add(client, in, call, linOutput{result: linRenewed, at: l.RenewedAt().UnixMicro(),
								expires: l.ExpiresAt().UnixMicro()})
							count("renewed")
						}
					}
					if rng.IntN(4) == 0 {
						count("abandoned") // taken over at its expiry
						continue
					}
					time.Sleep(time.Duration(rng.Int64N(int64(ttl * 3 / 2)))) // sometimes past the expiry
					in = linInput{kind: linRelease, name: name, owner: m.Owner(), fence: l.Fence()}
					call = r.now()
					if err := l.Release(ctx); err != nil {
						r.add(client, in, call, linOutput{result: linUnknown})
						assert(t, !strict, "Release %s#%d: %v", name, l.Fence(), err)
						continue
					}
					r.add(client, in, call, linOutput{result: linReleased})
					count("released")
				}
			})
		}
	}
	wg.Wait()
	return r, counts
}

// assert reports a failure from any goroutine (never FailNow).
func assert(t *testing.T, ok bool, format string, args ...any) {
	if !ok {
		t.Errorf(format, args...)
	}
}

// checkLinearizable checks the history with porcupine; on a violation, with
// visualize, it writes porcupine's visualization to a file and names it.
func checkLinearizable(t *testing.T, history []porcupine.Operation, visualize bool) porcupine.CheckResult {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(linModel, history, 20*time.Second)
	if res == porcupine.Illegal && visualize {
		if f, err := os.CreateTemp("", "lease-linearizability-*.html"); err == nil {
			if porcupine.Visualize(linModel, info, f) == nil {
				t.Logf("the history is not linearizable: see %s", f.Name())
			}
			f.Close()
		}
	}
	return res
}

func newLinManager(t *testing.T, s lease.Store, owner string) *lease.Manager {
	t.Helper()
	m, err := lease.New(s, &lease.Config{Owner: owner, CleanupInterval: -1, SafetyMargin: 2 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	return m
}

// TestNamedLeasesLinearizable runs the workload on the memory backend (two
// Managers on one store) and on PostgreSQL (two Managers on two pools of
// their own, two processes as far as the database can tell), and checks the
// history.
func TestNamedLeasesLinearizable(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		runLinearizable(t, 2*time.Second, func() []*lease.Manager {
			s := memory.New(nil)
			return []*lease.Manager{newLinManager(t, s, "p1"), newLinManager(t, s, "p2")}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		runLinearizable(t, 3*time.Second, func() []*lease.Manager {
			schema := pgtest.NewSchema(t, pgtest.Shared(t, false))
			var managers []*lease.Manager
			for _, owner := range []string{"p1", "p2"} {
				pool, err := pgtest.NewPool(t.Context(), &pgtest.Options{MaxConns: 4})
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				s, err := postgres.New(pool, &postgres.Config{Schema: schema})
				require.NoError(t, err)
				managers = append(managers, newLinManager(t, s, owner))
			}
			return managers
		})
	})
}

// runLinearizable runs the workload for d on the Managers open returns, on a
// fresh store, and checks its history. A check that cannot decide in its
// time (porcupine.Unknown: on a loaded machine the operations overlap more,
// and unknown outcomes multiply the orders to try) is no verdict: the
// workload runs again on a fresh store, up to three tries in all. An
// Illegal history fails at once.
func runLinearizable(t *testing.T, d time.Duration, open func() []*lease.Manager) {
	t.Helper()
	for try := 1; ; try++ {
		r, counts := linWorkload(t, open(), 4, d, 1000, true)
		history := r.history()
		start := time.Now()
		res := checkLinearizable(t, history, true)
		t.Logf("%d operations %v checked in %v: %v", len(history), counts, time.Since(start).Round(time.Millisecond), res)
		if res == porcupine.Unknown && try < 3 {
			continue
		}
		require.Equal(t, porcupine.Ok, res)
		require.Positive(t, counts["acquired"])
		require.Positive(t, counts["held"])
		return
	}
}

// doubleGrant is a backend that breaks mutual exclusion: one refused acquire
// in three is turned into a grant of the next fence, as if the name were
// free.
type doubleGrant struct {
	lease.Store
	mu sync.Mutex
	n  int
}

func (s *doubleGrant) AcquireLeases(ctx context.Context, reqs []store.AcquireLeaseRequest, p *store.LeaseBatchParams) []store.AcquireLeaseResult {
	res := s.Store.AcquireLeases(ctx, reqs, p)
	for i, r := range res {
		var held *store.HeldError
		if !errors.As(r.Err, &held) {
			continue
		}
		s.mu.Lock()
		s.n++
		lie := s.n%3 == 0
		s.mu.Unlock()
		if lie {
			res[i] = store.AcquireLeaseResult{Lease: store.NamedLease{Name: reqs[i].Name, Owner: reqs[i].Owner, Fence: held.Fence + 1,
				AcquiredAt: held.AsOf, RenewedAt: held.AsOf, ExpiresAt: held.AsOf.Add(reqs[i].TTL), AsOf: held.AsOf}}
		}
	}
	return res
}

// TestLinearizabilityCheckFindsDoubleGrants runs the workload on a backend
// that grants held names: the check must report the history illegal.
func TestLinearizabilityCheckFindsDoubleGrants(t *testing.T) {
	t.Parallel()
	s := &doubleGrant{Store: memory.New(nil)}
	managers := []*lease.Manager{newLinManager(t, s, "p1"), newLinManager(t, s, "p2")}
	r, _ := linWorkload(t, managers, 3, 500*time.Millisecond, 100, false)
	require.Equal(t, porcupine.Illegal, checkLinearizable(t, r.history(), false))
}

// TestLinearizabilityModel feeds the model fabricated histories: legal ones
// pass, and overlapping holdings, stale renewals, false "held" answers and
// reused fences are reported.
func TestLinearizabilityModel(t *testing.T) {
	t.Parallel()
	acq := func(owner string) linInput { return linInput{kind: linAcquire, name: "n", owner: owner} }
	renew := func(owner string, fence int64) linInput {
		return linInput{kind: linRenew, name: "n", owner: owner, fence: fence}
	}
	rel := func(owner string, fence int64) linInput {
		return linInput{kind: linRelease, name: "n", owner: owner, fence: fence}
	}
	granted := func(fence, at, expires int64) linOutput {
		return linOutput{result: linAcquired, fence: fence, at: at, expires: expires}
	}
	held := func(owner string, fence, at, expires int64) linOutput {
		return linOutput{result: linHeld, owner: owner, fence: fence, at: at, expires: expires}
	}
	renewed := func(at, expires int64) linOutput { return linOutput{result: linRenewed, at: at, expires: expires} }
	released := linOutput{result: linReleased}
	// seq makes a sequential history: operation i runs in [2i, 2i+1].
	seq := func(ops ...[2]any) []porcupine.Operation {
		h := make([]porcupine.Operation, len(ops))
		for i, op := range ops {
			h[i] = porcupine.Operation{ClientId: i % 2, Input: op[0], Call: int64(2 * i), Output: op[1], Return: int64(2*i + 1)}
		}
		return h
	}
	op := func(in linInput, out linOutput) [2]any { return [2]any{in, out} }
	for _, c := range []struct {
		name  string
		legal bool
		h     []porcupine.Operation
	}{
		{"take over at the expiry", true, seq(op(acq("A"), granted(1, 0, 100)), op(acq("B"), held("A", 1, 50, 100)), op(acq("B"), granted(2, 100, 200)))},
		{"take over after a release", true, seq(op(acq("A"), granted(1, 0, 100)), op(rel("A", 1), released), op(acq("B"), granted(2, 10, 110)))},
		{"renew, then held until the new expiry", true, seq(op(acq("A"), granted(1, 0, 100)), op(renew("A", 1), renewed(90, 190)), op(acq("B"), held("A", 1, 150, 190)), op(acq("B"), granted(2, 190, 290)))},
		{"release of a superseded fence", true, seq(op(acq("A"), granted(1, 0, 100)), op(acq("B"), granted(2, 100, 200)), op(rel("A", 1), released), op(acq("A"), held("B", 2, 150, 200)))},
		{"a failed renewal that took effect", true, seq(op(acq("A"), granted(1, 0, 100)), op(renew("A", 1), linOutput{result: linFailed}), op(acq("B"), held("A", 1, 120, 190)))},
		{"overlapping holdings", false, seq(op(acq("A"), granted(1, 0, 100)), op(acq("B"), granted(2, 50, 150)))},
		{"a grant over a renewed holding", false, seq(op(acq("A"), granted(1, 0, 100)), op(renew("A", 1), renewed(90, 190)), op(acq("B"), granted(2, 150, 250)))},
		{"a renewal after the expiry", false, seq(op(acq("A"), granted(1, 0, 100)), op(renew("A", 1), renewed(100, 200)))},
		{"a renewal after a takeover", false, seq(op(acq("A"), granted(1, 0, 100)), op(acq("B"), granted(2, 100, 200)), op(renew("A", 1), renewed(150, 250)))},
		{"held by someone else", false, seq(op(acq("A"), granted(1, 0, 100)), op(acq("C"), held("B", 1, 50, 100)))},
		{"held after a release", false, seq(op(acq("A"), granted(1, 0, 100)), op(rel("A", 1), released), op(acq("B"), held("A", 1, 20, 100)))},
		{"a fence reused", false, seq(op(acq("A"), granted(1, 0, 100)), op(rel("A", 1), released), op(acq("B"), granted(1, 20, 120)))},
		{"a fence skipped", false, seq(op(acq("A"), granted(1, 0, 100)), op(rel("A", 1), released), op(acq("B"), granted(3, 20, 120)))},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := porcupine.Illegal
			if c.legal {
				want = porcupine.Ok
			}
			require.Equal(t, want, porcupine.CheckOperationsTimeout(linModel, c.h, 10*time.Second))
		})
	}
	// Concurrent overlapping grants, each operation concurrent with the
	// other: no order makes both legal.
	h := []porcupine.Operation{
		{ClientId: 0, Input: acq("A"), Call: 0, Output: granted(1, 10, 100), Return: 10},
		{ClientId: 1, Input: acq("B"), Call: 0, Output: granted(2, 20, 120), Return: 10},
	}
	require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(linModel, h, 10*time.Second))
}
