package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// inbox holds the inbox records of a Store: per consumer, the receive time
// of each message id. One mutex guards them all; a record costs a map
// insert under it. PurgeReceived reads every record of the consumers it
// purges (O(records) per call): retention is an occasional job here, and
// nothing survives the process anyway.
type inbox struct {
	mu        sync.Mutex
	consumers map[string]map[string]time.Time // consumer -> message id -> received at
}

// MarkReceived implements the inbox contract's MarkReceived. It decides at
// once: there are no transactions to wait for in memory.
func (s *Store) MarkReceived(ctx context.Context, consumer, messageID string, p *store.ReceiveParams) (bool, error) {
	if err := store.ValidateReceive(consumer, messageID); err != nil {
		return false, fmt.Errorf("mark received: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("mark received: %w", store.NotSent(err))
	}
	var now *time.Time
	if p != nil {
		now = p.Now
	}
	at := s.clock(now)
	in := &s.inbox
	in.mu.Lock()
	defer in.mu.Unlock()
	ids := in.consumers[consumer]
	if ids == nil {
		if in.consumers == nil {
			in.consumers = make(map[string]map[string]time.Time)
		}
		ids = make(map[string]time.Time)
		in.consumers[consumer] = ids
	}
	if _, dup := ids[messageID]; dup {
		return false, nil
	}
	ids[messageID] = at
	return true, nil
}

// Received implements the inbox contract's Received.
func (s *Store) Received(ctx context.Context, consumer, messageID string) (time.Time, bool, error) {
	if err := store.ValidateReceive(consumer, messageID); err != nil {
		return time.Time{}, false, fmt.Errorf("received: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, fmt.Errorf("received: %w", store.NotSent(err))
	}
	s.inbox.mu.Lock()
	defer s.inbox.mu.Unlock()
	at, ok := s.inbox.consumers[consumer][messageID]
	return at, ok, nil
}

// CountReceived implements the inbox contract's CountReceived.
func (s *Store) CountReceived(ctx context.Context, consumer string) (int64, error) {
	if consumer != "" {
		if err := store.ValidateConsumer(consumer); err != nil {
			return 0, fmt.Errorf("count received: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("count received: %w", store.NotSent(err))
	}
	s.inbox.mu.Lock()
	defer s.inbox.mu.Unlock()
	if consumer != "" {
		return int64(len(s.inbox.consumers[consumer])), nil
	}
	var n int64
	for _, ids := range s.inbox.consumers {
		n += int64(len(ids))
	}
	return n, nil
}

// PurgeReceived implements the inbox contract's PurgeReceived: under the
// mutex it collects the records below the cutoff, sorts them by receive
// time and deletes the oldest, up to the limit.
func (s *Store) PurgeReceived(ctx context.Context, p *store.PurgeReceivedParams) (int64, error) {
	limit, err := store.ValidatePurgeReceived(p)
	if err != nil {
		return 0, fmt.Errorf("purge received: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("purge received: %w", store.NotSent(err))
	}
	var now *time.Time
	if p != nil {
		now = p.Now
	}
	cutoff := store.PurgeCutoff(p, s.clock(now))
	type rec struct {
		consumer, id string
		at           time.Time
	}
	in := &s.inbox
	in.mu.Lock()
	defer in.mu.Unlock()
	var old []rec
	for consumer, ids := range in.consumers {
		if p != nil && p.Consumer != "" && consumer != p.Consumer {
			continue
		}
		for id, at := range ids {
			if at.Before(cutoff) {
				old = append(old, rec{consumer, id, at})
			}
		}
	}
	slices.SortFunc(old, func(a, b rec) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.consumer, b.consumer), cmp.Compare(a.id, b.id))
	})
	old = old[:min(len(old), limit)]
	for _, r := range old {
		ids := in.consumers[r.consumer]
		delete(ids, r.id)
		if len(ids) == 0 {
			delete(in.consumers, r.consumer)
		}
	}
	return int64(len(old)), nil
}
