package batch

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// SendFunc makes one backend call for reqs and returns their results, in
// order. When decided is not nil, it may call it once, when the backend has
// decided reqs but before their results are final (see Early hand-off).
type SendFunc[Req, Res any] func(ctx context.Context, reqs []Req, decided func()) []Res

// Defaults of Config.
const (
	DefaultMaxBatch    = 100
	DefaultMaxInFlight = 1
	DefaultTimeout     = 30 * time.Second
)

// Config configures a Batcher. The zero value of each field means its
// default; Send is required.
type Config[Req, Res any] struct {
	// Send makes the backend calls.
	Send SendFunc[Req, Res]
	// Orphans, if set, is given the results of requests whose callers
	// gave up while they were in flight, with the leader's context.
	Orphans func(ctx context.Context, reqs []Req, res []Res)
	// MaxBatch bounds the size of a backend call, counted by Size.
	// Default: DefaultMaxBatch.
	MaxBatch int
	// Size is the size of a request (the numbers it leases, the commits it
	// carries). Default: 1 each. A request larger than MaxBatch goes alone.
	Size func(Req) int
	// MaxInFlight bounds the backend calls out at once; more than one
	// only when Send calls decided. Default: DefaultMaxInFlight.
	MaxInFlight int
	// Timeout bounds a backend call made for several callers, which runs
	// without the leader's cancellation. Default: DefaultTimeout.
	Timeout time.Duration
	// Direct sends every call alone, at once, from its caller: the backend
	// answers in process, with no round trip to save.
	Direct bool
	// Wave, shared by the Batchers whose callers alternate between them,
	// has leaders wait for the callers answered a moment ago (see Waves).
	// Nil: leaders never wait.
	Wave *Wave
	// Async sends a batch of several from a goroutine of the Batcher when
	// the leader's context can end, so that the leader returns with its
	// context like the others; Close waits for those goroutines. Without
	// it the leader stays until its batch returns (at most Timeout).
	Async bool
	// Taken, if set, is called with the requests of a batch when the
	// leader takes them from the queue, before they are sent: a consumer
	// may add to them what joined since they queued (the sequence Leaser
	// adds to a run of commits the consecutive ones parked meanwhile).
	Taken func(reqs []Req)
	// Callers is how many callers a request answers, for the Wave: the
	// commits of a run, whose callers wait for its leader. Default: 1.
	Callers func(Req) int
	// ArriveElsewhere says that callers count their arrival on the Wave
	// themselves (Wave.Arrive), before they reach this Batcher: Do does
	// not count it.
	ArriveElsewhere bool
}

// Batcher coalesces the concurrent calls of one kind. It is safe for
// concurrent use.
type Batcher[Req, Res any] struct {
	send        SendFunc[Req, Res]
	orphans     func(ctx context.Context, reqs []Req, res []Res)
	maxBatch    int
	size        func(Req) int
	maxInFlight int
	timeout     time.Duration
	direct      bool
	wave        *Wave
	async       bool
	taken       func(reqs []Req)
	callers     func(Req) int
	arriveHere  bool

	mu      sync.Mutex
	waiting []*call[Req, Res]
	leading bool          // a caller holds the lead: it is about to send, or sending and not yet decided
	flying  int           // backend calls sent that have not returned
	several bool          // the last batch carried several calls
	lastDur time.Duration // how long the last backend call took
	closed  bool          // Close waits for bg: no goroutine starts
	bg      sync.WaitGroup
}

type call[Req, Res any] struct {
	req       Req
	res       Res
	lead      chan struct{} // closed when the call is handed the lead
	done      chan struct{} // closed when res is set
	abandoned bool          // its caller gave up while it was in flight (b.mu)
}

// New returns a Batcher. It panics without cfg.Send: a programming error.
func New[Req, Res any](cfg Config[Req, Res]) *Batcher[Req, Res] {
	if cfg.Send == nil {
		panic("batch: nil Send")
	}
	return &Batcher[Req, Res]{
		send:        cfg.Send,
		orphans:     cfg.Orphans,
		maxBatch:    cmp.Or(cfg.MaxBatch, DefaultMaxBatch),
		size:        cfg.Size,
		maxInFlight: cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight),
		timeout:     cmp.Or(cfg.Timeout, DefaultTimeout),
		direct:      cfg.Direct,
		wave:        cfg.Wave,
		async:       cfg.Async,
		taken:       cfg.Taken,
		callers:     cfg.Callers,
		arriveHere:  !cfg.ArriveElsewhere,
	}
}

