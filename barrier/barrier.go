package barrier

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqlease/seqlease/internal/lifecycle"
	"github.com/seqlease/seqlease/store"
)

// Source is what the barrier needs of a backend (store/memory,
// store/postgres).
type Source interface {
	// Snapshot returns what the backend knows of a stream at one instant.
	Snapshot(ctx context.Context, stream string, limit int) (store.Snapshot, error)
	// Watch reports resolutions to sink until ctx ends.
	Watch(ctx context.Context, sink store.Sink) error
	// ReadResolved returns resolved entries after a number, up to the
	// first unresolved one.
	ReadResolved(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
}

// Defaults of Config.
const (
	DefaultPollInterval = 5 * time.Second
	DefaultQueryTimeout = 10 * time.Second
)

// Config configures a Barrier. A nil *Config means the defaults; so does the
// zero value of each field.
type Config struct {
	// PollInterval is the period of the safety poll that re-reads the
	// snapshot of every stream with waiters, in case a notification was
	// lost without the backend noticing. Default: DefaultPollInterval (5 s).
	PollInterval time.Duration
	// QueryTimeout bounds each snapshot the barrier reads in the
	// background. Default: DefaultQueryTimeout (10 s).
	QueryTimeout time.Duration
	// SnapshotLimit is the most unresolved numbers one snapshot lists.
	// Default: store.MaxListLimit.
	SnapshotLimit int
	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
}

// Errors of the lifecycle.
var (
	// ErrNotStarted is returned by waits on a Barrier that was not started:
	// without its watch it would not hear of other resolutions.
	ErrNotStarted = errors.New("barrier: not started")
	// ErrStopped is returned by Start and by waits on a stopped Barrier.
	ErrStopped = errors.New("barrier: stopped")
)

// Barrier tracks the watermarks of streams and wakes the waiters whose turn
// came. It is safe for concurrent use.
type Barrier struct {
	src          Source
	retryPauses  [2]time.Duration // a follower's first and longest pause between failed reads
	pollInterval time.Duration
	queryTimeout time.Duration
	limit        int
	logger       *slog.Logger

	streams sync.Map               // string -> *stream
	recent  atomic.Pointer[stream] // the stream looked up last, if not evicted: most callers use one stream
	gen     atomic.Uint64          // bumped by every Reset
	resets  chan struct{}          // wakes the refresher after a Reset; capacity 1

	life *lifecycle.Life // the watch and the refresher
}

// New returns a Barrier on src. Call Start to have it listen.
func New(src Source, cfg *Config) (*Barrier, error) {
	if src == nil {
		return nil, errors.New("barrier: nil Source")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	switch {
	case cfg.PollInterval < 0:
		return nil, fmt.Errorf("barrier: Config.PollInterval %v is negative: %w", cfg.PollInterval, store.ErrInvalidArgument)
	case cfg.QueryTimeout < 0:
		return nil, fmt.Errorf("barrier: Config.QueryTimeout %v is negative: %w", cfg.QueryTimeout, store.ErrInvalidArgument)
	case cfg.SnapshotLimit < 0 || cfg.SnapshotLimit > store.MaxListLimit:
		return nil, fmt.Errorf("barrier: Config.SnapshotLimit %d must be in 0..%d: %w", cfg.SnapshotLimit, store.MaxListLimit, store.ErrInvalidArgument)
	}
	b := &Barrier{
		src:          src,
		retryPauses:  [2]time.Duration{RetryInitialInterval, RetryMaxInterval},
		pollInterval: cmp.Or(cfg.PollInterval, DefaultPollInterval),
		queryTimeout: cmp.Or(cfg.QueryTimeout, DefaultQueryTimeout),
		limit:        cmp.Or(cfg.SnapshotLimit, store.MaxListLimit),
		logger:       cfg.Logger,
		resets:       make(chan struct{}, 1),
		life:         lifecycle.New(ErrStopped),
	}
	if b.logger == nil {
		b.logger = slog.New(slog.DiscardHandler)
	}
	b.gen.Store(1)
	return b, nil
}

// Start starts watching the backend and the safety poll, and returns. The
// goroutines run until Stop or until ctx ends.
func (b *Barrier) Start(ctx context.Context) error {
	return b.life.Start(ctx, func(context.Context) error {
		b.life.Go(b.watch)
		b.life.Go(b.refresher)
		return nil
	})
}

// Stop stops the goroutines Start started and waits for them. Waiters keep
// waiting (their contexts bound them); they are no longer woken by other
// processes' resolutions.
func (b *Barrier) Stop() { b.life.Stop() }

// watch has the backend report resolutions until ctx ends.
func (b *Barrier) watch(ctx context.Context) {
	err := b.src.Watch(ctx, sink{b})
	if err != nil && context.Cause(ctx) != ErrStopped && ctx.Err() == nil {
		b.logger.Error("barrier: watch ended", slog.Any("error", err))
	}
}

// sink adapts a Barrier to store.Sink without exporting its methods.
type sink struct{ b *Barrier }

func (s sink) Resolved(stream string, number int64) { s.b.Resolved(stream, number) }

func (s sink) ResolvedThrough(stream string, through int64) { s.b.ResolvedThrough(stream, through) }

func (s sink) Reset() {
	s.b.gen.Add(1)
	s.b.kick()
}

// Forget implements store.Forgetter: the backend accepted a history of
// stream below what it reported (store/postgres AcceptHistory), so the
// barrier drops what it knows of the stream, its watermark too, and reads
// it afresh. Waiters stay queued and are woken when the new watermark
// reaches them.
func (s sink) Forget(stream string) {
	if st := s.b.lookup(stream); st != nil {
		st.forget()
		s.b.kick()
	}
}

// kick has the refresher re-read the snapshots of streams with waiters.
func (b *Barrier) kick() {
	select {
	case b.resets <- struct{}{}:
	default: // a refresh is already due
	}
}

// refresher re-reads the snapshots of streams with waiters: on every poll
// tick all of them, when kicked those that need it (stale after a reset, or
// at the end of a cut snapshot).
func (b *Barrier) refresher(ctx context.Context) {
	tick := time.NewTicker(b.pollInterval)
	defer tick.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-b.resets:
		case <-tick.C:
			all = true
		}
		b.streams.Range(func(k, v any) bool {
			st := v.(*stream)
			if all && st.evictIfIdle() {
				b.streams.CompareAndDelete(k, st)
				b.recent.CompareAndSwap(st, nil)
				return true
			}
			if st.needsRead(all, b.gen.Load()) {
				qctx, cancel := context.WithTimeout(ctx, b.queryTimeout)
				b.refresh(qctx, k.(string), st)
				cancel()
			}
			return ctx.Err() == nil
		})
	}
}

