package ui_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/ui"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// backend is what the tests write through, besides what the pages read.
type backend interface {
	ui.Source
	Lease(ctx context.Context, stream string, reqs []store.LeaseRequest, p *store.LeaseParams) ([]store.Entry, error)
	Commit(ctx context.Context, stream string, number int64, token store.Token, p *store.CommitParams) (time.Time, error)
	ResolveExpiredBatch(ctx context.Context, stream string, numbers []int64, p *store.ResolveExpiredParams) ([]int64, error)
	AcquireLease(ctx context.Context, name, owner string, p *store.AcquireLeaseParams) (store.NamedLease, error)
	RenewLease(ctx context.Context, name, owner string, fence int64, p *store.RenewLeaseParams) (store.NamedLease, error)
	SaveCheckpoint(ctx context.Context, reader, stream string, position int64, p *store.SaveCheckpointParams) error
	AnnounceLeaseWaiter(ctx context.Context, w store.LeaseWaiter) error
}

var (
	_ ui.Source = (*memory.Store)(nil)
	_ ui.Source = (*postgres.Store)(nil)
)

// backends returns a fresh memory store and a store on a fresh PostgreSQL
// schema.
func backends(t *testing.T) map[string]backend {
	return map[string]backend{"memory": memory.New(nil), "postgres": newPostgres(t)}
}

func newPostgres(tb testing.TB) *postgres.Store {
	tb.Helper()
	pool := pgtest.Shared(tb, false)
	s, err := postgres.New(pool, &postgres.Config{Schema: pgtest.NewSchema(tb, pool)})
	require.NoError(tb, err)
	return s
}

// Hostile names and owners: valid for the store, dangerous in a page.
const (
	scriptName = `<script>alert(1)</script>`
	quoteName  = `"quoted" 'stream' & <b>bold</b>`
	owner      = `<script>alert("owner")</script>'&"`
	leaseName  = `<img src=x onerror=alert(1)>`
	readerName = `<script>reader</script>`
	waiterName = `<script>alert("waiter")</script>`
)

// payload carries markup and control characters.
var payload = []byte("<script>alert('payload')</script>\x00\x01\x1b[31m" + strings.Repeat("x", 500))

// fill writes, on stream: 1-3 committed (with payload), 4 leased live by
// owner, 5 leased and expired, 6 a gap (expired, resolved).
func fill(t *testing.T, s backend, stream string) {
	t.Helper()
	ctx := t.Context()
	now, err := s.Now(ctx)
	require.NoError(t, err)
	es, err := s.Lease(ctx, stream, make3(time.Hour), &store.LeaseParams{Owner: owner})
	require.NoError(t, err)
	for _, e := range es {
		_, err := s.Commit(ctx, stream, e.Number, e.Token, &store.CommitParams{Payload: payload})
		require.NoError(t, err)
	}
	_, err = s.Lease(ctx, stream, []store.LeaseRequest{{TTL: time.Hour, OperationID: "op-4"}}, &store.LeaseParams{Owner: owner})
	require.NoError(t, err)
	past := now.Add(-time.Hour)
	_, err = s.Lease(ctx, stream, []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}}, &store.LeaseParams{Owner: owner, Now: &past})
	require.NoError(t, err)
	got, err := s.ResolveExpiredBatch(ctx, stream, []int64{6}, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{6}, got)
}

func make3(ttl time.Duration) []store.LeaseRequest {
	return []store.LeaseRequest{{TTL: ttl}, {TTL: ttl}, {TTL: ttl}}
}

// hostile fills both hostile streams, a named lease with history and a
// checkpoint, all with hostile names.
func hostile(t *testing.T, s backend) {
	t.Helper()
	ctx := t.Context()
	fill(t, s, scriptName)
	fill(t, s, quoteName)
	l, err := s.AcquireLease(ctx, leaseName, owner, &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	_, err = s.RenewLease(ctx, leaseName, owner, l.Fence, &store.RenewLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	require.NoError(t, s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: leaseName, Waiter: waiterName, Since: now, Fence: l.Fence}))
	require.NoError(t, s.SaveCheckpoint(ctx, readerName, scriptName, 2, nil))
}

// response is an answer read whole.
type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, h http.Handler, method, target string) response {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), method, target, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{res.StatusCode, res.Header, string(b)}
}

func get(t *testing.T, h http.Handler, target string) response {
	t.Helper()
	return do(t, h, http.MethodGet, target)
}

