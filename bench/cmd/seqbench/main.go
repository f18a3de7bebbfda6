// Command seqbench runs seqlease's benchmarks side by side with the
// physical limit (pgbench running the same SQL without ordering logic, a
// raw pgx loop, a bare in-process ordered ticket) and with a peer
// (cirello.io/pglock), and writes the figures, the ratios and the targets to
// a Markdown report (docs/benchmarks.md through make bench).
//
// Every measurement runs in rounds (three by default): each round runs
// every measurement once, in a fixed order, so that a noisy spell of the
// machine touches the compared figures alike; the report gives the median.
// With -smoke, every measurement runs once, briefly, and nothing is written
// unless -out says so; the exit status is non-zero only on errors, never on
// timing.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Sections of the report, in order.
const (
	secLimit   = "The limit: pgbench, same SQL without ordering logic"
	secStreams = "seqlease streams on PostgreSQL, and the raw pgx loop"
	secMany    = "Many streams on one database"
	secNamed   = "Named leases: seqlease, pglock, raw pgx"
	secMemory  = "In-memory backend and its limit"
	secCleanup = "Cleanup of expired leases (PostgreSQL)"
	secWake    = "Wake latency of an ordered commit"
	secApp     = "The application's own transaction"
)

var sections = []string{secLimit, secStreams, secMany, secApp, secNamed, secMemory, secCleanup, secWake}

// metric is one figure a measurement reports.
type metric struct {
	key   string // in the run's result
	label string // what it is; default: the unit says it
	unit  string
}

// spec is one measurement.
type spec struct {
	key     string
	section string
	name    string
	metrics []metric
	run     func(ctx context.Context, e *env) (map[string]float64, error)
}

// outcome is what the rounds of one measurement gave.
type outcome struct {
	values map[string][]float64 // metric key -> one value per run
	err    error
}

func allSpecs() []spec {
	var out []spec
	for _, f := range []func() []spec{pgbenchSpecs, streamSpecs, manySpecs, appSpecs, namedSpecs, memorySpecs, cleanupSpecs, wakeSpecs} {
		out = append(out, f()...)
	}
	return out
}

func main() {
	os.Exit(run())
}

func run() int {
	var (
		dsn    = flag.String("dsn", cmp.Or(os.Getenv("SEQLEASE_TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (default: $SEQLEASE_TEST_DATABASE_URL or the local test database)")
		out    = flag.String("out", "", "write the Markdown report here (default: none)")
		smoke  = flag.Bool("smoke", false, "run every measurement once, briefly: checks that everything runs, says nothing about speed")
		rounds = flag.Int("rounds", 3, "rounds of every measurement; the report gives the median")
		dur    = flag.Duration("d", 3*time.Second, "measured window of each timed PostgreSQL run")
		memD   = flag.Duration("memd", time.Second, "measured window of each in-memory run")
		only   = flag.String("only", "", "run only the measurements whose key matches this regular expression")
		list   = flag.Bool("list", false, "list the measurements' keys and exit")
		cmdStr = flag.String("cmd", "", "the command to name in the report (default: this program's arguments)")
		cpu    = flag.String("cpuprofile", "", "write a CPU profile of the run here (pair it with -only)")
		mem    = flag.String("memprofile", "", "write an allocation profile of the run here (pair it with -only)")
	)
	flag.Parse()
	specs := allSpecs()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "seqbench: -only:", err)
			return 2
		}
		specs = filter(specs, func(s spec) bool { return re.MatchString(s.key) })
	}
	if *list {
		for _, s := range specs {
			fmt.Println(s.key)
		}
		return 0
	}
	e := &env{dsn: *dsn, smoke: *smoke, dur: *dur, warm: max(*dur/6, 100*time.Millisecond), memD: *memD}
	if *smoke {
		*rounds = 1
		e.dur, e.warm, e.memD = 250*time.Millisecond, 50*time.Millisecond, 100*time.Millisecond
	}
	if *cpu != "" {
		pf, err := os.Create(*cpu)
		if err != nil {
			fmt.Fprintln(os.Stderr, "seqbench:", err)
			return 2
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			fmt.Fprintln(os.Stderr, "seqbench:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if *mem != "" {
		defer writeAllocs(*mem)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	started := time.Now()
	admin, err := (&env{dsn: e.dsn}).pool(ctx, 4, "")
	if err != nil {
		fmt.Fprintf(os.Stderr, "seqbench: cannot reach PostgreSQL at %s: %v\n(start it, or set SEQLEASE_TEST_DATABASE_URL / -dsn)\n", e.dsn, err)
		return 1
	}
	defer admin.Close()
	e.admin = admin
	f, err := e.facts(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "seqbench:", err)
		return 1
	}
	f.Command = cmp.Or(*cmdStr, strings.Join(append([]string{"seqbench"}, os.Args[1:]...), " "))
	f.Commit = gitCommit()

	outcomes := map[string]*outcome{}
	for _, s := range specs {
		outcomes[s.key] = &outcome{values: map[string][]float64{}}
	}
	for r := 1; r <= *rounds; r++ {
		for _, s := range runOrder(specs, r) {
			o := outcomes[s.key]
			if o.err != nil || ctx.Err() != nil {
				continue
			}
			t := time.Now()
			vals, err := s.run(ctx, e)
			if err == nil {
				for _, m := range s.metrics {
					v, ok := vals[m.key]
					if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
						err = fmt.Errorf("no value for %s", m.key)
						break
					}
				}
			}
			if err != nil && ctx.Err() != nil {
				break // interrupted: said below
			}
			if err != nil {
				o.err = err
				fmt.Fprintf(os.Stderr, "[%d/%d] %-34s ERROR: %v\n", r, *rounds, s.key, err)
				continue
			}
			for _, m := range s.metrics {
				o.values[m.key] = append(o.values[m.key], vals[m.key])
			}
			fmt.Fprintf(os.Stderr, "[%d/%d] %-34s %s (%.1fs)\n", r, *rounds, s.key, brief(s, vals), time.Since(t).Seconds())
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "seqbench: interrupted")
		return 1
	}
	f.Elapsed = time.Since(started).Round(time.Second)
	f.LoadEnd = loadAvg()

	res := results{specs: specs, outcomes: outcomes}
	failed := 0
	for _, s := range specs {
		if outcomes[s.key].err != nil {
			failed++
		}
	}
	report := render(f, res, *smoke)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "seqbench:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "seqbench: wrote %s\n", *out)
	}
	fmt.Fprint(os.Stderr, targetSummary(res))
	fmt.Fprintf(os.Stderr, "seqbench: %d measurements, %d failed, %s\n", len(specs), failed, f.Elapsed)
	if failed > 0 {
		return 1
	}
	return 0
}

