package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/ui"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	// waitTimeout bounds every wait on the page: generous, as the machines
	// running the test are small and shared.
	waitTimeout = 30 * time.Second
	// refresh is the pages' own refresh: the shortest there is (the pages
	// count it in whole seconds), so that the live updates come quickly.
	refresh = time.Second
	// prefix is where the handler is mounted, as in an application's mux.
	prefix = "/seqlease/"
	// width and height are the browser's viewport, and the screenshots'.
	width, height = 1200, 800
	// screenshotsEnv names the environment variable that makes the test
	// write the screenshots of docs/ui.md.
	screenshotsEnv = "SEQLEASE_SCREENSHOTS"
	// screenshotDir is where they go, from this directory.
	screenshotDir = "../docs/ui"
)

// The data set: a stream that stalls, one that is healthy, a named lease
// and a reader.
const (
	stalling  = "orders"
	healthy   = "payments"
	holder    = "orders-worker-7"
	leaseName = "projection/orders"
	leaseHold = "projector-2"
	reader    = "orders-projection"
	// operator force-releases the named lease, for forceReason.
	operator    = "operator-ana"
	forceReason = "projector-2 is stuck; restarting it"
	// parkedStream holds an entry parked with parkedError.
	parkedStream = "invoices"
	parkedError  = "recover invoice-77: tracker: dial tcp 10.0.4.12:5432: connect: connection refused"
)

