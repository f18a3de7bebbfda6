package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// Interrupter is implemented by a store under test whose test harness can
// cut, in the middle of its next CommitMulti, the connection the call runs
// on (store/postgres's tests do, with pg_terminate_backend). The suite
// then checks that the cut call fails as a whole and that each item's
// outcome is learned by retrying it with its token (I7).
type Interrupter interface {
	// InterruptNextCommitMulti makes the next CommitMulti call lose its
	// connection after the backend has run some of its items and before
	// it committed them.
	InterruptNextCommitMulti()
}

// capabilities returns the capability groups of the suite that s has
// (store/capability.go): a backend is checked for exactly what it claims.
func capabilities(s Store) []group[Store] {
	var out []group[Store]
	if _, ok := s.(store.MultiLeaser); ok {
		out = append(out, group[Store]{"LeaseMulti", testLeaseMulti})
	}
	if _, ok := s.(store.MultiCommitter); ok {
		out = append(out, group[Store]{"CommitMulti", testCommitMulti})
	}
	if _, ok := s.(store.OneByOne); ok {
		out = append(out, group[Store]{"OneByOne", testOneByOne})
	}
	if ip, ok := s.(store.InProcess); ok && ip.InProcess() {
		out = append(out, group[Store]{"InProcess", testInProcess})
	}
	if _, ok := s.(store.Appender); ok {
		out = append(out, group[Store]{"Append", testAppend})
	}
	if _, ok := s.(store.HookQueue); ok {
		out = append(out, group[Store]{"Hooks", testHooks})
	}
	if _, ok := s.(store.Parker); ok {
		out = append(out, group[Store]{"Parked", testParked})
	}
	if _, ok := s.(store.StreamSummarizer); ok {
		out = append(out, group[Store]{"Summarize", testSummarize})
	}
	if _, ok := s.(store.CommitFinder); ok {
		out = append(out, group[Store]{"CommitFinder", testFindCommitted})
	}
	if _, ok := s.(store.RecoveryHistory); ok {
		out = append(out, group[Store]{"RecoveryHistory", testRecoveryHistory})
	}
	if _, ok := s.(Interrupter); ok {
		out = append(out, group[Store]{"Interrupted", testInterrupted})
	}
	return out
}

// multiLeaser returns b's store as a store.MultiLeaser.
func (b *bundle) multiLeaser() store.MultiLeaser { return b.s.(store.MultiLeaser) }

// multiCommitter returns b's store as a store.MultiCommitter.
func (b *bundle) multiCommitter() store.MultiCommitter { return b.s.(store.MultiCommitter) }

// streamLeases is an item of LeaseMulti: n requests of stream.
func streamLeases(stream string, n int, ttl time.Duration) store.StreamLeases {
	it := store.StreamLeases{Stream: stream}
	for i := range n {
		it.Requests = append(it.Requests, req(ttl, fmt.Sprint(stream, "-", i)))
	}
	return it
}

