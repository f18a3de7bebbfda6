package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// The actions of `cleanup`, one per expired lease.
const (
	actionGap      = "gap"      // made a gap (dry run: would make)
	actionWait     = "wait"     // waits behind a live earlier lease of its stream
	actionSkip     = "skip"     // another cleaner leads its stream
	actionResolved = "resolved" // resolved meanwhile by someone else
	actionFailed   = "failed"   // its resolution failed: it stays expired
	actionParked   = "parked"   // parked: left for an operator (seqlease parked)
)

// cleanupRow is one expired lease in `cleanup`.
type cleanupRow struct {
	Stream      string    `json:"stream"`
	Number      int64     `json:"number"`
	OperationID string    `json:"operation_id"`
	Kind        string    `json:"kind"`
	Owner       string    `json:"owner"`
	ExpiresAt   time.Time `json:"expires_at"`
	Action      string    `json:"action"` // gap, wait, skip, resolved, failed, parked
	Detail      string    `json:"detail,omitempty"`
}

// cleanupResult is the JSON of `cleanup`.
type cleanupResult struct {
	DryRun bool   `json:"dry_run"`
	Stream string `json:"stream,omitempty"` // absent: every stream
	// Expired counts the expired leases found.
	Expired int `json:"expired"`
	// Capped says a dry run listed only the first maxCount of them.
	Capped bool `json:"capped"`
	// Gaps counts the leases made gaps (dry run: that a pass would make).
	Gaps int `json:"gaps"`
	// Resolved counts those resolved meanwhile by someone else.
	Resolved int `json:"resolved_elsewhere"`
	// Waiting counts those left waiting behind a live earlier lease.
	Waiting int `json:"waiting"`
	// Failed counts those whose resolution failed (they stay expired).
	Failed int `json:"failed"`
	// Parked counts the parked ones: never resolved by a pass; each
	// holds its stream until an operator chooses (seqlease parked).
	Parked int `json:"parked"`
	// SkippedStreams counts the streams another cleaner leads.
	SkippedStreams int `json:"skipped_streams"`
	// Remaining counts the expired leases left after the pass (not in a
	// dry run), up to maxCount.
	Remaining int `json:"remaining"`
	// Entries lists the expired leases: in a dry run every one listed; in
	// a pass those it resolved or failed to.
	Entries []cleanupRow `json:"entries"`
}

func (c *cli) cleanup(ctx context.Context, args []string) error {
	fs := c.flags("cleanup")
	dryRun := fs.Bool("dry-run", false, "list what a pass would do and change nothing")
	durable := fs.Bool("durable-hooks", false, "record a durable hook for every lease the pass resolves, for the application's cleanup loop (cleanup.Config.DurableHook) to deliver")
	pos, err := c.positional(fs, args, 0, 1)
	if err != nil {
		return err
	}
	stream := ""
	if len(pos) == 1 {
		stream = pos[0]
		if err := store.ValidateStream(stream); err != nil {
			return usagef("cleanup: STREAM: %v", err)
		}
	}
	if *dryRun && *durable {
		return usagef("cleanup: -durable-hooks records hooks; a -dry-run records nothing")
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	if stream != "" {
		if _, err := c.store.Stats(ctx, stream); err != nil {
			return c.explain(err, stream)
		}
	}
	var res cleanupResult
	if *dryRun {
		res, err = c.cleanupPlan(ctx, stream)
	} else {
		res, err = c.cleanupPass(ctx, stream, *durable)
	}
	if res.Entries == nil && err == nil {
		res.Entries = []cleanupRow{}
	}
	if err != nil && res.Entries == nil {
		return c.explain(err, stream)
	}
	if perr := c.printCleanup(res); perr != nil {
		return perr
	}
	switch {
	case err != nil && res.Failed > 0:
		return fmt.Errorf("cleanup: %d expired leases could not be resolved (they stay expired; their streams wait): %w", res.Failed, c.explain(err, stream))
	case err != nil:
		return fmt.Errorf("cleanup: %w", c.explain(err, stream))
	}
	return nil
}

// onlyStream is the store a pass over one stream runs on: its listing of
// expired leases sees that stream only.
type onlyStream struct {
	*postgres.Store
	stream string
}

// ListExpired lists the expired leases of the one stream.
func (s onlyStream) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	q := *p
	q.Stream = s.stream
	return s.Store.ListExpired(ctx, &q)
}

