package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Info is a holding as the backend saw it (store.NamedLease): Held reports
// whether it was live at AsOf, by the backend's clock.
type Info = store.NamedLease

// HistoryEvent is a record of the audit history (store.LeaseEvent).
type HistoryEvent = store.LeaseEvent

// Get returns the current or last holding of name; ErrLeaseNotFound if the
// name was never acquired.
func (m *Manager) Get(ctx context.Context, name string) (Info, error) {
	l, err := m.store.GetLease(ctx, name, nil)
	if err != nil {
		return Info{}, fmt.Errorf("lease: get %s: %w", store.QuoteInput(name), err)
	}
	return l, nil
}

// IsHeld reports whether someone holds name now, by the backend's clock.
func (m *Manager) IsHeld(ctx context.Context, name string) (bool, error) {
	_, held, err := m.HeldBy(ctx, name)
	return held, err
}

// HeldBy returns the owner that holds name now, by the backend's clock;
// held is false when nobody does.
func (m *Manager) HeldBy(ctx context.Context, name string) (owner string, held bool, err error) {
	l, err := m.store.GetLease(ctx, name, nil)
	switch {
	case errors.Is(err, ErrLeaseNotFound):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("lease: held by %s: %w", store.QuoteInput(name), err)
	case !l.Held():
		return "", false, nil
	}
	return l.Owner, true, nil
}

// ListByOwner returns every live holding of owner, by name. It pages
// through the backend (store.MaxListLimit holdings per statement), so the
// list is complete however many there are, but not one snapshot: a holding
// that starts or ends while it pages may or may not be in it.
func (m *Manager) ListByOwner(ctx context.Context, owner string) ([]Info, error) {
	if owner == "" {
		return nil, fmt.Errorf("lease: list by owner: %w: empty", store.ErrInvalidOwner)
	}
	ls, err := m.listAll(ctx, &store.ListLeasesParams{Owner: owner})
	if err != nil {
		return nil, fmt.Errorf("lease: list by owner %s: %w", store.QuoteInput(owner), err)
	}
	return ls, nil
}

// ListLongHeld returns every live holding acquired at least olderThan ago
// by the backend's clock, renewals notwithstanding, by name: a holder stuck
// in a renewal loop shows here before it hurts. It pages like ListByOwner.
// The metrics package's long-held gauge counts this process's own such
// holdings without a query.
func (m *Manager) ListLongHeld(ctx context.Context, olderThan time.Duration) ([]Info, error) {
	if olderThan <= 0 {
		return nil, fmt.Errorf("lease: list long held: %w: %v is not positive", store.ErrInvalidTTL, olderThan)
	}
	ls, err := m.listAll(ctx, &store.ListLeasesParams{HeldFor: olderThan})
	if err != nil {
		return nil, fmt.Errorf("lease: list long held: %w", err)
	}
	return ls, nil
}

// listAll pages through ListLeases with p.
func (m *Manager) listAll(ctx context.Context, p *store.ListLeasesParams) ([]Info, error) {
	page := *p
	page.Limit = m.listPage
	var out []Info
	for {
		ls, err := m.store.ListLeases(ctx, &page)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
		if len(ls) < page.Limit {
			return out, nil
		}
		page.AfterName = ls[len(ls)-1].Name
	}
}

// History returns the audit events of name (of every name if empty) after
// the event afterID, in order, at most limit (0: store.DefaultListLimit).
func (m *Manager) History(ctx context.Context, name string, afterID int64, limit int) ([]HistoryEvent, error) {
	es, err := m.store.LeaseHistory(ctx, name, &store.LeaseHistoryParams{AfterID: afterID, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("lease: history %s: %w", store.QuoteInput(name), err)
	}
	return es, nil
}

// ForceReleaseParams are the options of ForceRelease. A nil pointer means
// none.
type ForceReleaseParams struct {
	// Actor is the operator who force-releases, recorded in the history of
	// each lease it ends (HistoryEvent.Actor): at most store.MaxNameLen
	// bytes of text without control characters. Empty: none, unless Reason
	// is set, which needs an Actor.
	Actor string
	// Reason is why, recorded with Actor (HistoryEvent.Comment): at most
	// store.MaxTextLen bytes of text without control characters.
	Reason string
}

// ForceRelease ends every live lease of owner (a crashed agent's) and
// returns them, recording p's Actor and Reason in their history. Waiters
// everywhere are woken; the holder's own Leases end with ErrForceReleased
// at once in this process, and in another at its next renewal (at once if
// it runs a keep-alive and hears the backend's notice). A bad Actor or
// Reason matches store.ErrInvalidArgument and ends nothing.
func (m *Manager) ForceRelease(ctx context.Context, owner string, p *ForceReleaseParams) ([]Info, error) {
	if p == nil {
		p = &ForceReleaseParams{}
	}
	ls, err := m.store.ForceReleaseLeases(ctx, owner, &store.LeaseOpParams{NoHistory: m.conf().DisableHistory, Actor: p.Actor, Reason: p.Reason})
	if err != nil {
		return nil, fmt.Errorf("lease: force release %s: %w", store.QuoteInput(owner), err)
	}
	for _, info := range ls {
		if l := m.holdings.get(info.Name); l != nil && l.fence == info.Fence && l.owner == info.Owner {
			l.end(fmt.Errorf("%w: %s", ErrForceReleased, store.QuoteInput(l.name)))
		}
		m.queues.wakeHead(info.Name)
	}
	return ls, nil
}