func testLeaseMulti(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("leases each item as Lease would, streams dense, in item order", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb, sc := b.name("a"), b.name("b"), b.name("c")
		items := []store.StreamLeases{
			streamLeases(sa, 2, time.Minute), streamLeases(sb, 1, time.Second),
			streamLeases(sa, 1, time.Hour), streamLeases(sc, 3, time.Minute),
		}
		res := b.multiLeaser().LeaseMulti(b.ctx, items, &store.LeaseParams{Owner: "multi", Now: b.at(0)})
		require.Len(t, res, len(items))
		want := map[string][]int64{sa: {1, 2, 3}, sb: {1}, sc: {1, 2, 3}}
		got := map[string][]int64{}
		tokens := map[store.Token]bool{}
		for i, r := range res {
			require.NoError(t, r.Err, "item %d", i)
			require.Len(t, r.Entries, len(items[i].Requests), "item %d", i)
			for j, e := range r.Entries {
				rq := items[i].Requests[j]
				require.Equal(t, items[i].Stream, e.Stream)
				require.Equal(t, store.Leased, e.State)
				require.Equal(t, "multi", e.Owner)
				require.Equal(t, rq.OperationID, e.OperationID)
				require.Equal(t, rq.Kind, e.Kind)
				requireTime(t, b.time(0), e.LeasedAt)
				requireTime(t, b.time(rq.TTL), e.ExpiresAt)
				require.False(t, e.Token.IsZero())
				require.False(t, tokens[e.Token], "a token handed out twice")
				tokens[e.Token] = true
				got[e.Stream] = append(got[e.Stream], e.Number)
				require.Equal(t, norm(e), b.entry(e.Stream, e.Number), "the entry as stored")
			}
		}
		require.Equal(t, want, got)
		for s, ns := range want {
			require.Equal(t, int64(len(ns))+1, b.stats(s).NextNumber, s)
		}
	})

	t.Run("an item with bad input fails alone and changes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb := b.name("a"), b.name("b")
		bad := b.name("bad\x00")
		items := []store.StreamLeases{
			streamLeases(sa, 1, time.Minute),
			streamLeases(bad, 1, time.Minute),
			streamLeases(sb, 2, time.Minute),
			streamLeases(sa, 1, 0),
			{Stream: sb},
		}
		res := b.multiLeaser().LeaseMulti(b.ctx, items, &store.LeaseParams{Now: b.at(0)})
		require.NoError(t, res[0].Err)
		require.ErrorIs(t, res[1].Err, store.ErrInvalidStream)
		require.ErrorIs(t, res[1].Err, store.ErrInvalidArgument)
		require.NoError(t, res[2].Err)
		require.ErrorIs(t, res[3].Err, store.ErrInvalidTTL)
		require.ErrorIs(t, res[4].Err, store.ErrInvalidCount)
		for _, i := range []int{1, 3, 4} {
			require.Empty(t, res[i].Entries, "item %d", i)
		}
		require.Equal(t, []int64{1}, numbers(res[0].Entries))
		require.Equal(t, []int64{1, 2}, numbers(res[2].Entries))
		require.Equal(t, int64(2), b.stats(sa).NextNumber, "the bad item of a leased nothing")
		require.Equal(t, int64(3), b.stats(sb).NextNumber)
	})

	t.Run("bad input of the whole call fails every item and leases nothing", func(t *testing.T) {
		b := setup(t, newStore)
		sa := b.name("a")
		for name, call := range map[string]struct {
			items []store.StreamLeases
			p     *store.LeaseParams
			want  error
		}{
			"no items":          {nil, nil, store.ErrInvalidCount},
			"too many":          {[]store.StreamLeases{streamLeases(sa, store.MaxBatch, time.Minute), streamLeases(sa, 1, time.Minute)}, nil, store.ErrInvalidCount},
			"a bad owner":       {[]store.StreamLeases{streamLeases(sa, 1, time.Minute)}, &store.LeaseParams{Owner: "bad\x00owner"}, store.ErrInvalidText},
			"an owner too long": {[]store.StreamLeases{streamLeases(sa, 1, time.Minute)}, &store.LeaseParams{Owner: string(make([]byte, store.MaxTextLen+1))}, store.ErrInvalidText},
		} {
			res := b.multiLeaser().LeaseMulti(b.ctx, call.items, call.p)
			require.Len(t, res, len(call.items), name)
			for i, r := range res {
				require.ErrorIs(t, r.Err, call.want, "%s: item %d", name, i)
				require.ErrorIs(t, r.Err, store.ErrInvalidArgument, "%s: item %d", name, i)
			}
		}
		b.requireNoStream(sa)
	})

	t.Run("a cancelled context leases nothing", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb := b.name("a"), b.name("b")
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		res := b.multiLeaser().LeaseMulti(ctx, []store.StreamLeases{streamLeases(sa, 1, time.Minute), streamLeases(sb, 1, time.Minute)}, nil)
		for i, r := range res {
			require.ErrorIs(t, r.Err, context.Canceled, "item %d", i)
			require.NotErrorIs(t, r.Err, store.ErrInvalidArgument)
		}
		b.requireNoStream(sa)
		b.requireNoStream(sb)
	})

	t.Run("concurrent calls over the same streams stay dense", func(t *testing.T) {
		b := setup(t, newStore)
		streams := []string{b.name("a"), b.name("b"), b.name("c"), b.name("d")}
		const callers, rounds = 8, 10
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for r := range rounds {
					// Each call asks for the streams in its own order: the
					// backend must not deadlock on their counter rows.
					var items []store.StreamLeases
					for k := range streams {
						items = append(items, streamLeases(streams[(c+r+k)%len(streams)], 1+(c+k)%2, time.Minute))
					}
					for i, res := range b.multiLeaser().LeaseMulti(b.ctx, items, nil) {
						if res.Err != nil {
							t.Errorf("caller %d round %d item %d: %v", c, r, i, res.Err)
						}
					}
				}
			})
		}
		wg.Wait()
		for _, s := range streams {
			es := b.readAll(s)
			for i, e := range es {
				require.Equal(t, int64(i+1), e.Number, "%s dense", s)
			}
			require.Equal(t, b.stats(s).NextNumber, int64(len(es))+1)
		}
	})
}