// Do sends req, alone or with others, and returns its result, or ctx's
// error if ctx ends first.
func (b *Batcher[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	var zero Res
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if b.direct {
		return b.send(ctx, []Req{req}, nil)[0], nil
	}
	c := &call[Req, Res]{req: req, lead: make(chan struct{}), done: make(chan struct{})}
	b.mu.Lock()
	b.waiting = append(b.waiting, c)
	if b.wave != nil && b.arriveHere {
		// Counted once queued: a leader that this arrival wakes finds it.
		b.wave.Arrive()
	}
	b.passLead()
	b.mu.Unlock()

	// The lead goes to a queued call, which is sent by its own run: a call
	// is never both led and done before it runs.
	select {
	case <-c.lead:
		if !b.run(ctx, c) {
			return zero, ctx.Err()
		}
		// Sent by this run, which returned once the results were set, or
		// in a goroutine of b's (a batch of several): wait like the others.
		select {
		case <-c.done:
			return c.res, nil
		case <-ctx.Done():
		}
	case <-c.done:
		return c.res, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if isClosed(c.done) { // done before we looked: the result is ours
		return c.res, nil
	}
	if !b.unqueue(c) { // in flight in another caller's batch
		c.abandoned = true
	}
	return zero, ctx.Err()
}

// Queued returns how many calls wait to be sent.
func (b *Batcher[Req, Res]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiting)
}

// InFlight returns how many backend calls are out.
func (b *Batcher[Req, Res]) InFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flying
}

// Close makes b send every batch from its leader's goroutine from now on,
// and waits for the goroutines that send batches (Config.Async). It is
// safe to call twice.
func (b *Batcher[Req, Res]) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.bg.Wait()
}

// unqueue removes c, which was not sent, from the queue, and hands the lead
// on if c held it. It reports false if c is not queued: it was sent. b.mu
// must be held.
func (b *Batcher[Req, Res]) unqueue(c *call[Req, Res]) bool {
	i := slices.Index(b.waiting, c)
	if i < 0 {
		return false
	}
	b.waiting = slices.Delete(b.waiting, i, i+1)
	if isClosed(c.lead) { // handed the lead, which it will not use
		b.leading = false
		b.passLead()
	}
	return true
}

// passLead hands the lead to the first queued call, if the lead is free
// and fewer than maxInFlight backend calls are out. b.mu must be held.
func (b *Batcher[Req, Res]) passLead() {
	if !b.leading && b.flying < b.maxInFlight && len(b.waiting) > 0 {
		b.leading = true
		close(b.waiting[0].lead)
	}
}

// take removes the calls of the next batch from the queue: the first
// (the leader's), then those that fit in maxBatch. b.mu must be held.
func (b *Batcher[Req, Res]) take() []*call[Req, Res] {
	n := min(len(b.waiting), b.maxBatch)
	if b.size != nil {
		total := 0
		for n = 0; n < len(b.waiting); n++ {
			s := b.size(b.waiting[n].req)
			if n > 0 && total+s > b.maxBatch {
				break
			}
			total += s
		}
	}
	calls := slices.Clone(b.waiting[:n]) // the leader first: the lead goes to the first queued
	b.waiting = slices.Delete(b.waiting, 0, n)
	return calls
}

// queuedSizeLocked returns the size of the queued calls. b.mu must be
// held.
func (b *Batcher[Req, Res]) queuedSizeLocked() int {
	if b.size == nil {
		return len(b.waiting)
	}
	total := 0
	for _, c := range b.waiting {
		total += b.size(c.req)
	}
	return total
}

