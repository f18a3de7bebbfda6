package lease

import "sync"

// holdings are the leases a Manager holds. By name it keeps the latest
// lease of each name: the one a backend notice or ForceRelease concerns.
// Apart from that it keeps every live lease, which Stop releases: a lease
// is live from its grant until it is over and settled (a lease over whose
// backend holding may outlive it stays live until released, see
// Lease.settleLocked).
type holdings struct {
	mu     sync.Mutex
	byName map[string]*Lease
	live   map[*Lease]struct{}
}

func newHoldings() *holdings {
	return &holdings{byName: map[string]*Lease{}, live: map[*Lease]struct{}{}}
}

// add records l, unless it is over already.
func (h *holdings) add(l *Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l.Err() == nil {
		h.byName[l.name] = l
		h.live[l] = struct{}{}
	}
}

// drop removes l, which is over, as the latest lease of its name, and
// reports whether it was; l stays live until retire.
func (h *holdings) drop(l *Lease) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byName[l.name] != l {
		return false
	}
	delete(h.byName, l.name)
	return true
}

// retire removes l, over and settled, from the live leases: Stop no longer
// releases it.
func (h *holdings) retire(l *Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.live, l)
}

// has reports whether a live lease is the holding of name with fence.
func (h *holdings) has(name string, fence int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for l := range h.live {
		if l.name == name && l.fence == fence {
			return true
		}
	}
	return false
}

// get returns the latest lease of name; nil if this Manager holds none.
func (h *holdings) get(name string) *Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byName[name]
}

// latest returns the latest lease of every name.
func (h *holdings) latest() []*Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Lease, 0, len(h.byName))
	for _, l := range h.byName {
		out = append(out, l)
	}
	return out
}

// allLive returns every live lease.
func (h *holdings) allLive() []*Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Lease, 0, len(h.live))
	for l := range h.live {
		out = append(out, l)
	}
	return out
}
