package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// report is what the run came to.
type report struct {
	backend         string
	stream          string // the run's stream, its own in the schema
	events, workers int
	procs           int
	elapsed         time.Duration
	n               *counters
	numbers         int
	committed       int
	recoveredBy     map[string]int
	gapsBy          map[string]int
	recoveryTimes   []time.Duration
	owners          map[string]int // numbers leased per owner (process)
	matches         bool
	accounts        int // accounts in the read model
	refused         int // transitions the read model refused as out of order
	audit           *audit.Report
	lastApplied     int64   // the number of the last entry the projector applied
	checkpoint      int64   // the projector's saved checkpoint at the end
	kill            bool    // -kill was given
	killAt          int64   // the events applied when the supervisor sent SIGKILL; 0 if it did not
	killChecked     bool    // a worker process died of that SIGKILL, and the run finished
	deaths          []death // worker processes that died (by -kill or not) and were restarted
}

// check waits for every number to resolve, then audits the ledger against
// what the projector read and compares the read model with a sequential
// replay.
func (p *pipeline) check(ctx context.Context, model readModel, elapsed time.Duration) (*report, error) {
	rep := &report{
		backend: "in-memory", stream: p.stream, events: len(p.events), workers: p.c.workers, procs: max(p.c.procs, 1), elapsed: elapsed, n: &p.n,
		recoveredBy: map[string]int{}, gapsBy: map[string]int{}, owners: map[string]int{},
	}
	if p.c.dsn != "" {
		rep.backend = "PostgreSQL"
	}
	// Stalled workers may still hold numbers nobody needs any more: the
	// cleanup loop resolves them within TTL + interval + a cycle.
	bound := 10 * (p.c.ttl + p.c.interval)
	deadline := time.Now().Add(bound)
	for {
		st, err := p.st.Stats(ctx, p.stream)
		if err != nil {
			return rep, err
		}
		if st.Unresolved == 0 {
			break
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("%d numbers still unresolved after %v", st.Unresolved, bound)
		}
		time.Sleep(p.c.interval)
	}
	ar, err := audit.Stream(ctx, p.st, p.stream, &audit.Options{
		Ordered:  true,
		Observed: p.observed,
	})
	if err != nil {
		return rep, err
	}
	rep.audit = ar
	var ledger []store.Entry
	for {
		es, err := p.st.Read(ctx, p.stream, int64(len(ledger)), store.MaxListLimit)
		if err != nil {
			return rep, err
		}
		ledger = append(ledger, es...)
		if len(es) < store.MaxListLimit {
			break
		}
	}
	byNumber := map[int64]store.Entry{}
	for _, e := range ledger {
		byNumber[e.Number] = e
		switch {
		case e.State == store.Committed:
			rep.committed++
		case e.State == store.Gap:
			rep.gapsBy[e.GapReason]++
		}
		if e.RecoveredFrom == 0 {
			rep.owners[e.Owner]++
		}
	}
	for _, e := range ledger {
		if md, ok := recovery.MetadataOf(e); ok {
			rep.recoveredBy[md.Type]++
			rep.recoveryTimes = append(rep.recoveryTimes, md.RecoveredAt.Sub(byNumber[md.OriginalNumber].ExpiresAt))
		}
	}
	for _, d := range p.deaths {
		for _, n := range d.held {
			switch e := byNumber[n]; {
			case e.State == store.Gap && e.RecoveredAs != 0:
				d.heldRecovered++
			case e.State == store.Gap:
				d.heldGaps++
			}
		}
		rep.deaths = append(rep.deaths, d)
	}
	rep.numbers = len(ledger)
	rep.matches = model.equal(replay(p.events))
	rep.accounts, rep.refused = len(model), model.refused()
	if err := ar.Err(); err != nil {
		return rep, err
	}
	if p.n.duplicates.Load() > 0 {
		return rep, fmt.Errorf("%d events applied twice", p.n.duplicates.Load())
	}
	if p.n.lateRefused.Load() != p.n.stalled.Load() {
		return rep, fmt.Errorf("%d stalled workers, but only %d late commits refused", p.n.stalled.Load(), p.n.lateRefused.Load())
	}
	if rep.committed != len(p.events) {
		return rep, fmt.Errorf("%d events, %d committed entries", len(p.events), rep.committed)
	}
	if !rep.matches {
		return rep, fmt.Errorf("the read model does not match the sequential replay")
	}
	rep.lastApplied = p.lastApplied
	if rep.checkpoint, err = p.st.Checkpoint(ctx, readerName, p.stream); err != nil {
		return rep, err
	}
	if rep.checkpoint != rep.lastApplied {
		return rep, fmt.Errorf("the checkpoint of reader %q is %d, the last applied entry %d", readerName, rep.checkpoint, rep.lastApplied)
	}
	return rep, nil
}

