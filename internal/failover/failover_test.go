//go:build failover

package failover_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqlease/seqlease/audit"
	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
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
	// resumeTarget is the time to resume after the new primary accepts
	// writes that the library aims at (reported when missed);
	// resumeBound the one the test enforces, loose enough for a loaded
	// machine.
	resumeTarget = 2 * time.Second
	resumeBound  = 10 * time.Second
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
	// afterNums holds, per stream, the numbers of those acknowledgements
	// (entries committed on the new primary), and streamAt the first of
	// them; streamResumed[stream], if set, is closed at it. Nil maps are
	// made on first use.
	afterNums     map[string]map[int64]bool
	streamAt      map[string]time.Time
	streamResumed map[string]chan struct{}
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
		if g.afterNums == nil {
			g.afterNums, g.streamAt = map[string]map[int64]bool{}, map[string]time.Time{}
		}
		if g.afterNums[stream] == nil {
			g.afterNums[stream] = map[int64]bool{}
			g.streamAt[stream] = now
			if ch := g.streamResumed[stream]; ch != nil {
				close(ch)
			}
		}
		g.afterNums[stream][n] = true
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

// follower is a following reader of one stream (barrier.Entries with
// Follow, IncludeGaps and a checkpoint it saves itself): what it yielded,
// in order, and when.
type follower struct {
	stream string

	mu        sync.Mutex
	numbers   []int64     // every number yielded, gaps included, in order
	times     []time.Time // when each was yielded
	committed map[int64][]byte
	problems  []string      // numbers out of order or repeated
	err       error         // an error that ended the iteration before its context
	first     chan struct{} // closed at the first entry
	target    int64         // caught is closed once numbers reach it
	caught    chan struct{}
}

// readerName is the followers' checkpoint name (one per stream).
const readerName = "ha-follower"

func newFollower(stream string) *follower {
	return &follower{stream: stream, committed: map[int64][]byte{}, first: make(chan struct{})}
}

// run follows the stream until ctx ends.
func (f *follower) run(ctx context.Context, b *barrier.Barrier) {
	opts := &barrier.ReadOpts{Follow: true, IncludeGaps: true, Reader: readerName, SaveEvery: 10}
	for e, err := range b.Entries(ctx, f.stream, opts) {
		now := time.Now()
		f.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				f.err = err
			}
			f.mu.Unlock()
			return
		}
		if want := int64(len(f.numbers)) + 1; e.Number != want {
			f.problems = append(f.problems, fmt.Sprintf("#%d where #%d was due", e.Number, want))
		}
		if len(f.numbers) == 0 {
			close(f.first)
		}
		f.numbers = append(f.numbers, e.Number)
		f.times = append(f.times, now)
		if e.State == store.Committed {
			f.committed[e.Number] = e.Payload
		}
		if f.caught != nil && e.Number >= f.target {
			close(f.caught)
			f.caught = nil
		}
		f.mu.Unlock()
	}
}

// reached returns a channel closed once the follower yielded number n.
func (f *follower) reached(n int64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	if len(f.numbers) > 0 && f.numbers[len(f.numbers)-1] >= n {
		close(ch)
		return ch
	}
	f.target, f.caught = n, ch
	return ch
}

// firstOf returns when the follower first yielded one of nums.
func (f *follower) firstOf(nums map[int64]bool) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, n := range f.numbers {
		if nums[n] {
			return f.times[i]
		}
	}
	return time.Time{}
}

// The named lease the holder keeps, and the application table it writes
// to, fenced.
const (
	holderName = "ha-holder"
	// holderTTL is shorter than the failover (Patroni's ttl, 5 s): the
	// holding at the kill cannot be renewed in time and must end at its
	// local deadline.
	holderTTL    = 2 * time.Second
	holderMargin = holderTTL / 10 // lease.Config.SafetyMargin's default at this TTL
	appTable     = "failover_app.fenced"
)

// holding is one holding of the holder's lease.
type holding struct {
	fence      int64
	start      time.Time // local: when the holder got it
	acquiredAt time.Time // the backend's clock
	expiresAt  time.Time // the backend's clock, as of its last renewal
	ended      time.Time // local: when its Context ended
	cause      error
}

// fencedWrite is a write the holder's fenced transaction committed.
type fencedWrite struct {
	fence, seq int64
	acked      time.Time
}