// TestBrowser opens the streams page in chromium, sees a stream stall when a
// lease expires and recover after a cleanup pass, through the page's own
// live updates, visits every other page, and force-releases a named lease
// through its form and CSRF token. See the package doc.
func TestBrowser(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	entries := seed(t, st)

	// The cleanup loop of this process, whose passes the streams page
	// shows: the test runs them (RunOnce); the loop is never started.
	cl, err := cleanup.New(st, nil)
	require.NoError(t, err)
	t.Cleanup(cl.Stop)
	actions := &syncBuffer{} // the handler's log: the record of every action
	h, err := ui.New(&ui.Config{
		Store:   st,
		Refresh: refresh,
		Cleanup: cl,
		Logger:  slog.New(slog.NewTextHandler(actions, nil)),
		Actions: &ui.ActionsConfig{
			Authenticate: func(*http.Request) (string, error) { return operator, nil },
		},
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(prefix, http.StripPrefix(prefix[:len(prefix)-1], h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	b := newBrowser(t)
	b.do(chromedp.EmulateViewport(width, height), chromedp.Navigate(srv.URL+prefix))
	b.waitLive()
	b.markPage()

	// Before: number 3 is leased and live, so the watermark waits at 2.
	b.waitRow(stalling, `r.watermark === "2" && r.inFlight === "1" && r.expired === "0" && !r.stalled`)
	b.waitRow(healthy, `r.watermark === "3" && r.inFlight === "0"`)

	// The holder of 3 renews for a millisecond, then dies: the page, by its
	// own refresh, marks the stream stalled by one expired lease, 3.
	_, _, err = st.Extend(ctx, stalling, 3, entries[2].Token, &store.ExtendParams{TTL: time.Millisecond})
	require.NoError(t, err)
	row := b.waitRow(stalling, `r.expired === "1" && r.stalled && r.oldest.startsWith("3 ")`)
	require.Equal(t, "2", row.Watermark, "the expired lease holds the watermark")
	require.Equal(t, "6", row.Next)
	b.waitFor(`(() => { const c = document.getElementById("cleanup");
		return c && c.classList.contains("bad") && c.textContent.includes("not started") && !c.textContent.includes("last full pass"); })()`)
	b.requireSamePage()
	b.screenshot("streams")

	// The stream's page shows what holds it: 3, expired, and its holder.
	b.follow(http.StatusOK, clickIn(`document.evaluate('//tr[td[1]/a[text()="`+stalling+`"]]/td[1]/a', document).iterateNext()`))
	b.waitFor(`(() => { const r = document.getElementById("n3");
		return r && r.classList.contains("expired") && r.querySelector("td.owner").textContent === "` + holder + `"; })()`)
	b.screenshot("stream")
	b.do(chromedp.NavigateBack())
	b.waitLive()
	b.markPage()
	b.waitRow(stalling, `r.expired === "1" && r.stalled`)

	// A cleanup pass declares 3 a gap: the page shows the stream recover,
	// and the pass.
	res, err := cl.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Expired)
	row = b.waitRow(stalling, `r.watermark === "5" && r.expired === "0" && r.inFlight === "0" && !r.stalled`)
	require.Equal(t, "1", row.Gaps)
	require.Equal(t, "-", row.Oldest)
	b.waitFor(`document.getElementById("cleanup").textContent.includes("last full pass")`)
	b.requireSamePage()

	// The open gap, through the streams page's link.
	b.follow(http.StatusOK, clickIn(`document.evaluate('//tr[td[1]/a[text()="`+stalling+`"]]/td[8]/a', document).iterateNext()`))
	b.waitFor(`(() => { const r = document.querySelector("table.gaps tbody tr");
		return r && r.cells[0].textContent === "3" && r.cells[1].textContent === "expired" && r.cells[2].textContent === "lost"; })()`)
	b.screenshot("gaps")

	// The named leases, then the one lease and its history.
	b.follow(http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="leases"]`)))
	b.waitFor(`(() => { const r = document.querySelector("table.leases tbody tr");
		return r && r.querySelector("td.owner").textContent === "` + leaseHold + `"; })()`)
	b.screenshot("leases")
	b.follow(http.StatusOK, clickIn(`document.querySelector("table.leases tbody tr td.name a")`))
	b.waitFor(`(() => { const rows = document.querySelectorAll("table.history tbody tr");
		return rows.length === 2 && rows[0].cells[1].textContent === "renewed" && rows[1].cells[1].textContent === "acquired"; })()`) // newest first
	b.screenshot("lease")

	// The reader, behind its stream's new watermark.
	b.follow(http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="readers"]`)))
	b.waitFor(`document.querySelector("main table tbody") !== null && document.querySelector("main table tbody").textContent.includes("` + reader + `")`)
	b.screenshot("readers")

	// Force-release the named lease from its page, as an operator: the
	// confirmation page's form with a token altered in the page is refused
	// and changes nothing; the form as served releases the lease.
	b.follow(http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="leases"]`)))
	b.follow(http.StatusOK, clickIn(`document.querySelector("table.leases tbody tr td.name a")`))
	b.follow(http.StatusOK, clickIn(`document.getElementById("force-release")`))
	b.waitFor(`(() => { const f = document.getElementById("action-form"), t = f && f.elements.namedItem("token");
		return t && t.value.length > 20 && f.textContent.includes("Acting as ` + operator + `"); })()`)
	confirm := b.location()
	b.do(chromedp.SendKeys(chromedp.ID("reason"), forceReason))
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[string](`(() => { const t = document.getElementById("action-form").elements.namedItem("token");
			return t.value = t.value.slice(0, -1) + (t.value.endsWith("A") ? "B" : "A"); })()`)(ctx, t)
		return err
	}))
	b.follow(http.StatusForbidden, chromedp.Click(chromedp.ID("confirm")))
	b.waitStyled() // the refusal, at actions/force-release, links its stylesheet one level up
	l, err := st.GetLease(ctx, leaseName, nil)
	require.NoError(t, err)
	require.True(t, l.Held(), "a refused action changed the lease: %+v", l)
	require.Contains(t, actions.String(), "action refused: token")

	b.do(chromedp.Navigate(confirm)) // a fresh confirmation page, a fresh token
	b.do(chromedp.SendKeys(chromedp.ID("reason"), forceReason))
	b.screenshot("force-release")
	b.follow(http.StatusOK, chromedp.Click(chromedp.ID("confirm"))) // 303 to the lease's page
	b.waitFor(`(() => { const r = document.getElementById("result");
		return r && r.textContent.includes("Reason: ` + forceReason + ` (by ` + operator + `)")
			&& document.querySelector("dl.figures dd").textContent === "force-released"; })()`)
	b.screenshot("force-released")
	l, err = st.GetLease(ctx, leaseName, nil)
	require.NoError(t, err)
	require.False(t, l.Held(), "%+v", l)
	require.Equal(t, store.LeaseForceReleased, l.EndReason)
	require.Equal(t, leaseHold, l.Owner)
	log := actions.String()
	require.Contains(t, log, `outcome=done`)
	require.Contains(t, log, `actor=`+operator)
	require.Contains(t, log, `reason="`+forceReason+`"`)

	// A 404 below a sub-path is styled, and its navigation works.
	b.follow(http.StatusNotFound, chromedp.Navigate(srv.URL+prefix+"leases/"))
	b.waitStyled()
	b.follow(http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="../leases"]`)))
	b.waitFor(`(() => { const h = document.querySelector("main h1"); return h && h.textContent === "Named leases"; })()`)
	b.waitStyled()

	// An entry whose recovery failed three times is parked: the parked
	// page, through the nav link, lists it with its last error.
	past := time.Now().Add(-time.Hour)
	ps, err := st.Lease(ctx, parkedStream, []store.LeaseRequest{{TTL: time.Minute, OperationID: "invoice-77", Kind: "invoice"}},
		&store.LeaseParams{Owner: "invoices-worker-2", Now: &past})
	require.NoError(t, err)
	for range 3 {
		_, err = st.RecordRecoveryFailure(ctx, parkedStream, ps[0].Number, &store.RecoveryFailureParams{Error: parkedError, ParkAfter: 3})
		require.NoError(t, err)
	}
	b.follow(http.StatusOK, chromedp.Click(chromedp.CSS(`nav a[href="parked"]`)))
	b.waitFor(`(() => { const r = document.querySelector("table.parked tbody tr");
		return r && r.cells[0].textContent === "` + parkedStream + `" && r.cells[5].textContent === "3"
			&& r.cells[6].textContent === ` + strconv.Quote(parkedError) + `; })()`)
	b.screenshot("parked")
}

