package cleanup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/store"
)

// Elector makes sure one cleaner at a time cleans a stream, so that the
// tracker calls and hooks of an expired lease run once and cleaners do not
// race each other through a stream.
type Elector interface {
	// Lead tries to become the cleaner of stream. ok is false, at once,
	// when another cleaner leads it.
	Lead(ctx context.Context, stream string) (l Leadership, ok bool, err error)
}

// Leadership is the right to clean one stream.
type Leadership interface {
	// Context ends when the leadership is lost; the walk of the stream
	// stops at once.
	Context() context.Context
	// Release gives the leadership up. It is safe after the leadership was
	// lost, and twice.
	Release(ctx context.Context) error
}

// LeasePrefix starts the name of every stream lease of a LeaseElector.
const LeasePrefix = "seqlease/cleanup/"

// DefaultLeaseTTL is the TTL of the stream leases of the default
// LeaseElector (Config.LeaseTTL).
const DefaultLeaseTTL = 15 * time.Second

// LeaseName returns the named lease that elects the cleaner of stream:
// LeasePrefix + stream, or, when that is longer than a lease name may be
// (store.MaxNameLen), LeasePrefix + the stream's first bytes + "~" + 16 hex
// digits of its SHA-256, which is stable and tells long names apart.
func LeaseName(stream string) string {
	name := LeasePrefix + stream
	if len(name) <= store.MaxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(stream))
	suffix := "~" + hex.EncodeToString(sum[:8])
	keep := store.MaxNameLen - len(LeasePrefix) - len(suffix)
	for keep > 0 && !utf8.RuneStart(stream[keep]) {
		keep-- // cut on a character boundary
	}
	return LeasePrefix + stream[:keep] + suffix
}

// LeaseElector elects cleaners across processes with named leases (package
// lease) on the shared store: the cleaner of a stream holds the lease
// LeaseName(stream), kept alive while it walks the stream and released when
// the walk ends. It is the default of a Service whose store has named leases
// (both backends do).
type LeaseElector struct {
	m   *lease.Manager
	ttl time.Duration
}

// NewLeaseElector returns a LeaseElector whose leases m acquires with ttl
// (0: DefaultLeaseTTL). A cleaner that dies mid-walk holds its streams for
// at most ttl.
func NewLeaseElector(m *lease.Manager, ttl time.Duration) (*LeaseElector, error) {
	if m == nil {
		return nil, errors.New("cleanup: nil lease.Manager")
	}
	if ttl < 0 {
		return nil, errors.New("cleanup: negative lease TTL")
	}
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	return &LeaseElector{m: m, ttl: ttl}, nil
}

// Lead implements Elector: a try-acquire of LeaseName(stream), with the
// keep-alive started.
func (e *LeaseElector) Lead(ctx context.Context, stream string) (Leadership, bool, error) {
	l, err := e.m.TryAcquire(ctx, LeaseName(stream), &lease.AcquireOpts{TTL: e.ttl, KeepAlive: true, Kind: "cleanup"})
	switch {
	case errors.Is(err, lease.ErrHeld):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return leaseLeadership{l}, true, nil
}

type leaseLeadership struct{ l *lease.Lease }

func (x leaseLeadership) Context() context.Context          { return x.l.Context() }
func (x leaseLeadership) Release(ctx context.Context) error { return x.l.Close(ctx) }

// LocalElector elects cleaners within one process only: right when a
// single process runs cleanup, or for a store without named leases.
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
