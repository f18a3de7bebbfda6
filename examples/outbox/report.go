package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/seqlease/seqlease/store"
)

// maxListed bounds the problems of one kind the report lists.
const maxListed = 5

// report is what a run came to, and the check of JetStream against the
// ledger and the order rows.
type report struct {
	c                            config
	backend, broker              string
	placed, declined, abandoned  int
	rows                         int // order rows of the run
	committed, gaps              int // entries in the ledger
	jsMessages                   int // messages JetStream holds
	relays                       relayCounts
	writeElapsed, publishElapsed time.Duration
	drain                        time.Duration   // last write to last message
	lagAtEnd                     int             // placed but not yet in JetStream when the writers ended
	checkpoints                  map[route]int64 // the relays' seqlease checkpoints at the end (nil: not checked)
	lastNumbers                  map[route]int64 // every stream's last number, from the ledger
	kill                         *killInfo
	takeover                     *received // the first message of the killed stream under a later fence
	checks                       []string
	problems                     []string
}

func newReport(c config) *report { return &report{c: c} }

// problem records a failed check.
func (r *report) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// err returns nil if every check passed.
func (r *report) err() error {
	if len(r.problems) == 0 {
		return nil
	}
	return fmt.Errorf("%d checks failed, first: %s", len(r.problems), r.problems[0])
}

// verify checks what JetStream holds (msgs, in stream order) against the
// ledger of every stream and the order rows.
func (r *report) verify(ledger map[route][]store.Entry, msgs []received, rows map[string]int) {
	before := len(r.problems)
	bySubject := map[string][]received{}
	for _, m := range msgs {
		bySubject[m.subject] = append(bySubject[m.subject], m)
	}
	routes := make([]route, 0, len(ledger))
	for rt := range ledger {
		routes = append(routes, rt)
	}
	slices.SortFunc(routes, func(a, b route) int { return a.index - b.index })
	known := map[string]bool{}
	mismatches := 0
	for _, rt := range routes {
		known[rt.subject] = true
		var committed []store.Entry
		gaps := map[int64]bool{}
		for j, e := range ledger[rt] {
			if e.Number != int64(j+1) {
				r.problem("%s: entry %d where %d was due: a hole", rt.stream, e.Number, j+1)
			}
			switch e.State {
			case store.Committed:
				committed = append(committed, e)
			case store.Gap:
				gaps[e.Number] = true
			default:
				r.problem("%s: entry %d is still %s", rt.stream, e.Number, e.State)
			}
		}
		r.committed += len(committed)
		r.gaps += len(gaps)
		got := bySubject[rt.subject]
		if len(got) != len(committed) {
			r.problem("%s: %d committed entries, %d messages in JetStream", rt.stream, len(committed), len(got))
		}
		var fence int64
		for j, m := range got {
			if gaps[m.number] {
				r.problem("%s: gap %d was published", rt.stream, m.number)
			}
			if m.fence < fence {
				r.problem("%s: message %d published under fence %d after fence %d", rt.stream, m.number, m.fence, fence)
			}
			fence = max(fence, m.fence)
			if j >= len(committed) {
				continue
			}
			e := committed[j]
			if m.number != e.Number || m.id != msgID(rt.stream, e.Number) || !bytes.Equal(m.data, e.Payload) {
				if mismatches++; mismatches <= maxListed {
					r.problem("%s: message %d of the subject is %s (number %d), want entry %d with its payload", rt.stream, j+1, m.id, m.number, e.Number)
				}
			}
		}
	}
	for subject, ms := range bySubject {
		if !known[subject] {
			r.problem("%d messages on %s, which is no stream's subject", len(ms), subject)
		}
	}
	r.lastNumbers = map[route]int64{}
	for _, rt := range routes {
		r.lastNumbers[rt] = int64(len(ledger[rt]))
	}
	if len(r.problems) == before {
		r.checks = append(r.checks, fmt.Sprintf("every committed entry of every stream in JetStream once, in number order, with its payload (%d)", r.committed))
		r.checks = append(r.checks, fmt.Sprintf("every stream dense, 1..n, declined orders included; no gap published (%d gaps in the ledger)", r.gaps))
		r.checks = append(r.checks, "fencing tokens never go back along a subject")
	}

	// The orders: the rows against the messages, and each customer's
	// orders in its sequence.
	before = len(r.problems)
	r.rows = len(rows)
	if r.rows != r.placed {
		r.problem("%d orders placed, %d order rows", r.placed, r.rows)
	}
	published := map[string]int{}
	next := map[string]int{} // customer -> its next sequence number
	for _, m := range msgs {
		var msg message
		if err := json.Unmarshal(m.data, &msg); err != nil {
			r.problem("message %s: %v", m.id, err)
			continue
		}
		if _, dup := published[msg.Order]; dup {
			r.problem("order %s published twice", msg.Order)
		}
		published[msg.Order] = msg.Seq
		if want := next[msg.Customer] + 1; msg.Seq != want {
			r.problem("customer %s: order %s is its order %d, want %d", msg.Customer, msg.Order, msg.Seq, want)
		}
		next[msg.Customer] = msg.Seq
		if seq, ok := rows[msg.Order]; !ok || seq != msg.Seq {
			r.problem("order %s published (its customer's order %d) without its row", msg.Order, msg.Seq)
		}
	}
	for id := range rows {
		if _, ok := published[id]; !ok {
			r.problem("order %s has a row but no message", id)
		}
	}
	if r.jsMessages != len(msgs) {
		r.problem("JetStream holds %d messages, %d were read back", r.jsMessages, len(msgs))
	}
	if len(r.problems) == before {
		r.checks = append(r.checks, fmt.Sprintf("order rows == orders placed (%d), each published once; nothing lost", r.rows))
		r.checks = append(r.checks, fmt.Sprintf("every customer's orders in its order: 1, 2, 3, ... (%d customers)", len(next)))
	}

	if r.checkpoints != nil {
		before = len(r.problems)
		for _, rt := range routes {
			if got, want := r.checkpoints[rt], r.lastNumbers[rt]; got != want {
				r.problem("%s: checkpoint of reader %s at %d, want the stream's last number %d", rt.stream, relayReader, got, want)
			}
		}
		if len(r.problems) == before {
			r.checks = append(r.checks, fmt.Sprintf("the relays' checkpoints (reader %s) at every stream's last number", relayReader))
		}
	}

	if k := r.kill; k != nil {
		before = len(r.problems)
		for _, m := range bySubject[k.route.subject] {
			if m.fence > k.fence {
				r.takeover = &m
				break
			}
		}
		if !k.signaled {
			r.problem("relay process %s did not end by SIGKILL", k.owner)
		}
		if r.takeover == nil || r.takeover.relay == k.owner {
			r.problem("nobody took %s over from %s", k.route.lease, k.owner)
		}
		if len(r.problems) == before {
			r.checks = append(r.checks, fmt.Sprintf("the holder of %s was killed (SIGKILL) and another relay took over", k.route.lease))
		}
	}
}

