package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// appender returns b's store as a store.Appender.
func (b *bundle) appender() store.Appender { return b.s.(store.Appender) }

// appendReqs returns n requests of stream with payloads "<stream>-i".
func appendReqs(stream string, n int) []store.AppendRequest {
	out := make([]store.AppendRequest, n)
	for i := range out {
		out[i] = store.AppendRequest{OperationID: fmt.Sprint("op-", i), Kind: "outbox", Payload: []byte(fmt.Sprint(stream, "-", i))}
	}
	return out
}

func testAppend(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("appends committed entries after the leased ones, dense", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		held := b.lease1(s, 0, time.Minute)
		reqs := appendReqs(s, 3)
		es, err := b.appender().Append(b.ctx, s, reqs, &store.AppendParams{Owner: "appender", Now: b.at(time.Second)})
		require.NoError(t, err)
		require.Len(t, es, 3)
		for i, e := range es {
			require.Equal(t, s, e.Stream)
			require.Equal(t, int64(i+2), e.Number, "after the leased number 1")
			require.Equal(t, store.Committed, e.State)
			require.False(t, e.Token.IsZero())
			require.Equal(t, "appender", e.Owner)
			require.Equal(t, reqs[i].OperationID, e.OperationID)
			require.Equal(t, reqs[i].Kind, e.Kind)
			requireTime(t, b.time(time.Second), e.LeasedAt)
			requireTime(t, b.time(time.Second), e.ExpiresAt)
			requireTime(t, b.time(time.Second), e.ResolvedAt)
			require.Equal(t, reqs[i].Payload, e.Payload)
			require.Equal(t, norm(e), b.entry(s, e.Number), "what Read returns")
		}
		st := b.stats(s)
		require.Equal(t, int64(5), st.NextNumber)
		require.Equal(t, int64(0), st.Watermark, "not an ordered commit: 1 is still leased")
		require.Equal(t, int64(1), st.Unresolved)
		got, err := b.s.ReadResolved(b.ctx, s, 0, 0)
		require.NoError(t, err)
		require.Empty(t, got, "readers stop at the watermark")

		b.commit(held, 2*time.Second, nil)
		require.Equal(t, int64(4), b.stats(s).Watermark)
		more, err := b.appender().Append(b.ctx, s, appendReqs(s, 1), nil)
		require.NoError(t, err)
		require.Equal(t, int64(5), more[0].Number)
		lease := b.lease1(s, 3*time.Second, time.Minute)
		require.Equal(t, int64(6), lease.Number, "leases go on after the appended numbers")
	})

	t.Run("creates the stream and is reported to watchers", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		sink := b.watch(t, s)
		es, err := b.appender().Append(b.ctx, s, appendReqs(s, 2), &store.AppendParams{Now: b.at(0)})
		require.NoError(t, err)
		require.Equal(t, []int64{1, 2}, []int64{es[0].Number, es[1].Number})
		require.Equal(t, int64(2), b.stats(s).Watermark)
		deadline := time.After(10 * time.Second)
		for len(sink.reported()) < 2 {
			select {
			case <-sink.got:
			case <-deadline:
				t.Fatalf("watchers heard %v of the appended 1 and 2", sink.reported())
			}
		}
		require.Equal(t, []int64{1, 2}, sink.reported())
	})

	t.Run("a nil payload is stored as none", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		_, err := b.appender().Append(b.ctx, s, []store.AppendRequest{{}}, nil)
		require.NoError(t, err)
		e := b.entry(s, 1)
		require.Empty(t, e.Payload)
		require.Equal(t, store.Committed, e.State)
	})

	t.Run("an empty payload reads back as it was given", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		_, err := b.appender().Append(b.ctx, s, []store.AppendRequest{{Payload: nil}, {Payload: []byte{}}}, nil)
		require.NoError(t, err)
		es, err := b.s.Read(b.ctx, s, 0, 2)
		require.NoError(t, err)
		require.Len(t, es, 2)
		require.Nil(t, es[0].Payload, "nil reads back as nil")
		require.NotNil(t, es[1].Payload, "[]byte{} reads back as empty, not nil")
		require.Empty(t, es[1].Payload)
	})

	t.Run("bad input appends nothing", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		ok := appendReqs(s, 1)
		cases := []struct {
			name   string
			stream string
			reqs   []store.AppendRequest
			p      *store.AppendParams
			want   error
		}{
			{"empty stream", "", ok, nil, store.ErrInvalidStream},
			{"stream with a control character", s + "\n", ok, nil, store.ErrInvalidStream},
			{"no entries", s, nil, nil, store.ErrInvalidCount},
			{"too many entries", s, make([]store.AppendRequest, store.MaxBatch+1), nil, store.ErrInvalidCount},
			{"operation id not UTF-8", s, []store.AppendRequest{{OperationID: "\xff"}}, nil, store.ErrInvalidText},
			{"kind too long", s, []store.AppendRequest{{Kind: strings.Repeat("k", store.MaxTextLen+1)}}, nil, store.ErrInvalidText},
			{"owner with a control character", s, ok, &store.AppendParams{Owner: "a\x00b"}, store.ErrInvalidText},
			{"a bad entry among good ones", s, append(appendReqs(s, 2), store.AppendRequest{Kind: "\x01"}), nil, store.ErrInvalidText},
		}
		for _, c := range cases {
			_, err := b.appender().Append(b.ctx, c.stream, c.reqs, c.p)
			require.ErrorIs(t, err, c.want, c.name)
			require.ErrorIs(t, err, store.ErrInvalidArgument, c.name)
		}
		b.requireNoStream(s)
	})

	t.Run("concurrent appends and leases stay dense", func(t *testing.T) {
		b := setup(t, newStore)
		s := b.name("")
		const workers, rounds = 4, 5
		var wg sync.WaitGroup
		errs := make(chan error, 2*workers*rounds)
		for w := range workers {
			wg.Go(func() {
				for i := range rounds {
					if _, err := b.appender().Append(b.ctx, s, appendReqs(s, 1+(w+i)%3), nil); err != nil {
						errs <- err
					}
					es, err := b.s.Lease(b.ctx, s, []store.LeaseRequest{req(time.Minute, "l")}, nil)
					if err != nil {
						errs <- err
						continue
					}
					if _, err := b.s.Commit(b.ctx, s, es[0].Number, es[0].Token, nil); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		all := b.readAll(s)
		for i, e := range all {
			require.Equal(t, int64(i+1), e.Number, "dense")
			require.Equal(t, store.Committed, e.State)
		}
		require.Equal(t, int64(len(all)), b.stats(s).Watermark)
	})
}
