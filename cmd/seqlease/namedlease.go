package main

import (
	"context"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/store"
)

// leaseRow is one line of `leases`, and of `force-release` with forcedRow.
type leaseRow struct {
	Name       string    `json:"name"`
	Owner      string    `json:"owner"`
	Fence      int64     `json:"fence"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Renewals   int       `json:"renewals"`
	// Status is active, expired (past its expiry, by the database clock,
	// marked by maintenance or not yet), released or force-released.
	Status string `json:"status"`
	// Remaining is the time to expiry by the database clock; 0 once the
	// holding expired or ended.
	Remaining time.Duration `json:"remaining_ns"`
}

func toLeaseRow(l store.NamedLease) leaseRow {
	return leaseRow{l.Name, l.Owner, l.Fence, l.AcquiredAt, l.ExpiresAt, l.Renewals, string(l.Status()), l.Remaining()}
}

// remaining prints the time a holding has left: "-" when it has none.
func remaining(l store.NamedLease) string {
	if l.Status() != store.LeaseStatusActive {
		return "-"
	}
	return l.Remaining().Round(time.Millisecond).String()
}

func (c *cli) leases(ctx context.Context, args []string) error {
	fs := c.flags("leases")
	owner := fs.String("owner", "", "only this owner's leases")
	heldFor := fs.Duration("held-for", 0, "only leases held at least this long (long-held leases)")
	expired := fs.Bool("expired", false, "also list the holdings past their expiry that maintenance has not marked yet (status expired)")
	if _, err := c.positional(fs, args, 0, 0); err != nil {
		return err
	}
	if *heldFor < 0 {
		return usagef("leases: -held-for must not be negative")
	}
	if *owner != "" {
		if err := store.ValidateLeaseOwner(*owner); err != nil {
			return usagef("leases: -owner: %v", err)
		}
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	now, err := c.store.Now(ctx)
	if err != nil {
		return c.explain(err, "")
	}
	var out []leaseRow
	var rows [][]string
	for after := ""; ; {
		ls, err := c.store.ListLeases(ctx, &store.ListLeasesParams{Owner: *owner, Expired: *expired, HeldFor: *heldFor,
			AfterName: after, Limit: store.MaxListLimit, Now: &now})
		if err != nil {
			return c.explain(err, "")
		}
		for _, l := range ls {
			out = append(out, toLeaseRow(l))
			rows = append(rows, []string{l.Name, l.Owner, fmt.Sprint(l.Fence), string(l.Status()),
				now.Sub(l.AcquiredAt).Round(time.Millisecond).String(), remaining(l), fmt.Sprint(l.Renewals)})
		}
		if len(ls) < store.MaxListLimit {
			break
		}
		after = ls[len(ls)-1].Name
	}
	return c.emit(out, []string{"NAME", "OWNER", "FENCE", "STATUS", "HELD FOR", "REMAINING", "RENEWALS"}, rows)
}

// forcedRow is one line of `force-release`: a holding it ended, and who
// ended it and why, as the history records them.
type forcedRow struct {
	leaseRow
	By     string `json:"by"`
	Reason string `json:"reason"`
}

func (c *cli) forceRelease(ctx context.Context, args []string) error {
	fs := c.flags("force-release")
	by := fs.String("by", "", "who force-releases, recorded in the history of each lease it ends (required with -reason)")
	reason := fs.String("reason", "", "why, recorded with -by in the history of each lease it ends")
	pos, err := c.positional(fs, args, 1, 1)
	if err != nil {
		return err
	}
	owner := pos[0]
	if err := store.ValidateLeaseOwner(owner); err != nil {
		return usagef("force-release: OWNER: %v", err)
	}
	// Each flag on its own, so that the error names it.
	if err := store.ValidateForceRelease(owner, &store.LeaseOpParams{Actor: *by}); err != nil {
		return usagef("force-release: -by: %v", err)
	}
	if err := store.ValidateForceRelease(owner, &store.LeaseOpParams{Actor: "-", Reason: *reason}); err != nil {
		return usagef("force-release: -reason: %v", err)
	}
	if *reason != "" && *by == "" {
		return usagef("force-release: -by WHO is required with -reason: the history records who gave the reason")
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	ended, err := c.store.ForceReleaseLeases(ctx, owner, &store.LeaseOpParams{Actor: *by, Reason: *reason})
	if err != nil {
		return c.explain(err, "")
	}
	out := make([]forcedRow, len(ended))
	rows := make([][]string, len(ended))
	for i, l := range ended {
		out[i] = forcedRow{toLeaseRow(l), *by, *reason}
		rows[i] = []string{l.Name, fmt.Sprint(l.Fence), "force-released", orDash(*by), orDash(*reason)}
	}
	if len(rows) == 0 {
		rows = [][]string{{"-", "-", "no live lease held by " + owner, "-", "-"}}
	}
	return c.emit(out, []string{"NAME", "FENCE", "RESULT", "BY", "REASON"}, rows)
}

// orDash prints an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// waiterRow is one line of `lease-waiters`.
type waiterRow struct {
	Name   string `json:"name"`
	Waiter string `json:"waiter"`
	Status string `json:"status"` // pending
	// Since is when the waiter asked for the name, by the database clock.
	Since   time.Time     `json:"since"`
	Waiting time.Duration `json:"waiting_ns"`
	// Fence is the fence of the last holding of the name the waiter saw
	// (0: none).
	Fence int64 `json:"fence_seen"`
}

func (c *cli) leaseWaiters(ctx context.Context, args []string) error {
	fs := c.flags("lease-waiters")
	limit := fs.Int("limit", 100, "waiters to show")
	pos, err := c.positional(fs, args, 0, 1)
	if err != nil {
		return err
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
		if err := store.ValidateLeaseName(name); err != nil {
			return usagef("lease-waiters: NAME: %v", err)
		}
	}
	if *limit < 1 || *limit > store.MaxListLimit {
		return usagef("lease-waiters: -limit must be in 1..%d", store.MaxListLimit)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	now, err := c.store.Now(ctx)
	if err != nil {
		return c.explain(err, "")
	}
	// One more than asked tells whether there are more.
	ws, err := c.store.ListLeaseWaiters(ctx, &store.ListLeaseWaitersParams{Name: name, Limit: min(*limit+1, store.MaxListLimit), Now: &now})
	if err != nil {
		return c.explain(err, "")
	}
	more := len(ws) > *limit
	ws = ws[:min(len(ws), *limit)]
	out := make([]waiterRow, len(ws))
	rows := make([][]string, len(ws))
	for i, w := range ws {
		out[i] = waiterRow{w.Name, w.Waiter, string(w.Status()), w.Since, now.Sub(w.Since), w.Fence}
		rows[i] = []string{w.Name, w.Waiter, string(w.Status()), w.Since.Format(time.RFC3339Nano),
			now.Sub(w.Since).Round(time.Millisecond).String(), fmt.Sprint(w.Fence)}
	}
	if err := c.emit(out, []string{"NAME", "WAITER", "STATUS", "SINCE", "WAITING", "FENCE SEEN"}, rows); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(c.errOut, "seqlease: more than %d waiters: raise -limit (at most %d)\n", *limit, store.MaxListLimit)
	}
	return nil
}
