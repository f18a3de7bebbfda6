package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/seqlease/seqlease/lease"
)

// With -procs N the relays run in N relay processes that share the
// PostgreSQL of -dsn and the NATS server (the embedded one of this process,
// or -nats): each campaigns for every stream's lease, its own share first
// (stream i goes to process i mod N at the start), the others a lease TTL
// later, so that it can take over a stream whose relay died. This process
// writes the orders, reads JetStream back and checks it; it stops the relay
// processes by closing their standard input, and each prints its counts as
// the last line of its output. With -kill, a third of the way in, the
// process that holds the first stream's lease is killed with SIGKILL: it
// has no chance to release anything, its lease expires after the TTL, and
// another process's relay takes the stream over from where JetStream has it.

// childFlag starts a process as relay process RUN:INDEX of a -procs run.
const childFlag = "child"

// runMainEnv, set to 1, makes a test binary of this package run main
// instead of its tests, so tests can start relay processes too.
const runMainEnv = "OUTBOX_RUN_MAIN"

// relayOwner is the lease owner of relay process i.
func relayOwner(i int) string { return "relay-" + strconv.Itoa(i) }

// killInfo is what -kill did.
type killInfo struct {
	owner     string // the killed process's lease owner
	route     route  // the stream whose lease it held
	fence     int64  // that holding's fence
	published int    // messages read back from JetStream when it was killed
	signaled  bool   // the process ended by SIGKILL
}

// supervisor runs the relay processes.
type supervisor struct {
	cmds   []*exec.Cmd
	stdins []io.WriteCloser
	fail   func(error)
	ctx    context.Context // ends when stop begins
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	counts []relayCounts
	errs   []error
	kill   *killInfo
	victim int // index of the killed process; -1: none
}

// startChildren starts c.procs relay processes of run n.
func startChildren(ctx context.Context, c config, n names, natsURL string, fail func(error)) (*supervisor, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := &supervisor{fail: fail, counts: make([]relayCounts, c.procs), errs: make([]error, c.procs), victim: -1}
	s.ctx, s.cancel = context.WithCancel(ctx)
	for i := range c.procs {
		cmd := exec.Command(exe, "-"+childFlag, n.run+":"+strconv.Itoa(i),
			"-procs", strconv.Itoa(c.procs), "-streams", strconv.Itoa(c.streams),
			"-dsn", c.dsn, "-schema", c.schema, "-nats", natsURL, "-relay-ttl", c.relayTTL.String())
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err == nil {
			var in io.WriteCloser
			if in, err = cmd.StdinPipe(); err == nil {
				s.stdins = append(s.stdins, in)
				err = cmd.Start()
			}
		}
		if err != nil {
			_, _ = s.stop()
			return nil, fmt.Errorf("start relay process %d: %w", i, err)
		}
		s.cmds = append(s.cmds, cmd)
		s.wg.Go(func() { s.watch(i, cmd, out) })
	}
	return s, nil
}

// watch waits for relay process i to end and records how it ended.
func (s *supervisor) watch(i int, cmd *exec.Cmd, out io.Reader) {
	sc := bufio.NewScanner(out)
	var last []byte
	for sc.Scan() {
		last = append(last[:0], sc.Bytes()...)
	}
	err := cmd.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if i == s.victim {
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		s.kill.signaled = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
		return
	}
	if err == nil {
		err = json.Unmarshal(last, &s.counts[i])
	}
	if err != nil {
		s.errs[i] = fmt.Errorf("relay process %d: %w", i, err)
		s.fail(s.errs[i])
	}
}

// stop closes the relay processes' input, which ends them, waits for them,
// and returns the sum of their counts.
func (s *supervisor) stop() (relayCounts, error) {
	s.cancel()
	for _, in := range s.stdins {
		_ = in.Close()
	}
	s.wg.Wait()
	var sum relayCounts
	for _, c := range s.counts {
		sum.add(c)
	}
	return sum, errors.Join(s.errs...)
}

// killHolderAt kills, once published messages were read back, the relay
// process that holds rt's lease, in the background; stop waits for it.
func (s *supervisor) killHolderAt(st relaySource, col *collector, rt route, published int) {
	ctx := s.ctx
	s.wg.Go(func() {
		if col.wait(ctx, func(c *collector) bool { return len(c.msgs) >= published }) != nil {
			return
		}
		m, err := lease.New(st, &lease.Config{Owner: "outbox-supervisor"})
		if err != nil {
			s.fail(err)
			return
		}
		defer m.Stop()
		for ctx.Err() == nil {
			info, err := m.Get(ctx, rt.lease)
			if err == nil && info.Held() {
				for i := range s.cmds {
					if relayOwner(i) == info.Owner {
						s.mu.Lock()
						s.victim = i
						s.kill = &killInfo{owner: info.Owner, route: rt, fence: info.Fence, published: col.count()}
						s.mu.Unlock()
						_ = s.cmds[i].Process.Kill() // SIGKILL
						return
					}
				}
			}
			sleep(ctx, 10*time.Millisecond) // between holders
		}
	})
}

// killed returns what -kill did; nil if nothing was killed.
func (s *supervisor) killed() *killInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kill
}

// runChild is relay process index of run: it relays until its standard
// input closes, then prints its counts.
func runChild(ctx context.Context, c config, run string, index int) error {
	n := names{run: run, streams: c.streams}
	st, _, _, closeStore, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer closeStore()
	b, err := dialBroker(ctx, c.natsURL, n, false, 0)
	if err != nil {
		return err
	}
	defer b.close()
	rl, err := startRelays(ctx, st, b, n.routes(), relayConfig{
		owner: relayOwner(index), ttl: c.relayTTL,
		later: func(rt route) bool { return rt.index%c.procs != index }, holdBack: c.relayTTL,
	})
	if err != nil {
		return err
	}
	stdin := make(chan struct{})
	go func() { // ends with the process if ctx ends first
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdin)
	}()
	select {
	case <-stdin:
	case <-ctx.Done():
	}
	counts := rl.stop()
	return json.NewEncoder(os.Stdout).Encode(counts)
}
