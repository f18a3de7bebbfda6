package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// results are the outcomes of a run, by measurement key.
type results struct {
	specs    []spec
	outcomes map[string]*outcome
}

// med returns the median of a measurement's metric; ok is false if it did
// not run or failed.
func (r results) med(key, metric string) (float64, bool) {
	o, ok := r.outcomes[key]
	if !ok || o.err != nil || len(o.values[metric]) == 0 {
		return math.NaN(), false
	}
	return median(o.values[metric]), true
}

// lowest returns the smallest value of a measurement's metric over its runs.
func (r results) lowest(key, metric string) (float64, bool) {
	o, ok := r.outcomes[key]
	if !ok || o.err != nil || len(o.values[metric]) == 0 {
		return math.NaN(), false
	}
	return slices.Min(o.values[metric]), true
}

// target is one of issue 8's targets.
type target struct {
	name  string
	want  string
	value func(r results) (v float64, shown string, ok bool)
	pass  func(v float64) bool
}

// roundRatios returns the ratio of two measurements' rates in each round
// that measured both: they ran next to each other (pairs).
func (r results) roundRatios(numKey, denKey string) []float64 {
	a, b := r.outcomes[numKey], r.outcomes[denKey]
	if a == nil || b == nil || a.err != nil || b.err != nil {
		return nil
	}
	var out []float64
	for i := range min(len(a.values["rate"]), len(b.values["rate"])) {
		if d := b.values["rate"][i]; d > 0 {
			out = append(out, a.values["rate"][i]/d)
		}
	}
	return out
}

// ratio is a target on the ratio of two rates: the median of the ratios of
// the rounds (each measured side by side), shown with the medians.
func ratio(numKey, denKey string, atLeast float64) (func(results) (float64, string, bool), func(float64) bool) {
	return func(r results) (float64, string, bool) {
			a, ok1 := r.med(numKey, "rate")
			b, ok2 := r.med(denKey, "rate")
			rs := r.roundRatios(numKey, denKey)
			if !ok1 || !ok2 || len(rs) == 0 {
				return math.NaN(), "", false
			}
			v := median(rs)
			parts := make([]string, len(rs))
			for i, x := range rs {
				parts[i] = fmt.Sprintf("%.2f", x)
			}
			return v, fmt.Sprintf("**%.2fx** (rounds: %s; medians %s / %s)", v, strings.Join(parts, ", "), num(a), num(b)), true
		}, func(v float64) bool {
			return v >= atLeast
		}
}