// newStore returns a store on a fresh schema of the test database.
func newStore(t *testing.T) *postgres.Store {
	t.Helper()
	pool := pgtest.Shared(t, false)
	st, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(t, pool)})
	require.NoError(t, err)
	return st
}

// seed leases 1..5 of the stalling stream for an hour and commits all but
// 3, which it returns among the entries; commits 1..3 of the healthy
// stream; takes and renews a named lease; and saves a reader's checkpoint.
func seed(t *testing.T, st *postgres.Store) []store.Entry {
	t.Helper()
	ctx := t.Context()
	reqs := make([]store.LeaseRequest, 5)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Hour, OperationID: fmt.Sprintf("order-%d", 1001+i), Kind: "order"}
	}
	es, err := st.Lease(ctx, stalling, reqs, &store.LeaseParams{Owner: holder})
	require.NoError(t, err)
	for _, e := range es {
		if e.Number != 3 {
			_, err := st.Commit(ctx, stalling, e.Number, e.Token,
				&store.CommitParams{Payload: fmt.Appendf(nil, `{"order":%d,"total":"%d.50"}`, 1000+e.Number, 10*e.Number)})
			require.NoError(t, err)
		}
	}
	ps, err := st.Lease(ctx, healthy, reqs[:3], &store.LeaseParams{Owner: "payments-worker-1"})
	require.NoError(t, err)
	for _, e := range ps {
		_, err := st.Commit(ctx, healthy, e.Number, e.Token, &store.CommitParams{Payload: []byte(`{"paid":true}`)})
		require.NoError(t, err)
	}
	l, err := st.AcquireLease(ctx, leaseName, leaseHold, &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	_, err = st.RenewLease(ctx, l.Name, l.Owner, l.Fence, &store.RenewLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, st.SaveCheckpoint(ctx, reader, stalling, 2, nil))
	return es
}