func newHandler(t *testing.T, s ui.Source, cfg *ui.Config) *ui.Handler {
	t.Helper()
	c := ui.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Store = s
	h, err := ui.New(&c)
	require.NoError(t, err)
	return h
}

func q(page string, kv ...string) string {
	v := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return page + "?" + v.Encode()
}

// requireSafe checks a page for the escaping and the headers every answer
// carries.
func requireSafe(t *testing.T, r response) {
	t.Helper()
	for _, raw := range []string{scriptName, "<b>", `"quoted"`, "<img", "<script>alert", "<script>reader"} {
		require.NotContains(t, r.body, raw)
	}
	require.NotRegexp(t, regexp.MustCompile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"), r.body, "a control character came through")
	require.Equal(t, "text/html; charset=utf-8", r.header.Get("Content-Type"))
	require.Contains(t, r.header.Get("Content-Security-Policy"), "script-src 'self'")
	require.Contains(t, r.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
	require.Equal(t, "DENY", r.header.Get("X-Frame-Options"))
}

func TestPagesEscapeHostileInput(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hostile(t, s)
			h := newHandler(t, s, nil)
			escaped := "&lt;script&gt;alert(1)&lt;/script&gt;"
			pages := []struct {
				target string
				want   []string
			}{
				{"/", []string{escaped, "&#34;quoted&#34; &#39;stream&#39; &amp; &lt;b&gt;bold&lt;/b&gt;"}},
				{q("/stream", "name", scriptName), []string{escaped, "&lt;script&gt;alert(&#34;owner&#34;)", "expired", "leased", "committed", "gap",
					`&#34;&lt;script&gt;alert(&#39;payload&#39;)&lt;/script&gt;\x00\x01\x1b[31mxxx`, "…(&#43;476 bytes)", "watermark"}},
				{q("/stream", "name", quoteName), []string{"&#34;quoted&#34; &#39;stream&#39; &amp; &lt;b&gt;bold&lt;/b&gt;"}},
				{"/gaps", []string{escaped}},
				{q("/gaps", "stream", scriptName), []string{escaped, "expired", "&lt;script&gt;alert(&#34;owner&#34;)"}},
				{"/leases", []string{"&lt;img src=x onerror=alert(1)&gt;", "&lt;script&gt;alert(&#34;owner&#34;)", "active",
					"&lt;script&gt;alert(&#34;waiter&#34;)&lt;/script&gt;", "pending"}},
				{q("/lease", "name", leaseName), []string{"&lt;img src=x onerror=alert(1)&gt;", "acquired", "renewed", `id="status">active<`,
					"&lt;script&gt;alert(&#34;waiter&#34;)&lt;/script&gt;", "pending"}},
				{"/readers", []string{"&lt;script&gt;reader&lt;/script&gt;", escaped}},
			}
			for _, p := range pages {
				r := get(t, h, p.target)
				require.Equal(t, http.StatusOK, r.status, "%s: %s", p.target, r.body)
				requireSafe(t, r)
				for _, w := range p.want {
					require.True(t, strings.Contains(r.body, w), "%s: no %s", p.target, w)
				}
			}
		})
	}
}

func TestStreamsPageFigures(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fill(t, s, "orders")
			r := get(t, newHandler(t, s, nil), "/")
			require.Equal(t, http.StatusOK, r.status)
			row := rowOf(t, r.body, "orders")
			// next 7, watermark 3, lag 3, in flight 2, expired 1, oldest 4, open gaps 1
			cells := cellsOf(row)
			require.Equal(t, []string{"orders", "7", "3", "3", "2", "1"}, cells[:6], row)
			require.Contains(t, cells[6], "4 leased")
			require.Equal(t, "1", cells[7])
			// the three commits and the gap were resolved just now: the chart counts 4
			require.Contains(t, row, `<span class="total">4</span>`)
			require.Contains(t, row, `class="stalled"`)
		})
	}
}

var tags = regexp.MustCompile(`<[^>]*>`)

// rowOf returns the table row that names stream.
func rowOf(t *testing.T, body, stream string) string {
	t.Helper()
	for _, row := range strings.Split(body, "<tr") {
		if strings.Contains(row, ">"+stream+"</a>") {
			return row
		}
	}
	t.Fatalf("no row for %s in %s", stream, body)
	return ""
}

