package sequence

import (
	"context"
	"slices"
	"strings"

	"github.com/seqlease/seqlease/internal/batch"
	"github.com/seqlease/seqlease/store"
)

// Batching. On a backend with a round trip to save, the Leaser batches
// through the library's batching engine (internal/batch), across streams:
//
//   - Lease coalescing: concurrent Lease and LeaseN calls, on any streams,
//     share one statement (store.MultiLeaser), so each stream's counter
//     row is locked once per batch, not once per lease.
//   - Group commit: a run of consecutive numbers of a stream whose turn
//     came (a group, commit.go) and the ready runs of other streams, and
//     Complete's commits, share one transaction (store.MultiCommitter):
//     one WAL flush for all of them. Commits with a function for the
//     committing transaction (CommitTx) share transactions with each other
//     and with plain commits of their runs (store.TxCommitter).
//
// Lease and commit batches share one wave: a worker's calls alternate
// between them. Each item keeps its own checks and its own outcome: the
// Leaser validates a call before it queues, the backend decides each item
// independently, and an ordered commit still checks its own stream's
// earlier numbers in the transaction, counting the batch's earlier items
// of its stream exactly when they succeeded. A backend without these
// capabilities gets every call alone, as does one that answers in process
// (store.InProcess), where there is no round trip to save.

// maxCommitBatch is the most commits one transaction carries, across
// streams (each stream's run is bounded by Config.MaxGroup).
const maxCommitBatch = 1000

// group is a run of ready commits: consecutive numbers of one stream whose
// turn came (Commit, CommitTx), or one Complete. It is one request of the
// commit engine.
type group struct {
	items []*commitItem
	tx    txFunc // the function type of its CommitTx items, if any
	// run says a committer's leader took it and completes every item in
	// it when the engine answers (lead): only then may the engine add the
	// commits parked since (extend). A commit sent alone (commitOne) is
	// no run.
	run bool
}

// groupResult is the outcome of a group: each item's, or err for all (the
// outcome of every item is unknown).
type groupResult struct {
	res []store.CommitResult
	err error
}

// newEngines sets up lease coalescing and group commit for what the store
// can do.
func (l *Leaser) newEngines() {
	ml, multiLease := l.store.(store.MultiLeaser)
	if multiLease && l.maxLeaseBatch > 1 {
		l.leases = batch.New(batch.Config[store.StreamLeases, store.LeaseResult]{
			Send: func(ctx context.Context, items []store.StreamLeases, _ func()) []store.LeaseResult {
				return ml.LeaseMulti(ctx, items, l.leaseParams)
			},
			Orphans:  l.releaseOrphans,
			MaxBatch: l.maxLeaseBatch,
			Size:     func(it store.StreamLeases) int { return len(it.Requests) },
			Timeout:  l.writeTimeout,
			Wave:     l.wave,
		})
	}
	mc, multiCommit := l.store.(store.MultiCommitter)
	if multiCommit && l.maxGroup > 1 {
		l.commits = l.newCommitEngine(func(ctx context.Context, groups []*group) ([]store.CommitResult, error) {
			return mc.CommitMulti(ctx, flatten(groups, func(it *commitItem, c store.StreamCommit) store.StreamCommit { return c }), nil)
		})
	}
}

// newCommitEngine returns a commit engine that commits the items of a
// batch's groups with send, in the order flatten gives them. When the
// engine takes a batch, each run of ordered commits takes along the
// consecutive commits of its stream that parked since it queued (extend),
// so that the callers a lease batch answered together commit together
// even when the first of them found the engine idle. Every commit counts
// its arrival on the wave when it parks (or, for Complete, when it
// queues), and a run answers all of its callers.
func (l *Leaser) newCommitEngine(send func(ctx context.Context, groups []*group) ([]store.CommitResult, error)) *batch.Batcher[*group, groupResult] {
	return batch.New(batch.Config[*group, groupResult]{
		Send: func(ctx context.Context, groups []*group, _ func()) []groupResult {
			res, err := send(ctx, groups)
			return splitResults(groups, res, err)
		},
		Orphans:         l.commitOrphans,
		MaxBatch:        maxCommitBatch,
		Size:            func(g *group) int { return len(g.items) },
		Timeout:         l.writeTimeout,
		Direct:          l.maxGroup <= 1,
		Wave:            l.wave,
		Taken:           l.extend,
		Callers:         func(g *group) int { return len(g.items) },
		ArriveElsewhere: true,
	})
}

// extend adds to each run of groups (group.run) the consecutive commits of
// its stream parked since it was taken, up to Config.MaxGroup.
func (l *Leaser) extend(groups []*group) {
	for _, g := range groups {
		first := g.items[0]
		if !g.run || len(g.items) >= l.maxGroup {
			continue
		}
		last := g.items[len(g.items)-1].lease.number
		l.commitReady(l.committer(first.lease.stream).takeAfter(last, l.maxGroup-len(g.items), g, true))
	}
}

// arrive counts a commit's arrival on the wave (see newCommitEngine).
func (l *Leaser) arrive() {
	if l.wave != nil {
		l.wave.Arrive()
	}
}

// flatten returns the items of groups as the backend takes them (conv
// makes one of an item and its plain commit), sorted by stream and number:
// an ordered item then follows the earlier items of its stream that it
// counts on. The positions of the items in the groups follow from
// itemOrder.
func flatten[T any](groups []*group, conv func(*commitItem, store.StreamCommit) T) []T {
	order := itemOrder(groups)
	out := make([]T, len(order))
	for i, it := range order {
		x := it.lease
		out[i] = conv(it, store.StreamCommit{Stream: x.stream, Number: x.number, Token: x.token, Payload: it.payload, Ordered: it.ordered})
	}
	return out
}

