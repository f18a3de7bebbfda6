package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// report is what the run came to.
type report struct {
	backend         string
	events, workers int
	elapsed         time.Duration
	n               *counters
	numbers         int
	committed       int
	recoveredBy     map[string]int
	gapsBy          map[string]int
	recoveryTimes   []time.Duration
	matches         bool
	invariants      []string
}

// check waits for every number to resolve, then audits the ledger and
// compares the read model with a sequential replay.
func (p *pipeline) check(ctx context.Context, model readModel, elapsed time.Duration) (*report, error) {
	rep := &report{
		backend: "in-memory", events: len(p.events), workers: p.c.workers, elapsed: elapsed, n: &p.n,
		recoveredBy: map[string]int{}, gapsBy: map[string]int{},
	}
	if p.c.dsn != "" {
		rep.backend = "PostgreSQL"
	}
	// Stalled workers may still hold numbers nobody needs any more: the
	// cleanup loop resolves them within TTL + interval + a cycle.
	deadline := time.Now().Add(10 * (p.c.ttl + p.c.interval))
	for {
		st, err := p.st.Stats(ctx, p.stream)
		if err != nil {
			return rep, err
		}
		if st.Unresolved == 0 {
			break
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("%d numbers still unresolved after %v", st.Unresolved, 10*(p.c.ttl+p.c.interval))
		}
		time.Sleep(p.c.interval)
	}
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
	for i, e := range ledger {
		if e.Number != int64(i+1) {
			return rep, fmt.Errorf("I1 violated: position %d holds number %d", i+1, e.Number)
		}
		if !e.State.Resolved() {
			return rep, fmt.Errorf("number %d unresolved", e.Number)
		}
		byNumber[e.Number] = e
		if e.State == store.Committed {
			rep.committed++
		}
		if e.State == store.Gap {
			rep.gapsBy[e.GapReason]++
		}
	}
	for _, e := range ledger {
		if md, ok := recovery.MetadataOf(e); ok {
			rep.recoveredBy[md.Type]++
			orig := byNumber[md.OriginalNumber]
			rep.recoveryTimes = append(rep.recoveryTimes, md.RecoveredAt.Sub(orig.ExpiresAt))
			if orig.RecoveredAs != e.Number {
				return rep, fmt.Errorf("recovery of %d points at %d, not %d", orig.Number, orig.RecoveredAs, e.Number)
			}
		}
	}
	rep.numbers = len(ledger)
	rep.matches = model.equal(replay(p.events))
	rep.invariants = []string{
		"I1 dense: numbers 1.." + fmt.Sprint(len(ledger)) + ", no hole, no duplicate",
		"I2 every number resolved exactly once (committed or gap)",
		"I3 every late commit of a stalled worker refused",
		"I4 commits in sequence order (the barrier, checked by the store)",
		"I5 the projector read strictly increasing numbers, never past the watermark",
		"exactly once: every event applied once, none twice (" + fmt.Sprint(p.n.duplicates.Load()) + " duplicates)",
	}
	if p.n.duplicates.Load() > 0 {
		return rep, fmt.Errorf("%d events applied twice", p.n.duplicates.Load())
	}
	if p.n.lateRefused.Load() != p.n.stalled.Load() {
		return rep, fmt.Errorf("%d stalled workers, but only %d late commits refused", p.n.stalled.Load(), p.n.lateRefused.Load())
	}
	if !rep.matches {
		return rep, fmt.Errorf("the read model does not match the sequential replay")
	}
	return rep, nil
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\n%d events, %d workers, %s backend, %v (%.0f events/s)\n",
		r.events, r.workers, r.backend, r.elapsed.Round(time.Millisecond), float64(r.events)/r.elapsed.Seconds())
	fmt.Fprintf(w, "numbers handed out       %d\n", r.numbers)
	fmt.Fprintf(w, "committed                %d (by workers %d, recovered %d)\n", r.committed, r.n.committed.Load(), r.n.recovered.Load())
	fmt.Fprintf(w, "faults injected          %d stalled, %d crashed, %d crashed with partial work, %d crashed with a result\n",
		r.n.stalled.Load(), r.n.crashed.Load(), r.n.partial.Load(), r.n.retried.Load())
	fmt.Fprintf(w, "late commits refused     %d\n", r.n.lateRefused.Load())
	fmt.Fprintf(w, "recoveries by method     partial-work %d, retry %d\n", r.recoveredBy[recovery.MethodPartialWork], r.recoveredBy[recovery.MethodRetry])
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
	for _, inv := range r.invariants {
		fmt.Fprintf(w, "checked                  %s\n", inv)
	}
	if r.matches {
		fmt.Fprintln(w, "read model matches sequential replay")
	} else {
		fmt.Fprintln(w, "READ MODEL DIFFERS FROM SEQUENTIAL REPLAY")
	}
}