// holder holds holderName through the lease runner (Manager.Run) and
// writes rows fenced with postgres.CheckFence while it holds it.
type holder struct {
	pool *pgxpool.Pool
	s    *postgres.Store
	ends sync.WaitGroup // the recorders of the holdings' ends

	mu       sync.Mutex
	holdings []*holding
	writes   []fencedWrite
	errs     map[string]int
	seq      int64
	renewed  chan struct{} // closed at the second renewal of the first holding
	after    int64         // resumed is closed at the first write with a fence above it
	resumed  chan struct{}
}

// write inserts one row of the application table in a transaction that
// first checks the fence (postgres.CheckFence): a deposed holder writes
// nothing.
func write(ctx context.Context, pool *pgxpool.Pool, s *postgres.Store, fence, seq int64) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := s.CheckFence(ctx, tx, holderName, fence); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+appTable+" (fence, seq) VALUES ($1, $2)", fence, seq)
		return err
	})
}

// lead is the function Manager.Run runs while the lease is held: fenced
// writes until ctx ends (the lease is over, or the test stops the holder).
func (h *holder) lead(ctx context.Context, l *lease.Lease) error {
	x := &holding{fence: l.Fence(), start: time.Now(), acquiredAt: l.AcquiredAt()}
	h.mu.Lock()
	h.holdings = append(h.holdings, x)
	h.mu.Unlock()
	h.ends.Add(1)
	context.AfterFunc(l.Context(), func() {
		defer h.ends.Done()
		now := time.Now()
		h.mu.Lock()
		defer h.mu.Unlock()
		x.ended, x.cause, x.expiresAt = now, l.Err(), l.ExpiresAt()
	})
	for ctx.Err() == nil {
		h.mu.Lock()
		h.seq++
		seq := h.seq
		h.mu.Unlock()
		err := write(ctx, h.pool, h.s, l.Fence(), seq)
		now := time.Now()
		h.mu.Lock()
		if err == nil {
			h.writes = append(h.writes, fencedWrite{fence: l.Fence(), seq: seq, acked: now})
			if h.resumed != nil && l.Fence() > h.after {
				close(h.resumed)
				h.resumed = nil
			}
		} else if ctx.Err() == nil {
			h.errs[kindOf(err)]++
		}
		if h.renewed != nil && l.Renewals() >= 2 {
			close(h.renewed)
			h.renewed = nil
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// resumeAfter returns a channel closed at the first write with a fence
// above fence.
func (h *holder) resumeAfter(fence int64) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.after, h.resumed = fence, make(chan struct{})
	return h.resumed
}

// renewLog is the lease Manager's store, recording when each successful
// renewal of holderName started: the holder's local deadline is the start
// of the last one + TTL - the safety margin.
type renewLog struct {
	*postgres.Store
	mu     sync.Mutex
	starts map[int64][]time.Time // fence -> starts of its successful renewals
}

func (r *renewLog) RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error) {
	start := time.Now()
	g, err := r.Store.RenewLease(ctx, name, owner, fence, p)
	if err == nil && name == holderName {
		r.mu.Lock()
		r.starts[fence] = append(r.starts[fence], start)
		r.mu.Unlock()
	}
	return g, err
}

// lastBefore returns the start of the last successful renewal of fence
// that started before t.
func (r *renewLog) lastBefore(fence int64, t time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Time
	for _, s := range r.starts[fence] {
		if s.Before(t) {
			last = s
		}
	}
	return last
}

// testLogger logs to t from level up, with the time of each record.
func testLogger(t *testing.T, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: level}))
}

// tlog writes lines to t.Log.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// since formats the time from from to to, or "never" when to is zero.
func since(from, to time.Time) string {
	if to.IsZero() {
		return "never"
	}
	return to.Sub(from).Round(time.Millisecond).String()
}