// cellsOf returns the text of a row's cells.
func cellsOf(row string) []string {
	var out []string
	for _, c := range strings.Split(row, "<td")[1:] {
		c = c[strings.Index(c, ">")+1:]
		c = strings.TrimSpace(tags.ReplaceAllString(strings.SplitN(c, "</td>", 2)[0], ""))
		out = append(out, c)
	}
	return out
}

func TestPagination(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			names := []string{"a", "b", "c", "d", "e"}
			for _, n := range names {
				_, err := s.Lease(ctx, n, []store.LeaseRequest{{TTL: time.Hour}}, nil)
				require.NoError(t, err)
			}
			past := time.Now().Add(-time.Hour)
			reqs := make([]store.LeaseRequest, 7)
			for i := range reqs {
				reqs[i] = store.LeaseRequest{TTL: time.Minute}
			}
			_, err := s.Lease(ctx, "gappy", reqs, &store.LeaseParams{Now: &past})
			require.NoError(t, err)
			_, err = s.ResolveExpiredBatch(ctx, "gappy", []int64{1, 2, 3, 4, 5, 6, 7}, nil)
			require.NoError(t, err)
			for i := range 5 {
				require.NoError(t, s.SaveCheckpoint(ctx, string(rune('p'+i)), "gappy", 7, nil))
			}
			h := newHandler(t, s, nil)

			require.Equal(t, []string{"a", "b", "c", "d", "e", "gappy"}, walk(t, h, "/?limit=2", `<td class="name"><a href="[^"]*">([^<]*)</a>`))
			require.Equal(t, []string{"1", "2", "3", "4", "5", "6", "7"}, walk(t, h, "/gaps?stream=gappy&limit=3", `<td class="num">(\d+)</td>\s*<td>expired`))
			require.Equal(t, []string{"p", "q", "r", "s", "t"}, walk(t, h, "/readers?limit=2", `<td class="name">([a-z])</td>`))
			require.Equal(t, []string{"a", "b", "c", "d", "e", "gappy"}, walk(t, h, "/gaps?limit=4", `<td class="name"><a href="[^"]*">([^<]*)</a>`))

			// The stream page pages through the numbers.
			r := get(t, h, "/stream?name=gappy&after=0&limit=3")
			require.Equal(t, http.StatusOK, r.status)
			require.Contains(t, r.body, "Numbers 1 to 3")
			require.Contains(t, r.body, `href="stream?after=3&amp;limit=3&amp;name=gappy"`)
			require.NotContains(t, r.body, `rel="prev"`)
		})
	}
}

// walk follows the rel="next" links from target and collects the first
// group of re in every page.
func walk(t *testing.T, h http.Handler, target, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	next := regexp.MustCompile(`rel="next" href="([^"]*)"`)
	var out []string
	for pages := 0; target != ""; pages++ {
		require.Less(t, pages, 20, "too many pages")
		r := get(t, h, target)
		require.Equal(t, http.StatusOK, r.status, r.body)
		for _, m := range rx.FindAllStringSubmatch(r.body, -1) {
			out = append(out, m[1])
		}
		base, err := url.Parse(target)
		require.NoError(t, err)
		target = ""
		if m := next.FindStringSubmatch(r.body); m != nil {
			u, err := base.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
			require.NoError(t, err)
			target = u.RequestURI()
		}
	}
	return out
}

func TestBadParametersAnswer400(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	fill(t, s, "orders")
	h := newHandler(t, s, &ui.Config{MaxPageSize: 50})
	huge := strings.Repeat("<script>", 1280) // 10 KB
	cases := []struct{ target, want string }{
		{"/?limit=0", "limit"},
		{"/?limit=51", "from 1 to 50"},
		{"/?limit=abc", "limit"},
		{"/?limit=99999999999999999999", "limit"},
		{q("/", "after", huge), "after"},
		{q("/", "after", "a\x00b"), "control character"},
		{"/stream", "the name parameter is required"},
		{q("/stream", "name", huge), "name"},
		{q("/stream", "name", "orders\x1b[31m"), "control character"},
		{q("/stream", "name", "\xff\xfe"), "UTF-8"},
		{"/stream?name=orders&after=-1", "after"},
		{"/stream?name=orders&after=1e3", "after"},
		{q("/gaps", "stream", huge), "stream"},
		{"/gaps?stream=orders&filled=yes", "filled"},
		{q("/gaps", "stream", "orders", "reason", huge), "reason"},
		{q("/leases", "owner", huge), "owner"},
		{q("/leases", "after", "\x01"), "after"},
		{"/leases?expired=maybe", "expired"},
		{"/lease", "the name parameter is required"},
		{"/lease?name=x&after=-5", "after"},
		{q("/readers", "reader", huge), "reader"},
		{q("/readers", "after_stream", "\x7f"), "after_stream"},
	}
	for _, c := range cases {
		r := get(t, h, c.target)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", c.target, r.body)
		require.Contains(t, r.body, c.want, c.target)
		requireSafe(t, r)
		require.Less(t, len(r.body), 4096, "%s: the message repeats the hostile input whole", c.target)
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHandler(t, s, nil)
			for _, target := range []string{"/stream?name=nope", "/gaps?stream=nope", "/lease?name=nope", "/nowhere", q("/" + scriptName)} {
				r := get(t, h, target)
				require.Equal(t, http.StatusNotFound, r.status, "%s: %s", target, r.body)
				requireSafe(t, r)
			}
		})
	}
}