func (r *report) print(w io.Writer) {
	where := "the relays in this process"
	if r.c.procs > 1 {
		where = fmt.Sprintf("relays in %d processes", r.c.procs)
	}
	fmt.Fprintf(w, "\n%d orders, %d writers, %d streams, %s backend, %s, %s\n",
		r.c.orders, r.c.writers, r.c.streams, r.backend, r.broker, where)
	undo := "rolled back: no entry"
	if r.c.dsn == "" {
		undo = "released: a gap each"
	}
	fmt.Fprintf(w, "orders placed            %d (declined after the entry was written: %d, %s)\n", r.placed, r.declined, undo)
	fmt.Fprintf(w, "order rows               %d\n", r.rows)
	fmt.Fprintf(w, "entries                  %d committed, %d gaps (%d left by -abandon)\n", r.committed, r.gaps, r.abandoned)
	fmt.Fprintf(w, "messages in JetStream    %d\n", r.jsMessages)
	fmt.Fprintf(w, "relays                   %d published, %d duplicates dropped by JetStream, %d publishes fenced off, %d gaps skipped, %d leases taken, %d errors retried\n",
		r.relays.Published, r.relays.Duplicates, r.relays.Fenced, r.relays.Gaps, r.relays.Takeovers, r.relays.Errors)
	if r.kill != nil {
		fmt.Fprintln(w, "                         (the survivors' counts: the killed process's died with it)")
	}
	written := r.placed + r.declined
	fmt.Fprintf(w, "written                  %d orders in %v (%.0f orders/s)\n", written, r.writeElapsed.Round(time.Millisecond), float64(written)/r.writeElapsed.Seconds())
	fmt.Fprintf(w, "published                %d messages in %v from the first write (%.0f messages/s)\n", r.jsMessages, r.publishElapsed.Round(time.Millisecond), float64(r.jsMessages)/r.publishElapsed.Seconds())
	if r.drain > 0 {
		fmt.Fprintf(w, "lag when writing ended   %d messages; the last one published %v after the last write\n", r.lagAtEnd, r.drain.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "lag when writing ended   %d messages: the relays kept pace (the last message was in JetStream before the last writer returned)\n", r.lagAtEnd)
	}
	if k := r.kill; k != nil {
		fmt.Fprintf(w, "killed                   %s (SIGKILL: %v), holding %s with fence %d, after %d messages\n", k.owner, k.signaled, k.route.lease, k.fence, k.published)
		if t := r.takeover; t != nil {
			fmt.Fprintf(w, "taken over by            %s with fence %d, from entry %d\n", t.relay, t.fence, t.number)
		}
	}
	for _, c := range r.checks {
		fmt.Fprintf(w, "checked                  %s\n", c)
	}
	for _, p := range r.problems {
		fmt.Fprintf(w, "PROBLEM                  %s\n", p)
	}
	if err := r.err(); err != nil {
		fmt.Fprintln(w, "verdict                  FAILED")
		return
	}
	fmt.Fprintln(w, "verdict                  OK: JetStream holds exactly the committed outbox, in order")
}
