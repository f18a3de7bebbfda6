package memory

import (
	"context"
	"fmt"

	"github.com/seqlease/seqlease/store"
)

// Trim implements the storage contract's Trim. Under the stream's lock it
// drops the ledger's prefix below min(below, watermark+1) and raises the low
// point to that bound. Every entry of the prefix is resolved: the watermark
// cursor is past it.
//
// The ledger's chunks wholly below the bound go, with their payloads; the
// trimmed entries of the chunk the bound cuts are cleared, and what they
// referred to goes with that chunk (ledger.trim): O(1) per trimmed entry.
func (s *Store) Trim(ctx context.Context, name string, below int64) (int64, error) {
	if err := store.ValidateTrim(name, below); err != nil {
		return 0, fmt.Errorf("trim: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("trim: %w", store.NotSent(err))
	}
	st, err := s.stream(name)
	if err != nil {
		return 0, fmt.Errorf("trim: %w", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	bound := min(below, st.firstUnresolved) // firstUnresolved is watermark+1
	if bound <= st.low {
		return st.low, nil
	}
	st.gaps -= st.trim(bound)
	return st.low, nil
}
