package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/ui"
)

// countingSource counts the entries its Read returns.
type countingSource struct {
	ui.Source
	read atomic.Int64
}

func (s *countingSource) Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error) {
	es, err := s.Source.Read(ctx, stream, after, limit)
	s.read.Add(int64(len(es)))
	return es, err
}

// The streams page reads no entry, so no payload: the store counts the
// chart's resolutions.
func TestStreamsPageReadsNoPayload(t *testing.T) {
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			fill(t, s, "orders")
			cs := &countingSource{Source: s}
			r := get(t, newHandler(t, cs, nil), "/")
			require.Equal(t, 200, r.status)
			require.Contains(t, r.body, `aria-label="4 resolved in the last 10m0s; per 30s, oldest first: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 4"`,
				"the chart counts 3 commits and a gap")
			require.Zero(t, cs.read.Load(), "the streams page read whole entries")
		})
	}
}

// The pages count at most 100 expired (and parked) entries of a stream.
func TestExpiredCountCapped(t *testing.T) {
	s := memory.New(nil)
	past := time.Now().Add(-time.Hour)
	reqs := make([]store.LeaseRequest, 150)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Minute}
	}
	_, err := s.Lease(t.Context(), "stalled", reqs, &store.LeaseParams{Owner: "w", Now: &past})
	require.NoError(t, err)
	r := get(t, newHandler(t, s, nil), "/")
	require.Equal(t, 200, r.status)
	require.Contains(t, r.body, `<td class="num bad">100&#43;</td>`)
}

// A stream with more resolutions in the window than ChartSample shows an
// estimate, marked as one; the store sampled every Stride-th number.
func TestChartEstimateMarked(t *testing.T) {
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			_, err := s.(store.Appender).Append(t.Context(), "busy", make([]store.AppendRequest, 30), nil)
			require.NoError(t, err)
			r := get(t, newHandler(t, s, &ui.Config{ChartSample: 10}), "/")
			require.Equal(t, 200, r.status)
			row := rowOf(t, r.body, "busy")
			require.Contains(t, row, `<span class="total">≈30</span>`)
			require.Contains(t, row, `aria-label="about 30 resolved in the last 10m0s;`)
			r = get(t, newHandler(t, s, &ui.Config{ChartSample: 30}), "/")
			require.Contains(t, rowOf(t, r.body, "busy"), `<span class="total">30</span>`, "30 samples read every number")
		})
	}
}

// A ChartWindow under a second (a step of zero between the chart's bars)
// is refused, naming the field.
func TestChartWindowValidated(t *testing.T) {
	s := memory.New(nil)
	for _, w := range []time.Duration{-1, 1, 19, 20, time.Second - 1} {
		_, err := ui.New(&ui.Config{Store: s, ChartWindow: w})
		var ce *ui.ConfigError
		require.ErrorAs(t, err, &ce, "ChartWindow %v", w)
		require.Equal(t, "ChartWindow", ce.Field)
		require.ErrorIs(t, err, store.ErrInvalidArgument)
	}
	_, err := ui.New(&ui.Config{Store: s, ChartWindow: time.Second})
	require.NoError(t, err)
}

// panicking is a store whose Stats panics for the stream "boom", and so
// do summaries that include it.
type panicking struct{ *memory.Store }

func (p panicking) Stats(ctx context.Context, name string) (store.StreamStats, error) {
	if name == "boom" {
		panic("stats exploded")
	}
	return p.Store.Stats(ctx, name)
}

func (p panicking) SummarizeStreams(ctx context.Context, names []string, sp *store.SummaryParams) ([]store.StreamSummary, error) {
	if slices.Contains(names, "boom") {
		panic("stats exploded")
	}
	return p.Store.SummarizeStreams(ctx, names, sp)
}

// A panic in a page's worker goroutines answers 500; it does not end the
// process.
func TestWorkerPanicAnswers500(t *testing.T) {
	s := memory.New(nil)
	for _, n := range []string{"a", "b", "boom", "c", "d", "e"} {
		fill(t, s, n)
	}
	r := get(t, newHandler(t, panicking{s}, nil), "/")
	require.Equal(t, 500, r.status)
	require.NotContains(t, r.body, "stats exploded")
	r = get(t, newHandler(t, panicking{s}, nil), "/stream?name=boom")
	require.Equal(t, 500, r.status, "a panic in the request's own goroutine too")
}

