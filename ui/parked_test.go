package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/ui"
)

var (
	_ store.Parker = (*memory.Store)(nil)
)

// hostileError is a last recovery error with markup, quotes and control
// characters, longer than the parked page shows.
var hostileError = `<script>alert("err")</script>'&` + "\x1b[31m\n\t" + strings.Repeat("e", 300)

// park leases n numbers of stream, expired an hour ago, and parks each
// after one failed recovery with hostileError.
func park(t *testing.T, s backend, stream string, n int) {
	t.Helper()
	ctx := t.Context()
	now, err := s.Now(ctx)
	require.NoError(t, err)
	past := now.Add(-time.Hour)
	reqs := make([]store.LeaseRequest, n)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Minute, OperationID: fmt.Sprintf("op-%d", i+1), Kind: "refund"}
	}
	es, err := s.Lease(ctx, stream, reqs, &store.LeaseParams{Owner: owner, Now: &past})
	require.NoError(t, err)
	pk := s.(store.Parker)
	for _, e := range es {
		got, err := pk.RecordRecoveryFailure(ctx, stream, e.Number, &store.RecoveryFailureParams{Error: hostileError, ParkAfter: 1})
		require.NoError(t, err)
		require.True(t, got.Parked())
	}
}

func TestParkedPage(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hostile(t, s)
			park(t, s, scriptName, 1) // number 7, after fill's 1-6
			fill(t, s, "orders")
			park(t, s, "orders", 3) // 7, 8, 9
			h := newHandler(t, s, nil)

			r := get(t, h, "/parked")
			require.Equal(t, http.StatusOK, r.status, r.body)
			requireSafe(t, r)
			require.Contains(t, r.body, `<a href="parked" aria-current="page">Parked work</a>`)
			require.NotContains(t, r.body, "not shown yet")
			require.Contains(t, r.body, "4 parked entries in all")
			require.NotContains(t, r.body, `class="action"`, "read-only: no action links")
			row := rowOf(t, r.body, "&lt;script&gt;alert(1)&lt;/script&gt;")
			cells := cellsOf(row)
			require.Equal(t, []string{"7", "refund", "op-1", "&lt;script&gt;alert(&#34;owner&#34;)&lt;/script&gt;&#39;&amp;&#34;", "1"}, cells[1:6], row)
			// The last error: escaped, control characters as Go escapes,
			// cut in the cell and whole in its title.
			shown := `&lt;script&gt;alert(&#34;err&#34;)&lt;/script&gt;&#39;&amp;\x1b[31m\n\t`
			require.True(t, strings.HasPrefix(cells[6], shown+"eee"), cells[6])
			require.True(t, strings.HasSuffix(cells[6], "…(&#43;"+fmt.Sprint(len(hostileError)-155)+" bytes)"), cells[6])
			require.Contains(t, row, `title="`+shown+strings.Repeat("e", 300)+`"`)

			// One stream, paged by its numbers; every stream, by (stream, number):
			// the script stream's 7, then those of orders.
			require.Equal(t, []string{"7", "8", "9"}, walk(t, h, "/parked?stream=orders&limit=2", `<td class="num">(\d+)</td>\s*<td>refund`))
			require.Equal(t, []string{"7", "7", "8", "9"}, walk(t, h, "/parked?limit=1", `<td class="num">(\d+)</td>\s*<td>refund`))
			r = get(t, h, "/parked?stream=nope")
			require.Equal(t, http.StatusNotFound, r.status)
			for _, bad := range []string{"/parked?after=-1", q("/parked", "stream", "a\x01"), q("/parked", "after_stream", "\x7f"), "/parked?limit=0"} {
				r = get(t, h, bad)
				require.Equal(t, http.StatusBadRequest, r.status, bad)
				requireSafe(t, r)
			}

			// The streams page marks the stream, linking to its parked entries.
			r = get(t, h, "/")
			cells = cellsOf(rowOf(t, r.body, "orders"))
			require.Equal(t, "4 3 parked", cells[5])
			require.Contains(t, r.body, `<a class="parked" href="parked?stream=orders">3 parked</a>`)
			require.NotContains(t, cellsOf(rowOf(t, r.body, "&#34;quoted&#34; &#39;stream&#39; &amp; &lt;b&gt;bold&lt;/b&gt;"))[5], "parked")

			// The stream page counts them and shows each as parked.
			r = get(t, h, q("/stream", "name", "orders"))
			requireSafe(t, r)
			require.Contains(t, r.body, `<dt>Parked</dt><dd><a class="bad" href="parked?stream=orders">3</a></dd>`)
			require.Contains(t, r.body, `<tr id="n8" class="parked">`)
			require.Contains(t, r.body, `<a href="parked?after=7&amp;after_stream=orders&amp;stream=orders">parked</a> after 1 failed recoveries`)
			require.Contains(t, r.body, `<tr id="n5" class="expired">`, "expired, not parked")
		})
	}
}

// TestParkedUnsupported serves a store that keeps no parked work: the
// page says so, and the parked actions are not reachable.
func TestParkedUnsupported(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	b := prepareActions(t, s)
	before := b.state(t)
	f := form(t, b.h, q("/unpark", "stream", "parked", "number", "1"), operator)
	f.Set("reason", "retry it")

	h := newHandler(t, struct{ ui.Source }{s}, nil)
	r := get(t, h, "/parked")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, "Parked work is not supported by this store.")
	require.Contains(t, get(t, h, q("/stream", "name", "parked")).body, `<tr id="n1" class="parked">`,
		"the entry still shows parked: the entry says so")

	h = newHandler(t, struct{ ui.ActionStore }{s}, &ui.Config{Actions: &ui.ActionsConfig{
		Authenticate: authenticate, Secret: []byte(strings.Repeat("k", 32))}})
	require.Equal(t, http.StatusNotFound, request(t, h, http.MethodGet, q("/unpark", "stream", "parked", "number", "1"), nil, operator).status)
	r = request(t, h, http.MethodPost, "/actions/unpark", f, operator)
	require.Equal(t, http.StatusNotFound, r.status, r.body)
	require.Contains(t, r.body, "not supported by this store")
	require.Equal(t, before, b.state(t))
}

// TestParkedActionStale posts forms drawn while the entry was parked after
// it changed: each is refused with 409 and changes nothing.
func TestParkedActionStale(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := prepareActions(t, s)
			unpark := form(t, b.h, q("/unpark", "stream", "parked", "number", "1"), operator)
			giveUp := form(t, b.h, q("/give-up", "stream", "parked", "number", "1"), operator)
			unpark.Set("reason", "retry")
			giveUp.Set("reason", "lost cause")
			r := request(t, b.h, http.MethodPost, "/actions/unpark", unpark, operator)
			require.Equal(t, http.StatusSeeOther, r.status, r.body)
			before := b.state(t)
			for action, f := range map[string]url.Values{"unpark": unpark, "give-up": giveUp} {
				r := request(t, b.h, http.MethodPost, "/actions/"+action, f, operator)
				require.Equal(t, http.StatusConflict, r.status, "%s: %s", action, r.body)
				require.Contains(t, r.body, "not parked: refused, nothing changed")
				requireSafe(t, r)
				require.Equal(t, before, b.state(t))
			}
			// A number the stream did not hand out.
			r = request(t, b.h, http.MethodGet, q("/give-up", "stream", "parked", "number", "99"), nil, operator)
			require.Equal(t, http.StatusNotFound, r.status, r.body)
			require.Contains(t, b.log.String(), `"outcome":"refused"`)
		})
	}
}