// TestFailover runs, through the cluster's multi-host URL, ordered workers
// on two streams, the cleanup loop, a following reader of each stream and a
// named-lease holder making fenced writes; kills the primary node (Patroni,
// postmaster and children); and lets them all ride through the failover,
// no process restarted. It checks that no acknowledged commit was lost
// (synchronous replication), that each stream is dense, ordered and
// resolved, that no number was handed out twice, that each reader yielded
// exactly its stream's sequence, that fencing tokens only grew, that the
// holding at the kill ended at its local deadline (within the TTL of its
// last renewal, before the backend's expiry) and that a write with its
// fence is refused afterwards. It logs, and bounds loosely, how long each
// took to resume after the standby became writable.
func TestFailover(t *testing.T) {
	url, ns := nodes(t)
	ctx := t.Context()

	pool := migratedPool(t, url, schema, 24)
	_, err := pool.Exec(ctx, `CREATE SCHEMA failover_app;
		CREATE TABLE `+appTable+` (id bigserial PRIMARY KEY, fence bigint NOT NULL, seq bigint NOT NULL,
			written_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
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
	cl, err := cleanup.New(s, &cleanup.Config{Interval: time.Second, Barrier: b, Logger: testLogger(t, slog.LevelWarn)})
	require.NoError(t, err)
	require.NoError(t, cl.Start(ctx))
	defer cl.Stop()
	l, err := sequence.New(s, &sequence.Config{Barrier: b, Owner: "failover"})
	require.NoError(t, err)

	// The followers, one per stream, until the audit.
	readCtx, stopRead := context.WithCancel(ctx)
	var readWG sync.WaitGroup
	followers := map[string]*follower{}
	for _, st := range streams {
		f := newFollower(st)
		followers[st] = f
		readWG.Go(func() { f.run(readCtx, b) })
	}
	defer readWG.Wait()
	defer stopRead()

	// The lease holder: a Manager of its own, its runner, fenced writes.
	rl := &renewLog{Store: s, starts: map[int64][]time.Time{}}
	lm, err := lease.New(rl, &lease.Config{Owner: "ha-holder-process"})
	require.NoError(t, err)
	require.NoError(t, lm.Start(ctx))
	renewed := make(chan struct{})
	h := &holder{pool: pool, s: s, errs: map[string]int{}, renewed: renewed}
	holdCtx, stopHold := context.WithCancel(ctx)
	var holdWG sync.WaitGroup
	var runErr error
	holdWG.Go(func() {
		runErr = lm.Run(holdCtx, holderName, &lease.AcquireOpts{TTL: holderTTL}, h.lead)
	})
	holdStopped := false
	stopHolder := func() {
		if !holdStopped {
			holdStopped = true
			stopHold()
			holdWG.Wait()
			lm.Stop()
			h.ends.Wait()
		}
	}
	defer stopHolder()

	g := &ledger{
		leased:        map[string]map[int64]string{},
		acked:         map[string]map[int64][]byte{},
		errs:          map[string]int{},
		resumed:       make(chan struct{}),
		warm:          make(chan struct{}),
		streamResumed: map[string]chan struct{}{},
	}
	waits := []<-chan struct{}{g.resumed}
	for _, st := range streams {
		g.leased[st], g.acked[st] = map[int64]string{}, map[int64][]byte{}
		g.streamResumed[st] = make(chan struct{})
		waits = append(waits, g.streamResumed[st])
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
	await := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("%s within a minute before the kill", what)
		}
	}
	for range len(streams) * workers {
		await(started, "the workers did not all commit")
	}
	await(g.warm, fmt.Sprintf("fewer than %d commits", warmup))
	for _, st := range streams {
		await(followers[st].first, st+": the follower read nothing")
	}
	await(renewed, "the lease holder did not renew its lease twice")

	// Lose the primary, and find when the standby is promoted.
	// An acknowledgement after killedAt comes from the new primary: the
	// old one is gone by then.
	h.mu.Lock()
	heldAtKill := h.holdings[len(h.holdings)-1].fence
	h.mu.Unlock()
	holderResumed := h.resumeAfter(heldAtKill)
	kill(t, ns[primary])
	g.mu.Lock()
	before := len(g.ackTimes)
	g.killedAt = time.Now()
	killedAt := g.killedAt
	g.mu.Unlock()
	t.Logf("killed node%d after %d acknowledged commits; the holder held fence %d", primary+1, before, heldAtKill)
	promoted := make(chan time.Time, 1)
	pollCtx, stopPoll := context.WithCancel(ctx)
	var pollWG sync.WaitGroup
	pollWG.Go(func() {
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
	})

	deadline := time.After(resumeWait)
	for _, ch := range append(waits, holderResumed) {
		select {
		case <-ch:
		case <-deadline:
		}
	}
	stopPoll()
	pollWG.Wait()
	var writableAt time.Time
	select {
	case writableAt = <-promoted:
	default:
	}
	require.False(t, writableAt.IsZero(), "node%d was never found writable", standby+1)

	// A write with the fence of the holding at the kill is refused now.
	err = write(ctx, pool, s, heldAtKill, -1)
	require.ErrorIs(t, err, lease.ErrStaleFence, "a write fenced with %d, the holding at the kill", heldAtKill)
	var fe *lease.FenceError
	require.ErrorAs(t, err, &fe)
	t.Logf("a write fenced with %d after the failover: refused (%s)", heldAtKill, fe.Reason)

	stop()
	stopHolder()
	require.ErrorIs(t, runErr, context.Canceled, "the holder's runner")

	g.mu.Lock()
	firstAfter := g.resumeAt
	afterNums, streamAt := g.afterNums, g.streamAt
	t.Logf("acknowledged commits: %d before the kill, %d after; failed calls: %v",
		before, len(g.ackTimes)-before, g.errs)
	g.mu.Unlock()
	require.False(t, firstAfter.IsZero(), "no commit was acknowledged within %v of the kill", resumeWait)

	// Let the cleanup loop resolve what the workers left, let the
	// followers read it all, then audit.
	for _, st := range streams {
		stats, err := s.Stats(ctx, st)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		require.NoError(t, b.WaitFor(wctx, st, stats.NextNumber), "%s: the cleanup loop did not resolve every entry", st)
		cancel()
		stats, err = s.Stats(ctx, st)
		require.NoError(t, err)
		require.Zero(t, stats.Unresolved, "%s: unresolved entries", st)
		select {
		case <-followers[st].reached(stats.NextNumber - 1):
		case <-time.After(time.Minute):
			t.Fatalf("%s: the follower did not read up to #%d within a minute", st, stats.NextNumber-1)
		}
	}
	stopRead()
	readWG.Wait()
	for _, st := range streams {
		f := followers[st]
		require.NoError(t, f.err, "%s: the follower", st)
		require.Empty(t, f.problems, "%s: the follower's order", st)
		for n, p := range g.acked[st] {
			require.Equal(t, string(p), string(f.committed[n]), "%s: #%d as the follower read it", st, n)
		}
		rep, err := audit.Stream(ctx, s, st, &audit.Options{Ordered: true, Acknowledged: g.acked[st],
			Observed: f.numbers, ObservedGaps: true})
		require.NoError(t, err)
		require.NoError(t, rep.Err(), "%s: the ledger after the failover", st)
		cp, err := s.Checkpoint(ctx, readerName, st)
		require.NoError(t, err)
		require.Equal(t, f.numbers[len(f.numbers)-1], cp, "%s: the follower's saved checkpoint", st)
		t.Logf("%s: %d numbers, %d acknowledged commits, all present; the follower read all %d in order",
			st, len(f.numbers), len(g.acked[st]), len(f.numbers))
	}
	require.Empty(t, g.dups, "numbers handed out twice")

	// The lease holder.
	h.mu.Lock()
	holdings, writes := h.holdings, h.writes
	t.Logf("lease holder: %d holdings (fences %v), %d fenced writes acknowledged; failed writes: %v",
		len(holdings), fences(holdings), len(writes), h.errs)
	h.mu.Unlock()
	var old, next *holding
	for i, x := range holdings {
		if i > 0 {
			require.Greater(t, x.fence, holdings[i-1].fence, "fencing tokens must grow with every holding")
		}
		if x.fence == heldAtKill {
			old = x
		}
		if x.fence > heldAtKill && next == nil {
			next = x
		}
	}
	require.NotNil(t, old)
	require.NotNil(t, next, "the holder did not hold %s again within %v of the kill", holderName, resumeWait)
	require.ErrorIs(t, old.cause, lease.ErrLost, "the holding at the kill ended, but not lost")
	// Its release failed (no primary): the name was free again only at its
	// expiry, by the backend's clock.
	require.False(t, next.acquiredAt.Before(old.expiresAt),
		"fence %d granted at %v, before fence %d expired at %v (the backend's clock)",
		next.fence, next.acquiredAt, old.fence, old.expiresAt)
	last := rl.lastBefore(old.fence, old.ended)
	require.False(t, last.IsZero(), "no successful renewal of fence %d recorded", old.fence)
	require.True(t, last.Before(killedAt), "fence %d renewed at %v, after the kill", old.fence, last)
	// The local deadline is the start of the last successful renewal + TTL -
	// the margin (the lease took its start a moment before the log did).
	localDeadline := last.Add(holderTTL - holderMargin)
	require.False(t, old.ended.Before(localDeadline.Add(-10*time.Millisecond)),
		"the holding at the kill ended %v after its last renewal, before its local deadline (TTL %v - margin %v)",
		old.ended.Sub(last), holderTTL, holderMargin)
	require.True(t, old.ended.Before(last.Add(holderTTL)),
		"the holding at the kill ended %v after its last renewal: later than its TTL %v",
		old.ended.Sub(last), holderTTL)
	t.Logf("the holding at the kill (fence %d) ended %v after its last renewal began (%v after the kill): TTL %v, margin %v; %v",
		old.fence, old.ended.Sub(last).Round(time.Millisecond), old.ended.Sub(killedAt).Round(time.Millisecond),
		holderTTL, holderMargin, old.cause)
	var firstWrite time.Time
	prev := int64(0)
	for _, w := range writes {
		require.GreaterOrEqual(t, w.fence, prev, "fenced writes acknowledged with a smaller fence than an earlier one")
		prev = w.fence
		if w.fence == next.fence && firstWrite.IsZero() {
			firstWrite = w.acked
		}
	}
	checkFencedRows(t, pool, writes)

	// The times to resume.
	readers := map[string]time.Time{}
	for _, st := range streams {
		readers[st] = followers[st].firstOf(afterNums[st])
	}
	t.Logf("kill -> node%d writable: %v (polled every %v)", standby+1, writableAt.Sub(killedAt).Round(time.Millisecond), pause)
	t.Logf("writable -> workers' first commit: %v; kill -> first commit: %v", since(writableAt, firstAfter), since(killedAt, firstAfter))
	for _, st := range streams {
		t.Logf("writable -> %s: first commit %v; the follower's first entry committed after the kill: %v",
			st, since(writableAt, streamAt[st]), since(writableAt, readers[st]))
	}
	t.Logf("writable -> lease held again (fence %d): %v; -> its first fenced write: %v",
		next.fence, since(writableAt, next.start), since(writableAt, firstWrite))
	resumes := map[string]time.Time{"the workers' first commit": firstAfter, "the new holding": next.start,
		"the holder's first fenced write": firstWrite}
	for _, st := range streams {
		resumes[st+": the first commit"] = streamAt[st]
		resumes[st+": the follower's first new entry"] = readers[st]
	}
	for what, at := range resumes {
		require.False(t, at.IsZero(), "%s: never", what)
		require.Less(t, at.Sub(writableAt), resumeBound,
			"%s came %v after the new primary accepted writes (target %v; bound %v)", what, at.Sub(writableAt), resumeTarget, resumeBound)
		if at.Sub(writableAt) > resumeTarget {
			t.Logf("%s: %v after writable, over the %v target", what, at.Sub(writableAt).Round(time.Millisecond), resumeTarget)
		}
	}
}

// fences lists the fences of holdings.
func fences(hs []*holding) []int64 {
	out := make([]int64, len(hs))
	for i, x := range hs {
		out[i] = x.fence
	}
	return out
}

// checkFencedRows checks the application table: every acknowledged fenced
// write is there, the fences never go back in commit order, and the write
// with a stale fence (seq -1) is not.
func checkFencedRows(t *testing.T, pool *pgxpool.Pool, acked []fencedWrite) {
	t.Helper()
	rows, err := pool.Query(t.Context(), "SELECT fence, seq FROM "+appTable+" ORDER BY written_at, id")
	require.NoError(t, err)
	have := map[int64]int64{}
	prev := int64(0)
	for rows.Next() {
		var fence, seq int64
		require.NoError(t, rows.Scan(&fence, &seq))
		require.NotEqual(t, int64(-1), seq, "the write with a stale fence was written")
		require.GreaterOrEqual(t, fence, prev, "a row fenced %d written after one fenced %d", fence, prev)
		prev = fence
		have[seq] = fence
	}
	require.NoError(t, rows.Err())
	for _, w := range acked {
		f, ok := have[w.seq]
		require.True(t, ok, "acknowledged fenced write %d (fence %d) is missing", w.seq, w.fence)
		require.Equal(t, w.fence, f, "fenced write %d", w.seq)
	}
}