// browser is one chromium, headless, and one tab in it.
type browser struct {
	t      *testing.T
	tab    context.Context
	output *syncBuffer
}

// newBrowser starts chromium and opens a tab; both close when t ends. It
// fails t, saying how to install chromium, when there is none.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	out := &syncBuffer{}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.WindowSize(width, height),
		chromedp.CombinedOutput(out),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses root with its sandbox
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		// Close the browser gracefully, waiting for it to exit, but not
		// forever.
		cctx, ccancel := context.WithTimeout(tab, waitTimeout)
		if err := chromedp.Cancel(cctx); err != nil {
			t.Logf("closing chromium: %v", err)
		}
		ccancel()
		cancel()
		acancel()
		if t.Failed() {
			o := out.String()
			t.Logf("chromium's output (the end):\n%s", o[max(0, len(o)-4000):])
		}
	})
	start := time.Now()
	// The first Run starts the browser: no timeout on its context, which
	// would stop the browser when it ends.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start chromium (%s): %v\n%s", path, err, out.String())
	}
	t.Logf("chromium started in %v", time.Since(start).Round(time.Millisecond))
	return &browser{t: t, tab: tab, output: out}
}

// chromiumPath returns the chromium to run, or fails t saying how to
// install one.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal(`browsertest: chromium is not installed (not on PATH, not /usr/bin/chromium).

This test drives Debian's chromium. Provide it in one of these ways:
  - run "make browser", which installs it when it is missing (scripts/ensure-chromium,
    as root or through passwordless sudo);
  - install it yourself: sudo apt-get update && sudo apt-get install -y chromium`)
	return ""
}

// do runs actions in the tab, each step bounded by waitTimeout.
func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	for _, a := range actions {
		ctx, cancel := context.WithTimeout(b.tab, waitTimeout)
		_, err := chromedp.Run(ctx, a)
		cancel()
		require.NoError(b.t, err)
	}
}

// follow runs an action that loads a page (a click on a link, a form's
// submit button) and waits until the page has loaded, after any redirect;
// it fails unless the page answered status.
func (b *browser) follow(status int, action chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, waitTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, action)
	require.NoError(b.t, err)
	require.Equal(b.t, int64(status), resp.Status, "%s", resp.URL)
}

// location returns the URL of the tab's page.
func (b *browser) location() string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, waitTimeout)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(b.t, err)
	return loc
}

// clickIn clicks the element that the JavaScript expression elem finds, a
// link in <main>, in one go inside the page. A mouse click (press, then
// release) could straddle a live update, which replaces <main>'s nodes, and
// be lost; the links of the header, never replaced, get real mouse clicks.
func clickIn(elem string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		ok, err := chromedp.Evaluate[bool](`(() => { const e = `+elem+`; if (!e) { return false; } e.click(); return true; })()`)(ctx, t)
		if err == nil && !ok {
			err = fmt.Errorf("no element %s to click", elem)
		}
		return err
	})
}

// waitFor waits until the JavaScript expression is truthy in the page.
func (b *browser) waitFor(expr string) {
	b.t.Helper()
	if _, err := b.poll(`() => (` + expr + `)`); err != nil {
		b.t.Fatalf("waiting for %s: %v", expr, err)
	}
}

// poll waits until the JavaScript function fn, called with args, returns a
// truthy value, and returns that value as JSON; it gives up after
// waitTimeout. A poll that started in a page the browser was leaving
// (its execution context went away under it: a navigation that ended
// after the response its action waited for) starts again in the new one.
func (b *browser) poll(fn string, args ...any) (string, error) {
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(b.tab, time.Until(deadline)+10*time.Second) // the poll's own timeout comes first
		v, err := chromedp.Run(ctx, chromedp.PollFunction[string](`(...args) => { const v = (`+fn+`)(...args); return v ? JSON.stringify(v) : false; }`,
			chromedp.WithPollingArgs(args...),
			chromedp.WithPollingTimeout(time.Until(deadline)), chromedp.WithPollingInterval(50*time.Millisecond)))
		cancel()
		if err == nil || !contextGone(err) || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// contextGone reports whether err says the page's JavaScript context was
// replaced while a call ran in it (the DevTools protocol's -32000 errors).
func contextGone(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") ||
		strings.Contains(msg, "Execution context was destroyed")
}

// waitLive waits until the page's script runs: it shows the "live" mark.
func (b *browser) waitLive() {
	b.t.Helper()
	b.waitFor(`(() => { const l = document.getElementById("live"); return l && !l.hidden; })()`)
}

// waitStyled waits until the page's stylesheet applies (its header is a
// flex box): a stylesheet link that resolves wrong loads a 404 page,
// which the browser refuses as a stylesheet.
func (b *browser) waitStyled() {
	b.t.Helper()
	b.waitFor(`(() => { const h = document.querySelector("header"); return h && getComputedStyle(h).display === "flex"; })()`)
}

// markPage marks the page's window; requireSamePage checks the mark is
// still there: the page changed by its own live updates, not by a load.
func (b *browser) markPage() {
	b.t.Helper()
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](`window.seqleaseBrowserTest = true`)(ctx, t)
		return err
	}))
}

func (b *browser) requireSamePage() {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, waitTimeout)
	defer cancel()
	same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.seqleaseBrowserTest === true`))
	require.NoError(b.t, err)
	require.True(b.t, same, "the page was loaded again: the live update should have changed it in place")
}