func targets() []target {
	var ts []target
	add := func(name, want string, value func(results) (float64, string, bool), pass func(float64) bool) {
		ts = append(ts, target{name: name, want: want, value: value, pass: pass})
	}
	v, p := ratio("seq/ordered/group=on/w=16", "pgbench/lease_commit.sql/c=16", 1.0)
	add("Ordered commit, one stream, 16 workers (coalescing + group commit) vs pgbench (b) lease+commit, 16 clients", ">= 1.0x", v, p)
	v, p = ratio("seq/ordered/group=on/w=16", "raw/leasecommit/w=16", 1.1)
	add("Ordered commit, 16 workers vs raw pgx unordered lease+commit, 16 workers", ">= 1.1x", v, p)
	v, p = ratio("seq/streams/s=16/w=16", "pgbench/own_stream.sql/c=16", 1.0)
	add("16 workers over 16 streams vs pgbench (d) own stream per client, 16 clients", ">= 1.0x", v, p)
	v, p = ratio("seq/streams/s=1/w=16", "pgbench/sequence.sql/c=16", 1.5)
	add("16 workers over 1 stream vs pgbench (e) plain sequence, 16 clients", ">= 1.5x", v, p)
	v, p = ratio("seq/streams/s=16/w=16", "seq/streams/s=1/w=16", 0.9)
	add("Adding streams: 16 workers over 16 streams vs 16 workers over 1 stream", ">= 0.9x", v, p)
	v, p = ratio("seq/streams/s=64/w=64", "seq/streams/s=16/w=16", 0.9)
	add("Adding streams: 64 workers over 64 streams vs 16 workers over 16 streams", ">= 0.9x", v, p)
	v, p = ratio("app/append/s=16/w=16", "app/row/s=16/w=16", 0.75)
	add("Business row + Append in the application's transaction vs business row alone, 16 clients over 16 streams", ">= 0.75x", v, p)
	v, p = ratio("named/seq/1", "named/raw/1", 0.95)
	add("Named lease acquire+release, 1 goroutine, vs raw pgx", ">= 0.95x", v, p)
	v, p = ratio("named/seq/16", "named/pglock/16", 2.5)
	add("Named lease acquire+release, 16 goroutines on distinct names, vs pglock", ">= 2.5x", v, p)
	add("Try-acquire of a held name writes no WAL (smallest of the runs)", "0 bytes/try",
		func(r results) (float64, string, bool) {
			v, ok := r.lowest("wal/seq", "bytes")
			raw, _ := r.lowest("wal/raw", "bytes")
			pg, _ := r.lowest("wal/pglock", "bytes")
			return v, fmt.Sprintf("**%s** bytes/try (raw guarded upsert: %s, pglock: %s)", num(v), num(raw), num(pg)), ok
		}, func(v float64) bool { return v == 0 })
	add("16 goroutines in blocking acquire on one name share the successes", "fewest >= half the mean",
		func(r results) (float64, string, bool) {
			share, ok := r.med("named/seq/16-one", "share")
			lo, _ := r.med("named/seq/16-one", "min")
			hi, _ := r.med("named/seq/16-one", "max")
			w, _ := r.med("named/seq/16-one", "winners")
			plo, _ := r.med("named/pglock/16-one", "min")
			phi, _ := r.med("named/pglock/16-one", "max")
			pw, _ := r.med("named/pglock/16-one", "winners")
			return share, fmt.Sprintf("seqlease: %.0f of 16 got the name, %s to %s cycles each, fewest/mean **%.2f**; pglock: %.0f of 16, %s to %s",
				w, num(lo), num(hi), share, pw, num(plo), num(phi)), ok
		}, func(v float64) bool { return v >= 0.5 })
	add("Batch lease, one stream", ">= 100,000 numbers/s",
		func(r results) (float64, string, bool) {
			v, ok := r.med("seq/leasen/100", "rate")
			v1000, _ := r.med("seq/leasen/1000", "rate")
			return v, fmt.Sprintf("**%s** numbers/s (100 a call; 1,000 a call: %s)", num(v), num(v1000)), ok
		}, func(v float64) bool { return v >= 100_000 })
	v, p = ratio("mem/ordered/w=8", "mem/ticket/w=8", 0.3)
	add("Memory backend ordered commit, 8 workers, vs the bare ordered ticket", ">= 0.3x", v, p)
	add("Memory backend cost per op flat up to 100,000 leases in flight", "100,000 / 10 <= 1.5x",
		func(r results) (float64, string, bool) {
			a, ok1 := r.med("mem/inflight/10", "ns")
			m, _ := r.med("mem/inflight/1000", "ns")
			b, ok2 := r.med("mem/inflight/100000", "ns")
			if !ok1 || !ok2 {
				return math.NaN(), "", false
			}
			return b / a, fmt.Sprintf("%s / %s / %s ns/op at 10 / 1,000 / 100,000: **%.2fx**", num(a), num(m), num(b), b/a), true
		}, func(v float64) bool { return v <= 1.5 })
	add("Cleanup: 10,000 expired leases resolved", "< 2 s",
		func(r results) (float64, string, bool) {
			v, ok := r.med("cleanup/10000", "s")
			return v, fmt.Sprintf("**%.2f s**", v), ok
		}, func(v float64) bool { return v < 2 })
	add("Cleanup: 100,000 expired leases, vs 10,000", "< 12x",
		func(r results) (float64, string, bool) {
			a, ok1 := r.med("cleanup/10000", "s")
			b, ok2 := r.med("cleanup/100000", "s")
			if !ok1 || !ok2 {
				return math.NaN(), "", false
			}
			return b / a, fmt.Sprintf("%.2f s / %.2f s = **%.1fx**", b, a, b/a), true
		}, func(v float64) bool { return v < 12 })
	add("Wake latency p99, in-process", "< 100 µs",
		func(r results) (float64, string, bool) {
			v, ok := r.med("wake/inprocess", "p99")
			p50, _ := r.med("wake/inprocess", "p50")
			return v, fmt.Sprintf("**%s µs** (p50 %s µs)", num(v), num(p50)), ok
		}, func(v float64) bool { return v < 100 })
	add("Wake latency p99, across processes (NOTIFY)", "< 5 ms",
		func(r results) (float64, string, bool) {
			v, ok := r.med("wake/cross", "p99")
			p50, _ := r.med("wake/cross", "p50")
			return v, fmt.Sprintf("**%s µs** (p50 %s µs)", num(v), num(p50)), ok
		}, func(v float64) bool { return v < 5000 })
	return ts
}

func verdict(t target, r results) (shown, mark string) {
	v, shown, ok := t.value(r)
	switch {
	case !ok:
		return "not measured", "n/a"
	case t.pass(v):
		return shown, "PASS"
	}
	return shown, "MISS"
}

