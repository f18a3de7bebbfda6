package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqlease/seqlease/store"
)

// position is where the relay of a stream resumes when it takes the
// stream's lease: the number of the last entry that reached the broker (0:
// none). Save records that n reached it; the relay calls it after each
// publish was acked. It is one small seam on purpose: where a relay keeps
// its position is a choice, and the relay does not care which.
type position interface {
	Load(ctx context.Context, r route) (int64, error)
	Save(ctx context.Context, r route, n int64) error
}

// brokerPosition asks JetStream itself: the last message on the stream's
// subject carries its entry's number in its Nats-Msg-Id, so the broker's
// own record of what it stored is the position, and nothing else needs
// writing (Save does nothing). It is exact: a relay that died between the
// publish and its ack finds the message if JetStream stored it, and
// publishes it if not, so no message is published twice whatever the
// duplicate window. And it is what the broker fence needs anyway: the
// relay's next publish expects the subject's last message, which only
// JetStream knows. The cost is one request to JetStream when a relay takes
// a stream, and it needs the subject's history to be kept (no retention
// policy that drops the subject's last message before the next is relayed).
//
// A position kept next to the entries (the seqlease reader checkpoint, in
// the relay's own transaction) could not replace it: it lags the broker by
// the messages acked but not yet saved when a relay dies, which are then
// published again and dropped by JetStream only within its duplicate
// window; and if the broker loses its tail (a single-replica stream after a
// power loss), it is ahead of the broker, and a relay resuming from it
// would never publish the lost messages. So the relays resume from
// JetStream, and keep the seqlease checkpoint only as a report
// (checkpointer, below).
type brokerPosition struct{ b *broker }

// Load returns the number in the Nats-Msg-Id of the subject's last message.
func (p brokerPosition) Load(ctx context.Context, r route) (int64, error) {
	_, id, err := p.b.last(ctx, r.subject)
	if err != nil || id == "" {
		return 0, err
	}
	return parseMsgID(r.stream, id)
}

// Save does nothing: the acked message is the record.
func (brokerPosition) Save(context.Context, route, int64) error { return nil }

// relayReader is the reader name of the relays' seqlease checkpoints, one
// per stream: `seqlease readers -reader outbox-relay` lists them with their
// lag, and so does the seqlease.reader.lag metric.
const relayReader = "outbox-relay"

// saveInterval is the least time between two saves of a stream's
// checkpoint: the acks in between are saved together, so a relay that
// publishes a thousand messages a second saves ten times a second.
const saveInterval = 100 * time.Millisecond

// checkpoints is what the relays use of the store's reader checkpoints
// (both backends have them), and ReadResolved, to tell the messages a
// broker lost from gaps the relay skipped.
type checkpoints interface {
	Checkpoint(ctx context.Context, reader, stream string) (int64, error)
	SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error
	DeleteCheckpoint(ctx context.Context, reader, stream string) error
	ReadResolved(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
}

// checkpointer keeps the seqlease checkpoint of one stream's relay (reader
// relayReader) at the position of its last acked publish (or skipped gap),
// so that operators see the relay's lag with the other readers'. It saves
// in the background (one goroutine, which stop waits for), at most once
// every saveInterval, and once more when stopped: the publish path never
// waits for it. The checkpoint is a report, not where the relay resumes
// (see brokerPosition): a failed save is logged and the next one covers
// it, and a save refused because the checkpoint is further already (a
// deposed relay's late save, after the new holder's) is dropped.
type checkpointer struct {
	cp     checkpoints
	rt     route
	logger *slog.Logger
	want   atomic.Int64 // the position to save
	saved  int64        // the checkpoint as saved; the goroutine's, then stop's
	wake   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startCheckpointer aligns the checkpoint of rt with at, the position the
// relay resumes from (JetStream's), and starts the saves. saved is the
// checkpoint as read before at was. It may be ahead of at by skipped gaps,
// which JetStream never sees; ahead by a committed entry, it means that
// the broker lost messages it had acked (the relay publishes them again):
// that is logged at error level, and the checkpoint is set back to at so
// that its lag counts them.
func startCheckpointer(ctx context.Context, cp checkpoints, rt route, saved, at int64, logger *slog.Logger) (*checkpointer, error) {
	c := &checkpointer{cp: cp, rt: rt, logger: logger, saved: saved, wake: make(chan struct{}, 1)}
	if saved > at {
		lost, err := committedBetween(ctx, cp, rt.stream, at, saved)
		if err != nil {
			return nil, err
		}
		if lost > 0 {
			logger.ErrorContext(ctx, "outbox: the relay's checkpoint is ahead of JetStream: the broker lost acked messages; resuming from JetStream, publishing them again",
				slog.String("stream", rt.stream), slog.String("subject", rt.subject),
				slog.Int64("checkpoint", saved), slog.Int64("jetstream", at), slog.Int64("lost", lost))
			if err := cp.DeleteCheckpoint(ctx, relayReader, rt.stream); err != nil && !errors.Is(err, store.ErrCheckpointNotFound) {
				return nil, err
			}
			c.saved = 0
		}
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.advance(at)
	c.wg.Go(func() { c.loop(ctx) })
	return c, nil
}

// committedBetween counts the committed entries of stream in (after, upTo].
func committedBetween(ctx context.Context, cp checkpoints, stream string, after, upTo int64) (int64, error) {
	var n int64
	for after < upTo {
		es, err := cp.ReadResolved(ctx, stream, after, int(min(upTo-after, store.MaxListLimit)))
		if err != nil {
			return 0, err
		}
		if len(es) == 0 {
			break // unresolved: the checkpoint cannot be there (the store refuses that)
		}
		for _, e := range es {
			if e.Number <= upTo && e.State == store.Committed {
				n++
			}
			after = e.Number
		}
	}
	return n, nil
}

// advance records that every entry up to n was published or skipped.
func (c *checkpointer) advance(n int64) {
	c.want.Store(n)
	select {
	case c.wake <- struct{}{}:
	default: // woken already
	}
}

// loop saves what advance recorded, until ctx ends.
func (c *checkpointer) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		c.save(ctx)
		if !sleep(ctx, saveInterval) {
			return
		}
	}
}

// save saves the position advance recorded, if it moved.
func (c *checkpointer) save(ctx context.Context) {
	n := c.want.Load()
	if n <= c.saved {
		return
	}
	err := c.cp.SaveCheckpoint(ctx, relayReader, c.rt.stream, n, nil)
	switch {
	case err == nil:
		c.saved = n
	case errors.Is(err, store.ErrCheckpointBackwards):
		c.saved = n // someone saved further: nothing to report
	case ctx.Err() == nil:
		c.logger.WarnContext(ctx, "outbox: save the relay's checkpoint failed; the next save covers it",
			slog.String("stream", c.rt.stream), slog.Int64("position", n), slog.Any("error", err))
	}
}

// stop ends the saves and saves the last position once more, even if the
// relay's context ended (within saveTimeout).
func (c *checkpointer) stop(ctx context.Context) {
	c.cancel()
	c.wg.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	c.save(sctx)
}

// saveTimeout bounds the last save of a checkpointer.
const saveTimeout = 5 * time.Second