func testCommitMulti(t *testing.T, newStore func(t *testing.T) Store) {
	item := func(e store.Entry, ordered bool) store.StreamCommit {
		return store.StreamCommit{Stream: e.Stream, Number: e.Number, Token: e.Token, Payload: []byte(fmt.Sprint("p", e.Number)), Ordered: ordered}
	}

	t.Run("commits the items of several streams, each as Commit would", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb := b.name("a"), b.name("b")
		a := b.lease(sa, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Minute, "3"))
		bs := b.lease(sb, 0, req(time.Minute, "1"), req(time.Minute, "2"))
		foreign := item(bs[1], true)
		foreign.Token = store.NewToken()
		items := []store.StreamCommit{item(a[0], true), item(bs[0], true), item(a[1], false), foreign, item(a[2], true)}
		res, err := b.multiCommitter().CommitMulti(b.ctx, items, &store.CommitMultiParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		require.Len(t, res, len(items))
		for _, i := range []int{0, 1, 2, 4} {
			require.NoError(t, res[i].Err, "item %d", i)
			requireTime(t, b.time(time.Second), res[i].ResolvedAt)
			e := b.entry(items[i].Stream, items[i].Number)
			require.Equal(t, store.Committed, e.State)
			require.Equal(t, items[i].Payload, e.Payload)
		}
		require.ErrorIs(t, res[3].Err, store.ErrTokenMismatch, "a foreign token fails its item alone")
		b.requireUnchanged(bs[1])
		require.Equal(t, int64(3), b.stats(sa).Watermark, "3 counted 1 and 2 of the same call")
		require.Equal(t, int64(1), b.stats(sb).Watermark)

		again, err := b.multiCommitter().CommitMulti(b.ctx, items[:3], &store.CommitMultiParams{Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		for i, r := range again {
			require.NoError(t, r.Err, "the holder's retry of item %d reports the first outcome (I7)", i)
			requireTime(t, b.time(time.Second), r.ResolvedAt)
		}
		other := items[1]
		other.Payload = []byte("other")
		next := b.lease(sa, 0, req(time.Minute, "4"))
		res, err = b.multiCommitter().CommitMulti(b.ctx, []store.StreamCommit{other, item(next[0], true)}, &store.CommitMultiParams{Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		require.ErrorIs(t, res[0].Err, store.ErrPayloadMismatch, "a retry with another payload fails its item alone")
		require.Equal(t, items[1].Payload, b.entry(sb, 1).Payload)
		require.NoError(t, res[1].Err)
	})

	t.Run("an ordered item counts the earlier items of its stream only when they succeeded", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb := b.name("a"), b.name("b")
		a := b.lease(sa, 0, req(time.Minute, "1"), req(time.Second, "2"), req(time.Minute, "3"))
		bs := b.lease(sb, 0, req(time.Minute, "1"))
		items := []store.StreamCommit{item(a[0], true), item(a[1], true), item(bs[0], true), item(a[2], true)}
		res, err := b.multiCommitter().CommitMulti(b.ctx, items, &store.CommitMultiParams{Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.ErrorIs(t, res[1].Err, store.ErrExpired)
		require.NoError(t, res[2].Err, "another stream is not held back")
		require.ErrorIs(t, res[3].Err, store.ErrNotReady, "2 failed: 3 must wait")
		b.requireUnchanged(a[2])
		b.expire(a[1], 2*time.Second, nil)
		res, err = b.multiCommitter().CommitMulti(b.ctx, items[3:], &store.CommitMultiParams{Now: b.at(2 * time.Second)})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
	})

	t.Run("an item with bad input fails alone and changes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb := b.name("a"), b.name("b")
		a := b.lease(sa, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Minute, "3"))
		bs := b.lease(sb, 0, req(time.Minute, "1"))
		zero := item(a[0], false)
		zero.Token = store.Token{}
		badStream := item(bs[0], false)
		badStream.Stream = "bad\x00stream"
		noNumber := item(bs[0], false)
		noNumber.Number = 0
		items := []store.StreamCommit{zero, badStream, item(a[2], false), item(a[1], false), noNumber, item(bs[0], false)}
		res, err := b.multiCommitter().CommitMulti(b.ctx, items, &store.CommitMultiParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		require.ErrorIs(t, res[0].Err, store.ErrInvalidToken)
		require.ErrorIs(t, res[1].Err, store.ErrInvalidStream)
		require.NoError(t, res[2].Err)
		require.ErrorIs(t, res[3].Err, store.ErrInvalidNumber, "2 after 3 of the same stream")
		require.ErrorIs(t, res[4].Err, store.ErrInvalidNumber)
		require.NoError(t, res[5].Err)
		for _, i := range []int{0, 1, 3, 4} {
			require.ErrorIs(t, res[i].Err, store.ErrInvalidArgument, "item %d", i)
		}
		b.requireUnchanged(a[0])
		b.requireUnchanged(a[1])
		require.Equal(t, store.Committed, b.entry(sa, 3).State)
		require.Equal(t, store.Committed, b.entry(sb, 1).State)

		_, err = b.multiCommitter().CommitMulti(b.ctx, nil, nil)
		require.ErrorIs(t, err, store.ErrInvalidCount)
		_, err = b.multiCommitter().CommitMulti(b.ctx, make([]store.StreamCommit, store.MaxBatch+1), nil)
		require.ErrorIs(t, err, store.ErrInvalidCount)
	})

	t.Run("the watchers hear of the items that committed, and of nothing else", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb := b.name("a"), b.name("b")
		sinkA, sinkB := b.watch(t, sa), b.watch(t, sb)
		a := b.lease(sa, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Minute, "3"), req(time.Minute, "4"))
		bs := b.lease(sb, 0, req(time.Minute, "1"), req(time.Minute, "2"))
		foreign := item(a[2], true)
		foreign.Token = store.NewToken()
		res, err := b.multiCommitter().CommitMulti(b.ctx, []store.StreamCommit{
			item(a[0], true), item(a[1], true), foreign, item(a[3], false), item(bs[1], false),
		}, &store.CommitMultiParams{Now: b.at(time.Second)})
		require.NoError(t, err)
		require.ErrorIs(t, res[2].Err, store.ErrTokenMismatch)
		b.commit(a[2], time.Second, nil) // the sentinels: after the call
		b.commit(bs[0], time.Second, nil)
		for _, sink := range []*recordingSink{sinkA, sinkB} {
			want := int64(1)
			if sink == sinkA {
				want = 3
			}
			waitReported(t, sink, want)
		}
		require.Equal(t, []int64{1, 2, 3, 4}, sinkA.reported())
		require.Equal(t, []int64{1, 2}, sinkB.reported())
	})

}

func testInterrupted(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("a CommitMulti cut mid-way: each item's outcome is learned by retrying it", func(t *testing.T) {
		b := setup(t, newStore)
		sa, sb := b.name("a"), b.name("b")
		a := b.lease(sa, 0, req(time.Minute, "1"), req(time.Minute, "2"))
		bs := b.lease(sb, 0, req(time.Minute, "1"), req(time.Minute, "2"))
		items := []store.StreamCommit{
			{Stream: sa, Number: 1, Token: a[0].Token, Payload: []byte("a1"), Ordered: true},
			{Stream: sb, Number: 1, Token: bs[0].Token, Payload: []byte("b1"), Ordered: true},
			{Stream: sa, Number: 2, Token: a[1].Token, Payload: []byte("a2"), Ordered: true},
			{Stream: sb, Number: 2, Token: bs[1].Token, Payload: []byte("b2")},
		}
		b.s.(Interrupter).InterruptNextCommitMulti()
		_, err := b.multiCommitter().CommitMulti(b.ctx, items, &store.CommitMultiParams{Now: b.at(time.Second)})
		require.Error(t, err, "the cut call fails as a whole: its outcome is unknown")
		require.NotErrorIs(t, err, store.ErrInvalidArgument)
		for _, it := range items { // the retries, item by item
			_, err := b.s.Commit(b.ctx, it.Stream, it.Number, it.Token, &store.CommitParams{Payload: it.Payload, Ordered: it.Ordered, Now: b.at(2 * time.Second)})
			require.NoError(t, err, "%s/%d", it.Stream, it.Number)
			again, err := b.s.Commit(b.ctx, it.Stream, it.Number, it.Token, &store.CommitParams{Payload: it.Payload, Ordered: it.Ordered, Now: b.at(3 * time.Second)})
			require.NoError(t, err, "%s/%d: the retry of the retry", it.Stream, it.Number)
			e := b.entry(it.Stream, it.Number)
			require.Equal(t, store.Committed, e.State)
			require.Equal(t, it.Payload, e.Payload)
			requireTime(t, e.ResolvedAt, again, "committed once: the retry reports the first outcome")
		}
	})
}

// waitReported waits until sink heard of number, one by one or as part of
// a ResolvedThrough.
func waitReported(t *testing.T, sink *recordingSink, number int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.seen[number] > 0 || sink.through >= number
	}, 10*time.Second, time.Millisecond, "%s/%d not reported", sink.stream, number)
}

