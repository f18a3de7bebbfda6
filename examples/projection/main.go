// Command projection is an end-to-end event-sourcing projection on seqlease:
// workers turn events into projection operations in parallel, each under a
// sequence lease; the operations commit in sequence order; a projector
// follows the stream and applies them to a read model strictly in order; at
// the end the read model is compared with a sequential replay of the same
// events.
//
// Faults are on by default: some workers stall past their lease (their late
// commits are refused), some crash and drop their lease, some crash after
// doing part of the work or all of it. The cleanup loop resolves their
// numbers while the pipeline runs, recovering the work it can (partial work,
// completed results) under new numbers and turning the rest into gaps, which
// the projector answers by redelivering the event.
//
//	go run ./examples/projection                      # in memory
//	go run ./examples/projection -dsn postgres://...  # on PostgreSQL
//	go run ./examples/projection -metrics :9464       # and serve /metrics
//
// Run with -h for the knobs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"
)

// config is the command line.
type config struct {
	events, workers, accounts int
	seed                      uint64
	ttl, interval             time.Duration
	stall, crash              float64
	partial, retry            float64
	dsn, schema               string
	progress                  time.Duration
	metricsAddr               string
	telemetry                 *telemetry // set when metricsAddr is; nil: no metrics
}

func main() {
	var c config
	flag.IntVar(&c.events, "events", 2000, "events in the source")
	flag.IntVar(&c.workers, "workers", 16, "parallel workers")
	flag.IntVar(&c.accounts, "accounts", 50, "accounts the events touch")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the event source and the faults")
	flag.DurationVar(&c.ttl, "ttl", 100*time.Millisecond, "lease duration")
	flag.DurationVar(&c.interval, "cleanup-interval", 25*time.Millisecond, "cleanup loop interval")
	flag.Float64Var(&c.stall, "stall", 0.005, "share of attempts that stall past their lease")
	flag.Float64Var(&c.crash, "crash", 0.01, "share of attempts that crash and drop their lease")
	flag.Float64Var(&c.partial, "partial", 0.01, "share of attempts that crash after doing part of the work")
	flag.Float64Var(&c.retry, "retry", 0.005, "share of attempts that crash after doing all of the work")
	flag.StringVar(&c.dsn, "dsn", "", "PostgreSQL URL; empty runs on the in-memory backend")
	flag.StringVar(&c.schema, "schema", "seqlease_demo", "PostgreSQL schema (migrated on start)")
	flag.DurationVar(&c.progress, "progress", time.Second, "interval of the progress line (0: none)")
	flag.StringVar(&c.metricsAddr, "metrics", "", "serve Prometheus metrics on this address while it runs, e.g. :9464 (empty: off)")
	flag.Parse()

	if c.metricsAddr != "" {
		tm, err := newTelemetry()
		if err != nil {
			fmt.Fprintln(os.Stderr, "projection:", err)
			os.Exit(1)
		}
		stop, err := tm.serve(c.metricsAddr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "projection:", err)
			os.Exit(1)
		}
		defer stop()
		c.telemetry = tm
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := run(ctx, c)
	if rep != nil {
		rep.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "projection:", err)
		os.Exit(1)
	}
}
