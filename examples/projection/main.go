// Command projection is an end-to-end event-sourcing projection on seqlease:
// workers turn events into projection operations in parallel, each under a
// sequence lease; the operations commit in sequence order; a projector
// follows the stream and applies them to a read model strictly in order; at
// the end the read model is compared with a sequential replay of the same
// events. The read model depends on order within an account (an order's
// state machine, a running balance, a hash chain), so the pipeline leases an
// account's next event only once its previous one committed; accounts run in
// parallel.
//
// Faults are on by default: some workers stall past their lease (their late
// commits are refused), some crash and drop their lease, some crash after
// doing part of the work or all of it. The cleanup loop resolves their
// numbers while the pipeline runs, recovering the work it can (partial work,
// completed results) under new numbers and turning the rest into gaps, which
// the projector answers by redelivering the event. These faults are
// simulated inside the workers (a worker sleeps past its lease or drops it
// on the floor). With -procs 3 -kill a fault is real: the supervisor
// SIGKILLs a worker process a third of the way in and restarts it; the
// leases the dead process held expire and the cleanup loop of the other
// processes resolves them, and the restarted process picks its share up
// from what the stream holds.
//
// The projector is the named reader "projection": it saves its checkpoint
// every 100 entries and at its last, and the report checks that the
// checkpoint reached the last applied entry; `seqlease readers` and the
// seqlease_reader_lag gauge (-metrics) show its lag. The read model here is
// in memory, so the checkpoint is progress and lag, not a restart point;
// with a read model in PostgreSQL, save the checkpoint in the transaction
// that applies the entries (docs/projections.md) and a restart resumes
// exactly after the last applied one.
//
//	make demo                                            # in memory
//	make demo ARGS="-dsn postgres://..."                 # on PostgreSQL
//	make demo ARGS="-dsn postgres://... -procs 3"        # three worker processes
//	make demo ARGS="-dsn postgres://... -procs 3 -kill"  # and one of them SIGKILLed
//	make demo ARGS="-dsn postgres://... -events 200000"  # a large run: a progress line past 5 s
//	make demo ARGS="-metrics :9464 -linger 1m"           # and serve /metrics
//
// (or, in examples/, which is a module of its own: go run ./projection ...)
//
// Run with -h for the knobs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
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
	procs                     int
	kill                      bool // with procs > 1: SIGKILL a worker process a third of the way in
	progress, linger          time.Duration
	timeout                   time.Duration // 0: none
	metricsAddr               string
	telemetry                 *telemetry // set when metricsAddr is; nil: no metrics
}

func main() {
	code := 0
	defer func() { os.Exit(code) }() // after the deferred shutdowns below
	var c config
	flag.IntVar(&c.events, "events", 2000, "events in the source")
	flag.IntVar(&c.workers, "workers", 16, "parallel workers (per process, with -procs)")
	flag.IntVar(&c.accounts, "accounts", 50, "accounts the events touch")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the event source and the faults")
	flag.DurationVar(&c.ttl, "ttl", 0, "lease duration (default 100ms in memory, 300ms on PostgreSQL)")
	flag.DurationVar(&c.interval, "cleanup-interval", 25*time.Millisecond, "cleanup loop interval")
	flag.Float64Var(&c.stall, "stall", 0.005, "share of attempts that stall past their lease")
	flag.Float64Var(&c.crash, "crash", 0.01, "share of attempts that crash and drop their lease")
	flag.Float64Var(&c.partial, "partial", 0.01, "share of attempts that crash after doing part of the work")
	flag.Float64Var(&c.retry, "retry", 0.005, "share of attempts that crash after doing all of the work")
	flag.StringVar(&c.dsn, "dsn", "", "PostgreSQL URL; empty runs on the in-memory backend")
	flag.StringVar(&c.schema, "schema", "seqlease_demo", "PostgreSQL schema (migrated on start)")
	flag.DurationVar(&c.progress, "progress", time.Second, "interval of the progress line, printed once a run goes past "+progressQuiet.String()+" (0: none)")
	flag.DurationVar(&c.timeout, "timeout", 0, "give up after this long (0: no limit; unset: "+defaultTimeoutText+")")
	flag.IntVar(&c.procs, "procs", 1, "worker processes sharing the PostgreSQL of -dsn (1: workers run in this process)")
	flag.BoolVar(&c.kill, "kill", false, "with -procs, SIGKILL worker process 0 a third of the way in (a real kill -9); the supervisor restarts it")
	flag.StringVar(&c.metricsAddr, "metrics", "", "serve Prometheus metrics on this address while it runs, e.g. :9464 (empty: off)")
	flag.DurationVar(&c.linger, "linger", 0, "with -metrics, keep serving this long after the run, for a scraper to catch the last values")
	child := flag.String(childFlag, "", "internal: run as worker process STREAM:INDEX of a -procs run")
	childRun := flag.Int(childRunFlag, 0, "internal: with -child, how many times this worker process was restarted")
	flag.Parse()
	timeoutSet := false
	flag.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
	c.setDefaults(timeoutSet)
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "projection:", err)
		os.Exit(2)
	}

	ctx, cancel := c.runContext()
	defer cancel()
	if *child != "" {
		stream, index, err := parseChild(*child)
		if err == nil {
			err = runChild(ctx, c, stream, index, *childRun)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "projection: worker process:", err)
			os.Exit(1)
		}
		return
	}

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
		c.telemetry = tm
		defer func() {
			if c.linger > 0 {
				fmt.Fprintf(os.Stderr, "projection: serving metrics for %v more\n", c.linger)
				time.Sleep(c.linger)
			}
			stop()
		}()
	}

	rep, err := run(ctx, c)
	if rep != nil {
		rep.print(os.Stdout)
	}
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && errors.Is(err, context.DeadlineExceeded) {
			err = cause
		}
		fmt.Fprintln(os.Stderr, "projection:", err)
		code = 1
	}
}