// handled collects what a pass did, entry by entry: a cleanup.Observer.
type handled struct {
	mu   sync.Mutex
	rows []cleanupRow
}

func (h *handled) Handled(e store.Entry, _ time.Time, r recovery.Result, err error) {
	row := cleanupRow{Stream: e.Stream, Number: e.Number, OperationID: e.OperationID, Kind: e.Kind, Owner: e.Owner,
		ExpiresAt: e.ExpiresAt, Action: actionGap, Detail: "reason " + cmp.Or(r.Reason, store.ReasonExpired)}
	switch {
	case err != nil:
		row.Action, row.Detail = actionFailed, err.Error()
	case r.Method != recovery.MethodGap: // the pass runs the gap step only
		row.Action, row.Detail = r.Method, r.Reason
	}
	h.mu.Lock()
	h.rows = append(h.rows, row)
	h.mu.Unlock()
}

func (h *handled) Cycle(cleanup.CycleResult, error) {}
func (h *handled) Cascade(bool)                     {}
func (h *handled) HookFailed(store.Entry, error)    {}

// errNotDelivered is what the durable hook of the CLI's pass would return:
// it records hooks for the application's loop and delivers none.
var errNotDelivered = errors.New("seqlease cleanup: durable hooks are delivered by the application's cleanup loop")

// cleanupPass runs one cycle of a cleanup.Service, gaps only, under the
// per-stream named leases of the loop.
func (c *cli) cleanupPass(ctx context.Context, stream string, durable bool) (cleanupResult, error) {
	res := cleanupResult{Stream: stream}
	host, _ := os.Hostname()
	logger := slog.New(slog.NewTextHandler(c.errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := lease.New(c.store, &lease.Config{
		Owner:           fmt.Sprintf("seqlease-cli:%s:%d", host, os.Getpid()),
		CleanupInterval: -1, // no maintenance loop: one pass, then Stop
		Logger:          logger,
	})
	if err != nil {
		return res, err
	}
	defer m.Stop()
	elector, err := cleanup.NewLeaseElector(m, 0)
	if err != nil {
		return res, err
	}
	var st cleanup.Store = c.store
	if stream != "" {
		st = onlyStream{c.store, stream}
	}
	obs := &handled{}
	pipeline, err := recovery.New(st, &recovery.Config{Owner: "seqlease-cli"})
	if err != nil {
		return res, err
	}
	cfg := &cleanup.Config{Pipeline: pipeline, Elector: elector, Observer: obs, Logger: logger}
	if durable {
		// Never Started: never runs.
		cfg.Hooks = &cleanup.HooksConfig{Durable: func(context.Context, store.Entry) error { return errNotDelivered }}
	}
	sv, err := cleanup.New(st, cfg)
	if err != nil {
		return res, err
	}
	cr, err := sv.RunOnce(ctx)
	sv.Stop()
	res.Expired, res.Resolved, res.Failed = cr.Expired, cr.Elsewhere, cr.Failed
	res.Waiting, res.SkippedStreams, res.Parked = cr.Deferred, cr.NotLeader, cr.Parked
	for _, n := range cr.Resolved {
		res.Gaps += n
	}
	res.Entries = obs.rows
	left, _, lerr := c.expired(ctx, stream, nil)
	res.Remaining = len(left)
	return res, errors.Join(err, lerr)
}

// cleanupPlan lists what a pass would do, changing nothing: it takes no
// lease, and reads the expired leases, the snapshot of each stream (for
// the leases that would wait) and the stream leases (for the streams
// another cleaner leads).
func (c *cli) cleanupPlan(ctx context.Context, stream string) (cleanupResult, error) {
	res := cleanupResult{DryRun: true, Stream: stream}
	now, err := c.store.Now(ctx)
	if err != nil {
		return res, err
	}
	es, capped, err := c.expired(ctx, stream, &now)
	if err != nil {
		return res, err
	}
	res.Expired, res.Capped = len(es), capped
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].Stream == es[i].Stream {
			j++
		}
		rows, err := c.planStream(ctx, es[i:j], now)
		if err != nil {
			return res, err
		}
		for _, r := range rows {
			switch r.Action {
			case actionGap:
				res.Gaps++
			case actionWait:
				res.Waiting++
			case actionResolved:
				res.Resolved++
			case actionParked:
				res.Parked++
			}
		}
		if len(rows) > 0 && rows[0].Action == actionSkip {
			res.SkippedStreams++
		}
		res.Entries = append(res.Entries, rows...)
		i = j
	}
	return res, nil
}

