package chaos

import (
	"fmt"
	"slices"
	"time"

	"github.com/seqlease/seqlease/store"
)

// CheckLeaseHistory checks invariant I8 on the audit history of named
// leases, which the backend writes in the statement that decides each
// change, by its own clock: per name, in the order of the events, every
// grant has a larger fence than the grants before it, and is made no earlier
// than the end of the holding before it (its release, or its last expiry);
// every renewal renews the current holding before its expiry. A holding of a
// Manager that records no history (lease.Config.DisableHistory) is absent:
// fences may then jump, and the check holds across the gap. It returns one
// line per violation.
func CheckLeaseHistory(events []store.LeaseEvent) []string {
	events = slices.Clone(events)
	slices.SortFunc(events, func(a, b store.LeaseEvent) int { return int(a.ID - b.ID) })
	type holding struct {
		owner   string
		fence   int64
		expires time.Time // the last known expiry
		ended   time.Time // released or force-released; zero if not
	}
	var bad []string
	report := func(e store.LeaseEvent, format string, args ...any) {
		bad = append(bad, fmt.Sprintf("I8: %s: event %d (%s, fence %d, owner %s, at %s): %s",
			e.Name, e.ID, e.Kind, e.Fence, e.Owner, e.At.Format(time.RFC3339Nano), fmt.Sprintf(format, args...)))
	}
	cur := map[string]*holding{}
	for _, e := range events {
		h := cur[e.Name]
		if e.Kind == store.LeaseAcquired {
			if h != nil {
				end := h.expires
				if !h.ended.IsZero() && h.ended.Before(end) {
					end = h.ended
				}
				switch {
				case e.Fence <= h.fence:
					report(e, "fence not above the previous grant's %d", h.fence)
				case e.At.Before(end):
					report(e, "granted while fence %d (%s) held it until %s", h.fence, h.owner, end.Format(time.RFC3339Nano))
				}
			}
			cur[e.Name] = &holding{owner: e.Owner, fence: e.Fence, expires: e.ExpiresAt}
			continue
		}
		if h == nil || e.Fence != h.fence {
			if h != nil && e.Fence > h.fence {
				report(e, "an event of a fence never granted (the current one is %d)", h.fence)
			}
			continue // an older holding's end, recorded late (expired): nothing held
		}
		switch e.Kind {
		case store.LeaseRenewed:
			switch {
			case e.Owner != h.owner:
				report(e, "renewed by another owner than the holder %s", h.owner)
			case !h.ended.IsZero():
				report(e, "renewed after its release at %s", h.ended.Format(time.RFC3339Nano))
			case !e.At.Before(h.expires):
				report(e, "renewed at or after its expiry %s", h.expires.Format(time.RFC3339Nano))
			}
			h.expires = e.ExpiresAt
		case store.LeaseReleased, store.LeaseForceReleased:
			if h.ended.IsZero() {
				h.ended = e.At
			}
		}
	}
	return bad
}