func (r *report) print(w io.Writer) {
	procs := ""
	if r.procs > 1 {
		procs = fmt.Sprintf(" in each of %d processes", r.procs)
	}
	fmt.Fprintf(w, "\n%d events, %d workers%s, %s backend, %v (%.0f events/s)\n",
		r.events, r.workers, procs, r.backend, r.elapsed.Round(time.Millisecond), float64(r.events)/r.elapsed.Seconds())
	fmt.Fprintf(w, "numbers handed out       %d\n", r.numbers)
	fmt.Fprintf(w, "committed                %d (by workers %d, recovered %d)\n", r.committed, r.n.committed.Load(), r.n.recovered.Load())
	fmt.Fprintf(w, "faults injected          %d stalled, %d crashed, %d crashed with partial work, %d crashed with a result\n",
		r.n.stalled.Load(), r.n.crashed.Load(), r.n.partial.Load(), r.n.retried.Load())
	fmt.Fprintln(w, "                         (simulated inside the workers: a worker sleeps past its lease or drops it)")
	if r.procs > 1 {
		fmt.Fprintf(w, "worker processes killed  %s\n", r.killed())
		for _, d := range r.deaths {
			by := ""
			if d.byKill {
				by = ", sent by -kill"
			}
			fmt.Fprintf(w, "                         process %d (incarnation %d): %s%s at %d events applied, restarted\n", d.proc, d.run, d.status, by, d.applied)
			fmt.Fprintf(w, "                         it held %d unresolved leases: the cleanup recovered %d, made %d gaps (redelivered)\n",
				len(d.held), d.heldRecovered, d.heldGaps)
		}
	}
	fmt.Fprintf(w, "late commits refused     %d\n", r.n.lateRefused.Load())
	fmt.Fprintf(w, "recoveries by method     partial-work %d, retry %d, gap (nothing to recover) %d\n",
		r.recoveredBy[recovery.MethodPartialWork], r.recoveredBy[recovery.MethodRetry], r.gapsBy[store.ReasonExpired])
	fmt.Fprintf(w, "gaps by reason           expired %d, recovered %d, released %d\n",
		r.gapsBy[store.ReasonExpired], r.gapsBy[store.ReasonRecovered], r.gapsBy[store.ReasonReleased])
	fmt.Fprintf(w, "events redelivered       %d\n", r.n.redelivered.Load())
	if len(r.recoveryTimes) > 0 {
		var worst, sum time.Duration
		for _, d := range r.recoveryTimes {
			worst = max(worst, d)
			sum += d
		}
		fmt.Fprintf(w, "time to recover          mean %v, worst %v after expiry\n",
			(sum / time.Duration(len(r.recoveryTimes))).Round(time.Millisecond), worst.Round(time.Millisecond))
	}
	if r.procs > 1 {
		owners := slices.Sorted(maps.Keys(r.owners))
		parts := make([]string, len(owners))
		for i, o := range owners {
			parts[i] = fmt.Sprintf("%s %d", o, r.owners[o])
		}
		fmt.Fprintf(w, "numbers leased by        %s\n", strings.Join(parts, ", "))
	}
	if r.audit != nil {
		for _, c := range r.audit.Checks {
			fmt.Fprintf(w, "checked                  %s\n", c)
		}
		for _, v := range r.audit.Violations {
			fmt.Fprintf(w, "VIOLATION                %s\n", v)
		}
	}
	fmt.Fprintf(w, "checked                  I3 every late commit of a stalled worker refused (%d of %d)\n", r.n.lateRefused.Load(), r.n.stalled.Load())
	fmt.Fprintf(w, "checked                  exactly once: every event applied once (%d duplicates)\n", r.n.duplicates.Load())
	fmt.Fprintf(w, "checked                  order per account: %d transitions out of order in %d accounts\n", r.refused, r.accounts)
	fmt.Fprintf(w, "checked                  checkpoint of reader %q at %d, the last applied entry %d\n", readerName, r.checkpoint, r.lastApplied)
	if r.killChecked {
		fmt.Fprintf(w, "checked                  a worker process died of the SIGKILL sent at %d events applied; its restart finished its share\n", r.killAt)
	}
	if r.matches {
		fmt.Fprintln(w, "read model matches sequential replay")
	} else {
		fmt.Fprintln(w, "READ MODEL DIFFERS FROM SEQUENTIAL REPLAY")
	}
}

// killed describes the worker processes that died: how many of a real
// SIGKILL, and the restarts.
func (r *report) killed() string {
	sigkills := 0
	for _, d := range r.deaths {
		if d.signal == syscall.SIGKILL {
			sigkills++
		}
	}
	switch {
	case len(r.deaths) == 0 && !r.kill:
		return "none (-kill SIGKILLs one a third of the way in)"
	case len(r.deaths) == 0:
		return "none"
	}
	return fmt.Sprintf("%d by a real SIGKILL (kill -9); %d died in all, each restarted (a dead process's counts above die with it, its work is in the ledger)",
		sigkills, len(r.deaths))
}
