package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/seqlease/seqlease/store"
)

// report is the outcome of a run.
type report struct {
	c         config
	run, nats string
	twice     int    // payments the stream holds twice (same Nats-Msg-Id)
	n         counts // of this process's consumers, or of the processes not killed
	killed    int    // the process killed, -1 for none
	killedAt  int    // payments credited when it was killed
	elapsed   time.Duration
	applyTime time.Duration // until the last first receipt was credited

	// check
	accounts  int
	exactlyOn bool // every payment credited once, balances match
	// purge
	records, purged int64
	batches         int
}

// check compares the ledger with the payments: each one credited exactly
// once, no other credit, and each account's balance the sum of its
// payments.
func (r *report) check(ctx context.Context, l ledger, pays []payment) error {
	credits, balances, err := l.tally(ctx, r.run)
	if err != nil {
		return fmt.Errorf("tally: %w", err)
	}
	want := map[string]int64{}
	var errs []error
	for i, p := range pays {
		want[p.Account] += p.Amount
		switch n := credits[paymentID(r.run, i)]; n {
		case 1:
		case 0:
			errs = append(errs, fmt.Errorf("payment %s was lost: never credited", paymentID(r.run, i)))
		default:
			errs = append(errs, fmt.Errorf("payment %s was credited %d times", paymentID(r.run, i), n))
		}
	}
	if len(credits) != len(pays) {
		errs = append(errs, fmt.Errorf("%d payments credited, %d published", len(credits), len(pays)))
	}
	for account, sum := range want {
		if balances[account] != sum {
			errs = append(errs, fmt.Errorf("account %s holds %d, its payments add up to %d", account, balances[account], sum))
		}
	}
	if len(balances) != len(want) {
		errs = append(errs, fmt.Errorf("%d accounts have a balance, %d were paid", len(balances), len(want)))
	}
	if r.killed < 0 && r.n.Duplicates < r.n.Withheld+int64(r.twice) {
		errs = append(errs, fmt.Errorf("%d duplicates seen, fewer than the %d withheld acks and %d payments stored twice",
			r.n.Duplicates, r.n.Withheld, r.twice))
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more", len(errs)-10))
	}
	r.accounts = len(want)
	r.exactlyOn = len(errs) == 0
	return errors.Join(errs...)
}

// purge deletes the inbox records through the library, a bounded batch at
// a time, as a retention job would (here with no age: the run is over),
// and checks none is left.
func (r *report) purge(ctx context.Context, in inboxStore) error {
	var err error
	if r.records, err = in.CountReceived(ctx, inboxConsumer); err != nil {
		return err
	}
	if r.records < int64(r.c.payments) {
		return fmt.Errorf("%d inbox records for %d payments", r.records, r.c.payments)
	}
	for {
		n, err := in.PurgeReceived(ctx, &store.PurgeReceivedParams{Consumer: inboxConsumer, Limit: store.DefaultPurgeLimit})
		if err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		r.purged += n
		r.batches++
		if n < store.DefaultPurgeLimit {
			break
		}
	}
	left, err := in.CountReceived(ctx, inboxConsumer)
	if err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("%d inbox records left after the purge", left)
	}
	return nil
}

// print writes the report.
func (r *report) print(w io.Writer) {
	backend, broker := "memory", "embedded NATS"
	if r.c.dsn != "" {
		backend = "PostgreSQL"
	}
	if r.nats != "" {
		broker = "NATS at " + r.nats
	}
	fmt.Fprintf(w, "inbox: %d payments to %d accounts, %s backend, %s, %d consumer process(es) of %d workers\n",
		r.c.payments, r.c.accounts, backend, broker, r.c.procs, r.c.workers)
	if r.killed >= 0 {
		fmt.Fprintf(w, "  killed       consumer process %d (SIGKILL) at %d payments credited; its counts are lost with it\n", r.killed, r.killedAt)
	}
	fmt.Fprintf(w, "  deliveries   %d: %d first, %d duplicates (acks withheld after commit: %d; payments stored twice: %d)\n",
		r.n.Deliveries, r.n.Applied, r.n.Duplicates, r.n.Withheld, r.twice)
	if r.n.Failed > 0 {
		fmt.Fprintf(w, "  failed       %d transactions rolled back and redelivered\n", r.n.Failed)
	}
	if r.applyTime > 0 {
		fmt.Fprintf(w, "  throughput   %.0f payments/s (all %d credited in %v); %.0f deliveries/s over the whole run (%v, ack waits included)\n",
			float64(r.c.payments)/r.applyTime.Seconds(), r.c.payments, r.applyTime.Round(time.Millisecond),
			float64(r.n.Deliveries)/r.elapsed.Seconds(), r.elapsed.Round(time.Millisecond))
	}
	if r.exactlyOn {
		fmt.Fprintf(w, "  verdict      OK: every payment credited exactly once; the %d balances match what was published\n", r.accounts)
	}
	if r.batches > 0 {
		fmt.Fprintf(w, "  purged       %d of %d inbox records with PurgeReceived (%d batch(es) of at most %d); none left\n",
			r.purged, r.records, r.batches, store.DefaultPurgeLimit)
	}
}
