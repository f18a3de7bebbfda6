package codec_test

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/codec"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/seqleasetest"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestMain checks for leaked goroutines after the tests (goleak) and closes
// the shared PostgreSQL pools.
func TestMain(m *testing.M) { pgtest.Main(m) }

type order struct {
	ID    string  `json:"id"`
	Total float64 `json:"total"`
}

// stacks are the backends every test runs on: memory and PostgreSQL.
func stacks() map[string]func(t *testing.T) *seqleasetest.Stack {
	return map[string]func(t *testing.T) *seqleasetest.Stack{
		"memory": func(t *testing.T) *seqleasetest.Stack { return seqleasetest.Setup(t, nil) },
		"postgres": func(t *testing.T) *seqleasetest.Stack {
			pool := pgtest.Shared(t, false)
			st, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
			require.NoError(t, err)
			return seqleasetest.Setup(t, &seqleasetest.Config{Store: st})
		},
	}
}

func lease(t *testing.T, st *seqleasetest.Stack, stream string, n int) []*sequence.Lease {
	t.Helper()
	xs, err := st.Leaser.LeaseN(t.Context(), stream, n, &sequence.LeaseOpts{TTL: time.Hour})
	require.NoError(t, err)
	return xs
}

// TestRoundTrip: values committed (ordered and not) read back decoded, in
// order, with their entries' metadata; the raw payload is the JSON.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for name, newStack := range stacks() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := newStack(t)
			orders := codec.New[order](nil)
			xs := lease(t, st, "orders", 3)
			require.NoError(t, orders.Complete(ctx, xs[2], order{ID: "o-3", Total: 3.5}))
			require.NoError(t, orders.Commit(ctx, xs[0], order{ID: "o-1", Total: 1}))
			require.NoError(t, xs[1].Release(ctx))
			st.RequireCommitted(t, "orders", 1, []byte(`{"id":"o-1","total":1}`))

			var got []codec.Entry[order]
			for e, err := range orders.Entries(ctx, st.Barrier, "orders", &barrier.ReadOpts{IncludeGaps: true}) {
				require.NoError(t, err)
				got = append(got, e)
			}
			require.Len(t, got, 3)
			require.Equal(t, order{ID: "o-1", Total: 1}, got[0].Value)
			require.Equal(t, store.Committed, got[0].State)
			require.Equal(t, int64(2), got[1].Number)
			require.Equal(t, store.Gap, got[1].State)
			require.Zero(t, got[1].Value, "a gap has no value")
			require.Equal(t, order{ID: "o-3", Total: 3.5}, got[2].Value)

			var zero codec.Typed[order] // the zero value is JSON too
			e, err := zero.Decode(got[2].Entry)
			require.NoError(t, err)
			require.Equal(t, order{ID: "o-3", Total: 3.5}, e.Value)
		})
	}
}

// TestEncodeError: a value that cannot be encoded fails with an
// *EncodeError matching store.ErrInvalidArgument and ErrEncode, unwrapping
// to the codec's error, and writes nothing: the lease is still held and
// commits a good value afterwards.
func TestEncodeError(t *testing.T) {
	t.Parallel()
	for name, newStack := range stacks() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := newStack(t)
			orders := codec.New[order](nil)
			xs := lease(t, st, "orders", 2)
			for _, err := range []error{
				orders.Commit(ctx, xs[0], order{ID: "nan", Total: math.NaN()}),
				orders.Complete(ctx, xs[1], order{ID: "inf", Total: math.Inf(1)}),
			} {
				require.ErrorIs(t, err, store.ErrInvalidArgument)
				require.ErrorIs(t, err, sequence.ErrInvalidArgument)
				require.ErrorIs(t, err, codec.ErrEncode)
				require.NotErrorIs(t, err, codec.ErrDecode)
				var ee *codec.EncodeError
				require.ErrorAs(t, err, &ee)
				require.Equal(t, "orders", ee.Stream)
				var je *json.UnsupportedValueError
				require.ErrorAs(t, err, &je, "the codec's error is wrapped")
			}
			var ee *codec.EncodeError
			require.ErrorAs(t, orders.Commit(ctx, xs[1], order{Total: math.NaN()}), &ee)
			require.Equal(t, int64(2), ee.Number)
			require.Contains(t, ee.Error(), "codec: encode the value of orders/2: ")

			st.RequireWatermark(t, "orders", 0)
			es, err := st.Store.Read(ctx, "orders", 0, 10)
			require.NoError(t, err)
			require.Len(t, es, 2)
			for _, e := range es {
				require.Equal(t, store.Leased, e.State, "nothing was written to %d", e.Number)
				require.Nil(t, e.Payload)
			}
			require.NoError(t, xs[0].Err(), "the lease is still held")
			require.NoError(t, orders.Commit(ctx, xs[0], order{ID: "o-1"}))
			require.NoError(t, orders.Complete(ctx, xs[1], order{ID: "o-2"}))
			st.RequireAllResolved(t, "orders")
		})
	}
}