func TestOnlyGetAndHead(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	fill(t, s, "orders")
	h := newHandler(t, s, nil)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, "BREW"} {
		for _, target := range []string{"/", "/stream?name=orders", "/static/ui.css"} {
			r := do(t, h, m, target)
			require.Equal(t, http.StatusMethodNotAllowed, r.status, "%s %s", m, target)
			require.Equal(t, "GET, HEAD", r.header.Get("Allow"))
			requireSafe(t, r)
		}
	}
	r := do(t, h, http.MethodHead, "/stream?name=orders")
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, r.body)
}

func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	fill(t, s, "orders")
	h := newHandler(t, s, &ui.Config{Title: "ops"})
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "outside", http.StatusTeapot) })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	body := fetch(t, srv.URL+"/ops/", http.StatusOK)
	// Every link is relative, so each resolves under the prefix.
	hrefs := regexp.MustCompile(`(?:href|src)="([^"]*)"`).FindAllStringSubmatch(body, -1)
	require.NotEmpty(t, hrefs)
	base, err := url.Parse(srv.URL + "/ops/")
	require.NoError(t, err)
	for _, m := range hrefs {
		ref := strings.ReplaceAll(m[1], "&amp;", "&")
		require.False(t, strings.HasPrefix(ref, "/"), "absolute link %s", ref)
		u, err := base.Parse(ref)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(u.Path, "/ops/"), "%s leaves the prefix", ref)
		fetch(t, u.String(), http.StatusOK)
	}
	css := fetch(t, srv.URL+"/ops/static/ui.css", http.StatusOK)
	require.Contains(t, css, ".cell")
	fetch(t, srv.URL+"/ops/stream?name=orders", http.StatusOK)
	fetch(t, srv.URL+"/ops/static/nothing.css", http.StatusNotFound)

	// Stripping the prefix with its slash leaves an empty path: the streams page.
	r := get(t, http.StripPrefix("/ops/", h), "/ops/")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, "<h1>Streams</h1>")
}

func fetch(t *testing.T, target string, status int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, target, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, status, res.StatusCode, "%s: %s", target, b)
	return string(b)
}

func TestStoreErrorAnswers500(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	h := newHandler(t, failing{s}, nil)
	r := get(t, h, "/")
	require.Equal(t, http.StatusInternalServerError, r.status)
	require.Contains(t, r.body, "the store could not be read")
	requireSafe(t, r)
}

// failing is a store whose stream listing fails, with hostile text.
type failing struct{ *memory.Store }

func (failing) Streams(context.Context, string, int) ([]string, error) {
	return nil, errString("<script>alert('db')</script>")
}

type errString string

func (e errString) Error() string { return string(e) }

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for _, c := range []struct {
		cfg   *ui.Config
		field string
	}{
		{nil, "Store"},
		{&ui.Config{}, "Store"},
		{&ui.Config{Store: s, PageSize: -1}, "PageSize"},
		{&ui.Config{Store: s, MaxPageSize: 1001}, "MaxPageSize"},
		{&ui.Config{Store: s, PreviewBytes: -1}, "PreviewBytes"},
		{&ui.Config{Store: s, Timeout: -1}, "Timeout"},
		{&ui.Config{Store: s, ChartWindow: -1}, "ChartWindow"},
		{&ui.Config{Store: s, ChartSample: store.MaxListLimit + 1}, "ChartSample"},
	} {
		_, err := ui.New(c.cfg)
		require.ErrorContains(t, err, c.field)
	}
}