// defaultTimeout bounds a run of events when -timeout is not given: five
// minutes plus 20 ms an event, so that a large run is allowed to finish and
// only a run that hangs is cut short. A run on PostgreSQL with the default
// flags, on a busy two-core machine, takes about 7 ms an event (latency,
// not CPU: the chain of each account is sequential).
func defaultTimeout(events int) time.Duration {
	return 5*time.Minute + time.Duration(events)*20*time.Millisecond
}

// defaultTimeoutText is defaultTimeout in words, for -h.
const defaultTimeoutText = "5m plus 20ms an event"

// setDefaults fills in the defaults that depend on other flags: the TTL
// (on the backend) and, unless -timeout was given, the run's bound (on
// -events).
func (c *config) setDefaults(timeoutSet bool) {
	if !timeoutSet {
		c.timeout = defaultTimeout(c.events)
	}
	if c.ttl == 0 {
		// Shared machines stall for tens of milliseconds at times: on
		// PostgreSQL a healthy worker must not lose its lease to that.
		c.ttl = 100 * time.Millisecond
		if c.dsn != "" {
			c.ttl = 300 * time.Millisecond
		}
	}
}

// runContext is the context of the run: ended after c.timeout, whose
// expiry is its cause, or never with c.timeout 0.
func (c *config) runContext() (context.Context, context.CancelFunc) {
	if c.timeout == 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeoutCause(context.Background(), c.timeout,
		fmt.Errorf("gave up after -timeout %v (0: no limit)", c.timeout))
}

// validate checks the command line.
func (c *config) validate() error {
	switch {
	case c.events < 1 || c.workers < 1 || c.accounts < 1:
		return errors.New("-events, -workers and -accounts must be positive")
	case c.ttl <= 0 || c.interval <= 0:
		return errors.New("-ttl and -cleanup-interval must be positive")
	case c.timeout < 0:
		return errors.New("-timeout must not be negative (0: no limit)")
	case c.procs < 1:
		return errors.New("-procs must be at least 1")
	case c.procs > 1 && c.dsn == "":
		return errors.New("-procs needs -dsn: the worker processes share one PostgreSQL")
	case c.kill && c.procs < 2:
		return errors.New("-kill needs -procs 2 or more: the worker process it kills is restarted while the others go on")
	case c.stall < 0 || c.crash < 0 || c.partial < 0 || c.retry < 0 || c.stall+c.crash+c.partial+c.retry > 0.5:
		return errors.New("the fault shares must be non-negative and add up to at most 0.5")
	}
	return nil
}

// parseChild parses the -child value STREAM:INDEX.
func parseChild(s string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("-child %q: want STREAM:INDEX", s)
	}
	index, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return "", 0, fmt.Errorf("-child %q: %w", s, err)
	}
	return s[:i], index, nil
}
