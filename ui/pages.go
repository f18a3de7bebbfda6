package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seqlease/seqlease/health"
	"github.com/seqlease/seqlease/store"
)

// expiredCap is the most expired leases the pages count per stream (and
// parked entries the stream page counts); beyond it the count shows as
// "100+". The streams page has the store count them; the stream page and
// the resolve-expired confirmation read them whole, so the cap bounds
// what they hold.
const expiredCap = 100

// link returns the relative URL of page with the non-empty params.
func link(page string, kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return page
	}
	return page + "?" + v.Encode()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// streamRow is one stream on the streams page.
type streamRow struct {
	Stats         store.StreamStats
	Link, GapLink string
	Lag           int64 // numbers handed out beyond the watermark
	Expired       int   // counted up to expiredCap
	ExpiredCapped bool
	Parked        int64
	ParkedLink    string // the parked page of the stream
	OpenGaps      int64
	OldestAge     time.Duration
	Chart         chart
}

type streamsData struct {
	Rows        []streamRow
	Next        string // the next page's link; empty on the last page
	ChartWindow time.Duration
	Cleanup     cleanupView
}

// cleanupView is what the streams page says of the cleanup loop.
type cleanupView struct {
	Text string
	Bad  bool // stopped, not started, stale or failing
}

// cleanupStatus describes Config.Cleanup's status at now, by the
// process's clock (the loop's own): whether it runs, its interval, and
// when its last full pass ended, as the health package's cleanup check
// judges it. The error of a failed cycle is not shown: store errors go to
// logs, not to pages.
func (h *Handler) cleanupStatus(now time.Time) cleanupView {
	if h.cfg.Cleanup == nil {
		return cleanupView{Text: "not known here: no cleanup loop runs in this process (ui.Config.Cleanup), " +
			"and the store keeps no record of other processes' loops; their health checks report them."}
	}
	st := h.cfg.Cleanup.Status()
	stale := health.DefaultCleanupStaleIntervals * st.Interval
	var b strings.Builder
	v := cleanupView{}
	switch {
	case st.Running:
		fmt.Fprintf(&b, "running, every %s", dur(st.Interval))
	case st.Started.IsZero():
		v.Bad = true
		b.WriteString("not started: expired leases are not resolved, and their streams wait")
	default:
		v.Bad = true
		b.WriteString("stopped: expired leases are not resolved, and their streams wait")
	}
	switch age := now.Sub(st.LastPass); {
	case !st.LastPass.IsZero() && (age <= stale || !st.Running):
		fmt.Fprintf(&b, "; last full pass %s ago (%s by this process's clock)", dur(age), stamp(st.LastPass))
	case !st.LastPass.IsZero():
		v.Bad = true
		fmt.Fprintf(&b, "; no full pass for %s (max %s; the last at %s)", dur(age), dur(stale), stamp(st.LastPass))
	case st.Running && now.Sub(st.Started) <= stale:
		fmt.Fprintf(&b, "; started %s ago, no full pass yet", dur(now.Sub(st.Started)))
	case st.Running:
		v.Bad = true
		fmt.Fprintf(&b, "; no full pass in the %s since its start (max %s)", dur(now.Sub(st.Started)), dur(stale))
	}
	if st.LastPassFailed > 0 {
		v.Bad = true
		fmt.Fprintf(&b, "; %d recoveries failed in it (tried again next cycle)", st.LastPassFailed)
	}
	if st.Failures > 0 {
		v.Bad = true
		fmt.Fprintf(&b, "; the last %d cycles could not list the expired leases (the error is in the application's log)", st.Failures)
	}
	v.Text = b.String() + "."
	return v
}

// streamsPage lists a page of streams (after, limit) with their figures.
func (h *Handler) streamsPage(ctx context.Context, r *http.Request, now time.Time) (string, any, error) {
	after, err := nameParam(r, "after", false, store.ValidateStream)
	if err != nil {
		return "", nil, err
	}
	limit, err := h.limitParam(r)
	if err != nil {
		return "", nil, err
	}
	names, err := h.cfg.Store.Streams(ctx, after, limit+1)
	if err != nil {
		return "", nil, err
	}
	d := streamsData{ChartWindow: h.cfg.ChartWindow, Cleanup: h.cleanupStatus(time.Now())}
	if len(names) > limit {
		names = names[:limit]
		d.Next = link("./", "after", names[limit-1], "limit", r.URL.Query().Get("limit"))
	}
	rows, err := h.streamRows(ctx, names, now)
	if err != nil {
		return "", nil, err
	}
	d.Rows = rows
	return "streams", d, nil
}

