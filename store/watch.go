package store

// Snapshot is what a backend knows of a stream's resolution at one instant:
// the barrier's starting point.
type Snapshot struct {
	// Watermark is the largest w such that 1..w are all resolved.
	Watermark int64
	// Known is the highest number whose state the snapshot describes: every
	// number in (Watermark, Known] is resolved unless listed in Unresolved.
	// It is the stream's last number, or less when Unresolved was cut at the
	// requested limit.
	Known int64
	// Unresolved lists the leased numbers in (Watermark, Known], ascending.
	Unresolved []int64
}

// Sink receives the resolutions a backend observes (Watch). Its methods must
// not block: they may be called with backend locks held.
type Sink interface {
	// Resolved reports that number of stream is resolved (committed or gap).
	// It may be reported more than once.
	Resolved(stream string, number int64)
	// ResolvedThrough reports that every number of stream up to through
	// is resolved (an ordered commit of through succeeded).
	ResolvedThrough(stream string, through int64)
	// Reset reports that resolutions may have been missed (at the start of
	// watching, and after a reconnect): the receiver must re-read the truth
	// with Snapshot before relying on what it was told.
	Reset()
}

// Forgetter is implemented by a Sink that keeps what it learnt of each
// stream (the barrier). A backend calls Forget when the history of stream
// was accepted as the database has it now, below what it reported before
// (store/postgres: AcceptHistory after store.ErrHistoryLost): the receiver
// must drop what it knows of stream, its watermark too, and read it afresh
// with Snapshot. Forget must not block.
type Forgetter interface {
	// Forget drops what the receiver knows of stream.
	Forget(stream string)
}

// Poller is implemented by a Sink or LeaseSink that has a cheaper way than
// Reset to re-check what a notice would have told it. A backend whose
// watch cannot hear the other processes (store/postgres: a LISTEN that
// failed its self-check, as through a transaction-mode pooler) calls Poll
// every few tens of milliseconds until it hears again, and Reset when the
// sink is not a Poller. Poll must not block.
type Poller interface {
	// Poll asks the receiver to re-check, soon, what it waits for.
	Poll()
}
