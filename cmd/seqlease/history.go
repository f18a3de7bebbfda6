package main

import (
	"context"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/store"
)

// historyRow is one event of `lease-history`.
type historyRow struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Event     string    `json:"event"` // acquired, renewed, released, expired, force-released
	Owner     string    `json:"owner"`
	Fence     int64     `json:"fence"`
	At        time.Time `json:"at"`         // for expired: the holding's expiry
	ExpiresAt time.Time `json:"expires_at"` // the holding's expiry after the event
	// Reason says why: renewed, released, expired, force-released, lost,
	// max-renewals; empty for acquired.
	Reason string `json:"reason"`
	// Actor and Comment are, for a force-release, who did it and why
	// (force-release -by and -reason); empty otherwise.
	Actor   string `json:"actor"`
	Comment string `json:"comment"`
}

func (c *cli) leaseHistory(ctx context.Context, args []string) error {
	fs := c.flags("lease-history")
	after := fs.Int64("after", 0, "list the events after this id (paging)")
	limit := fs.Int("limit", 100, "events to show")
	pos, err := c.positional(fs, args, 1, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	if err := store.ValidateLeaseName(name); err != nil {
		return usagef("lease-history: NAME: %v", err)
	}
	if *after < 0 || *limit < 1 || *limit > store.MaxListLimit {
		return usagef("lease-history: -after must not be negative and -limit must be in 1..%d", store.MaxListLimit)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	// One more than asked tells whether there are more.
	evs, err := c.store.LeaseHistory(ctx, name, &store.LeaseHistoryParams{AfterID: *after, Limit: min(*limit+1, store.MaxListLimit)})
	if err != nil {
		return c.explain(err, "")
	}
	more := len(evs) > *limit
	evs = evs[:min(len(evs), *limit)]
	out := make([]historyRow, len(evs))
	rows := make([][]string, len(evs))
	for i, e := range evs {
		out[i] = historyRow{e.ID, e.Name, string(e.Kind), e.Owner, e.Fence, e.At, e.ExpiresAt, string(e.Reason), e.Actor, e.Comment}
		rows[i] = []string{fmt.Sprint(e.ID), e.At.Format(time.RFC3339Nano), string(e.Kind), orDash(string(e.Reason)), e.Owner,
			fmt.Sprint(e.Fence), e.ExpiresAt.Format(time.RFC3339Nano), orDash(e.Actor), orDash(e.Comment)}
	}
	if err := c.emit(out, []string{"ID", "AT", "EVENT", "REASON", "OWNER", "FENCE", "EXPIRES", "ACTOR", "COMMENT"}, rows); err != nil {
		return err
	}
	switch {
	case more:
		fmt.Fprintf(c.errOut, "seqlease: more events: -after %d\n", evs[len(evs)-1].ID)
	case len(evs) == 0 && *after == 0:
		fmt.Fprintf(c.errOut, "seqlease: no history of %q: never acquired, acquired without history (the cleanup loop's stream leases keep none), or trimmed after its retention\n", name)
	}
	return nil
}
