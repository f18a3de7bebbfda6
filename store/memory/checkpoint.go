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

// checkpoints are the saved reader positions, under one mutex: saves are
// rare next to leases and commits (a reader saves once per batch it
// processed), and a listing sees them all at one instant.
type checkpoints struct {
	mu   sync.Mutex
	byID map[checkpointKey]checkpoint
}

type checkpointKey struct{ reader, stream string }

type checkpoint struct {
	position  int64
	updatedAt time.Time
}

// watermark returns the watermark of stream name, 0 if it does not exist.
// A watermark only grows, so a value read before a decision stays a true
// lower bound while the decision is made.
func (s *Store) watermark(name string) int64 {
	st := s.lookup(name)
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.firstUnresolved - 1
}

// Checkpoint returns the position reader saved for stream, 0 if none.
func (s *Store) Checkpoint(ctx context.Context, reader, stream string) (int64, error) {
	if err := store.ValidateCheckpointKey(reader, stream); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", store.NotSent(err))
	}
	s.ckpt.mu.Lock()
	defer s.ckpt.mu.Unlock()
	return s.ckpt.byID[checkpointKey{reader, stream}].position, nil
}

// SaveCheckpoint sets reader's position in stream: forward only, never past
// the watermark; saving the saved position again is a no-op success.
func (s *Store) SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error {
	if err := store.ValidateSaveCheckpoint(reader, stream, position); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("save checkpoint: %w", store.NotSent(err))
	}
	var now *time.Time
	if p != nil {
		now = p.Now
	}
	w := s.watermark(stream)
	key := checkpointKey{reader, stream}
	s.ckpt.mu.Lock()
	defer s.ckpt.mu.Unlock()
	cur, exists := s.ckpt.byID[key]
	write, err := store.SaveDecision(reader, stream, position, cur.position, exists, w)
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if write {
		if s.ckpt.byID == nil {
			s.ckpt.byID = map[checkpointKey]checkpoint{}
		}
		s.ckpt.byID[key] = checkpoint{position: position, updatedAt: s.clock(now)}
	}
	return nil
}

// DeleteCheckpoint removes reader's checkpoint of stream;
// store.ErrCheckpointNotFound if it has none.
func (s *Store) DeleteCheckpoint(ctx context.Context, reader, stream string) error {
	if err := store.ValidateCheckpointKey(reader, stream); err != nil {
		return fmt.Errorf("delete checkpoint: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete checkpoint: %w", store.NotSent(err))
	}
	key := checkpointKey{reader, stream}
	s.ckpt.mu.Lock()
	defer s.ckpt.mu.Unlock()
	if _, ok := s.ckpt.byID[key]; !ok {
		return fmt.Errorf("delete checkpoint: %w: reader %s, stream %s", store.ErrCheckpointNotFound, store.QuoteInput(reader), store.QuoteInput(stream))
	}
	delete(s.ckpt.byID, key)
	return nil
}

// ListCheckpoints returns the checkpoints p selects in (reader, stream)
// order, each with its stream's watermark.
func (s *Store) ListCheckpoints(ctx context.Context, p *store.ListCheckpointsParams) ([]store.Checkpoint, error) {
	limit, err := store.ValidateListCheckpoints(p)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", store.NotSent(err))
	}
	if p == nil {
		p = &store.ListCheckpointsParams{}
	}
	after := checkpointKey{p.AfterReader, p.AfterStream}
	s.ckpt.mu.Lock()
	var out []store.Checkpoint
	for k, c := range s.ckpt.byID {
		if (p.Reader != "" && k.reader != p.Reader) || (p.Stream != "" && k.stream != p.Stream) ||
			compareKeys(k, after) <= 0 {
			continue
		}
		out = append(out, store.Checkpoint{Reader: k.reader, Stream: k.stream, Position: c.position, UpdatedAt: c.updatedAt})
	}
	s.ckpt.mu.Unlock()
	slices.SortFunc(out, func(a, b store.Checkpoint) int {
		return compareKeys(checkpointKey{a.Reader, a.Stream}, checkpointKey{b.Reader, b.Stream})
	})
	if len(out) > limit {
		out = out[:limit]
	}
	for i := range out {
		out[i].Watermark = s.watermark(out[i].Stream)
	}
	return out, nil
}

func compareKeys(a, b checkpointKey) int {
	return cmp.Or(cmp.Compare(a.reader, b.reader), cmp.Compare(a.stream, b.stream))
}