// An after near the largest number pages back from the stream's end; no
// link overflows into a negative number.
func TestStreamAfterOverflow(t *testing.T) {
	s := memory.New(nil)
	fill(t, s, "s")
	h := newHandler(t, s, nil)
	for _, target := range []string{
		"/stream?name=s&after=9223372036854775807",
		"/stream?name=s&after=9223372036854775800&limit=500",
	} {
		r := get(t, h, target)
		require.Equal(t, 200, r.status, target)
		require.NotContains(t, r.body, "after=-", target)
		require.NotContains(t, r.body, `rel="next"`, target)
		require.Contains(t, r.body, "after=0", "the earlier link goes back from the end: %s", target)
	}
}

// The static files are served, their directory is not listed.
func TestStaticNoListing(t *testing.T) {
	h := newHandler(t, memory.New(nil), nil)
	for _, target := range []string{"/static/", "/static/%2e%2e/", "/static/nothing.js"} {
		r := get(t, h, target)
		require.Equal(t, 404, r.status, target)
		require.NotContains(t, r.body, `<a href="ui.js">`, target)
	}
	r := get(t, h, "/static/ui.js")
	require.Equal(t, 200, r.status)
	require.Contains(t, r.header.Get("Content-Type"), "javascript")
}

// With AllowedHosts, a request for another host (a DNS rebinding page's
// name) is refused before anything is read.
func TestAllowedHosts(t *testing.T) {
	s := memory.New(nil)
	fill(t, s, "orders")
	h := newHandler(t, s, &ui.Config{AllowedHosts: []string{"localhost", "127.0.0.1", "::1", "Ops.Example"}})
	for _, host := range []string{"localhost", "LOCALHOST:8080", "127.0.0.1:8080", "[::1]:8080", "[::1]", "ops.example"} {
		r := get(t, h, "http://"+host+"/stream?name=orders")
		require.Equal(t, 200, r.status, host)
	}
	for _, host := range []string{"attacker.example", "attacker.example:8080", "127.0.0.2", "localhost.attacker.example", "[::2]:80"} {
		r := get(t, h, "http://"+host+"/stream?name=orders")
		require.Equal(t, 403, r.status, host)
		require.NotContains(t, r.body, "alert(&#39;payload", host)
	}
	r := get(t, newHandler(t, s, nil), "http://attacker.example/")
	require.Equal(t, 200, r.status, "without AllowedHosts any host is answered")
	for _, bad := range []string{"", "localhost:8080", "[::1]", "a b"} {
		_, err := ui.New(&ui.Config{Store: s, AllowedHosts: []string{bad}})
		var ce *ui.ConfigError
		require.ErrorAs(t, err, &ce, bad)
		require.Equal(t, "AllowedHosts", ce.Field)
	}
}

// An action's result shows only on the page it was about, until the token
// TTL passes, with the operator's reason set apart from the store's
// outcome.
func TestResultBoundToPageAndTime(t *testing.T) {
	b := prepareActions(t, memory.New(nil))
	f := form(t, b.h, q("/give-up", "stream", "parked", "number", "2"), operator)
	f.Set("reason", "Your session expired: log in again at https://evil.example")
	r := request(t, b.h, http.MethodPost, "/actions/give-up", f, operator)
	require.Equal(t, http.StatusSeeOther, r.status, r.body)
	u, err := url.Parse(strings.TrimPrefix(r.header.Get("Location"), "../"))
	require.NoError(t, err)
	shown := func(target string) bool { return strings.Contains(get(t, b.h, target).body, `id="result"`) }

	page := get(t, b.h, "/"+u.String()).body
	require.Contains(t, page, `Reason: <q class="reason">Your session expired: log in again at https://evil.example</q> (by <span class="actor">alice</span>)`)
	for _, other := range []string{"/leases?", "/?", "/gaps?", "/parked?stream=other&", "/stream?name=parked&"} {
		require.False(t, shown(other+u.RawQuery), "a result for %s shown on %s", u.Path, other)
	}
	for _, k := range []string{"done", "reason", "by", "exp"} {
		v := u.Query()
		v.Set(k, v.Get(k)+"1")
		require.False(t, shown("/"+u.Path+"?"+v.Encode()), "%s altered", k)
	}
	b.offset.Store(int64(ui.DefaultTokenTTL + time.Second))
	require.False(t, shown("/"+u.String()), "an expired result is shown")
	b.offset.Store(0)
	require.True(t, shown("/"+u.String()))
}
