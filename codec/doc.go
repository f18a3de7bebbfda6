// Package codec is an optional typed layer over seqlease's []byte payloads:
// commit a value of T, read a stream's entries decoded to T, without
// marshalling by hand.
//
//	orders := codec.New[Order](nil) // JSON; or a Codec[Order] of your own
//	err := orders.Commit(ctx, lease, Order{ID: "o-1", Total: 42})
//	ns, err := orders.Append(ctx, leaser.InTx(pg.InTx(tx)), "orders", nil, o1, o2) // the outbox write
//	for e, err := range orders.Entries(ctx, b, "orders", nil) {
//		if err != nil { ... }
//		apply(e.Number, e.Value)
//	}
//
// # Design
//
// The layer adds nothing to what is stored: a payload is the Codec's bytes,
// and the untyped API reads it as before, so a stream may be written typed
// and read raw, or the other way round. Typed wraps the existing calls
// (Lease.Commit, Lease.Complete, Leaser.Append, barrier.Barrier.Entries) rather than
// extending them, because Go methods cannot take type parameters: one
// Typed[T] per payload type, holding its Codec, carries the generic methods.
// Every write goes through one step that encodes before anything is sent,
// so a write of several values (Append) is a loop over that step followed
// by the untyped call: a value that fails appends nothing.
//
// # Errors
//
// A value the Codec cannot encode is bad input: the call fails with an
// *EncodeError, which matches ErrEncode and store.ErrInvalidArgument, and
// nothing is written (the lease is still held; commit another value or
// release it). A committed payload that cannot be decoded (written by
// another version of the code, or raw) is a *DecodeError naming the stream
// and number, matching ErrDecode; both unwrap to the Codec's own error. A
// reader yields such an entry with its error and goes on, so one bad
// payload does not stop a projection unless the caller decides it must.
// Errors of the calls wrapped (an expired lease, a payload over the
// Leaser's limit) are returned as they are.
package codec