// pairs are measurements that a target compares: they run next to each
// other, in an order that alternates between rounds, so that the same spell
// of the machine touches both. A measurement is in one group at most: the
// targets that share a side put all their sides in one group.
var pairs = [][]string{
	{"seq/ordered/group=on/w=16", "pgbench/lease_commit.sql/c=16", "raw/leasecommit/w=16"},
	{"pgbench/sequence.sql/c=16", "seq/streams/s=1/w=16", "seq/streams/s=16/w=16", "pgbench/own_stream.sql/c=16", "seq/streams/s=64/w=64"},
	{"app/row/s=16/w=16", "app/append/s=16/w=16", "app/lease/s=16/w=16", "app/raw-append/s=16/w=16",
		"app/append-nowatch/s=16/w=16", "app/append/s=1/w=16"},
	{"named/seq/1", "named/raw/1"},
	{"named/seq/16", "named/pglock/16"},
	{"mem/ordered/w=8", "mem/ticket/w=8"},
}

// runOrder is the order of the measurements in round r: the report's order,
// except that the members of a pair run together where the first of them
// would.
func runOrder(specs []spec, r int) []spec {
	byKey := map[string]spec{}
	for _, s := range specs {
		byKey[s.key] = s
	}
	done := map[string]bool{}
	var out []spec
	for _, s := range specs {
		if done[s.key] {
			continue
		}
		group := []string{s.key}
		for _, p := range pairs {
			if slices.Contains(p, s.key) {
				group = slices.Clone(p)
				if r%2 == 0 {
					slices.Reverse(group)
				}
				break
			}
		}
		for _, k := range group {
			if m, ok := byKey[k]; ok && !done[k] {
				out = append(out, m)
				done[k] = true
			}
		}
	}
	return out
}

func filter(specs []spec, keep func(spec) bool) []spec {
	var out []spec
	for _, s := range specs {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

func brief(s spec, vals map[string]float64) string {
	var parts []string
	for _, m := range s.metrics {
		parts = append(parts, fmt.Sprintf("%s %s", num(vals[m.key]), m.unit))
	}
	return strings.Join(parts, ", ")
}

// gitCommit names the checked-out commit, read-only; "" if unknown.
func gitCommit() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	out, err := exec.Command("git", "-C", filepath.Dir(dir), "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// writeAllocs writes the allocation profile of the run to name.
func writeAllocs(name string) {
	f, err := os.Create(name)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "seqbench: memprofile:", err)
	}
}