// Resolved tells the barrier that number of stream is resolved. The backend
// reports resolutions through Watch; callers that resolved a number
// themselves report it too, which wakes local waiters without waiting for the
// backend's notification. Reporting a number twice is harmless.
func (b *Barrier) Resolved(name string, number int64) {
	st := b.lookup(name)
	if st == nil {
		return // nobody asked about this stream: a later snapshot covers it
	}
	if st.resolved(number) {
		b.kick() // W reached the end of a cut snapshot: read on
	}
}

// ResolvedThrough tells the barrier that every number of stream up to
// through is resolved, as a successful ordered commit of through shows.
func (b *Barrier) ResolvedThrough(name string, through int64) {
	st := b.lookup(name)
	if st == nil {
		return // nobody asked about this stream: a later snapshot covers it
	}
	if st.resolvedThrough(through) {
		b.kick() // W reached the end of a cut snapshot: read on
	}
}

// WaitFor blocks until every number of stream below n is resolved (W >= n-1),
// or ctx ends.
func (b *Barrier) WaitFor(ctx context.Context, name string, n int64) error {
	if err := store.ValidateStream(name); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	ready, cancel, err := b.Ready(ctx, name, n)
	if err != nil {
		return err
	}
	defer cancel()
	select {
	case <-ready:
		return nil
	default:
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("barrier: wait for %s/%d: %w", store.QuoteInput(name), n, context.Cause(ctx))
	}
}

// Reached reports whether every number of stream below n is known to be
// resolved (W >= n-1), without waiting, reading the backend or allocating.
// False may only mean "not known yet": use Ready to wait.
func (b *Barrier) Reached(name string, n int64) bool {
	st := b.lookup(name)
	return st != nil && st.reached(n)
}