// planStream says what a pass would do with es, the expired leases of one
// stream in number order, as the cleanup loop's walk decides it.
func (c *cli) planStream(ctx context.Context, es []store.Entry, now time.Time) ([]cleanupRow, error) {
	stream := es[0].Stream
	rows := make([]cleanupRow, len(es))
	for i, e := range es {
		rows[i] = cleanupRow{Stream: stream, Number: e.Number, OperationID: e.OperationID, Kind: e.Kind, Owner: e.Owner, ExpiresAt: e.ExpiresAt}
	}
	l, err := c.store.GetLease(ctx, cleanup.LeaseName(stream), nil)
	switch {
	case err == nil && l.Held():
		for i := range rows {
			rows[i].Action = actionSkip
			rows[i].Detail = fmt.Sprintf("cleaner %s leads the stream (lease %s, %v left)", l.Owner, l.Name, l.ExpiresAt.Sub(now).Round(time.Millisecond))
		}
		return rows, nil
	case err != nil && !errors.Is(err, store.ErrLeaseNotFound):
		return nil, err
	}
	limit := min(len(es)+1, store.MaxListLimit)
	snap, err := c.store.Snapshot(ctx, stream, limit)
	if err != nil {
		return nil, err
	}
	unresolved, cut := snap.Unresolved, len(snap.Unresolved) == limit
	for i := range rows {
		n := rows[i].Number
		switch {
		case len(unresolved) > 0 && unresolved[0] < n:
			for k := i; k < len(rows); k++ {
				rows[k].Action, rows[k].Detail = actionWait, fmt.Sprintf("behind the live lease of %d", unresolved[0])
			}
			return rows, nil
		case len(unresolved) == 0 && cut && n > snap.Known:
			for k := i; k < len(rows); k++ {
				rows[k].Action, rows[k].Detail = actionWait, fmt.Sprintf("beyond the first %d leased numbers: a pass looks again", limit)
			}
			return rows, nil
		case len(unresolved) == 0 || unresolved[0] > n:
			rows[i].Action, rows[i].Detail = actionResolved, "resolved since it was listed"
		case es[i].Parked():
			rows[i].Action, rows[i].Detail = actionParked, fmt.Sprintf("parked after %d failed recoveries: seqlease parked", es[i].RecoveryAttempts)
			for k := i + 1; k < len(rows); k++ { // counted as waiting, as behind a live lease
				rows[k].Action, rows[k].Detail = actionWait, fmt.Sprintf("behind the parked entry %d", n)
			}
			return rows, nil
		default:
			unresolved = unresolved[1:]
			rows[i].Action, rows[i].Detail = actionGap, "reason "+store.ReasonExpired
		}
	}
	return rows, nil
}

func (c *cli) printCleanup(res cleanupResult) error {
	rows := make([][]string, len(res.Entries))
	for i, r := range res.Entries {
		rows[i] = []string{r.Stream, fmt.Sprint(r.Number), r.OperationID, r.Kind, r.Owner, r.ExpiresAt.Format(time.RFC3339Nano), r.Action, r.Detail}
	}
	if err := c.emit(res, []string{"STREAM", "NUMBER", "OPERATION", "KIND", "OWNER", "EXPIRED AT", "ACTION", "DETAIL"}, rows); err != nil {
		return err
	}
	if c.json {
		return nil
	}
	if res.DryRun {
		_, err := fmt.Fprintf(c.out, "dry run, nothing changed: %s expired; a pass would make %d gaps; %d wait behind a live lease; %d streams skipped (another cleaner leads them); %d parked (seqlease parked)\n",
			atLeast(res.Expired, res.Capped), res.Gaps, res.Waiting, res.SkippedStreams, res.Parked)
		return err
	}
	_, err := fmt.Fprintf(c.out, "%d expired: %d made gaps, %d resolved elsewhere, %d failed, %d wait behind a live lease, %d streams skipped (another cleaner leads them); %d expired remain; %d parked (seqlease parked)\n",
		res.Expired, res.Gaps, res.Resolved, res.Failed, res.Waiting, res.SkippedStreams, res.Remaining, res.Parked)
	return err
}
