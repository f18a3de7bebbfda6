package sequence

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// ErrNoBarrier is returned by New for a Config without a Barrier (unless
// Config.UnorderedOnly is set), and by Commit and CommitTx on a Leaser
// made with UnorderedOnly and no Barrier.
var ErrNoBarrier = errors.New("sequence: ordered commit needs Config.Barrier")

// ErrCommitInProgress is returned by a Commit of a handle while another
// Commit of the same handle is still running.
var ErrCommitInProgress = errors.New("sequence: a commit of this lease is in progress")

// errOver completes a wait whose lease ended locally (its local deadline
// passed or its keep-alive lost it) before its turn came.
var errOver = errors.New("sequence: lease over while waiting")

// errRequeue completes a group item that could not commit yet because an
// earlier item of its group failed: its caller goes back to waiting.
var errRequeue = errors.New("sequence: requeued")

// committer runs the ordered commits of one stream in this process. Callers
// park their item here and wait at the barrier; the first whose turn comes
// leads: it takes its own item and every consecutive item parked behind it
// (up to Config.MaxGroup), a group, and sends the group to the commit
// engine (batching.go), where it shares one backend call, which on
// PostgreSQL is one transaction and one WAL flush, with the groups of other
// streams ready at the same time (group commit). The result is
// indistinguishable from one-by-one commits: each item is an ordered,
// fenced commit of its own, and an item that fails sends the ones behind it
// back to waiting, as they would have waited one by one.
type committer struct {
	mu     sync.Mutex
	parked map[int64]*commitItem // waiting, not yet in a group

	deadlines deadlines // of the ungrouped commits waiting at the barrier
}

// commitItem is one commit of a held number.
type commitItem struct {
	lease   *Lease
	payload []byte
	fn      txFunc        // CommitTx's function for the committing transaction; nil for none
	ordered bool          // Commit and CommitTx; not Complete
	arrived bool          // counted on the wave when it parked (see commitOrdered)
	done    chan struct{} // closed when err is set
	err     error
	ctx     context.Context // the caller's, for Observer.CommitReady
	parked  time.Time       // when the caller began to wait
}

func (l *Leaser) committer(stream string) *committer {
	if v, ok := l.committers.Load(stream); ok {
		return v.(*committer)
	}
	v, _ := l.committers.LoadOrStore(stream, &committer{parked: map[int64]*commitItem{}, deadlines: deadlines{now: l.now}})
	return v.(*committer)
}

// commitOrdered waits for every earlier number to resolve, then commits x.
func (x *Lease) commitOrdered(ctx context.Context, payload []byte, fn txFunc) (err error) {
	l := x.leaser
	if l.barrier == nil {
		return ErrNoBarrier
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, err)
	}
	if done, err := x.resolvedLocally(payload); done {
		return err
	}
	ctx, end := l.observer.StartCommit(ctx, x.stream, x.kind, x.number, true)
	defer func() { end(err) }()
	if l.inTx {
		if x.over() != nil {
			return x.commitOver(ctx, payload, fn)
		}
		return x.commitInTx(ctx, payload, fn)
	}
	if l.commits == nil {
		// commitAlone reads the clock only if it has to wait: a lease whose
		// turn has come goes to the store, which judges the expiry itself.
		if x.over() != nil {
			return x.commitOver(ctx, payload, fn)
		}
		return x.commitAlone(ctx, payload, fn)
	}
	if x.Err() != nil {
		return x.commitOver(ctx, payload, fn)
	}
	parked := l.now()
	c := l.committer(x.stream)
	for {
		it := &commitItem{lease: x, payload: payload, fn: fn, ordered: true, done: make(chan struct{}), ctx: ctx, parked: parked}
		// A commit whose turn has not come joins a run of its stream that
		// is taken after it parked: it arrives at the engine now. One whose
		// turn came leads a run of its own: it arrives when it queues it.
		it.arrived = !l.barrier.Reached(x.stream, x.number)
		c.mu.Lock()
		if _, dup := c.parked[x.number]; dup {
			c.mu.Unlock()
			return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, ErrCommitInProgress)
		}
		c.parked[x.number] = it
		c.mu.Unlock()
		if it.arrived {
			l.arrive()
		}

		err := c.wait(ctx, l, it)
		switch {
		case errors.Is(err, errRequeue):
			continue
		case errors.Is(err, errOver):
			if done, err := x.resolvedLocally(payload); done {
				return err
			}
			return x.commitOver(ctx, payload, fn)
		}
		return err
	}
}

