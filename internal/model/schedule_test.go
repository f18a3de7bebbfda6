package model

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/seqlease/seqlease/recovery"
)

// A schedule is a list of rounds; the steps of a round run concurrently, the
// rounds one after the other.
type (
	schedule []round
	round    []step
)

// kind is what a step does.
type kind uint8

const (
	opLease       kind = iota // Leaser.Lease (N 1) or Leaser.LeaseN
	opComplete                // Lease.Complete: unordered commit
	opCommit                  // Lease.Commit: ordered commit, waits for its turn
	opRelease                 // Lease.Release
	opExtend                  // Lease.Extend
	opForeign                 // store Commit of the handle's number with a foreign token
	opCrash                   // the holder stops for good: no step uses the handle again
	opAdvance                 // time passes (memory: the clock moves; PostgreSQL: sleep)
	opCleanup                 // cleanup.Service.RunOnce at a given load level
	opFill                    // gap.Gaps.Fill of a gap the model picks
	opTrim                    // Trim below the reader's position
	opRead                    // the reader catches up (barrier.Entries)
	opAcquire                 // named lease: AcquireLease (a steal when the last holder expired)
	opRenew                   // named lease: RenewLease of an earlier acquire's holding
	opReleaseName             // named lease: ReleaseLease of an earlier acquire's holding
	opCut                     // the process's next batch of commits loses its connection (Pick odd: after it took effect)
)

var kindNames = [...]string{"lease", "complete", "commit", "release", "extend", "foreign", "crash", "advance",
	"cleanup", "fill", "trim", "read", "acquire", "renew", "release-name", "cut"}

func (k kind) String() string { return kindNames[k] }

// ref names a handle: the lease step that made it and its index in that
// step's LeaseN.
type ref struct{ Step, I int }

func (r ref) String() string { return fmt.Sprintf("h%d.%d", r.Step, r.I) }

// plan is what the recovery trackers know of one leased operation.
type plan struct {
	Fails   int  // the WorkTracker fails this many calls first
	Partial bool // the WorkTracker has partial work
	Result  bool // the OperationTracker has a completed result
}

func (p plan) String() string {
	var parts []string
	if p.Fails > 0 {
		parts = append(parts, fmt.Sprintf("fail%d", p.Fails))
	}
	if p.Partial {
		parts = append(parts, "partial")
	}
	if p.Result {
		parts = append(parts, "result")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "+")
}

// step is one operation of a schedule. ID is unique in the schedule and
// survives shrinking, so that later steps can name what it made.
type step struct {
	ID     int
	Kind   kind
	Proc   int            // the process that makes the call (a handle's: the process that leased it)
	Stream string         // lease, fill, trim, read
	N      int            // lease: how many numbers
	Plan   plan           // lease: what the trackers know of its operation
	TTL    int            // lease, extend, acquire, renew: in ticks
	Ticks  int            // advance
	Handle ref            // complete, commit, release, extend, foreign, crash
	Level  recovery.Level // cleanup
	Pick   int            // fill, trim: a choice the model turns into a number
	Name   string         // acquire
	Owner  string         // acquire
	Of     int            // renew, release-name: the acquire step whose holding
}

func (s step) String() string {
	p := fmt.Sprintf("s%d p%d %s", s.ID, s.Proc, s.Kind)
	switch s.Kind {
	case opLease:
		return fmt.Sprintf("%s %s n=%d ttl=%d trackers=%s", p, s.Stream, s.N, s.TTL, s.Plan)
	case opExtend:
		return fmt.Sprintf("%s %s ttl=%d", p, s.Handle, s.TTL)
	case opComplete, opCommit, opRelease, opForeign, opCrash:
		return fmt.Sprintf("%s %s", p, s.Handle)
	case opAdvance:
		return fmt.Sprintf("%s %d", p, s.Ticks)
	case opCleanup:
		return fmt.Sprintf("%s level=%s", p, s.Level)
	case opFill, opTrim:
		return fmt.Sprintf("%s %s pick=%d", p, s.Stream, s.Pick)
	case opRead:
		return fmt.Sprintf("%s %s", p, s.Stream)
	case opAcquire:
		return fmt.Sprintf("%s %s by %s ttl=%d", p, s.Name, s.Owner, s.TTL)
	case opRenew:
		return fmt.Sprintf("%s of s%d ttl=%d", p, s.Of, s.TTL)
	case opReleaseName:
		return fmt.Sprintf("%s of s%d", p, s.Of)
	case opCut:
		if s.Pick%2 == 1 {
			return p + " after"
		}
		return p + " before"
	}
	return p
}

