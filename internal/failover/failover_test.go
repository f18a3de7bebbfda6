//go:build failover

package failover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store/postgres"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	schema     = "failover"
	workers    = 4 // per stream
	leaseTTL   = 3 * time.Second
	pause      = 50 * time.Millisecond // between retries of a failed call
	warmup     = 100                   // commits acknowledged before the kill
	afterKill  = 100                   // commits acknowledged after the kill before the load stops
	resumeWait = 90 * time.Second      // bound on the failover and the resumption
)

var streams = []string{"ha-a", "ha-b"}

// ledger is what the workers saw: every number handed out and every commit
// the library acknowledged, with the instant of each acknowledgement.
type ledger struct {
	mu       sync.Mutex
	leased   map[string]map[int64]string // stream -> number -> worker
	dups     []string
	acked    map[string]map[int64][]byte
	ackTimes []time.Time   // when each Commit returned success
	resumeAt time.Time     // the first success of a Commit called after killedAt
	warm     chan struct{} // closed at the warmup-th acknowledgement
	errs     map[string]int
	killedAt time.Time
	after    int           // acknowledgements after killedAt
	resumed  chan struct{} // closed at the afterKill-th of them
}

func (g *ledger) lease(stream string, n int64, worker string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w, ok := g.leased[stream][n]; ok {
		g.dups = append(g.dups, fmt.Sprintf("%s #%d to %s and %s", stream, n, w, worker))
	}
	g.leased[stream][n] = worker
}

// ack records the success of a Commit called at called.
func (g *ledger) ack(stream string, n int64, payload []byte, called time.Time) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.acked[stream][n] = payload
	g.ackTimes = append(g.ackTimes, now)
	if len(g.ackTimes) == warmup {
		close(g.warm)
	}
	// A Commit called after the kill can only have reached the new primary
	// (one that returned just after it may have been answered before it).
	if !g.killedAt.IsZero() && called.After(g.killedAt) {
		if g.resumeAt.IsZero() {
			g.resumeAt = now
		}
		g.after++
		if g.after == afterKill {
			close(g.resumed)
		}
	}
}

func (g *ledger) fail(op string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.errs[op+": "+kindOf(err)]++
}

// kindOf classifies an error for the summary.
func kindOf(err error) string {
	switch {
	case errors.Is(err, sequence.ErrExpired):
		return "expired"
	case errors.Is(err, sequence.ErrGap):
		return "gap"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case strings.Contains(err.Error(), "failed to connect"):
		return "no writable node"
	case strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset"):
		return "connection lost"
	default:
		s := err.Error()
		if i := strings.LastIndex(s, ": "); i >= 0 {
			s = s[i+2:]
		}
		return s
	}
}

// work leases and commits, in order, on stream until ctx ends. A failed
// Commit is retried with the same lease while it may still succeed (a
// retry reports success exactly when the number is committed with the
// lease's token); a lease that can no longer commit is left to the cleanup
// loop, and the worker takes a new one.
func work(ctx context.Context, g *ledger, l *sequence.Leaser, stream, name string, started chan<- struct{}) {
	wait := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
			return true
		}
	}
	first := true
	for i := 0; ctx.Err() == nil; i++ {
		x, err := l.Lease(ctx, stream, &sequence.LeaseOpts{TTL: leaseTTL})
		if err != nil {
			if ctx.Err() == nil {
				g.fail("lease", err)
				wait()
			}
			continue
		}
		g.lease(stream, x.Number(), name)
		payload := fmt.Appendf(nil, "%s/%d", name, i)
		for ctx.Err() == nil {
			called := time.Now()
			cctx, cancel := context.WithTimeout(ctx, 2*leaseTTL)
			err = x.Commit(cctx, payload)
			cancel()
			if err == nil {
				g.ack(stream, x.Number(), payload, called)
				if first {
					started <- struct{}{}
					first = false
				}
				break
			}
			if ctx.Err() != nil {
				break
			}
			g.fail("commit", err)
			if errors.Is(err, sequence.ErrExpired) || errors.Is(err, sequence.ErrGap) ||
				errors.Is(err, sequence.ErrReleased) || errors.Is(err, sequence.ErrTokenMismatch) {
				break // resolved without it: a new lease
			}
			wait()
		}
	}
}