func TestStreamReadErrorAnswers500(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	for _, n := range []string{"a", "b", "bad", "c", "d", "e", "f"} {
		fill(t, s, n)
	}
	r := get(t, newHandler(t, s, nil), "/")
	require.Equal(t, http.StatusOK, r.status)
	var log strings.Builder
	r = get(t, newHandler(t, failingStats{s}, &ui.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))}), "/")
	require.Equal(t, http.StatusInternalServerError, r.status)
	require.NotContains(t, r.body, "stats of bad failed", "a store error is not shown to readers")
	ref := regexp.MustCompile(`ref=([0-9a-f]{12})`).FindStringSubmatch(r.body)
	require.NotNil(t, ref, "the page names the log record")
	require.Contains(t, log.String(), "ref="+ref[1])
	require.Contains(t, log.String(), "stats of bad failed")
}

// failingStats is a store whose summaries fail when they include the
// stream "bad".
type failingStats struct{ *memory.Store }

func (f failingStats) SummarizeStreams(ctx context.Context, names []string, p *store.SummaryParams) ([]store.StreamSummary, error) {
	if slices.Contains(names, "bad") {
		return nil, errString("stats of bad failed")
	}
	return f.Store.SummarizeStreams(ctx, names, p)
}

// TestLeasePagesStatus shows a holding past its expiry that maintenance has
// not marked as expired, with no time remaining: on the one-lease page, and
// on the listing only when asked (expired=1); live holdings are active with
// their time remaining.
func TestLeasePagesStatus(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			_, err := s.AcquireLease(ctx, "live", "agent-1", &store.AcquireLeaseParams{TTL: time.Hour})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			past := now.Add(-time.Minute)
			_, err = s.AcquireLease(ctx, "stale", "agent-2", &store.AcquireLeaseParams{TTL: time.Second, Now: &past})
			require.NoError(t, err)
			h := newHandler(t, s, nil)

			r := get(t, h, "/leases")
			require.Equal(t, http.StatusOK, r.status, r.body)
			cells := cellsOf(rowOf(t, r.body, "live"))
			require.Equal(t, []string{"live", "agent-1", "1", "active"}, cells[:4])
			require.Regexp(t, `^(59m\d+s|1h0m0s)$`, cells[5], "time remaining")
			require.NotContains(t, r.body, ">stale</a>", "not live: listed only when asked")
			require.Contains(t, r.body, `href="leases?expired=1"`)

			r = get(t, h, "/leases?expired=1")
			require.Equal(t, http.StatusOK, r.status, r.body)
			cells = cellsOf(rowOf(t, r.body, "stale"))
			require.Equal(t, []string{"stale", "agent-2", "1", "expired"}, cells[:4])
			require.Contains(t, cells[5], "none (expired")
			require.Equal(t, "active", cellsOf(rowOf(t, r.body, "live"))[3])

			r = get(t, h, q("/lease", "name", "stale"))
			require.Equal(t, http.StatusOK, r.status, r.body)
			require.Contains(t, r.body, `id="status">expired<`)
			require.Contains(t, r.body, `id="remaining">none<`)
			require.Contains(t, r.body, "No process waits.")
		})
	}
}

// TestLinksAtAnyDepth opens error pages below sub-paths of a prefix (a 404
// at any depth, an action's refusal under actions/) and follows every
// link: the stylesheet and the script come back as such, navigation
// answers 200, and nothing leaves the prefix.
func TestLinksAtAnyDepth(t *testing.T) {
	t.Parallel()
	b := prepareActions(t, memory.New(nil))
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", b.h))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "outside", http.StatusTeapot) })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	pages := map[string]int{
		"/ops/leases/": http.StatusNotFound, "/ops/stream/extra": http.StatusNotFound, "/ops/a/b/c/": http.StatusNotFound,
		"/ops/static/x/y": http.StatusNotFound, "/ops/a%2Fb/c": http.StatusNotFound,
		"/ops/stream/": http.StatusNotFound, "/ops/": http.StatusOK, "/ops/stream?name=orders": http.StatusOK,
	}
	for target, status := range pages {
		body := fetch(t, srv.URL+target, status)
		requireLinksWork(t, srv.URL+target, body)
	}
	// An action refused (no token), under actions/.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/ops/actions/force-release", strings.NewReader("reason=x"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(operatorHeader, operator)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, res.StatusCode, string(body))
	requireLinksWork(t, srv.URL+"/ops/actions/force-release", string(body))

	// A path that is not clean, from a router that passes it on: no
	// redirect to the clean path, which would leave the prefix.
	for _, target := range []string{"/ops//leases", "/ops/x/../leases"} {
		r := get(t, http.StripPrefix("/ops", b.h), target)
		require.Equal(t, http.StatusNotFound, r.status, "%s: %v", target, r.header)
	}
	// Mounted with the prefix's slash stripped too, a page is found.
	r := get(t, http.StripPrefix("/ops/", b.h), "/ops/leases")
	require.Equal(t, http.StatusOK, r.status, r.body)
}