// spins is how often an ungrouped commit whose turn has not come yields
// before it parks.
const spins = 1

// commitAlone is the ordered commit without group commit (Config.MaxGroup
// 1, a backend that is no store.MultiCommitter, and by default on a store
// that answers in process): wait for the turn at the barrier, then one
// ordered commit with the caller's context.
func (x *Lease) commitAlone(ctx context.Context, payload []byte, fn txFunc) error {
	l := x.leaser
	if !x.committing.CompareAndSwap(false, true) {
		return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, ErrCommitInProgress)
	}
	defer x.committing.Store(false)
	var parked time.Time
	if l.observed {
		parked = l.now()
	}
	for {
		// The earlier numbers' holders are often about to commit: let
		// them run a few times before parking (an adaptive mutex spins
		// for the same reason), which spares a waiter, a timer and two
		// goroutine switches per commit under contention.
		for i := 0; i < spins && !l.barrier.Reached(x.stream, x.number); i++ {
			runtime.Gosched()
		}
		ready, withdraw, err := l.barrier.Ready(ctx, x.stream, x.number)
		if err != nil {
			return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, err)
		}
		err = x.awaitTurn(ctx, ready)
		withdraw()
		switch {
		case errors.Is(err, errOver):
			if done, err := x.resolvedLocally(payload); done {
				return err
			}
			return x.commitOver(ctx, payload, fn)
		case err != nil:
			return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, err)
		}
		if l.observed {
			l.observer.CommitReady(ctx, x.stream, x.kind, l.now().Sub(parked))
		}
		if fn == nil {
			err = l.commitPlain(ctx, x, payload, true)
		} else {
			err = l.commitOne(ctx, &commitItem{lease: x, payload: payload, fn: fn, ordered: true})
		}
		switch {
		case err == nil:
			x.committed(payload)
			return nil
		case errors.Is(err, store.ErrNotReady):
			continue // the barrier heard of a resolution the store no longer shows: wait again
		}
		// A lost connection leaves the outcome unknown: a retry with this
		// lease reports whether this attempt took effect (I7).
		return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, err)
	}
}