// Ready returns a channel that is closed once every number of stream below n
// is resolved, and a function that withdraws the wait; call it when done
// (it is a no-op once the channel closed). It is the building block of
// WaitFor for callers that wait on several things at once. A snapshot, when
// one is needed, is read with ctx; if that fails the wait goes on and the
// safety poll retries.
func (b *Barrier) Ready(ctx context.Context, name string, n int64) (<-chan struct{}, func(), error) {
	if err := b.running(); err != nil {
		return nil, nil, err
	}
	for {
		st := b.stream(name)
		st.used()
		if st.reached(n) {
			return closedCh, noWithdraw, nil // the turn has come, read without the stream's lock
		}
		w, stale, evicted := st.enqueue(n-1, b.gen.Load())
		switch {
		case evicted:
			continue // the refresher dropped this stream meanwhile: take a fresh one
		case w == nil:
			return closedCh, noWithdraw, nil // the turn has come: nothing to wait for
		}
		if stale {
			_ = b.refresh(ctx, name, st) // logged; the poll retries
		}
		return w.ch, func() { st.withdraw(w) }, nil
	}
}

// progress returns a channel that is closed once the watermark of stream
// passes both after and what the barrier knows of it now, and a function
// that withdraws the wait: the sign that the backend answers again, for a
// follower pausing after a failed read. It reads nothing itself (a stale
// stream is left to the refresher), so it never blocks on a backend that is
// away. On a barrier that does not run, the channel never closes.
func (b *Barrier) progress(name string, after int64) (<-chan struct{}, func()) {
	if b.running() != nil {
		return nil, noWithdraw
	}
	for {
		st := b.stream(name)
		w, stale, evicted := st.enqueue(max(st.watermark(), after)+1, b.gen.Load())
		switch {
		case evicted:
			continue // dropped meanwhile: take a fresh one
		case w == nil:
			return closedCh, noWithdraw // it moved meanwhile
		}
		if stale {
			b.kick() // the refresher reads streams with waiters
		}
		return w.ch, func() { st.withdraw(w) }
	}
}

// closedCh and noWithdraw answer a Ready whose turn has come, without
// allocating.
var closedCh = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

func noWithdraw() {}

func (b *Barrier) running() error {
	switch b.life.State() {
	case lifecycle.Running:
		return nil
	case lifecycle.NotStarted:
		return ErrNotStarted
	default: // stopped, or Start's context ended: nothing listens any more
		return ErrStopped
	}
}

// Watermark returns the watermark of stream, reading a snapshot first if
// what the barrier knows may be stale.
func (b *Barrier) Watermark(ctx context.Context, name string) (int64, error) {
	if err := store.ValidateStream(name); err != nil {
		return 0, fmt.Errorf("barrier: %w", err)
	}
	st := b.stream(name)
	if st.isStale(b.gen.Load()) {
		if err := b.refresh(ctx, name, st); err != nil {
			return 0, err
		}
	}
	return st.watermark(), nil
}

// stream returns what the barrier knows of stream name, made on first use.
func (b *Barrier) stream(name string) *stream {
	if st := b.lookup(name); st != nil {
		return st
	}
	v, _ := b.streams.LoadOrStore(name, newStream(name))
	return v.(*stream)
}

// lookup returns what the barrier knows of stream name, nil if nothing. The
// stream looked up last is remembered while it is not evicted, which spares
// the map lookup on the hot path. It may return a stream that is being
// evicted: its callers check under the stream's lock (enqueue), or deliver
// a resolution that a fresh stream's snapshot, read later, covers anyway.
func (b *Barrier) lookup(name string) *stream {
	if st := b.recent.Load(); st != nil && st.name == name && !st.evicted.Load() {
		return st
	}
	v, ok := b.streams.Load(name)
	if !ok {
		return nil
	}
	st := v.(*stream)
	if !st.evicted.Load() {
		b.recent.Store(st)
	}
	return st
}