// run sends the queued calls, the leader's (me) first, gives them their
// results and hands the lead on. A batch of several is sent by a goroutine
// of b's when b is Async and ctx can end, so that the leader can give up
// like the others; otherwise run returns once the results are set. It
// returns false, having sent nothing, if ctx ended while it waited for a
// wave.
func (b *Batcher[Req, Res]) run(ctx context.Context, me *call[Req, Res]) bool {
	if !b.awaitWave(ctx) {
		b.mu.Lock()
		b.unqueue(me)
		b.mu.Unlock()
		return false
	}
	b.mu.Lock()
	calls := b.take()
	n := len(calls)
	early := n > 1 || b.several // with a single caller, nobody could use an early lead
	b.several = n > 1
	b.flying++
	async := b.async && n > 1 && ctx.Done() != nil && !b.closed
	if async {
		b.bg.Add(1) // under b.mu, before Close: Close waits for it
	}
	b.mu.Unlock()
	if b.taken != nil {
		reqs := make([]Req, n)
		for i, c := range calls {
			reqs[i] = c.req
		}
		b.taken(reqs)
	}
	if b.wave != nil {
		b.wave.sent(b.count(calls, false))
	}
	if async {
		go func() {
			defer b.bg.Done()
			b.dispatch(ctx, calls, early)
		}()
		return true
	}
	b.dispatch(ctx, calls, early)
	return true
}

// dispatch makes the backend call of calls, sets their results, hands the
// lead on, and gives the results of the calls whose callers gave up to
// orphans. ctx is the leader's; early tells whether the lead may pass when
// the backend has decided the batch.
func (b *Batcher[Req, Res]) dispatch(ctx context.Context, calls []*call[Req, Res], early bool) {
	n := len(calls)
	reqs := make([]Req, n)
	for i, c := range calls {
		reqs[i] = c.req
	}
	sctx := ctx
	if n > 1 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
		defer cancel()
	}
	// The lead is released once: at decided, or when send returns. Until
	// then, no other batch is sent (but one whose commit is still out).
	var released bool
	release := func() { // b.mu held
		if !released {
			released = true
			b.leading = false
		}
	}
	var decided func()
	if early && b.maxInFlight > 1 {
		decided = func() {
			b.mu.Lock()
			release()
			b.passLead()
			b.mu.Unlock()
		}
	}
	start := time.Now()
	res := b.send(sctx, reqs, decided)
	took := time.Since(start)

	b.mu.Lock()
	b.flying--
	b.lastDur = took
	var lostReqs []Req
	var lostRes []Res
	for i, c := range calls {
		c.res = res[i]
		if c.abandoned {
			lostReqs, lostRes = append(lostReqs, c.req), append(lostRes, c.res)
		}
	}
	if b.wave != nil { // before its callers wake: their next calls are its arrivals
		all := b.count(calls, false)
		b.wave.answered(all, all-b.count(calls, true), took)
	}
	for _, c := range calls {
		close(c.done)
	}
	release()
	b.passLead()
	b.mu.Unlock()
	if len(lostReqs) > 0 && b.orphans != nil {
		b.orphans(ctx, lostReqs, lostRes)
	}
}

// count returns how many callers calls answer (Config.Callers), only of
// those abandoned if abandoned. b.mu must be held if abandoned.
func (b *Batcher[Req, Res]) count(calls []*call[Req, Res], abandoned bool) int {
	n := 0
	for _, c := range calls {
		if abandoned && !c.abandoned {
			continue
		}
		if b.callers == nil {
			n++
		} else {
			n += b.callers(c.req)
		}
	}
	return n
}

// awaitWave waits, holding the lead, while the wave says more callers are
// about to join the batch (see Wave): at most a quarter of the last
// backend call and maxWaveWait; or, while the callers loop, at most the
// longest recent backend call plus waveWindow, and maxRoundWait. It returns
// false if ctx ended first.
func (b *Batcher[Req, Res]) awaitWave(ctx context.Context) bool {
	if b.wave == nil {
		return true
	}
	var t *time.Timer
	for {
		changed, loop, longest, least := b.wave.await()
		if changed == nil {
			return true
		}
		if t == nil {
			b.mu.Lock()
			bound := min(b.lastDur/4, maxWaveWait)
			full := b.queuedSizeLocked() >= b.maxBatch
			b.mu.Unlock()
			if full {
				return true // nobody else would fit
			}
			if loop {
				bound = min(longest+waveWindow, maxRoundWait)
			}
			bound = max(bound, least)
			if bound <= 0 {
				return true
			}
			t = time.NewTimer(bound)
			defer t.Stop()
		}
		select {
		case <-changed: // look again
		case <-t.C:
			b.wave.forget() // the callers awaited are not coming soon
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// isClosed reports whether ch, which is only ever closed, is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
