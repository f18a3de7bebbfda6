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
// The dropped entries are cleared, so their payloads can be collected at
// once. When the prefix is at least as long as what remains, the rest is
// copied to a new slice so the old backing array goes too; otherwise the
// ledger is re-sliced and the next growth of the slice by Lease lets the
// prefix go. The copy costs no more than what it frees, so it is amortised
// O(1) per trimmed entry.
func (s *Store) Trim(ctx context.Context, name string, below int64) (int64, error) {
	if err := store.ValidateTrim(name, below); err != nil {
		return 0, fmt.Errorf("trim: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("trim: %w", err)
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
	cut := int(bound - st.low)
	clear(st.entries[:cut])
	if rest := st.entries[cut:]; cut >= len(rest) {
		st.entries = append(make([]store.Entry, 0, len(rest)), rest...)
	} else {
		st.entries = rest
	}
	st.low = bound
	return st.low, nil
}