// streamRow is a row of the streams page, as text.
type streamRow struct {
	Next      string `json:"next"`
	Watermark string `json:"watermark"`
	Lag       string `json:"lag"`
	InFlight  string `json:"inFlight"`
	Expired   string `json:"expired"`
	Oldest    string `json:"oldest"`
	Gaps      string `json:"gaps"`
	Stalled   bool   `json:"stalled"`
}

// rowJS reads the streams page's row of stream args[0] into r, or null.
const rowJS = `const tr = Array.from(document.querySelectorAll("table.streams tbody tr"))
	.find(tr => tr.cells[0].textContent.trim() === args[0]);
const r = tr ? {
	next: tr.cells[1].textContent.trim(), watermark: tr.cells[2].textContent.trim(),
	lag: tr.cells[3].textContent.trim(), inFlight: tr.cells[4].textContent.trim(),
	expired: tr.cells[5].textContent.trim(), oldest: tr.cells[6].textContent.trim(),
	gaps: tr.cells[7].textContent.trim(), stalled: tr.classList.contains("stalled"),
} : null;`

// waitRow waits until the streams page's row of stream satisfies cond, a
// JavaScript expression on r (a streamRow), and returns the row.
func (b *browser) waitRow(stream, cond string) streamRow {
	b.t.Helper()
	got, err := b.poll(`(...args) => { `+rowJS+` return r && (`+cond+`) ? r : false; }`, stream)
	if err != nil {
		ctx, cancel := context.WithTimeout(b.tab, waitTimeout)
		defer cancel()
		last, lerr := chromedp.Run(ctx, chromedp.Evaluate[string](
			`(() => { const args = [`+strconv.Quote(stream)+`]; `+rowJS+` return JSON.stringify(r); })()`))
		if lerr != nil {
			last = lerr.Error()
		}
		b.t.Fatalf("waiting for the row of %s with %s: %v\nlast seen: %s", stream, cond, err, last)
	}
	var row streamRow
	require.NoError(b.t, json.Unmarshal([]byte(got), &row))
	return row
}

// screenshot writes the viewport to docs/ui/name.png when screenshotsEnv
// is set.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	if os.Getenv(screenshotsEnv) == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.tab, waitTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(b.t, err)
	require.NoError(b.t, os.MkdirAll(screenshotDir, 0o755))
	require.NoError(b.t, os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644))
}

// syncBuffer is a bytes.Buffer safe for chromium's output goroutine and the
// test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
