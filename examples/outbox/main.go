// Command outbox is a transactional outbox on seqlease, relaying to NATS
// JetStream in strict order.
//
// Writers place orders. On PostgreSQL each order is one transaction of the
// application's own: it locks the customer's row, inserts the order's row,
// and leases and completes the order's outbox entry through a seqlease Store
// built over that same transaction, so the row and its message commit
// together or not at all. Every tenth order (-decline) is declined after its
// entry was written, and the transaction rolled back: the order's row, the
// customer's count and the entry's number vanish together, and the stream has
// no hole. (On the in-memory backend there is no database transaction: the
// same flow runs under a per-customer lock, and a declined order gives its
// number up, which leaves a gap the relay skips.)
//
// Orders go to several streams, one per region (-streams). One relay per
// stream runs at a time, across every process, under a named lease (a
// renewing runner, fenced): it reads the stream in order up to the watermark
// and publishes each message to JetStream with the header
// Nats-Msg-Id: <stream>#<number>, waiting for JetStream's ack before the
// next. When a relay takes a stream over it learns from JetStream where to
// resume (the last message on the stream's subject). At the end the whole
// JetStream stream is read back and checked against the seqlease ledger and
// the order rows: every committed entry of every stream once, in number
// order, with its payload; no gap published; nothing lost.
//
// By default an embedded NATS server (with JetStream) runs in this process,
// so nothing needs to be running; -nats points at a real one.
//
//	make outbox                                               # in memory
//	make outbox ARGS="-dsn postgres://..."                    # on PostgreSQL
//	make outbox ARGS="-dsn postgres://... -procs 3 -kill"     # 3 relay processes, one killed
//	make outbox ARGS="-dsn postgres://... -compare-writes"    # the write path, three ways
//
// (or, in examples/, which is a module of its own: go run ./outbox ...)
//
// docs/outbox.md walks through the design. Run with -h for the knobs.
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
	orders, writers, streams, customers int
	decline, abandon                    int
	seed                                uint64
	dsn, schema                         string
	natsURL                             string
	procs                               int
	kill                                bool
	relayTTL, dedupe                    time.Duration
	progress                            time.Duration
	compare                             bool
	keep                                bool
}

func main() {
	var c config
	flag.IntVar(&c.orders, "orders", 2000, "orders to place (declined ones included)")
	flag.IntVar(&c.writers, "writers", 16, "concurrent writers")
	flag.IntVar(&c.streams, "streams", 4, "outbox streams (regions); one relay each")
	flag.IntVar(&c.customers, "customers", 200, "customers the orders come from; each belongs to one region")
	flag.IntVar(&c.decline, "decline", 10, "every Nth order is declined after its outbox entry was written (0: none)")
	flag.IntVar(&c.abandon, "abandon", 0, "every Nth order, a number of its stream is leased outside any transaction and released: a gap the relay must skip (0: none)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the orders")
	flag.StringVar(&c.dsn, "dsn", "", "PostgreSQL URL; empty runs on the in-memory backend")
	flag.StringVar(&c.schema, "schema", "seqlease_outbox", "PostgreSQL schema (migrated on start; the example's tables go in it too)")
	flag.StringVar(&c.natsURL, "nats", "", "NATS server with JetStream, e.g. nats://127.0.0.1:4222; empty runs one embedded in this process")
	flag.IntVar(&c.procs, "procs", 1, "relay processes sharing the PostgreSQL of -dsn (1: the relays run in this process)")
	flag.BoolVar(&c.kill, "kill", false, "with -procs, kill the relay process holding the first stream's lease (SIGKILL) a third of the way in")
	flag.DurationVar(&c.relayTTL, "relay-ttl", 2*time.Second, "TTL of a relay's named lease: how long a dead relay's streams wait for a new one")
	flag.DurationVar(&c.dedupe, "dedupe", 2*time.Minute, "JetStream's duplicate window on the outbox stream")
	flag.DurationVar(&c.progress, "progress", time.Second, "interval of the progress line (0: none)")
	flag.BoolVar(&c.compare, "compare-writes", false, "PostgreSQL only: measure the write path alone (no relay), a plain outbox insert beside the seqlease entry")
	flag.BoolVar(&c.keep, "keep", false, "with -nats, keep the run's JetStream stream instead of deleting it at the end")
	child := flag.String(childFlag, "", "internal: run as relay process RUN:INDEX of a -procs run")
	flag.Parse()
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := dispatch(ctx, c, *child); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		cancel()
		os.Exit(1)
	}
}

// dispatch runs what the command line asks for.
func dispatch(ctx context.Context, c config, child string) error {
	switch {
	case child != "":
		run, index, err := parseChild(child)
		if err != nil {
			return err
		}
		return runChild(ctx, c, run, index)
	case c.compare:
		return compareWrites(ctx, c, os.Stdout)
	}
	rep, err := run(ctx, c)
	if rep != nil {
		rep.print(os.Stdout)
	}
	return err
}

// validate checks the command line.
func (c *config) validate() error {
	switch {
	case c.orders < 1 || c.writers < 1 || c.streams < 1 || c.customers < 1:
		return errors.New("-orders, -writers, -streams and -customers must be positive")
	case c.streams > 100:
		return errors.New("-streams must be at most 100")
	case c.decline < 0 || c.abandon < 0:
		return errors.New("-decline and -abandon must not be negative")
	case c.relayTTL < 100*time.Millisecond:
		return errors.New("-relay-ttl must be at least 100ms")
	case c.dedupe < time.Second:
		return errors.New("-dedupe must be at least 1s")
	case c.procs < 1:
		return errors.New("-procs must be at least 1")
	case c.procs > 1 && c.dsn == "":
		return errors.New("-procs needs -dsn: the relay processes share one PostgreSQL")
	case c.kill && c.procs < 2:
		return errors.New("-kill needs -procs 2 or more: another process must take over")
	case c.compare && c.dsn == "":
		return errors.New("-compare-writes needs -dsn")
	}
	return nil
}

// parseChild parses the -child value RUN:INDEX.
func parseChild(s string) (string, int, error) {
	run, idx, ok := strings.Cut(s, ":")
	index, err := strconv.Atoi(idx)
	if !ok || err != nil || run == "" || index < 0 {
		return "", 0, fmt.Errorf("-%s %q: want RUN:INDEX", childFlag, s)
	}
	return run, index, nil
}