func testOneByOne(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("LeaseOne and CommitOne do what Lease and Commit do", func(t *testing.T) {
		b := setup(t, newStore)
		one := b.s.(store.OneByOne)
		s := b.name("")
		p := &store.LeaseParams{Owner: "one", Now: b.at(0)}
		e1, err := one.LeaseOne(b.ctx, s, req(time.Minute, "1"), p)
		require.NoError(t, err)
		e2, err := one.LeaseOne(b.ctx, s, req(time.Second, "2"), p)
		require.NoError(t, err)
		require.Equal(t, []int64{1, 2}, []int64{e1.Number, e2.Number})
		require.Equal(t, norm(e1), b.entry(s, 1))
		require.Equal(t, norm(e2), b.entry(s, 2))

		_, err = one.LeaseOne(b.ctx, "", req(time.Minute, "x"), nil)
		require.ErrorIs(t, err, store.ErrInvalidStream)
		_, err = one.LeaseOne(b.ctx, s, req(0, "x"), nil)
		require.ErrorIs(t, err, store.ErrInvalidTTL)
		require.Equal(t, int64(3), b.stats(s).NextNumber, "bad input leased nothing")

		_, err = one.CommitOne(b.ctx, s, 2, e2.Token, []byte("two"), true)
		require.ErrorIs(t, err, store.ErrNotReady)
		_, err = one.CommitOne(b.ctx, s, 1, store.NewToken(), nil, false)
		require.ErrorIs(t, err, store.ErrTokenMismatch)
		at, err := one.CommitOne(b.ctx, s, 1, e1.Token, []byte("one"), true)
		require.NoError(t, err)
		again, err := one.CommitOne(b.ctx, s, 1, e1.Token, []byte("one"), true)
		require.NoError(t, err, "the holder's retry (I7)")
		require.Equal(t, at, again)
		require.Equal(t, []byte("one"), b.entry(s, 1).Payload)
	})
}

func testInProcess(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("watchers hear of a resolution before the call that made it returns", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		sink := b.watch(t, s)
		es := b.lease(s, 0, req(time.Minute, "1"), req(time.Minute, "2"), req(time.Minute, "3"))
		b.commit(es[0], time.Second, nil)
		b.release(es[1], time.Second)
		b.expire(es[2], 2*time.Minute, nil)
		require.Equal(t, []int64{1, 2, 3}, sink.reported(), "heard as soon as each call returned")
	})
}
