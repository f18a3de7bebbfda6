package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// Run runs the whole conformance suite. newStore must return a fresh,
// isolated store each time it is called (an empty schema on PostgreSQL); it
// is called from parallel subtests, once per leaf subtest (once for the whole
// BadInput table), and owns the cleanup of what it returns (t.Cleanup).
//
// The capabilities the store has (store/capability.go) are checked too,
// each in a group of its own (LeaseMulti, CommitMulti, OneByOne,
// InProcess, Hooks, Parked, Summarize, CommitFinder, RecoveryHistory), and so is
// a batch cut mid-way when the test harness can cut
// one (Interrupter): a backend is checked for exactly what it claims.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	t.Helper()
	groups := []group[Store]{
		{"Lease", testLease},
		{"Commit", testCommit},
		{"Release", testRelease},
		{"Extend", testExtend},
		{"ResolveExpired", testResolveExpired},
		{"ListExpired", testListExpired},
		{"Read", testRead},
		{"Stats", testStats},
		{"Streams", testStreams},
		{"BadInput", testBadInput},
		{"Concurrency", testConcurrency},
		{"Gaps", testGaps},
		{"Trim", testTrim},
		{"Ordered", testOrdered},
		{"CommitBatch", testCommitBatch},
		{"CommitTime", testCommitTime},
		{"Snapshot", testSnapshot},
		{"ReadResolved", testReadResolved},
		{"Watch", testWatch},
		{"RecoverExpired", testRecoverExpired},
		{"RecoverExpiredBatch", testRecoverExpiredBatch},
		{"Inbox", testInbox},
		{"Checkpoints", testCheckpoints},
	}
	groups = append(groups, capabilities(newStore(t))...)
	runGroups(t, newStore, groups)
}

// group is a group of the suite's subtests: one concept of the contract S.
type group[S any] struct {
	name string
	run  func(t *testing.T, newStore func(t *testing.T) S)
}

// runGroups runs each group as a parallel subtest of t.
func runGroups[S any](t *testing.T, newStore func(t *testing.T) S, groups []group[S]) {
	t.Helper()
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			g.run(t, newStore)
		})
	}
}

// clock is what the suite needs of every contract it checks: the
// backend's clock, from which each subtest takes its base time.
type clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// harness is what every subtest works with, whatever the contract S: a
// fresh store, a context and a base time on the backend's clock (in UTC,
// microseconds) from which every pinned time is an offset. The bundles of
// the two suites embed it: bundle (Store) and nlBundle (NamedLeaseStore).
type harness[S clock] struct {
	t    *testing.T
	ctx  context.Context
	s    S
	base time.Time
}

// newHarness returns the harness of t with a store from newStore.
func newHarness[S clock](t *testing.T, newStore func(t *testing.T) S) harness[S] {
	t.Helper()
	s := newStore(t)
	require.NotNil(t, s, "newStore returned nil")
	ctx := t.Context()
	now, err := s.Now(ctx)
	require.NoError(t, err, "Now")
	require.False(t, now.IsZero(), "Now returned the zero time")
	return harness[S]{t: t, ctx: ctx, s: s, base: normTime(store.Micro(now))}
}

var nameSeq atomic.Int64

// name returns a name (of a stream, of a lease) unique to this process,
// derived from the subtest's name so that a shared database shows who wrote
// what. The counter is zero-padded so that names sort in the order they
// were made (a test's expectations in name order hold past #999).
func (h *harness[S]) name(suffix string) string {
	name := h.t.Name()
	if i := strings.IndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if len(name) > 120 {
		name = name[len(name)-120:]
	}
	return fmt.Sprintf("%s#%09d%s", name, nameSeq.Add(1), suffix)
}

// at returns a pointer to base+d, for the Now fields of the params.
func (h *harness[S]) at(d time.Duration) *time.Time {
	tm := h.base.Add(d)
	return &tm
}

// time returns base+d.
func (h *harness[S]) time(d time.Duration) time.Time { return h.base.Add(d) }

// bundle is what a subtest of Run works with.
type bundle struct{ harness[Store] }

// setup marks t parallel and returns its bundle.
func setup(t *testing.T, newStore func(t *testing.T) Store) *bundle {
	t.Helper()
	t.Parallel()
	return newBundle(t, newStore)
}

// newBundle returns the bundle of t, for a t that shares its store with
// sequential subtests.
func newBundle(t *testing.T, newStore func(t *testing.T) Store) *bundle {
	t.Helper()
	return &bundle{newHarness(t, newStore)}
}

// req is a lease request with a TTL and generated operation id and kind.
func req(ttl time.Duration, op string) store.LeaseRequest {
	return store.LeaseRequest{OperationID: op, Kind: "kind-" + op, TTL: ttl}
}

// lease leases reqs on stream with the clock pinned at base+at and checks
// that it succeeded.
func (b *bundle) lease(stream string, at time.Duration, reqs ...store.LeaseRequest) []store.Entry {
	b.t.Helper()
	es, err := b.s.Lease(b.ctx, stream, reqs, &store.LeaseParams{Owner: "owner-" + stream, Now: b.at(at)})
	require.NoError(b.t, err, "Lease %s", stream)
	require.Len(b.t, es, len(reqs), "Lease %s", stream)
	return es
}