// itemOrder returns the items of groups sorted by stream and number.
func itemOrder(groups []*group) []*commitItem {
	var items []*commitItem
	for _, g := range groups {
		items = append(items, g.items...)
	}
	slices.SortStableFunc(items, func(a, b *commitItem) int {
		if c := strings.Compare(a.lease.stream, b.lease.stream); c != 0 {
			return c
		}
		return int(min(max(a.lease.number-b.lease.number, -1), 1))
	})
	return items
}

// splitResults gives each group the results of its items, which the
// backend returned in itemOrder.
func splitResults(groups []*group, res []store.CommitResult, err error) []groupResult {
	out := make([]groupResult, len(groups))
	if err != nil {
		for i := range out {
			out[i].err = err
		}
		return out
	}
	at := make(map[*commitItem]store.CommitResult, len(res))
	for i, it := range itemOrder(groups) {
		at[it] = res[i]
	}
	for i, g := range groups {
		out[i].res = make([]store.CommitResult, len(g.items))
		for j, it := range g.items {
			out[i].res[j] = at[it]
		}
	}
	return out
}

// releaseOrphans releases the numbers leased for callers that gave up
// while their lease was in flight, rather than have the barrier wait for
// their expiry.
func (l *Leaser) releaseOrphans(ctx context.Context, items []store.StreamLeases, res []store.LeaseResult) {
	for _, r := range res {
		for _, e := range r.Entries {
			rctx, cancel := l.sharedContext(ctx)
			if err := l.store.Release(rctx, e.Stream, e.Number, e.Token, nil); err == nil && l.barrier != nil {
				l.barrier.Resolved(e.Stream, e.Number)
			}
			cancel()
		}
	}
}

// commitOrphans records the commits of groups whose leader gave up while
// they were in flight: the leases are committed all the same.
func (l *Leaser) commitOrphans(_ context.Context, groups []*group, res []groupResult) {
	for i, g := range groups {
		if res[i].err != nil {
			continue // unknown: a retry of the commit will tell (I7)
		}
		for j, it := range g.items {
			if res[i].res[j].Err == nil {
				it.lease.committed(it.payload)
			}
		}
	}
}

// txFunc is the function of a CommitTx for the committing transaction,
// typed by the backend's transaction type: a txFuncOf[T].
type txFunc interface {
	// key identifies the transaction type: equal keys, equal types.
	key() any
	// engine returns the commit engine for that type.
	engine(l *Leaser) *batch.Batcher[*group, groupResult]
}

// txFuncOf is a CommitTx function for transactions of type T.
type txFuncOf[T any] func(ctx context.Context, tx T) error

// txKey is the key of txFuncOf[T].
type txKey[T any] struct{}

func (txFuncOf[T]) key() any { return txKey[T]{} }

// engine returns the Leaser's commit engine for transactions of type T,
// made on first use; the store is a store.TxCommitter[T] (CommitTx checked
// it).
func (txFuncOf[T]) engine(l *Leaser) *batch.Batcher[*group, groupResult] {
	if v, ok := l.txEngines.Load(txKey[T]{}); ok {
		return v.(*batch.Batcher[*group, groupResult])
	}
	tc := l.store.(store.TxCommitter[T])
	eng := l.newCommitEngine(func(ctx context.Context, groups []*group) ([]store.CommitResult, error) {
		return tc.CommitTx(ctx, flatten(groups, func(it *commitItem, c store.StreamCommit) store.TxCommit[T] {
			fn, _ := it.fn.(txFuncOf[T]) // nil for a plain commit; no other type joins this engine (take)
			return store.TxCommit[T]{StreamCommit: c, Func: fn}
		}), nil)
	})
	v, _ := l.txEngines.LoadOrStore(txKey[T]{}, eng)
	return v.(*batch.Batcher[*group, groupResult])
}

// sendGroup commits g through the engine of its kind and returns each
// item's outcome. A run of ordered commits is sent under the leader's
// values without its cancellation, bounded by Config.WriteTimeout: its
// members' commits, and those it takes along when the engine takes it
// (extend), do not end with the leader's context. A Complete goes with its
// caller's.
func (l *Leaser) sendGroup(ctx context.Context, g *group) groupResult {
	eng := l.commits
	if g.tx != nil {
		eng = g.tx.engine(l)
	}
	if len(g.items) > 1 || g.items[0].ordered {
		var cancel context.CancelFunc
		ctx, cancel = l.sharedContext(ctx)
		defer cancel()
	}
	r, err := eng.Do(ctx, g)
	if err != nil {
		return groupResult{err: err}
	}
	return r
}

// commitOne commits one item alone (no group commit): a plain one through
// commitPlain, one with a function as a group of its own.
func (l *Leaser) commitOne(ctx context.Context, it *commitItem) error {
	if it.fn == nil {
		return l.commitPlain(ctx, it.lease, it.payload, it.ordered)
	}
	r := l.sendGroup(ctx, &group{items: []*commitItem{it}, tx: it.fn})
	if r.err != nil {
		return r.err
	}
	return r.res[0].Err
}

// commitPlain commits x alone, through the store's call for one number
// when it has one (it allocates nothing for the call).
func (l *Leaser) commitPlain(ctx context.Context, x *Lease, payload []byte, ordered bool) error {
	if l.one != nil {
		_, err := l.one.CommitOne(ctx, x.stream, x.number, x.token, payload, ordered)
		return err
	}
	_, err := l.store.Commit(ctx, x.stream, x.number, x.token, &store.CommitParams{Payload: payload, Ordered: ordered})
	return err
}
