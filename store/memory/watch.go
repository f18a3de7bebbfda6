package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/seqlease/seqlease/store"
)

// CommitBatch commits items in order under one hold of the stream's lock,
// each exactly as Commit would.
func (s *Store) CommitBatch(ctx context.Context, name string, items []store.CommitItem, p *store.CommitBatchParams) ([]store.CommitResult, error) {
	if p == nil {
		p = &store.CommitBatchParams{}
	}
	if err := store.ValidateBatch(name, items); err != nil {
		return nil, fmt.Errorf("commit batch: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("commit batch: %w", store.NotSent(err))
	}
	out := make([]store.CommitResult, len(items))
	st, err := s.stream(name)
	if err != nil {
		for i := range out {
			out[i].Err = fmt.Errorf("commit: %w: number %d", store.ErrNotFound, items[i].Number)
		}
		return out, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.clock(p.Now)
	for i, it := range items {
		e, err := st.entry(it.Number)
		switch {
		case err != nil:
		case e.token != it.Token:
			err = store.ErrTokenMismatch
		default:
			out[i].ResolvedAt, err = s.commitLocked(name, st, e, it.Number, it.Payload, now, p.Ordered)
		}
		if err != nil {
			out[i].Err = fmt.Errorf("commit: %w", err)
		}
	}
	return out, nil
}

// Snapshot implements the barrier's starting point: the watermark and the
// unresolved numbers above it, at most limit of them (0: store.MaxListLimit).
// An unknown stream has an empty snapshot.
func (s *Store) Snapshot(ctx context.Context, name string, limit int) (store.Snapshot, error) {
	if err := store.ValidateStream(name); err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	if limit <= 0 || limit > store.MaxListLimit {
		limit = store.MaxListLimit
	}
	if err := ctx.Err(); err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return store.Snapshot{}, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	snap := store.Snapshot{Watermark: st.firstUnresolved - 1, Known: st.last}
	for n := st.firstUnresolved; n <= st.last; n++ {
		if st.at(n).slot.state == stateLeased {
			snap.Unresolved = append(snap.Unresolved, n)
			if len(snap.Unresolved) == limit { // cut: describe up to here, as PostgreSQL does
				snap.Known = n
				break
			}
		}
	}
	return snap, nil
}

// ReadResolved returns up to limit entries with numbers > after, ascending,
// stopping before the first unresolved one: never past the watermark.
func (s *Store) ReadResolved(ctx context.Context, name string, after int64, limit int) ([]store.Entry, error) {
	limit, err := store.ValidateRead(name, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read resolved: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read resolved: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return nil, fmt.Errorf("read resolved: %w", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if after < st.low-1 { // not after+1 < st.low: after may be math.MaxInt64
		return nil, fmt.Errorf("read resolved: %w", &store.TrimmedError{Stream: name, LowPoint: st.low})
	}
	if after >= st.firstUnresolved-1 { // at or past the watermark
		return nil, nil
	}
	from := after + 1
	to := min(from+int64(limit), st.firstUnresolved) // exclusive
	return st.clone(name, from, to), nil
}

// Watch delivers every resolution to sink until ctx ends, synchronously from
// the resolving call. It calls sink.Reset once, after registering.
func (s *Store) Watch(ctx context.Context, sink store.Sink) error {
	// Registered by a pointer of its own: this Watch finds exactly its
	// registration again, and a sink need not be comparable.
	reg := store.Sink(&registration{sink})
	s.watchMu.Lock()
	sinks := s.loadSinks()
	s.sinks.Store(ptr(append(slices.Clone(sinks), reg)))
	s.watchMu.Unlock()
	sink.Reset()

	<-ctx.Done()

	s.watchMu.Lock()
	sinks = slices.Clone(s.loadSinks())
	if i := slices.Index(sinks, reg); i >= 0 {
		sinks = slices.Delete(sinks, i, i+1)
	}
	s.sinks.Store(&sinks)
	s.watchMu.Unlock()
	return ctx.Err()
}

// registration is one Watch call's entry in the list of sinks.
type registration struct{ store.Sink }

func (s *Store) loadSinks() []store.Sink {
	if p := s.sinks.Load(); p != nil {
		return *p
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// notify tells every watcher that number of stream resolved.
func (s *Store) notify(name string, number int64) {
	for _, sink := range s.loadSinks() {
		sink.Resolved(name, number)
	}
}
