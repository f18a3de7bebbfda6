// Command inbox is an inbox consumer on seqlease: payments arrive from NATS
// JetStream, which delivers at least once, and each payment must credit its
// account exactly once. Each delivery records its message id with
// MarkReceived and credits the account in one transaction; a duplicate
// finds the record and changes nothing. At the end every account's balance
// is compared with what was published, and the records are purged through
// the library (PurgeReceived).
//
// Duplicates are real: consumers withhold some acks after committing, so
// JetStream redelivers those messages after the ack wait, and the producer
// publishes some payments a second time with the same Nats-Msg-Id once the
// stream's deduplication window has passed.
//
//	make inbox                                           # in memory, embedded NATS
//	make inbox ARGS="-dsn postgres://..."                # on PostgreSQL
//	make inbox ARGS="-dsn postgres://... -procs 3 -kill" # three consumer processes, one SIGKILLed
//	make inbox ARGS="-nats nats://127.0.0.1:4222"        # a NATS server of your own
//
// (or, in examples/, which is a module of its own: go run ./inbox ...)
//
// Run with -h for the knobs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

// config is the command line.
type config struct {
	payments, accounts, workers int
	seed                        uint64
	withhold, republish         float64
	ackWait                     time.Duration
	dsn, schema, natsURL        string
	procs                       int
	kill                        bool
	progress                    time.Duration
	noInbox                     bool // tests: on memory, credit duplicates too
}

func main() {
	var c config
	flag.IntVar(&c.payments, "payments", 2000, "payments the producer publishes")
	flag.IntVar(&c.accounts, "accounts", 20, "accounts the payments credit")
	flag.IntVar(&c.workers, "workers", 8, "consumer goroutines (per process, with -procs)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the payments and of the withheld acks")
	flag.Float64Var(&c.withhold, "withhold", 0.05, "share of first deliveries whose ack is withheld after the commit (JetStream redelivers them)")
	flag.Float64Var(&c.republish, "republish", 0.05, "share of payments published a second time with the same Nats-Msg-Id, after the dedupe window")
	flag.DurationVar(&c.ackWait, "ack-wait", time.Second, "JetStream's ack wait: an unacked delivery is redelivered after it")
	flag.StringVar(&c.dsn, "dsn", "", "PostgreSQL URL; empty runs on the in-memory backend")
	flag.StringVar(&c.schema, "schema", "seqlease_inbox_demo", "PostgreSQL schema (migrated on start)")
	flag.StringVar(&c.natsURL, "nats", "", "NATS server with JetStream; empty starts one embedded in this process")
	flag.IntVar(&c.procs, "procs", 1, "consumer processes sharing the PostgreSQL of -dsn (1: consumers run in this process)")
	flag.BoolVar(&c.kill, "kill", false, "with -procs, SIGKILL one consumer process a third of the way in")
	flag.DurationVar(&c.progress, "progress", time.Second, "interval of the progress line (0: none)")
	child := flag.Int(childFlag, -1, "internal: run as consumer process INDEX of a -procs run")
	run := flag.String(runFlag, "", "internal: the run id of a consumer process")
	flag.Parse()
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "inbox:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if *child >= 0 {
		if err := runChild(ctx, c, *run, *child); err != nil {
			fmt.Fprintln(os.Stderr, "inbox: consumer process:", err)
			cancel()
			os.Exit(1)
		}
		return
	}
	rep, err := runDemo(ctx, c)
	if rep != nil {
		rep.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "inbox:", err)
		cancel()
		os.Exit(1)
	}
}

// validate checks the command line.
func (c *config) validate() error {
	switch {
	case c.payments < 1 || c.accounts < 1 || c.workers < 1:
		return errors.New("-payments, -accounts and -workers must be positive")
	case c.withhold < 0 || c.withhold > 0.5 || c.republish < 0 || c.republish > 1:
		return errors.New("-withhold must be in [0, 0.5] and -republish in [0, 1]")
	case c.ackWait < 100*time.Millisecond:
		return errors.New("-ack-wait must be at least 100ms")
	case c.procs < 1:
		return errors.New("-procs must be at least 1")
	case c.procs > 1 && c.dsn == "":
		return errors.New("-procs needs -dsn: the consumer processes share one PostgreSQL")
	case c.kill && c.procs < 2:
		return errors.New("-kill needs -procs 2 or more: another process must take over")
	}
	return nil
}