// streamWorkers is how many statements the streams page sends at once,
// each summarizing a share of the page's streams: a few side by side use
// the database's cores.
const streamWorkers = 4

// streamRows reads the rows of names in up to streamWorkers calls of
// SummarizeStreams side by side, and returns once every call has returned.
// A stream gone since the listing is left out; the first error cancels the
// other calls and is returned.
func (h *Handler) streamRows(ctx context.Context, names []string, now time.Time) ([]streamRow, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := &store.SummaryParams{Now: &now, ExpiredLimit: expiredCap + 1, Window: h.cfg.ChartWindow,
		Buckets: chartBuckets, Samples: h.cfg.ChartSample}
	parts := slices.Collect(slices.Chunk(names, max(1, (len(names)+streamWorkers-1)/streamWorkers)))
	sums := make([][]store.StreamSummary, len(parts))
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Go(func() {
			// A panic here would end the process: nothing above this
			// goroutine recovers it. It fails the page instead (500).
			defer func() {
				if p := recover(); p != nil {
					cancel(fmt.Errorf("ui: summarizing streams panicked: %v\n%s", p, debug.Stack()))
				}
			}()
			var err error
			if sums[i], err = h.cfg.Store.SummarizeStreams(ctx, part, p); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	var rows []streamRow
	for _, sum := range slices.Concat(sums...) {
		rows = append(rows, h.streamRow(sum, now))
	}
	return rows, nil
}

func (h *Handler) streamRow(sum store.StreamSummary, now time.Time) streamRow {
	name := sum.Stream
	row := streamRow{Stats: sum.StreamStats, Link: link("stream", "name", name), GapLink: link("gaps", "stream", name),
		Lag: sum.NextNumber - 1 - sum.Watermark, OpenGaps: sum.OpenGaps, Parked: sum.Parked,
		ParkedLink: link("parked", "stream", name), Chart: newChart(sum.Throughput)}
	if sum.OldestUnresolved > 0 {
		row.OldestAge = now.Sub(sum.OldestUnresolvedAt)
	}
	row.Expired, row.ExpiredCapped = int(min(sum.Expired, expiredCap)), sum.Expired > expiredCap
	return row
}

// timelineEntry is one number on the stream page.
type timelineEntry struct {
	store.Entry
	Label     string // committed, leased, expired, parked, gap, filled
	Watermark bool   // the watermark's number
	Preview   string // the payload's first bytes, quoted
	Link      string // the gaps or parked page at this number, for a gap or a parked entry
}

type streamData struct {
	Stats              store.StreamStats
	Lag                int64
	OldestAge          time.Duration
	OpenGaps           int64
	Parked             int // counted up to expiredCap
	ParkedCapped       bool
	ParkedLink         string
	Entries            []timelineEntry
	Earlier, Later     string
	GapLink, ReadLink  string
	ResolveExpired     string // the confirmation page of the action
	Span, PreviewBytes int
	First, Last        int64 // the numbers shown
}

// streamPage shows one stream (name): its figures and the numbers after
// `after` (default: a quarter of span before the watermark), span of them.
func (h *Handler) streamPage(ctx context.Context, r *http.Request, now time.Time) (string, any, error) {
	name, err := nameParam(r, "name", true, store.ValidateStream)
	if err != nil {
		return "", nil, err
	}
	span, err := h.limitParam(r)
	if err != nil {
		return "", nil, err
	}
	if r.URL.Query().Get("limit") == "" {
		span = min(DefaultSpan, h.cfg.MaxPageSize)
	}
	after, given, err := numberParam(r, "after", 0)
	if err != nil {
		return "", nil, err
	}
	s := h.cfg.Store
	st, err := s.Stats(ctx, name)
	if err != nil {
		return "", nil, err
	}
	if !given {
		after = st.Watermark - int64(span)/4
	}
	// Between the low point and the end: no link computed from it
	// overflows, however large the after asked for.
	after = min(max(after, st.LowPoint-1, 0), max(st.NextNumber-1, 0))
	es, err := s.Read(ctx, name, after, span)
	var te *store.TrimmedError
	if errors.As(err, &te) { // trimmed since Stats: start at the new low point
		after = te.LowPoint - 1
		es, err = s.Read(ctx, name, after, span)
	}
	if err != nil {
		return "", nil, err
	}
	d := streamData{Stats: st, Lag: st.NextNumber - 1 - st.Watermark, Span: span, PreviewBytes: h.cfg.PreviewBytes,
		GapLink: link("gaps", "stream", name), ResolveExpired: link(actResolveExpired, "stream", name)}
	if st.OldestUnresolved > 0 {
		d.OldestAge = now.Sub(st.OldestUnresolvedAt)
	}
	if d.OpenGaps, err = s.CountGaps(ctx, name); err != nil {
		return "", nil, err
	}
	if pk := h.parker(); pk != nil && st.Unresolved > 0 {
		ps, err := pk.ListParked(ctx, &store.ListParkedParams{Stream: name, Limit: expiredCap + 1})
		if err != nil {
			return "", nil, err
		}
		d.Parked, d.ParkedCapped, d.ParkedLink = min(len(ps), expiredCap), len(ps) > expiredCap, link("parked", "stream", name)
	}
	limit := r.URL.Query().Get("limit")
	if after > st.LowPoint-1 && after > 0 {
		d.Earlier = link("stream", "name", name, "after", itoa(max(after-int64(span), st.LowPoint-1, 0)), "limit", limit)
	}
	if after+int64(span) < st.NextNumber-1 {
		d.Later = link("stream", "name", name, "after", itoa(after+int64(span)), "limit", limit)
	}
	for _, e := range es {
		t := timelineEntry{Entry: e, Label: label(e, now), Watermark: e.Number == st.Watermark,
			Preview: preview(e.Payload, h.cfg.PreviewBytes)}
		switch {
		case e.State == store.Gap:
			t.Link = link("gaps", "stream", name, "after", itoa(e.Number-1))
		case e.Parked():
			t.Link = link("parked", "stream", name, "after_stream", name, "after", itoa(e.Number-1))
		}
		d.Entries = append(d.Entries, t)
	}
	if len(es) > 0 {
		d.First, d.Last = es[0].Number, es[len(es)-1].Number
	}
	return "stream", d, nil
}

// label is what the timeline calls an entry at now.
func label(e store.Entry, now time.Time) string {
	switch {
	case e.Parked():
		return "parked"
	case e.State == store.Leased && !now.Before(e.ExpiresAt):
		return "expired"
	case e.State == store.Committed && !e.FilledAt.IsZero():
		return "filled"
	}
	return string(e.State)
}

// preview returns the first n bytes of p Go-quoted (control characters
// and invalid UTF-8 escaped), with the count of bytes left out; "" for no
// payload. html/template escapes the result again for HTML.
func preview(p []byte, n int) string {
	if p == nil {
		return ""
	}
	cut := p[:min(len(p), n)]
	q := strconv.Quote(string(cut))
	if len(p) > len(cut) {
		q += "…(+" + strconv.Itoa(len(p)-len(cut)) + " bytes)"
	}
	return q
}

type gapsData struct {
	Stream      string
	StreamLink  string
	Reason      string
	Filled      bool
	Gaps        []gapRow
	Span        int // the most numbers searched for the commits of the gaps' operations
	Next        string
	Streams     []gapStream // without a stream: the streams and their open gaps
	NextStreams string
}

type gapStream struct {
	Name     string
	Link     string
	OpenGaps int64
}

// gapsPage lists a stream's gaps (stream, after, limit, reason, filled),
// or without a stream the streams with their open gap counts.
func (h *Handler) gapsPage(ctx context.Context, r *http.Request, now time.Time) (string, any, error) {
	name, err := nameParam(r, "stream", false, store.ValidateStream)
	if err != nil {
		return "", nil, err
	}
	limit, err := h.limitParam(r)
	if err != nil {
		return "", nil, err
	}
	q := r.URL.Query()
	if name == "" {
		return h.gapStreams(ctx, r, limit)
	}
	after, _, err := numberParam(r, "after", 0)
	if err != nil {
		return "", nil, err
	}
	reason, err := textParam(r, "reason")
	if err != nil {
		return "", nil, err
	}
	filled, err := boolParam(r, "filled")
	if err != nil {
		return "", nil, err
	}
	st, err := h.cfg.Store.Stats(ctx, name)
	if err != nil {
		return "", nil, err // 404 for an unknown stream
	}
	gs, err := h.cfg.Store.ListGaps(ctx, name, &store.ListGapsParams{After: after, Limit: limit + 1, Reason: reason, IncludeFilled: filled})
	if err != nil {
		return "", nil, err
	}
	d := gapsData{Stream: name, StreamLink: link("stream", "name", name), Reason: reason, Filled: filled, Span: store.MaxFindSpan}
	if len(gs) > limit {
		gs = gs[:limit]
		d.Next = link("gaps", "stream", name, "after", itoa(gs[limit-1].Number), "limit", q.Get("limit"),
			"reason", reason, "filled", q.Get("filled"))
	}
	if d.Gaps, err = h.gapRows(ctx, st, gs); err != nil {
		return "", nil, err
	}
	return "gaps", d, nil
}

// Where the work of a gap went, as the gaps page says (gapRow.Work).
const (
	workRecovered = "recovered" // recovery moved it: RecoveredAs
	workAgain     = "again"     // its operation was committed under a later number
	workFilled    = "filled"    // an operator filled the gap
	workLost      = "lost"      // no later number of the stream committed its operation
	workUntraced  = "untraced"  // no operation id to look for
	workNotFound  = "not-found" // not committed up to Searched, the last number looked at
	workBeyond    = "beyond"    // beyond the numbers searched for the page
)

// gapRow is a gap on the gaps page, with where its work went.
type gapRow struct {
	store.Entry
	Work     string // one of the work* constants
	WentTo   int64  // the number the work went to (recovered, again)
	WentLink string // the stream page at WentTo
	Searched int64  // for workNotFound: the last number searched
	Fill     string // the fill action's confirmation page; empty when filling would apply work twice
}

// gapRows says where the work of each of gs went. A gap whose work
// recovery did not move may still have been delivered again by the
// application under the same operation id: the store is searched for a
// later commit of it (store.CommitFinder), from the first such gap over at
// most store.MaxFindSpan numbers, in one call. "Lost" only when the search
// reached the stream's end.
func (h *Handler) gapRows(ctx context.Context, st store.StreamStats, gs []store.Entry) ([]gapRow, error) {
	rows := make([]gapRow, len(gs))
	var ops []string
	var lo int64
	for i, g := range gs {
		r := gapRow{Entry: g}
		switch {
		case g.RecoveredAs != 0:
			r.Work, r.WentTo = workRecovered, g.RecoveredAs
		case !g.FilledAt.IsZero():
			r.Work = workFilled
		case g.OperationID == "":
			r.Work = workUntraced
		default:
			r.Work = workLost // unless the search below finds it
			if len(ops) == 0 {
				lo = g.Number
			}
			if !slices.Contains(ops, g.OperationID) {
				ops = append(ops, g.OperationID)
			}
		}
		rows[i] = r
	}
	end := st.NextNumber - 1
	hi := min(end, lo+store.MaxFindSpan)
	var found []store.Entry
	cf, ok := h.cfg.Store.(store.CommitFinder)
	if len(ops) > 0 && ok && hi > lo {
		var err error
		if found, err = cf.FindCommitted(ctx, st.Stream, &store.FindCommittedParams{Operations: ops, After: lo, Through: hi}); err != nil {
			return nil, err
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.Work == workLost {
			j := slices.IndexFunc(found, func(e store.Entry) bool { return e.Number > r.Number && e.OperationID == r.OperationID })
			switch {
			case j >= 0:
				r.Work, r.WentTo = workAgain, found[j].Number
			case !ok:
				r.Work = workUntraced
			case r.Number >= hi && hi < end:
				r.Work = workBeyond
			case hi < end:
				r.Work, r.Searched = workNotFound, hi
			}
		}
		if r.WentTo != 0 {
			r.WentLink = link("stream", "name", st.Stream, "after", itoa(max(r.WentTo-DefaultSpan/4, 0))) + "#n" + itoa(r.WentTo)
		}
		if h.act != nil && r.State == store.Gap && r.Work != workRecovered && r.Work != workAgain {
			r.Fill = link(actFillGap, "stream", st.Stream, "number", itoa(r.Number))
		}
	}
	return rows, nil
}

func (h *Handler) gapStreams(ctx context.Context, r *http.Request, limit int) (string, any, error) {
	after, err := nameParam(r, "after_stream", false, store.ValidateStream)
	if err != nil {
		return "", nil, err
	}
	names, err := h.cfg.Store.Streams(ctx, after, limit+1)
	if err != nil {
		return "", nil, err
	}
	var d gapsData
	if len(names) > limit {
		names = names[:limit]
		d.NextStreams = link("gaps", "after_stream", names[limit-1], "limit", r.URL.Query().Get("limit"))
	}
	// One statement for the page's counts; without a window it reads no
	// throughput, and a stream gone since the listing is left out.
	sums, err := h.cfg.Store.SummarizeStreams(ctx, names, &store.SummaryParams{ExpiredLimit: 1})
	if err != nil {
		return "", nil, err
	}
	for _, sum := range sums {
		d.Streams = append(d.Streams, gapStream{Name: sum.Stream, Link: link("gaps", "stream", sum.Stream), OpenGaps: sum.OpenGaps})
	}
	return "gaps", d, nil
}

type leaseRow struct {
	store.NamedLease
	Link string
}

type leasesData struct {
	Owner   string
	Expired bool // the listing includes the expired holdings not yet marked
	Leases  []leaseRow
	Next    string
	// All is the link that toggles Expired.
	All     string
	Waiters []store.LeaseWaiter
	// MoreWaiters says Waiters stopped at the page's limit.
	MoreWaiters bool
}

// leasesPage lists the held named leases (after, limit, owner; expired=1
// adds the expired holdings maintenance has not marked yet) and the
// processes waiting for any name.
func (h *Handler) leasesPage(ctx context.Context, r *http.Request, now time.Time) (string, any, error) {
	after, err := nameParam(r, "after", false, store.ValidateLeaseName)
	if err != nil {
		return "", nil, err
	}
	owner, err := nameParam(r, "owner", false, store.ValidateLeaseOwner)
	if err != nil {
		return "", nil, err
	}
	limit, err := h.limitParam(r)
	if err != nil {
		return "", nil, err
	}
	expired, err := boolParam(r, "expired")
	if err != nil {
		return "", nil, err
	}
	ls, err := h.cfg.Store.ListLeases(ctx, &store.ListLeasesParams{Owner: owner, Expired: expired, AfterName: after, Limit: limit + 1, Now: &now})
	if err != nil {
		return "", nil, err
	}
	exp := ""
	all := "1"
	if expired {
		exp, all = "1", ""
	}
	d := leasesData{Owner: owner, Expired: expired, All: link("leases", "owner", owner, "expired", all)}
	if len(ls) > limit {
		ls = ls[:limit]
		d.Next = link("leases", "after", ls[limit-1].Name, "owner", owner, "expired", exp, "limit", r.URL.Query().Get("limit"))
	}
	for _, l := range ls {
		d.Leases = append(d.Leases, leaseRow{NamedLease: l, Link: link("lease", "name", l.Name)})
	}
	if d.Waiters, d.MoreWaiters, err = h.waiters(ctx, "", limit, now); err != nil {
		return "", nil, err
	}
	return "leases", d, nil
}

// waiters lists the waiters of name (of every name when empty), up to
// limit; more says there are more.
func (h *Handler) waiters(ctx context.Context, name string, limit int, now time.Time) (ws []store.LeaseWaiter, more bool, err error) {
	ws, err = h.cfg.Store.ListLeaseWaiters(ctx, &store.ListLeaseWaitersParams{Name: name, Limit: limit + 1, Now: &now})
	if err != nil {
		return nil, false, err
	}
	if len(ws) > limit {
		return ws[:limit], true, nil
	}
	return ws, false, nil
}

type leaseData struct {
	Lease        store.NamedLease
	Held         bool
	ForceRelease string // the confirmation page of the action
	Events       []store.LeaseEvent
	// Newer and Older page through the history; Newest is the first page,
	// shown on an empty page that was not it.
	Newer, Older, Newest string
	Waiters              []store.LeaseWaiter
	MoreWaiters          bool
}

// leasePage shows one named lease (name): its current or last holding, the
// processes waiting for it and its audit history newest first, limit
// events: the latest, those before the ID before, or those after the ID
// after (the page newer than one shown).
func (h *Handler) leasePage(ctx context.Context, r *http.Request, now time.Time) (string, any, error) {
	name, err := nameParam(r, "name", true, store.ValidateLeaseName)
	if err != nil {
		return "", nil, err
	}
	after, newer, err := numberParam(r, "after", 0)
	if err != nil {
		return "", nil, err
	}
	before, older, err := numberParam(r, "before", 0)
	if err != nil {
		return "", nil, err
	}
	if newer && older {
		return "", nil, badRequest("after and before exclude each other: page one way at a time")
	}
	limit, err := h.limitParam(r)
	if err != nil {
		return "", nil, err
	}
	l, err := h.cfg.Store.GetLease(ctx, name, &store.LeaseOpParams{Now: &now})
	if err != nil {
		return "", nil, err
	}
	// Newest first, but the page newer than one shown is the limit events
	// just after it: read oldest first from there, then reversed.
	evs, err := h.cfg.Store.LeaseHistory(ctx, name, &store.LeaseHistoryParams{AfterID: after, BeforeID: before, Newest: !newer, Limit: limit + 1})
	if err != nil {
		return "", nil, err
	}
	more := len(evs) > limit
	evs = evs[:min(len(evs), limit)]
	if newer {
		slices.Reverse(evs)
	}
	d := leaseData{Lease: l, Held: l.Held(), Events: evs, ForceRelease: link(actForceRelease, "name", name)}
	lim := r.URL.Query().Get("limit")
	if len(evs) > 0 {
		if (newer && more) || older {
			d.Newer = link("lease", "name", name, "after", itoa(evs[0].ID), "limit", lim)
		}
		if (!newer && more) || (newer && after > 0) {
			d.Older = link("lease", "name", name, "before", itoa(evs[len(evs)-1].ID), "limit", lim)
		}
	} else if newer || older {
		d.Newest = link("lease", "name", name, "limit", lim)
	}
	if d.Waiters, d.MoreWaiters, err = h.waiters(ctx, name, limit, now); err != nil {
		return "", nil, err
	}
	return "lease", d, nil
}

type readerRow struct {
	store.Checkpoint
	StreamLink string
}

type readersData struct {
	Reader, Stream string
	Readers        []readerRow
	Next           string
}

// readersPage lists the readers' checkpoints with their lag (reader,
// stream to filter; after_reader, after_stream, limit to page).
func (h *Handler) readersPage(ctx context.Context, r *http.Request, now time.Time) (string, any, error) {
	p := &store.ListCheckpointsParams{}
	var err error
	for _, f := range []struct {
		name  string
		dst   *string
		valid func(string) error
	}{
		{"reader", &p.Reader, store.ValidateReader}, {"stream", &p.Stream, store.ValidateStream},
		{"after_reader", &p.AfterReader, store.ValidateReader}, {"after_stream", &p.AfterStream, store.ValidateStream},
	} {
		if *f.dst, err = nameParam(r, f.name, false, f.valid); err != nil {
			return "", nil, err
		}
	}
	limit, err := h.limitParam(r)
	if err != nil {
		return "", nil, err
	}
	p.Limit = limit + 1
	cs, err := h.cfg.Store.ListCheckpoints(ctx, p)
	if err != nil {
		return "", nil, err
	}
	d := readersData{Reader: p.Reader, Stream: p.Stream}
	if len(cs) > limit {
		cs = cs[:limit]
		last := cs[limit-1]
		d.Next = link("readers", "reader", p.Reader, "stream", p.Stream, "after_reader", last.Reader,
			"after_stream", last.Stream, "limit", r.URL.Query().Get("limit"))
	}
	for _, c := range cs {
		d.Readers = append(d.Readers, readerRow{Checkpoint: c, StreamLink: link("stream", "name", c.Stream)})
	}
	return "readers", d, nil
}