func (s schedule) steps() int {
	n := 0
	for _, r := range s {
		n += len(r)
	}
	return n
}

// String prints one round a line.
func (s schedule) String() string {
	var b strings.Builder
	for i, r := range s {
		parts := make([]string, len(r))
		for j, st := range r {
			parts[j] = st.String()
		}
		fmt.Fprintf(&b, "  round %d: %s\n", i+1, strings.Join(parts, "  |  "))
	}
	return b.String()
}

// The streams: "o" is written with ordered commits only (the audit checks
// I4 on it), "u" mixes ordered and unordered commits. The named leases
// are "x" and "y", held by owners "p", "q" and "r".
var (
	streams = []string{"o", "u"}
	names   = []string{"x", "y"}
	owners  = []string{"p", "q", "r"}
)

// Durations, in ticks (a backend decides how long a tick is).
var (
	leaseTTLs   = []int{2, 3, 5, 8}
	extendTTLs  = []int{2, 5, 8}
	namedTTLs   = []int{2, 4, 6}
	advanceBy   = []int{1, 2, 3, 5, 9}
	maxTTLTicks = 8
)

// gen builds a schedule from a seed. It knows nothing of outcomes: it only
// avoids steps that cannot mean anything (a handle used twice in a round,
// a crashed holder acting again).
type gen struct {
	r       *rand.Rand
	next    int // the next step ID
	first   int // the first step ID of the round being built
	handles []*ghandle
	holds   []int // acquire steps
}

type ghandle struct {
	ref     ref
	proc    int
	stream  string
	done    bool // committed or released, as far as the generator knows
	crashed bool
}

// weights of the kinds, in kind order.
var weights = [...]int{opLease: 16, opComplete: 9, opCommit: 13, opRelease: 5, opExtend: 5, opForeign: 2,
	opCrash: 3, opAdvance: 7, opCleanup: 9, opFill: 3, opTrim: 2, opRead: 5, opAcquire: 7, opRenew: 5,
	opReleaseName: 3, opCut: 3}

// generate returns a schedule of about n steps in rounds of one to three;
// one round in four, when it can, is three commits of one process on both
// streams, so that its Leaser has commits of several streams to batch.
func generate(seed uint64, n int) schedule {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	var s schedule
	for count := 0; count < n; {
		var r round
		if g.r.IntN(4) == 0 {
			r = g.commitRound()
		}
		if len(r) == 0 {
			r = g.round(1 + g.r.IntN(3))
		}
		s = append(s, r)
		count += len(r)
	}
	return s
}

// commitRound builds a round of three commits of one process's open
// handles on both streams, mostly Complete on "u" (which never waits for
// its turn) and an ordered commit on "o"; none if it has no such handles.
func (g *gen) commitRound() round {
	g.first = g.next
	proc := g.r.IntN(procs)
	byStream := map[string][]*ghandle{}
	for _, h := range g.handles {
		if h.proc == proc && !h.done && !h.crashed {
			byStream[h.stream] = append(byStream[h.stream], h)
		}
	}
	if len(byStream["o"]) == 0 || len(byStream["u"]) == 0 || len(byStream["o"])+len(byStream["u"]) < 3 {
		return nil
	}
	picked := []*ghandle{byStream["u"][0], byStream["o"][0]}
	if len(byStream["u"]) > 1 && (len(byStream["o"]) == 1 || g.r.IntN(3) > 0) {
		picked = append(picked, byStream["u"][1])
	} else {
		picked = append(picked, byStream["o"][1])
	}
	var r round
	for _, h := range picked {
		k := opCommit
		if h.stream == "u" && g.r.IntN(4) > 0 { // unordered commits do not wait for their turn
			k = opComplete
		}
		h.done = true
		r = append(r, step{ID: g.next, Kind: k, Proc: proc, Handle: h.ref})
		g.next++
	}
	return r
}

func (g *gen) pick(xs []int) int { return xs[g.r.IntN(len(xs))] }

func (g *gen) kind() kind {
	total := 0
	for _, w := range weights {
		total += w
	}
	x := g.r.IntN(total)
	for k, w := range weights {
		if x < w {
			return kind(k)
		}
		x -= w
	}
	panic("unreachable")
}