// targetSummary is the targets table as plain text, for the terminal.
func targetSummary(r results) string {
	var b strings.Builder
	for _, t := range targets() {
		shown, mark := verdict(t, r)
		fmt.Fprintf(&b, "%-5s %s (%s): %s\n", mark, t.name, t.want, strings.ReplaceAll(shown, "**", ""))
	}
	return b.String()
}

func render(f facts, r results, smoke bool) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmarks\n\n")
	w("<!-- Generated by `make bench` (bench/cmd/seqbench). Do not edit: run it again. -->\n\n")
	if smoke {
		w("**Smoke run: every measurement ran once, briefly, with cleanup sizes divided by 10 and fewer samples. ")
		w("These figures say nothing about speed.**\n\n")
	}
	w("seqlease side by side with the physical limit of this machine and with a peer, in one run. ")
	w("The limit is PostgreSQL doing the same SQL work without any ordering logic (pgbench with the scripts in ")
	w("[bench/pgbench](../bench/pgbench), and a raw pgx loop running the same statements); the in-process limit is a bare ")
	w("ordered ticket; the peer for named leases is [cirello.io/pglock](https://pkg.go.dev/cirello.io/pglock). ")
	w("Each figure is the median of %d runs, taken in rounds (every measurement once per round). ", roundsOf(r))
	w("A target that compares two rates runs them back to back in every round and takes the median of the rounds' ")
	w("ratios, so both sides of a ratio saw the same machine. Compare figures within this page only: the machine is ")
	w("shared and varies by 10-30%% between runs. How each figure is measured: [bench/README.md](../bench/README.md).\n\n")

	w("## Machine\n\n| | |\n|---|---|\n")
	w("| Date | %s |\n", f.Date)
	w("| Command | `%s` |\n", f.Command)
	if f.Commit != "" {
		w("| Checkout | %s (and any uncommitted changes) |\n", f.Commit)
	}
	w("| CPU | %d × %s (GOMAXPROCS %d) |\n", f.CPUs, f.CPU, f.GOMAXPROCS)
	w("| OS, Go | %s, Linux %s, %s |\n", f.OS, f.Kernel, f.Go)
	w("| PostgreSQL | %s at %s |\n", f.PG, f.Host)
	w("| Durability | synchronous_commit=%s, fsync=%s, full_page_writes=%s, wal_sync_method=%s |\n", f.SyncCommit, f.Fsync, f.FullPage, f.WalSync)
	w("| Server | shared_buffers=%s, max_connections=%s |\n", f.SharedBuffers, f.MaxConns)
	w("| Load average (1/5/15 min) | %s at the start, %s at the end |\n", f.LoadStart, f.LoadEnd)
	w("| Run time | %s |\n\n", f.Elapsed)

	w("## Targets\n\n| Target | Required | Measured | |\n|---|---|---|---|\n")
	for _, t := range targets() {
		shown, mark := verdict(t, r)
		w("| %s | %s | %s | %s |\n", t.name, t.want, shown, mark)
	}
	w("\n")

	for _, sec := range sections {
		var rows []spec
		for _, s := range r.specs {
			if s.section == sec {
				rows = append(rows, s)
			}
		}
		if len(rows) == 0 {
			continue
		}
		w("## %s\n\n| Measurement | Median | Unit | Runs |\n|---|--:|---|---|\n", sec)
		for _, s := range rows {
			o := r.outcomes[s.key]
			for i, m := range s.metrics {
				name := s.name
				if i > 0 || m.label != "" {
					name += ": " + cmpOr(m.label, m.unit)
				}
				if o.err != nil {
					if i == 0 {
						w("| %s | ERROR | | %s |\n", name, strings.ReplaceAll(o.err.Error(), "|", "/"))
					}
					continue
				}
				vals := o.values[m.key]
				runs := make([]string, len(vals))
				for j, v := range vals {
					runs[j] = num(v)
				}
				w("| %s | **%s** | %s | %s |\n", name, num(median(vals)), m.unit, strings.Join(runs, ", "))
			}
		}
		w("\n")
		if note := sectionNotes[sec]; note != "" {
			w("%s\n\n", note)
		}
	}
	return b.String()
}

func roundsOf(r results) int {
	n := 0
	for _, o := range r.outcomes {
		for _, v := range o.values {
			n = max(n, len(v))
		}
	}
	return n
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// num formats a figure: thousands separated, with decimals only for small
// values.
func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return group(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// group puts commas between thousands of an integer string.
func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// plural says n things: "1 worker", "16 workers".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return group(strconv.Itoa(n)) + " " + thing + "s"
}