// requireLinksWork follows every link of body, the page at pageURL: each
// stays under /ops/ and answers 200, the stylesheet and script with their
// types.
func requireLinksWork(t *testing.T, pageURL, body string) {
	t.Helper()
	base, err := url.Parse(pageURL)
	require.NoError(t, err)
	hrefs := regexp.MustCompile(`(?:href|src)="([^"#]*)"`).FindAllStringSubmatch(body, -1)
	require.NotEmpty(t, hrefs, pageURL)
	for _, m := range hrefs {
		u, err := base.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(u.Path, "/ops/"), "%s: %s leaves the prefix", pageURL, m[1])
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u.String(), nil)
		require.NoError(t, err)
		req.Header.Set(operatorHeader, operator) // for the confirmation pages
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: link %s (%s)", pageURL, m[1], u)
		switch {
		case strings.HasSuffix(u.Path, ".css"):
			require.Contains(t, res.Header.Get("Content-Type"), "text/css", "%s: %s", pageURL, u)
		case strings.HasSuffix(u.Path, ".js"):
			require.Contains(t, res.Header.Get("Content-Type"), "javascript", "%s: %s", pageURL, u)
		}
	}
}

// TestLeaseHistoryNewestFirst shows a named lease's history newest first,
// paging backwards to the oldest event and forwards again.
func TestLeaseHistoryNewestFirst(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			l, err := s.AcquireLease(ctx, "leader", "node-1", &store.AcquireLeaseParams{TTL: time.Hour})
			require.NoError(t, err)
			for range 6 {
				l, err = s.RenewLease(ctx, "leader", "node-1", l.Fence, &store.RenewLeaseParams{TTL: time.Hour})
				require.NoError(t, err)
			}
			evs, err := s.LeaseHistory(ctx, "leader", nil)
			require.NoError(t, err)
			require.Len(t, evs, 7)
			var want []string
			for i := len(evs) - 1; i >= 0; i-- {
				want = append(want, strconv.FormatInt(evs[i].ID, 10))
			}
			h := newHandler(t, s, nil)
			idRE := `<td class="num">(\d+)</td>\s*<td>(?:acquired|renewed)`

			first := get(t, h, "/lease?name=leader&limit=3")
			require.Equal(t, http.StatusOK, first.status, first.body)
			require.Contains(t, first.body, "Newest first")
			require.NotContains(t, first.body, `rel="prev"`, "nothing is newer than the first page")
			require.Equal(t, want, walk(t, h, "/lease?name=leader&limit=3", idRE), "newest first, paging backwards")

			// From the oldest page, forwards again.
			last := get(t, h, "/lease?name=leader&limit=3&before="+want[5])
			require.Equal(t, []string{want[6]}, regexp.MustCompile(idRE).FindAllStringSubmatch(last.body, -1)[0][1:])
			m := regexp.MustCompile(`rel="prev" href="([^"]*)"`).FindStringSubmatch(last.body)
			require.NotNil(t, m, "the oldest page links to newer events")
			newer := get(t, h, "/"+strings.ReplaceAll(m[1], "&amp;", "&"))
			var got []string
			for _, g := range regexp.MustCompile(idRE).FindAllStringSubmatch(newer.body, -1) {
				got = append(got, g[1])
			}
			require.Equal(t, want[3:6], got, "the events just newer, still newest first")

			require.Equal(t, http.StatusBadRequest, get(t, h, "/lease?name=leader&after=1&before=5").status)
			require.Equal(t, http.StatusBadRequest, get(t, h, "/lease?name=leader&before=-1").status)
		})
	}
}