// refresh reads a snapshot of stream and merges it. Concurrent refreshes of
// one stream coalesce: while one runs, others ask it to run once more. If it
// fails (its ctx may be a caller's that gave up), the refresher serves those
// others.
func (b *Barrier) refresh(ctx context.Context, name string, st *stream) error {
	if !st.beginLoad() {
		return nil
	}
	for {
		gen, epoch := b.gen.Load(), st.epochNow()
		snap, err := b.src.Snapshot(ctx, name, b.limit)
		if err != nil {
			if st.endLoad() {
				// Others asked for this load meanwhile, or waiters need it:
				// ours failed (perhaps only because our caller gave up), so
				// have the refresher read for them now, not at the next poll.
				b.kick()
			}
			if ctx.Err() == nil {
				b.logger.Warn("barrier: snapshot failed", slog.String("stream", name), slog.Any("error", err))
			}
			return fmt.Errorf("barrier: snapshot of %s: %w", store.QuoteInput(name), err)
		}
		if !st.apply(snap, gen, epoch, b.limit) {
			return nil
		}
	}
}

// stream is what the barrier knows of one stream.
type stream struct {
	name string

	// wa mirrors w, for reading without the lock (Reached, and Ready when
	// the turn has come); idle and evicted are read without it too.
	wa      atomic.Int64
	idle    atomic.Bool // unused since the last poll tick; set under mu
	evicted atomic.Bool // dropped from Barrier.streams: take a fresh one; set under mu

	mu         sync.Mutex
	w          int64              // the watermark; never decreases
	known      int64              // highest number the last snapshot described
	unresolved map[int64]struct{} // in (w, known]: leased at the last snapshot
	heard      map[int64]struct{} // above w: reported resolved
	cut        bool               // the last snapshot was cut at the limit: above known may be resolved unheard
	gen        uint64             // reset generation of the last snapshot; 0: none
	epoch      uint64             // bumped by forget: a snapshot read before is dropped
	waiters    waiterHeap
	loading    bool // a snapshot is being read
	again      bool // another snapshot was asked for meanwhile
}

func newStream(name string) *stream {
	return &stream{name: name, unresolved: map[int64]struct{}{}, heard: map[int64]struct{}{}}
}

func (st *stream) watermark() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.used()
	return st.w
}

// used marks the stream used in this poll interval, so it is not evicted.
// An eviction that races it is seen by the caller's check of evicted
// afterwards (enqueue, reached).
func (st *stream) used() {
	if st.idle.Load() {
		st.idle.Store(false)
	}
}

// reached reports, without the lock, whether w >= n-1 is known. A true
// answer holds forever, even on a stream being evicted: W never goes back,
// and every resolution it counted is final; only forget, after the backend
// accepted a history that lost them, takes it back.
func (st *stream) reached(n int64) bool {
	return st.wa.Load() >= n-1
}

// evictIfIdle reports whether the stream can be dropped, and marks it
// evicted if so: nobody waited on it, loaded it or asked for its watermark
// for a whole poll interval. Otherwise it starts a new idle interval. A
// dropped stream is read afresh (a snapshot) when it is used again, so
// eviction bounds the barrier's memory by the streams in use without losing
// anything: the backend remembers every resolution.
func (st *stream) evictIfIdle() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.idle.Load() && len(st.waiters) == 0 && !st.loading {
		st.evicted.Store(true)
		return true
	}
	st.idle.Store(true)
	return false
}

// forget drops what the stream knows, after the backend accepted a
// history that lost part of it: W starts again from the next snapshot,
// which it needs at once (stale); a snapshot being read is dropped and
// read again (apply).
func (st *stream) forget() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.w, st.known, st.cut, st.gen = 0, 0, false, 0
	st.wa.Store(0)
	clear(st.unresolved)
	clear(st.heard)
	st.epoch++
}

func (st *stream) epochNow() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.epoch
}

func (st *stream) isStale(gen uint64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.gen < gen
}

// needsRead reports whether the refresher should read a snapshot: for a
// stream with waiters, always (all) or if it is stale or starved.
func (st *stream) needsRead(all bool, gen uint64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.waiters) > 0 && (all || st.gen < gen || st.starvedLocked())
}

// starvedLocked reports waiters that only a new snapshot can serve: W reached
// the end of a snapshot that was cut at the limit, and numbers above it may
// have resolved before that snapshot, so they will never be heard of.
// st.mu must be held.
func (st *stream) starvedLocked() bool {
	return st.cut && st.w >= st.known && len(st.waiters) > 0
}