// awaitTurn waits until ready closes (every earlier number is resolved), the
// lease ends locally (errOver: at its local deadline, which Extend moves, or
// when its keep-alive loses it or it is released) or ctx ends. Nothing is
// armed when the turn has come. A lease that has to wait is watched by its
// stream's deadlines, one timer for all the waiting leases of the stream,
// rather than by a timer of its own: arming and stopping a timer per wait
// cost more than the rest of the wait.
func (x *Lease) awaitTurn(ctx context.Context, ready <-chan struct{}) error {
	select {
	case <-ready:
		return nil
	default:
	}
	d := &x.leaser.committer(x.stream).deadlines
	lost := d.watch(x)
	defer d.unwatch(x)
	select {
	case <-ready:
		return nil
	case <-lost:
		return errOver
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deadlines ends the leases of one stream whose ordered commits wait at the
// barrier once their local deadline passes, as the timer that Done arms
// would, with one timer for all of them. The timer is armed for the
// earliest deadline it was asked for and is not stopped when that lease
// stops waiting: when it fires, it ends the waiting leases whose deadline
// passed and re-arms for the earliest deadline still waiting, if any. Since
// leases usually wait in the order of their deadlines, a wait rarely touches
// the timer at all.
//
// Locks: d.mu is taken before a lease's mu (fire reads deadlines), never
// after: watch reads the lease's deadline before it takes d.mu.
type deadlines struct {
	now func() time.Time // the Leaser's clock

	mu      sync.Mutex
	waiting []*Lease    // each at its waitIndex
	timer   *time.Timer // made on first use
	at      time.Time   // when the timer fires; zero: not armed
}

// watch has d end x at its local deadline while x waits, and returns the
// channel that closes when x is over. A lease whose own timer is armed
// (Done, Context or KeepAlive was called) needs no watching.
func (d *deadlines) watch(x *Lease) <-chan struct{} {
	x.mu.Lock()
	lost, armed, deadline := x.lostLocked(), x.timer != nil, x.localDeadline
	x.mu.Unlock()
	if armed {
		return lost
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	x.waitIndex = int32(len(d.waiting)) // at most one waiting Commit per lease
	d.waiting = append(d.waiting, x)
	if d.at.IsZero() || deadline.Before(d.at) {
		d.armLocked(deadline)
	}
	return lost
}

// unwatch stops watching x, if d still does.
func (d *deadlines) unwatch(x *Lease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removeLocked(x)
}

func (d *deadlines) removeLocked(x *Lease) {
	i := int(x.waitIndex)
	if i < 0 || i >= len(d.waiting) || d.waiting[i] != x {
		return // not watched: its own timer is armed, or fire took it
	}
	last := len(d.waiting) - 1
	d.waiting[i] = d.waiting[last]
	d.waiting[i].waitIndex = int32(i)
	d.waiting[last] = nil
	d.waiting = d.waiting[:last]
	x.waitIndex = -1
}

// armLocked has the timer fire at t. d.mu must be held.
func (d *deadlines) armLocked(t time.Time) {
	d.at = t
	if d.timer == nil {
		d.timer = time.AfterFunc(t.Sub(d.now()), d.fire)
		return
	}
	d.timer.Reset(t.Sub(d.now()))
}

// fire ends the waiting leases whose local deadline passed, and re-arms
// the timer for the earliest deadline of the others (one may have been
// extended meanwhile).
func (d *deadlines) fire() {
	now := d.now()
	var over []*Lease
	d.mu.Lock()
	next := time.Time{}
	for i := 0; i < len(d.waiting); {
		x := d.waiting[i]
		x.mu.Lock()
		deadline := x.localDeadline
		x.mu.Unlock()
		if !deadline.After(now) {
			d.removeLocked(x) // moves the last one to i
			over = append(over, x)
			continue
		}
		if next.IsZero() || deadline.Before(next) {
			next = deadline
		}
		i++
	}
	d.at = time.Time{}
	if !next.IsZero() {
		d.armLocked(next)
	}
	d.mu.Unlock()
	for _, x := range over {
		x.endIfPast()
	}
}

// resolvedLocally reports whether this handle already resolved the number,
// and what a Commit of payload then returns: nil after a commit of the same
// payload (a retry), ErrPayloadMismatch after a commit of another, an
// error after a release.
func (x *Lease) resolvedLocally(payload []byte) (bool, error) {
	switch err := x.Err(); {
	case errors.Is(err, ErrCommitted):
		if x.sum.Load() != payloadSum(payload) {
			return true, fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, ErrPayloadMismatch)
		}
		return true, nil
	case errors.Is(err, ErrReleased):
		return true, fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, err)
	}
	return false, nil
}

// payloadSeed seeds payloadSum.
var payloadSeed = maphash.MakeSeed()

// payloadSum is what a handle keeps of the payload it committed, to tell a
// retry from a commit of another payload without holding the payload: a
// 64-bit hash, equal for nil and empty.
func payloadSum(payload []byte) uint64 { return maphash.Bytes(payloadSeed, payload) }

// committed records that this handle committed the number with payload.
func (x *Lease) committed(payload []byte) {
	x.sum.Store(payloadSum(payload)) // before the lease ends: whoever sees it committed sees the sum
	x.resolved(ErrCommitted)
}

// commitOver is the commit of a lease that is over by the holder's local
// estimate: the database decides, in one ordered attempt without waiting at
// the barrier. It reports success when an earlier attempt whose outcome was
// unknown had committed (I7), and ErrExpired when the number cannot commit
// now (expired, or earlier numbers still unresolved).
func (x *Lease) commitOver(ctx context.Context, payload []byte, fn txFunc) error {
	err := x.leaser.commitOne(ctx, &commitItem{lease: x, payload: payload, fn: fn, ordered: true})
	switch {
	case err == nil:
		x.committed(payload)
		return nil
	case errors.Is(err, store.ErrNotReady):
		return fmt.Errorf("sequence: commit %s/%d: %w while waiting for earlier numbers", x.stream, x.number, ErrExpired)
	}
	return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, err)
}

