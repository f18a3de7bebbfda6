package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/seqlease/seqlease/examples/internal/natsrun"
)

// runDemo runs the whole demo: NATS (embedded unless -nats), the stream,
// the consumers (here, or in -procs processes), the producer; it waits
// until JetStream has every message delivered and acked, then checks the
// ledger against the payments and purges the inbox records.
func runDemo(ctx context.Context, c config) (*report, error) {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	rep := &report{c: c, run: run, nats: c.natsURL, killed: -1}
	url, stopNATS, err := natsrun.Use(c.natsURL, nil)
	if err != nil {
		return nil, err
	}
	defer stopNATS()
	c.natsURL = url // for the consumer processes
	nc, js, err := connect(c.natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	if err := setupStream(ctx, js, run, c.ackWait); err != nil {
		return nil, err
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), streamName(run)) }()

	var l ledger
	var progress func(context.Context) (int, error) // payments credited so far
	var cn *consumer
	if c.dsn == "" {
		ml := newMemLedger(c.noInbox)
		l = ml
		cn = &consumer{c: c, run: run, l: l}
		progress = func(context.Context) (int, error) { return int(cn.n.applied.Load()), nil }
	} else {
		pl, err := openPGLedger(ctx, c)
		if err != nil {
			return nil, err
		}
		defer pl.close()
		l = pl
		cn = &consumer{c: c, run: run, l: l}
		progress = func(ctx context.Context) (int, error) { return pl.credited(ctx, run) }
	}

	pays, twice := payments(c)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	var consumers sync.WaitGroup
	var kids *children
	if c.procs == 1 {
		consumers.Go(func() {
			if err := cn.consume(ctx, js, 0); err != nil {
				cancel(err)
			}
		})
	} else {
		if kids, err = startChildren(cancel, c, run); err != nil {
			cancel(err)
			return nil, err
		}
	}
	rep.twice, err = produce(ctx, js, run, pays, twice)
	if err == nil {
		err = rep.wait(ctx, js, kids, progress)
	}
	rep.elapsed = time.Since(start)
	cancel(nil) // the consumers stop
	consumers.Wait()
	if kids != nil {
		rep.n = kids.stop()
	} else {
		rep.n = cn.counts()
	}
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if err != nil {
		return rep, err
	}
	if rep.n.LastApplied > 0 {
		rep.applyTime = time.Unix(0, rep.n.LastApplied).Sub(start)
	}
	ctx = context.WithoutCancel(ctx)
	if err := rep.check(ctx, l, pays); err != nil {
		return rep, err
	}
	return rep, rep.purge(ctx, l.inbox())
}

// wait waits until every message was delivered and acked, printing
// progress; with -kill it SIGKILLs a consumer process once a third of the
// payments were credited.
func (r *report) wait(ctx context.Context, js jetstream.JetStream, kids *children, progress func(context.Context) (int, error)) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Now()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
		credited, err := progress(ctx)
		if err != nil {
			return err
		}
		if r.c.kill && kids != nil && r.killed < 0 && credited >= r.c.payments/3 {
			if err := kids.kill(0); err != nil {
				return err
			}
			r.killed, r.killedAt = 0, credited
			fmt.Fprintf(os.Stderr, "inbox: SIGKILLed consumer process 0 at %d/%d payments credited\n", credited, r.c.payments)
		}
		if r.c.progress > 0 && time.Since(lastPrint) >= r.c.progress {
			lastPrint = time.Now()
			fmt.Fprintf(os.Stderr, "inbox: %d/%d payments credited\n", credited, r.c.payments)
		}
		if credited < r.c.payments {
			continue
		}
		done, err := drained(ctx, js, r.run)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}