// resolved records a reported resolution and wakes whom it concerns. It
// reports whether the stream is now starved (starvedLocked).
func (st *stream) resolved(n int64) (starved bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case n <= st.w:
		return false
	case n > st.w+1:
		st.heard[n] = struct{}{}
		return false
	}
	// The next number, as usual: W moves to it without a trip through heard.
	delete(st.unresolved, n)
	st.w = n
	st.advance()
	return st.starvedLocked()
}

// resolvedThrough records that every number up to through is resolved and
// wakes whom it concerns. It reports whether the stream is now starved
// (starvedLocked).
func (st *stream) resolvedThrough(through int64) (starved bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if through <= st.w {
		return false
	}
	forget(st.heard, st.w, through)
	forget(st.unresolved, st.w, through)
	st.w = through
	st.advance()
	return st.starvedLocked()
}

// forget deletes the numbers in (from, to] from set, visiting whichever
// is smaller: the numbers or the set.
func forget(set map[int64]struct{}, from, to int64) {
	if to-from <= int64(len(set)) {
		for n := from + 1; n <= to; n++ {
			delete(set, n)
		}
		return
	}
	for n := range set {
		if n <= to {
			delete(set, n)
		}
	}
}

// apply merges a snapshot read at reset generation gen and forget epoch
// with at most limit unresolved numbers. It reports whether another
// snapshot is needed: one was asked for while this one was read, the
// stream was forgotten meanwhile, or it is starved; if not, the load is
// over.
func (st *stream) apply(snap store.Snapshot, gen, epoch uint64, limit int) (again bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if epoch != st.epoch {
		return true // read before forget: of the history given up
	}
	st.gen = max(st.gen, gen)
	if snap.Known >= st.known || st.w >= st.known {
		st.known = snap.Known
		st.cut = len(snap.Unresolved) >= limit
		clear(st.unresolved)
		for _, n := range snap.Unresolved {
			if _, ok := st.heard[n]; !ok && n > st.w {
				st.unresolved[n] = struct{}{}
			}
		}
	}
	if snap.Watermark > st.w {
		for n := range st.heard {
			if n <= snap.Watermark {
				delete(st.heard, n)
			}
		}
		st.w = snap.Watermark
	}
	st.advance()
	again = st.again || st.starvedLocked()
	st.again = false
	st.loading = again
	return again
}

// advance moves w over every number known to be resolved, then wakes the
// waiters whose turn came. st.mu must be held.
func (st *stream) advance() {
	for {
		next := st.w + 1
		if _, ok := st.heard[next]; ok {
			delete(st.heard, next)
			delete(st.unresolved, next)
		} else if _, ok := st.unresolved[next]; ok || next > st.known {
			break
		}
		st.w = next
	}
	st.wa.Store(st.w)
	for len(st.waiters) > 0 && st.waiters[0].target <= st.w {
		w := heap.Pop(&st.waiters).(*waiter)
		close(w.ch)
	}
}

// beginLoad claims the right to read a snapshot; false if one is being read,
// in which case that reader is asked to read once more.
func (st *stream) beginLoad() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.loading {
		st.again = true
		return false
	}
	st.loading = true
	return true
}

// endLoad ends a load that failed; it reports whether another load is
// needed: one was asked for meanwhile, or the stream is starved.
func (st *stream) endLoad() (again bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	again = st.again || st.starvedLocked()
	st.loading, st.again = false, false
	return again
}

// enqueue registers a waiter for w >= target; it returns none if the target
// is reached. stale reports that the caller should read a snapshot;
// evicted, that the stream was dropped and the caller must enqueue on a
// fresh one.
func (st *stream) enqueue(target int64, gen uint64) (w *waiter, stale, evicted bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.evicted.Load() {
		return nil, false, true
	}
	st.used()
	if target <= st.w {
		return nil, false, false
	}
	w = &waiter{target: target, ch: make(chan struct{}), index: -1}
	heap.Push(&st.waiters, w)
	return w, st.gen < gen, false
}

// withdraw removes a waiter that is still queued.
func (st *stream) withdraw(w *waiter) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if w.index >= 0 {
		heap.Remove(&st.waiters, w.index)
	}
}

// waiter waits for the watermark to reach target.
type waiter struct {
	target int64
	ch     chan struct{}
	index  int // position in the heap; -1 once out
}

// waiterHeap is a min-heap of waiters by target.
type waiterHeap []*waiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].target < h[j].target }
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}