// round builds up to size steps; an advance is always alone.
func (g *gen) round(size int) round {
	var r round
	g.first = g.next // what this round makes, its own steps cannot use
	used := map[ref]bool{}
	usedHold := map[int]bool{}
	cleanup := map[int]bool{} // by process
	for tries := 0; len(r) < size && tries < 20; tries++ {
		k := g.kind()
		if k == opAdvance && len(r) > 0 {
			continue
		}
		s, ok := g.step(k, used, usedHold)
		if !ok || (k == opCleanup && cleanup[s.Proc]) {
			continue
		}
		r = append(r, s)
		if k == opAdvance {
			break
		}
		cleanup[s.Proc] = cleanup[s.Proc] || k == opCleanup
	}
	return r
}

// handle picks a handle not used in this round, for k; ordered commits
// mostly take the oldest open handle of a stream, so that they have a
// chance to go ahead.
func (g *gen) handle(k kind, used map[ref]bool) (*ghandle, bool) {
	var open, any []*ghandle
	for _, h := range g.handles {
		if h.crashed || used[h.ref] || h.ref.Step >= g.first || (k == opComplete && h.stream != "u") {
			continue
		}
		any = append(any, h)
		if !h.done {
			open = append(open, h)
		}
	}
	switch {
	case len(any) == 0:
		return nil, false
	case len(open) > 0 && (k == opCommit || k == opComplete) && g.r.IntN(10) < 6:
		return open[0], true
	case len(open) > 0 && g.r.IntN(10) < 8:
		return open[max(0, len(open)-1-g.r.IntN(4))], true
	}
	return any[g.r.IntN(len(any))], true
}

func (g *gen) step(k kind, used map[ref]bool, usedHold map[int]bool) (step, bool) {
	s := step{ID: g.next, Kind: k, Proc: g.r.IntN(procs)}
	switch k {
	case opLease:
		s.Stream = streams[g.r.IntN(len(streams))]
		s.TTL = g.pick(leaseTTLs)
		s.N, s.Plan = 1, g.plan()
		if g.r.IntN(4) == 0 {
			s.N = 2 + g.r.IntN(2)
		}
		for i := range s.N {
			g.handles = append(g.handles, &ghandle{ref: ref{s.ID, i}, proc: s.Proc, stream: s.Stream})
		}
	case opComplete, opCommit, opRelease, opExtend, opForeign, opCrash:
		h, ok := g.handle(k, used)
		if !ok {
			return s, false
		}
		used[h.ref] = true
		s.Handle, s.Proc = h.ref, h.proc
		switch k {
		case opExtend:
			s.TTL = g.pick(extendTTLs)
		case opCrash:
			h.crashed = true
		case opComplete, opCommit, opRelease:
			h.done = true
		}
	case opAdvance:
		s.Ticks, s.Proc = g.pick(advanceBy), 0
	case opCleanup:
		s.Level = recovery.Low
		switch x := g.r.IntN(10); {
		case x == 0:
			s.Level = recovery.High
		case x < 3:
			s.Level = recovery.Medium
		}
	case opFill, opTrim, opRead:
		s.Stream = streams[g.r.IntN(len(streams))]
		s.Pick = g.r.IntN(1 << 16)
	case opCut:
		s.Pick = g.r.IntN(2)
	case opAcquire:
		s.Name = names[g.r.IntN(len(names))]
		s.Owner = owners[g.r.IntN(len(owners))]
		s.TTL = g.pick(namedTTLs)
		g.holds = append(g.holds, s.ID)
	case opRenew, opReleaseName:
		if len(g.holds) == 0 {
			return s, false
		}
		s.Of = g.holds[max(0, len(g.holds)-1-g.r.IntN(3))]
		if usedHold[s.Of] || s.Of >= g.first {
			return s, false
		}
		usedHold[s.Of] = true
		s.TTL = g.pick(namedTTLs)
	}
	g.next++
	return s, true
}

func (g *gen) plan() plan {
	var p plan
	switch x := g.r.IntN(100); {
	case x < 40:
	case x < 65:
		p.Partial = true
	case x < 85:
		p.Result = true
	default:
		p.Fails = 1 + g.r.IntN(4)
		p.Partial = g.r.IntN(2) == 0
	}
	if g.r.IntN(5) == 0 {
		p.Result = true // both trackers know something: partial work wins at low load
	}
	return p
}
