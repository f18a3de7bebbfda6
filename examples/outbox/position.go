package main

import (
	"context"
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
// own record of what it stored is the checkpoint, and nothing else needs
// writing (Save does nothing). It is exact: a relay that died between the
// publish and its ack finds the message if JetStream stored it, and
// publishes it if not, so no message is published twice whatever the
// duplicate window. The cost is one request to JetStream when a relay takes
// a stream, and it needs the subject's history to be kept (no retention
// policy that drops the subject's last message before the next is relayed).
//
// A checkpoint kept next to the entries (in the seqlease database, in the
// relay's own transaction) would do as well: Load reads it, Save writes it
// after each ack. Such a checkpoint can lag the broker by the messages
// acked but not yet saved when a relay dies; those are published again when
// the next relay resumes, and JetStream drops them as duplicates as long as
// they are within its duplicate window (docs/outbox.md).
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
