package cleanup

import (
	"context"
	"sync"
)

// Elector makes sure one process at a time cleans a stream, so recovered
// work gets new numbers in the order of the originals.
type Elector interface {
	// Lead tries to become the cleaner of stream. ok is false, at once,
	// when another cleaner leads it.
	Lead(ctx context.Context, stream string) (l Leadership, ok bool, err error)
}

// Leadership is the right to clean one stream.
type Leadership interface {
	// Context ends when the leadership is lost.
	Context() context.Context
	// Release gives the leadership up.
	Release(ctx context.Context) error
}

// LocalElector elects cleaners within one process only: right when a single
// process runs cleanup, and the default.
type LocalElector struct {
	mu   sync.Mutex
	held map[string]bool
}

// NewLocalElector returns an empty LocalElector.
func NewLocalElector() *LocalElector { return &LocalElector{held: map[string]bool{}} }

// Lead implements Elector.
func (e *LocalElector) Lead(_ context.Context, stream string) (Leadership, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held[stream] {
		return nil, false, nil
	}
	e.held[stream] = true
	return &localLeadership{e: e, stream: stream}, true, nil
}

type localLeadership struct {
	e      *LocalElector
	stream string
	once   sync.Once
}

func (l *localLeadership) Context() context.Context { return context.Background() }

func (l *localLeadership) Release(context.Context) error {
	l.once.Do(func() {
		l.e.mu.Lock()
		delete(l.e.held, l.stream)
		l.e.mu.Unlock()
	})
	return nil
}
