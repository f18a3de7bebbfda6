package codec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/seqlease/seqlease/barrier"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
)

// Codec turns values of T into payloads and back.
type Codec[T any] interface {
	Marshal(v T) ([]byte, error)
	Unmarshal(data []byte, v *T) error
}

// JSON is the default Codec: encoding/json.
type JSON[T any] struct{}

// Marshal returns the JSON encoding of v.
func (JSON[T]) Marshal(v T) ([]byte, error) { return json.Marshal(v) }

// Unmarshal parses the JSON in data into v.
func (JSON[T]) Unmarshal(data []byte, v *T) error { return json.Unmarshal(data, v) }

// Reader yields the resolved entries of a stream in order:
// *barrier.Barrier.
type Reader interface {
	Entries(ctx context.Context, stream string, opts *barrier.ReadOpts) iter.Seq2[store.Entry, error]
}

var _ Reader = (*barrier.Barrier)(nil)

// Entry is an entry of a stream with its payload decoded into Value. The
// embedded store.Entry keeps the number, the state, the metadata and the
// raw Payload.
type Entry[T any] struct {
	store.Entry
	// Value is the decoded payload of a committed entry; the zero value for
	// a gap, or when decoding failed.
	Value T
}

// Errors of this package.
var (
	// ErrEncode is matched by every *EncodeError.
	ErrEncode = errors.New("codec: cannot encode value")
	// ErrDecode is matched by every *DecodeError.
	ErrDecode = errors.New("codec: cannot decode payload")
)

// EncodeError reports a value the Codec could not encode. Nothing was
// written. It matches ErrEncode and store.ErrInvalidArgument (the value is
// bad input), and unwraps to the Codec's error.
type EncodeError struct {
	Stream string
	Number int64 // the number the value was for; 0 in Append
	Index  int   // in Append, the position of the value among those passed
	Err    error // the Codec's error
}

func (e *EncodeError) Error() string {
	return fmt.Sprintf("codec: encode the value of %s/%d: %v", e.Stream, e.Number, e.Err)
}

// Unwrap returns the Codec's error.
func (e *EncodeError) Unwrap() error { return e.Err }

// Is makes an EncodeError match ErrEncode and store.ErrInvalidArgument.
func (e *EncodeError) Is(target error) bool {
	return target == ErrEncode || target == store.ErrInvalidArgument
}

// DecodeError reports a committed payload the Codec could not decode. It
// matches ErrDecode and unwraps to the Codec's error.
type DecodeError struct {
	Stream string
	Number int64
	Err    error // the Codec's error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("codec: decode the payload of %s/%d: %v", e.Stream, e.Number, e.Err)
}

// Unwrap returns the Codec's error.
func (e *DecodeError) Unwrap() error { return e.Err }

// Is makes a DecodeError match ErrDecode.
func (e *DecodeError) Is(target error) bool { return target == ErrDecode }

// Typed commits values of T as payloads and reads them back, through a
// Codec. Its zero value uses JSON; it is safe for concurrent use if its
// Codec is.
type Typed[T any] struct {
	codec Codec[T]
}

// New returns a Typed on c; a nil c means JSON[T].
func New[T any](c Codec[T]) *Typed[T] {
	return &Typed[T]{codec: c}
}

func (t *Typed[T]) c() Codec[T] {
	if t.codec == nil {
		return JSON[T]{}
	}
	return t.codec
}

// encode returns v's payload, or an *EncodeError for stream and number.
// Every write of this package encodes first, so that a value that cannot
// be encoded writes nothing.
func (t *Typed[T]) encode(stream string, number int64, v T) ([]byte, error) {
	b, err := t.c().Marshal(v)
	if err != nil {
		return nil, &EncodeError{Stream: stream, Number: number, Err: err}
	}
	return b, nil
}

// Commit encodes v and commits it as the payload of l (Lease.Commit: it
// waits for every earlier number). A value that cannot be encoded fails
// with an *EncodeError, and l stays as it was.
func (t *Typed[T]) Commit(ctx context.Context, l *sequence.Lease, v T) error {
	b, err := t.encode(l.Stream(), l.Number(), v)
	if err != nil {
		return err
	}
	return l.Commit(ctx, b)
}

// Complete encodes v and commits it as the payload of l without waiting
// for earlier numbers (Lease.Complete). A value that cannot be encoded
// fails with an *EncodeError, and l stays as it was.
func (t *Typed[T]) Complete(ctx context.Context, l *sequence.Lease, v T) error {
	b, err := t.encode(l.Stream(), l.Number(), v)
	if err != nil {
		return err
	}
	return l.Complete(ctx, b)
}

// Appender appends payloads as entries born committed: *sequence.Leaser,
// or the Leaser of an application's transaction (Leaser.InTx).
type Appender interface {
	Append(ctx context.Context, stream string, opts *sequence.AppendOpts, payloads ...[]byte) ([]int64, error)
}

var _ Appender = (*sequence.Leaser)(nil)

// Append encodes vs and appends them to stream through a (Leaser.Append:
// the outbox write), returning their numbers. Every value is encoded before
// anything is written: a value that cannot be encoded fails the call with
// an *EncodeError whose Number is 0 (none was taken) and Index is the
// value's position in vs, and nothing is appended.
func (t *Typed[T]) Append(ctx context.Context, a Appender, stream string, opts *sequence.AppendOpts, vs ...T) ([]int64, error) {
	payloads := make([][]byte, len(vs))
	for i, v := range vs {
		b, err := t.c().Marshal(v)
		if err != nil {
			return nil, &EncodeError{Stream: stream, Index: i, Err: err}
		}
		payloads[i] = b
	}
	return a.Append(ctx, stream, opts, payloads...)
}

// Decode decodes the payload of a committed entry (a filled gap too). A gap
// or a leased entry has no payload to decode: its Value is zero. A payload
// the Codec cannot decode fails with a *DecodeError, and the returned Entry
// still carries e.
func (t *Typed[T]) Decode(e store.Entry) (Entry[T], error) {
	out := Entry[T]{Entry: e}
	if e.State != store.Committed {
		return out, nil
	}
	if err := t.c().Unmarshal(e.Payload, &out.Value); err != nil {
		var zero T
		out.Value = zero // what a failed Unmarshal left there is no value
		return out, &DecodeError{Stream: e.Stream, Number: e.Number, Err: err}
	}
	return out, nil
}

// Entries yields the entries of r's stream (barrier.Barrier.Entries, with
// opts) with their payloads decoded. An entry whose payload cannot be
// decoded is yielded with a *DecodeError and iteration goes on: the caller
// decides whether to stop (break) or to skip it (its Number is set, so a
// checkpoint can move past it). An error of the reader itself ends the
// iteration, as it does there.
func (t *Typed[T]) Entries(ctx context.Context, r Reader, stream string, opts *barrier.ReadOpts) iter.Seq2[Entry[T], error] {
	return func(yield func(Entry[T], error) bool) {
		for e, err := range r.Entries(ctx, stream, opts) {
			if err != nil {
				yield(Entry[T]{}, err)
				return
			}
			if !yield(t.Decode(e)) {
				return
			}
		}
	}
}