// TestFailover runs ordered workers on two streams through the cluster's
// multi-host URL, kills the primary node (Patroni, postmaster and
// children), lets the workers ride through the failover, and checks that no
// acknowledged commit was lost (synchronous replication), that each stream
// is dense, ordered and resolved, and that no number was handed out twice.
// It logs how long the workers took to commit again.
func TestFailover(t *testing.T) {
	url, ns := nodes(t)
	ctx := t.Context()

	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	m, err := migrations.New(&migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = m.Up(ctx, pool)
	require.NoError(t, err)

	primary := -1
	for i, n := range ns {
		if ok, err := writable(ctx, n.port); err == nil && ok {
			primary = i
		}
	}
	require.GreaterOrEqual(t, primary, 0, "no node accepts writes")
	standby := (primary + 1) % len(ns)
	t.Logf("primary: node%d (port %d); standby: node%d (port %d)",
		primary+1, ns[primary].port, standby+1, ns[standby].port)

	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	b, err := barrier.New(s, &barrier.Config{PollInterval: 500 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	defer b.Stop()
	cl, err := cleanup.New(s, &cleanup.Config{Interval: time.Second, Barrier: b})
	require.NoError(t, err)
	require.NoError(t, cl.Start(ctx))
	defer cl.Stop()
	l, err := sequence.New(s, &sequence.Config{Barrier: b, Owner: "failover"})
	require.NoError(t, err)

	g := &ledger{
		leased:  map[string]map[int64]string{},
		acked:   map[string]map[int64][]byte{},
		errs:    map[string]int{},
		resumed: make(chan struct{}),
		warm:    make(chan struct{}),
	}
	for _, st := range streams {
		g.leased[st], g.acked[st] = map[int64]string{}, map[int64][]byte{}
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	started := make(chan struct{}, len(streams)*workers)
	for _, st := range streams {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				work(loadCtx, g, l, st, fmt.Sprintf("%s-w%d", st, w), started)
			}()
		}
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopLoad()
			wg.Wait()
		}
	}
	defer stop()
	for range len(streams) * workers {
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the workers did not all commit within a minute before the kill")
		}
	}
	select {
	case <-g.warm:
	case <-time.After(time.Minute):
		t.Fatalf("fewer than %d commits within a minute before the kill", warmup)
	}

	// Lose the primary, and find when the standby is promoted.
	// An acknowledgement after killedAt comes from the new primary: the
	// old one is gone by then.
	kill(t, ns[primary])
	g.mu.Lock()
	before := len(g.ackTimes)
	g.killedAt = time.Now()
	killedAt := g.killedAt
	g.mu.Unlock()
	t.Logf("killed node%d after %d acknowledged commits", primary+1, before)
	promoted := make(chan time.Time, 1)
	pollCtx, stopPoll := context.WithCancel(ctx)
	var pollWG sync.WaitGroup
	pollWG.Add(1)
	go func() {
		defer pollWG.Done()
		for pollCtx.Err() == nil {
			if ok, err := writable(pollCtx, ns[standby].port); err == nil && ok {
				promoted <- time.Now()
				return
			}
			select {
			case <-pollCtx.Done():
			case <-time.After(pause):
			}
		}
	}()

	select {
	case <-g.resumed:
	case <-time.After(resumeWait):
	}
	stopPoll()
	pollWG.Wait()
	var writableAt time.Time
	select {
	case writableAt = <-promoted:
	default:
	}
	stop()

	g.mu.Lock()
	firstAfter := g.resumeAt
	t.Logf("acknowledged commits: %d before the kill, %d after; failed calls: %v",
		before, len(g.ackTimes)-before, g.errs)
	g.mu.Unlock()
	require.False(t, firstAfter.IsZero(), "no commit was acknowledged within %v of the kill", resumeWait)
	require.False(t, writableAt.IsZero(), "node%d was never found writable", standby+1)
	t.Logf("kill -> node%d writable: %v; writable (polled every %v) -> first commit: %v; kill -> first commit: %v",
		standby+1, writableAt.Sub(killedAt).Round(time.Millisecond), pause,
		firstAfter.Sub(writableAt).Round(time.Millisecond), firstAfter.Sub(killedAt).Round(time.Millisecond))

	// Let the cleanup loop resolve what the workers left, then audit.
	for _, st := range streams {
		stats, err := s.Stats(ctx, st)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		require.NoError(t, b.WaitFor(wctx, st, stats.NextNumber), "%s: the cleanup loop did not resolve every entry", st)
		cancel()
		stats, err = s.Stats(ctx, st)
		require.NoError(t, err)
		require.Zero(t, stats.Unresolved, "%s: unresolved entries", st)
		rep, err := audit.Stream(ctx, s, st, &audit.Options{Ordered: true, Acknowledged: g.acked[st]})
		require.NoError(t, err)
		require.NoError(t, rep.Err(), "%s: the ledger after the failover", st)
		t.Logf("%s: %d numbers, %d acknowledged commits, all present", st, stats.NextNumber-1, len(g.acked[st]))
	}
	require.Empty(t, g.dups, "numbers handed out twice")
}