// wait parks it until its turn comes (then leads a group), another leader
// completes it, or it gives up.
func (c *committer) wait(ctx context.Context, l *Leaser, it *commitItem) error {
	x := it.lease
	ready, withdraw, err := l.barrier.Ready(ctx, x.stream, x.number)
	if err != nil {
		c.unpark(it)
		return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, err)
	}
	defer withdraw()
	lost := x.Done()
	deadline := time.NewTimer(x.Remaining())
	defer deadline.Stop()
	for {
		select {
		case <-it.done:
			return it.err
		case <-ready:
			if ctx.Err() != nil && c.unpark(it) {
				return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, ctx.Err())
			}
			c.lead(ctx, l, it)
			<-it.done
			return it.err
		case <-lost:
			if c.unpark(it) {
				return errOver
			}
		case <-deadline.C:
			if left := x.Remaining(); left > 0 { // extended meanwhile
				deadline.Reset(left)
				continue
			}
			if c.unpark(it) {
				return errOver
			}
		case <-ctx.Done():
			if c.unpark(it) {
				return fmt.Errorf("sequence: commit %s/%d: %w", x.stream, x.number, ctx.Err())
			}
		}
		// A leader took the item into its group: its outcome comes soon.
		<-it.done
		return it.err
	}
}

// unpark takes it back if no leader took it; it reports whether it did.
func (c *committer) unpark(it *commitItem) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parked[it.lease.number] == it {
		delete(c.parked, it.lease.number)
		return true
	}
	return false
}

// lead commits a group starting at it, if it is still parked, and completes
// every item of the group.
func (c *committer) lead(ctx context.Context, l *Leaser, it *commitItem) {
	g := c.take(it, l.maxGroup)
	if g == nil {
		return // another leader has it
	}
	l.commitReady(g.items)
	if l.groupDelay > 0 && len(g.items) < l.maxGroup {
		t := time.NewTimer(l.groupDelay)
		<-t.C
		last := g.items[len(g.items)-1].lease.number
		more := c.takeAfter(last, l.maxGroup-len(g.items), g, false)
		l.commitReady(more)
	}
	if !it.arrived {
		l.arrive()
	}
	r := l.sendGroup(ctx, g)
	x := it.lease
	for i, m := range g.items {
		switch {
		case r.err != nil:
			// Outcome unknown: the caller may retry Commit with the same
			// lease, which reports whether this attempt took effect (I7).
			m.err = fmt.Errorf("sequence: commit %s/%d: %w", x.stream, m.lease.number, r.err)
		case r.res[i].Err == nil:
			m.lease.committed(m.payload)
		case errors.Is(r.res[i].Err, store.ErrNotReady) && i > 0:
			m.err = errRequeue // an earlier item of the group failed: wait again
		default:
			m.err = fmt.Errorf("sequence: %s/%d: %w", x.stream, m.lease.number, r.res[i].Err)
		}
		close(m.done)
	}
}

// take removes it and the consecutive parked items after it (at most max in
// all) from the parking lot, as a group; nil if it is no longer parked.
func (c *committer) take(it *commitItem, max int) *group {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := it.lease.number
	if c.parked[n] != it {
		return nil
	}
	delete(c.parked, n)
	g := &group{items: []*commitItem{it}, tx: it.fn, run: true}
	c.takeAfterLocked(n, max-1, g, false)
	return g
}

// takeAfter adds to g the consecutive parked items after n, at most max,
// and returns them. With sent, g is queued at its engine already: it can
// no longer change engines (a plain run takes no CommitTx item).
func (c *committer) takeAfter(n int64, max int, g *group, sent bool) []*commitItem {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := len(g.items)
	c.takeAfterLocked(n, max, g, sent)
	return g.items[before:]
}

// takeAfterLocked adds to g the consecutive parked items after n, at most
// max, up to one whose function is of another transaction type than g's
// (they go to different engines), or, with sent, one with a function when
// g has none. c.mu must be held.
func (c *committer) takeAfterLocked(n int64, max int, g *group, sent bool) {
	for next, added := n+1, 0; added < max; next, added = next+1, added+1 {
		m, ok := c.parked[next]
		if !ok {
			break
		}
		if m.fn != nil {
			switch {
			case g.tx == nil && sent, g.tx != nil && m.fn.key() != g.tx.key():
				return
			}
			g.tx = m.fn
		}
		delete(c.parked, next)
		g.items = append(g.items, m)
	}
}