// lease1 leases one number with ttl at base+at.
func (b *bundle) lease1(stream string, at, ttl time.Duration) store.Entry {
	b.t.Helper()
	return b.lease(stream, at, req(ttl, "op"))[0]
}

// commit commits e at base+at with payload and checks that it succeeded.
func (b *bundle) commit(e store.Entry, at time.Duration, payload []byte) time.Time {
	b.t.Helper()
	ts, err := b.s.Commit(b.ctx, e.Stream, e.Number, e.Token, &store.CommitParams{Payload: payload, Now: b.at(at)})
	require.NoError(b.t, err, "Commit %s/%d", e.Stream, e.Number)
	return ts
}

// release releases e at base+at and checks that it succeeded.
func (b *bundle) release(e store.Entry, at time.Duration) {
	b.t.Helper()
	err := b.s.Release(b.ctx, e.Stream, e.Number, e.Token, &store.ReleaseParams{Now: b.at(at)})
	require.NoError(b.t, err, "Release %s/%d", e.Stream, e.Number)
}

// expire resolves e as expired at base+at and checks that it succeeded.
func (b *bundle) expire(e store.Entry, at time.Duration, p *store.ResolveExpiredParams) {
	b.t.Helper()
	if p == nil {
		p = &store.ResolveExpiredParams{}
	}
	p.Now = b.at(at)
	err := b.s.ResolveExpired(b.ctx, e.Stream, e.Number, p)
	require.NoError(b.t, err, "ResolveExpired %s/%d", e.Stream, e.Number)
}

// entry reads entry number of stream.
func (b *bundle) entry(stream string, number int64) store.Entry {
	b.t.Helper()
	es, err := b.s.Read(b.ctx, stream, number-1, 1)
	require.NoError(b.t, err, "Read %s/%d", stream, number)
	require.Len(b.t, es, 1, "Read %s/%d", stream, number)
	require.Equal(b.t, number, es[0].Number, "Read %s/%d", stream, number)
	return norm(es[0])
}

// readAll reads every entry of stream, page by page.
func (b *bundle) readAll(stream string) []store.Entry {
	b.t.Helper()
	var out []store.Entry
	for {
		es, err := b.s.Read(b.ctx, stream, int64(len(out)), store.MaxListLimit)
		require.NoError(b.t, err, "Read %s after %d", stream, len(out))
		for _, e := range es {
			out = append(out, norm(e))
		}
		if len(es) < store.MaxListLimit {
			return out
		}
	}
}

// stats returns the stats of stream.
func (b *bundle) stats(stream string) store.StreamStats {
	b.t.Helper()
	st, err := b.s.Stats(b.ctx, stream)
	require.NoError(b.t, err, "Stats %s", stream)
	return normStats(st)
}

// requireNoStream checks that stream does not exist.
func (b *bundle) requireNoStream(stream string) {
	b.t.Helper()
	_, err := b.s.Stats(b.ctx, stream)
	require.ErrorIs(b.t, err, store.ErrStreamNotFound, "Stats %s", stream)
	_, err = b.s.Read(b.ctx, stream, 0, 0)
	require.ErrorIs(b.t, err, store.ErrStreamNotFound, "Read %s", stream)
}

// requireUnchanged checks that e is still exactly as it was.
func (b *bundle) requireUnchanged(e store.Entry) {
	b.t.Helper()
	require.Equal(b.t, norm(e), b.entry(e.Stream, e.Number), "entry %s/%d changed", e.Stream, e.Number)
}

// norm makes entries from different sources comparable with require.Equal:
// times in UTC without a monotonic reading, an empty payload as nil.
func norm(e store.Entry) store.Entry {
	e.LeasedAt = normTime(e.LeasedAt)
	e.ExpiresAt = normTime(e.ExpiresAt)
	e.ResolvedAt = normTime(e.ResolvedAt)
	e.ParkedAt = normTime(e.ParkedAt)
	if len(e.Payload) == 0 {
		e.Payload = nil
	}
	return e
}

// normAll normalises every entry; an empty listing is nil.
func normAll(es []store.Entry) []store.Entry {
	if len(es) == 0 {
		return nil
	}
	out := make([]store.Entry, len(es))
	for i, e := range es {
		out[i] = norm(e)
	}
	return out
}

func normStats(st store.StreamStats) store.StreamStats {
	st.OldestUnresolvedAt = normTime(st.OldestUnresolvedAt)
	return st
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// requireTime checks that got is the same instant as want.
func requireTime(t *testing.T, want, got time.Time, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, normTime(want), normTime(got), msgAndArgs...)
}

// numbers returns the numbers of es.
func numbers(es []store.Entry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.Number
	}
	return out
}

// span returns the numbers from..to.
func span(from, to int64) []int64 {
	var out []int64
	for n := from; n <= to; n++ {
		out = append(out, n)
	}
	return out
}

// resolved returns e as the store should show it after a resolution.
func resolved(e store.Entry, state store.State, at time.Time, payload []byte, reason string, recoveredAs int64) store.Entry {
	e.State = state
	e.ResolvedAt = at
	e.Payload = payload
	e.GapReason = reason
	e.RecoveredAs = recoveredAs
	return norm(e)
}
