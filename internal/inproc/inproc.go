// Package inproc connects the sequence Leaser to a store that answers in
// process (store/memory) through calls the storage contract does not have:
// leasing and committing one number with nothing to allocate for the call.
//
// The store registers, when its package is loaded, a function that returns
// these calls for a value of exactly its own type. So a type that embeds
// the store, to wrap some of its calls, is not recognised, and the Leaser
// goes through the wrapper's Lease and Commit as it should; an exported
// method on the store would have been promoted to such a wrapper, and the
// Leaser would have bypassed it.
package inproc

import (
	"context"
	"sync"
	"time"

	"github.com/seqlease/seqlease/store"
)

// OneStore leases and commits one number.
type OneStore interface {
	// LeaseOne does what Lease with the one request req does, and
	// returns the entry by value.
	LeaseOne(ctx context.Context, stream string, req store.LeaseRequest, p *store.LeaseParams) (store.Entry, error)
	// CommitOne does what Commit with CommitParams{Payload: payload,
	// Ordered: ordered} does.
	CommitOne(ctx context.Context, stream string, number int64, token store.Token, payload []byte, ordered bool) (time.Time, error)
}

var (
	mu    sync.RWMutex
	finds []func(s any) OneStore
)

// Register adds find, which returns the calls for one number of s if s is
// a store it knows, else nil. Stores call it from init.
func Register(find func(s any) OneStore) {
	mu.Lock()
	defer mu.Unlock()
	finds = append(finds, find)
}

// One returns the calls for one number of s, nil if s has none.
func One(s any) OneStore {
	mu.RLock()
	defer mu.RUnlock()
	for _, find := range finds {
		if one := find(s); one != nil {
			return one
		}
	}
	return nil
}