// TestDecodeError: a payload that cannot be decoded is yielded with a
// *DecodeError naming its stream and number, and the reader goes on to the
// next entry; a caller that breaks stops the reader.
func TestDecodeError(t *testing.T) {
	t.Parallel()
	for name, newStack := range stacks() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := newStack(t)
			orders := codec.New[order](nil)
			xs := lease(t, st, "orders", 3)
			require.NoError(t, orders.Commit(ctx, xs[0], order{ID: "o-1"}))
			require.NoError(t, xs[1].Commit(ctx, []byte("not json"))) // raw, by other code
			require.NoError(t, orders.Commit(ctx, xs[2], order{ID: "o-3"}))

			var numbers []int64
			var decodeErrs []error
			for e, err := range orders.Entries(ctx, st.Barrier, "orders", nil) {
				numbers = append(numbers, e.Number)
				if err != nil {
					decodeErrs = append(decodeErrs, err)
					require.Zero(t, e.Value)
					require.Equal(t, []byte("not json"), e.Payload, "the raw entry comes along")
				}
			}
			require.Equal(t, []int64{1, 2, 3}, numbers, "the reader went on past the bad payload")
			require.Len(t, decodeErrs, 1)
			err := decodeErrs[0]
			var de *codec.DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, "orders", de.Stream)
			require.Equal(t, int64(2), de.Number)
			require.ErrorIs(t, err, codec.ErrDecode)
			require.NotErrorIs(t, err, store.ErrInvalidArgument)
			var se *json.SyntaxError
			require.ErrorAs(t, err, &se)
			require.Contains(t, err.Error(), "codec: decode the payload of orders/2: ")

			seen := 0
			for _, err := range orders.Entries(ctx, st.Barrier, "orders", nil) {
				seen++
				if err != nil {
					break
				}
			}
			require.Equal(t, 2, seen, "break stops the reader")
		})
	}
}

// TestReaderError: an error of the reader ends the iteration and is
// yielded as it is.
func TestReaderError(t *testing.T) {
	t.Parallel()
	st := seqleasetest.Setup(t, nil)
	orders := codec.New[order](nil)
	n := 0
	for _, err := range orders.Entries(t.Context(), st.Barrier, "orders", &barrier.ReadOpts{After: -1}) {
		n++
		require.ErrorIs(t, err, store.ErrInvalidArgument)
	}
	require.Equal(t, 1, n)
}

// decimal is a Codec of its own: ints as decimal text.
type decimal struct{}

func (decimal) Marshal(v int) ([]byte, error) {
	if v < 0 {
		return nil, errors.New("negative")
	}
	return strconv.AppendInt(nil, int64(v), 10), nil
}

func (decimal) Unmarshal(b []byte, v *int) error {
	n, err := strconv.Atoi(string(b))
	*v = n
	return err
}

// TestCustomCodec: a Codec of one's own writes its bytes and reads them
// back; its errors are wrapped like JSON's, and a failed decode leaves a
// zero Value whatever the codec left behind.
func TestCustomCodec(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := seqleasetest.Setup(t, nil)
	counts := codec.New[int](decimal{})
	xs := lease(t, st, "counts", 3)
	require.NoError(t, counts.Commit(ctx, xs[0], 42))
	st.RequireCommitted(t, "counts", 1, []byte("42"))
	err := counts.Commit(ctx, xs[1], -1)
	require.ErrorIs(t, err, codec.ErrEncode)
	require.EqualError(t, errors.Unwrap(err), "negative")
	require.NoError(t, xs[1].Commit(ctx, []byte("7x")))

	e, err := counts.Decode(store.Entry{Stream: "counts", Number: 2, State: store.Committed, Payload: []byte("7x")})
	require.ErrorIs(t, err, codec.ErrDecode)
	require.Zero(t, e.Value)
	e, err = counts.Decode(store.Entry{Stream: "counts", Number: 3, State: store.Leased})
	require.NoError(t, err, "a leased entry has nothing to decode")
	require.Zero(t, e.Value)
}

// TestAppend: values appended read back decoded in order; a value that
// cannot be encoded appends nothing, not even the values before it.
func TestAppend(t *testing.T) {
	t.Parallel()
	for name, newStack := range stacks() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := newStack(t)
			orders := codec.New[order](nil)

			_, err := orders.Append(ctx, st.Leaser, "orders", nil, order{ID: "ok"}, order{ID: "nan", Total: math.NaN()})
			require.ErrorIs(t, err, store.ErrInvalidArgument)
			require.ErrorIs(t, err, codec.ErrEncode)
			var ee *codec.EncodeError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, "orders", ee.Stream)
			require.Equal(t, 1, ee.Index, "the second value failed")

			ns, err := orders.Append(ctx, st.Leaser, "orders", &sequence.AppendOpts{Kind: "order"}, order{ID: "o-1", Total: 1}, order{ID: "o-2", Total: 2})
			require.NoError(t, err)
			require.Equal(t, []int64{1, 2}, ns, "the failed call appended nothing")
			var got []order
			for e, err := range orders.Entries(ctx, st.Barrier, "orders", nil) {
				require.NoError(t, err)
				require.Equal(t, "order", e.Kind)
				got = append(got, e.Value)
			}
			require.Equal(t, []order{{ID: "o-1", Total: 1}, {ID: "o-2", Total: 2}}, got)
		})
	}
}
