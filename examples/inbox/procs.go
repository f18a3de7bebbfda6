package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
)

// With -procs N the consumers run in N processes that share the NATS
// server and the PostgreSQL database; this process runs NATS (when it is
// embedded), publishes, watches the progress and checks the outcome. A
// consumer process runs until its standard input closes, then prints its
// counts as the last line of its output. With -kill, process 0 is
// SIGKILLed a third of the way in: its open transaction rolls back, the
// messages it had not acked are redelivered to the others, and the ones
// it had committed but not acked turn up there as duplicates.

// childFlag starts a process as consumer process INDEX; runFlag gives it
// the run id.
const (
	childFlag = "child"
	runFlag   = "run"
)

// runMainEnv, set to 1, makes a test binary of this package run main
// instead of its tests, so tests can start consumer processes too.
const runMainEnv = "INBOX_RUN_MAIN"

// children are the consumer processes of a -procs run.
type children struct {
	cmds   []*exec.Cmd
	stdins []io.WriteCloser
	counts []counts
	killed []atomic.Bool // written by kill, read by the goroutine that waits
	wg     sync.WaitGroup
}

// startChildren starts c.procs consumer processes; a process that fails
// (other than by the kill) cancels ctx with its error.
func startChildren(cancel context.CancelCauseFunc, c config, run string) (*children, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	k := &children{counts: make([]counts, c.procs), killed: make([]atomic.Bool, c.procs)}
	for i := range c.procs {
		cmd := exec.Command(exe, childArgs(c, run, i)...)
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			k.stop()
			return nil, err
		}
		in, err := cmd.StdinPipe()
		if err != nil {
			k.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			k.stop()
			return nil, fmt.Errorf("start consumer process %d: %w", i, err)
		}
		k.cmds, k.stdins = append(k.cmds, cmd), append(k.stdins, in)
		k.wg.Go(func() {
			sc := bufio.NewScanner(out) // the last line is the counts
			var last []byte
			for sc.Scan() {
				last = append(last[:0], sc.Bytes()...)
			}
			err := cmd.Wait()
			if k.killed[i].Load() {
				return
			}
			if err == nil {
				err = json.Unmarshal(last, &k.counts[i])
			}
			if err != nil {
				cancel(fmt.Errorf("consumer process %d: %w", i, err))
			}
		})
	}
	return k, nil
}

// kill SIGKILLs consumer process i.
func (k *children) kill(i int) error {
	k.killed[i].Store(true)
	return k.cmds[i].Process.Kill()
}

// stop closes the processes' standard inputs, which ends them, waits for
// them and returns the sum of the counts of those that were not killed.
func (k *children) stop() counts {
	for _, in := range k.stdins {
		_ = in.Close()
	}
	k.wg.Wait()
	var sum counts
	for i, n := range k.counts {
		if k.killed[i].Load() {
			continue
		}
		sum.Deliveries += n.Deliveries
		sum.Applied += n.Applied
		sum.Duplicates += n.Duplicates
		sum.Withheld += n.Withheld
		sum.Failed += n.Failed
		sum.LastApplied = max(sum.LastApplied, n.LastApplied)
	}
	return sum
}

// childArgs are the command line of consumer process i.
func childArgs(c config, run string, i int) []string {
	return []string{
		"-" + childFlag, strconv.Itoa(i), "-" + runFlag, run,
		"-nats", c.natsURL, "-dsn", c.dsn, "-schema", c.schema,
		"-workers", strconv.Itoa(c.workers), "-seed", strconv.FormatUint(c.seed, 10),
		"-withhold", strconv.FormatFloat(c.withhold, 'g', -1, 64), "-ack-wait", c.ackWait.String(),
		"-progress", "0",
	}
}

// runChild is consumer process index of run: it consumes until its
// standard input closes, then prints its counts.
func runChild(ctx context.Context, c config, run string, index int) error {
	if c.natsURL == "" || c.dsn == "" || run == "" {
		return fmt.Errorf("-%s needs -nats, -dsn and -%s", childFlag, runFlag)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // ends with the process: a read of stdin cannot be interrupted
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	nc, js, err := connect(c.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	l, err := openPGLedger(ctx, c)
	if err != nil {
		return err
	}
	defer l.close()
	cn := &consumer{c: c, run: run, l: l}
	if err := cn.consume(ctx, js, index+1); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(cn.counts())
}
