package ui_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/postgres"
	"github.com/seqlease/seqlease/ui"
)

var (
	_ ui.ActionStore = (*memory.Store)(nil)
	_ ui.ActionStore = (*postgres.Store)(nil)
)

// The operators' header of the tests' Authenticate.
const (
	operatorHeader = "X-Operator"
	operator       = "alice"
	// hostileReason is a valid reason that is markup.
	hostileReason = `<script>alert("reason")</script>'&`
)

// actionsBundle is a handler with actions on a store prepared by
// prepareActions, its clock and its log.
type actionsBundle struct {
	s      backend
	h      *ui.Handler
	offset atomic.Int64 // added to the token clock, in ns
	log    *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// authenticate names the actor of the operator header: an error without
// one.
func authenticate(r *http.Request) (string, error) {
	if a := r.Header.Get(operatorHeader); a != "" {
		return a, nil
	}
	return "", errors.New("no operator")
}

// prepareActions writes what the actions act on: named leases job and
// job2 held by agent-1, stream stalled with two expired leases (nothing
// live before them), stream orders (see fill) whose 6 is an open gap, and
// stream parked whose 1 and 2 are parked (see park).
func prepareActions(t *testing.T, s backend) *actionsBundle {
	t.Helper()
	ctx := t.Context()
	for _, name := range []string{"job", "job2"} {
		_, err := s.AcquireLease(ctx, name, "agent-1", &store.AcquireLeaseParams{TTL: time.Hour})
		require.NoError(t, err)
	}
	now, err := s.Now(ctx)
	require.NoError(t, err)
	past := now.Add(-time.Hour)
	_, err = s.Lease(ctx, "stalled", []store.LeaseRequest{{TTL: time.Minute}, {TTL: time.Minute}}, &store.LeaseParams{Owner: owner, Now: &past})
	require.NoError(t, err)
	fill(t, s, "orders")
	park(t, s, "parked", 2)
	b := &actionsBundle{s: s, log: &syncBuffer{}}
	b.h = newHandler(t, s, &ui.Config{
		Logger: slog.New(slog.NewJSONHandler(b.log, nil)),
		Actions: &ui.ActionsConfig{
			Authenticate: authenticate,
			Secret:       bytes.Repeat([]byte("k"), 32),
			Now:          func() time.Time { return time.Now().Add(time.Duration(b.offset.Load())) },
		},
	})
	return b
}

// state sums up what the actions change, to show a refusal changed nothing.
func (b *actionsBundle) state(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	var out []string
	for _, name := range []string{"job", "job2"} {
		l, err := b.s.GetLease(ctx, name, nil)
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%s %s %d held=%v %s", name, l.Owner, l.Fence, l.Held(), l.EndReason))
	}
	for _, stream := range []string{"stalled", "orders", "parked"} {
		es, err := b.s.Read(ctx, stream, 0, 100)
		require.NoError(t, err)
		for _, e := range es {
			out = append(out, fmt.Sprintf("%s/%d %s %s %q %s parked=%v attempts=%d", stream, e.Number, e.State, e.FilledBy, e.Payload,
				e.GapReason, e.Parked(), e.RecoveryAttempts))
		}
	}
	return strings.Join(out, "\n")
}

// request sends method target with form as the body, as operator (none
// when empty), with the extra headers.
func request(t *testing.T, h http.Handler, method, target string, form url.Values, as string, hdr ...string) response {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequestWithContext(t.Context(), method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if as != "" {
		r.Header.Set(operatorHeader, as)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	return response{res.StatusCode, res.Header, w.Body.String()}
}

var inputRE = regexp.MustCompile(`<input type="hidden" name="([^"]*)" value="([^"]*)">`)

// form opens the confirmation page target as operator and returns its
// form: the bound fields and the token, ready for a reason.
func form(t *testing.T, h http.Handler, target, as string) url.Values {
	t.Helper()
	r := request(t, h, http.MethodGet, target, nil, as)
	require.Equal(t, http.StatusOK, r.status, "%s: %s", target, r.body)
	requireSafe(t, r)
	require.Contains(t, r.body, `id="reason" name="reason"`)
	require.Contains(t, r.body, `id="confirm" name="confirm"`)
	require.NotContains(t, r.body, `data-refresh="5"`, "a confirmation page must not refresh")
	v := url.Values{}
	for _, m := range inputRE.FindAllStringSubmatch(r.body, -1) {
		name, err := url.QueryUnescape(unescapeHTML(m[1]))
		require.NoError(t, err)
		v.Set(name, unescapeHTML(m[2]))
	}
	require.NotEmpty(t, v.Get("token"))
	return v
}

func unescapeHTML(s string) string {
	return strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&#43;", "+").Replace(s)
}

// The actions and their confirmation pages in the tests.
var testActions = []struct {
	name, confirm string
}{
	{"force-release", q("/force-release", "name", "job")},
	{"resolve-expired", q("/resolve-expired", "stream", "stalled")},
	{"fill-gap", q("/fill-gap", "stream", "orders", "number", "6")},
	{"unpark", q("/unpark", "stream", "parked", "number", "1")},
	{"give-up", q("/give-up", "stream", "parked", "number", "2")},
}

func TestActionsSucceed(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := prepareActions(t, s)
			ctx := t.Context()
			// The pages link to the confirmation pages.
			require.Contains(t, get(t, b.h, q("/lease", "name", "job")).body, `href="force-release?name=job"`)
			require.Contains(t, get(t, b.h, q("/stream", "name", "stalled")).body, `href="resolve-expired?stream=stalled"`)
			require.Contains(t, get(t, b.h, q("/gaps", "stream", "orders")).body, `href="fill-gap?number=6&amp;stream=orders"`)
			parkedPage := get(t, b.h, "/parked").body
			require.Contains(t, parkedPage, `href="unpark?number=1&amp;stream=parked"`)
			require.Contains(t, parkedPage, `href="give-up?number=2&amp;stream=parked"`)

			for _, a := range testActions {
				f := form(t, b.h, a.confirm, operator)
				f.Set("reason", hostileReason)
				f.Set("confirm", "1")
				if a.name == "fill-gap" {
					f.Set("payload", "<b>refund</b>")
				}
				r := request(t, b.h, http.MethodPost, "/actions/"+a.name, f, operator)
				require.Equal(t, http.StatusSeeOther, r.status, "%s: %s", a.name, r.body)
				loc := r.header.Get("Location")
				require.True(t, strings.HasPrefix(loc, "../"), "%s: Location %s is not relative", a.name, loc)
				page := get(t, b.h, "/"+strings.TrimPrefix(loc, "../"))
				require.Equal(t, http.StatusOK, page.status, page.body)
				requireSafe(t, page)
				require.NotContains(t, page.body, `<script>alert("reason")`)
				require.Contains(t, page.body, `Reason: <q class="reason">&lt;script&gt;alert(&#34;reason&#34;)&lt;/script&gt;&#39;&amp;</q> (by <span class="actor">alice</span>)`)
				require.Contains(t, page.body, `id="result"`)

				// A tampered result is not shown.
				u, err := url.Parse(strings.TrimPrefix(loc, "../"))
				require.NoError(t, err)
				qv := u.Query()
				qv.Set("done", "Force-released everything.")
				u.RawQuery = qv.Encode()
				require.NotContains(t, get(t, b.h, "/"+u.String()).body, `id="result"`)
			}

			l, err := s.GetLease(ctx, "job", nil)
			require.NoError(t, err)
			require.False(t, l.Held())
			require.Equal(t, store.LeaseForceReleased, l.EndReason)
			l2, err := s.GetLease(ctx, "job2", nil)
			require.NoError(t, err)
			require.True(t, l2.Held(), "the holder's other lease is kept: only the named holding ends")
			evs, err := s.LeaseHistory(ctx, "job", nil)
			require.NoError(t, err)
			last := evs[len(evs)-1]
			require.Equal(t, store.LeaseForceReleased, last.Kind)
			require.Equal(t, store.LeaseReasonForceReleased, last.Reason)
			require.Equal(t, operator, last.Actor, "the history records the operator")
			require.Equal(t, hostileReason, last.Comment, "and the reason given")
			leasePage := get(t, b.h, q("/lease", "name", "job"))
			requireSafe(t, leasePage)
			require.Contains(t, leasePage.body, `<td class="owner">alice</td>`)
			require.Contains(t, leasePage.body, `<td class="comment">&lt;script&gt;alert(&#34;reason&#34;)&lt;/script&gt;&#39;&amp;</td>`)
			require.Contains(t, leasePage.body, `id="status">force-released<`)

			es, err := s.Read(ctx, "stalled", 0, 10)
			require.NoError(t, err)
			require.Len(t, es, 2)
			for _, e := range es {
				require.Equal(t, store.Gap, e.State)
				require.Equal(t, store.ReasonExpired, e.GapReason)
			}

			es, err = s.Read(ctx, "orders", 5, 1)
			require.NoError(t, err)
			require.Equal(t, store.Committed, es[0].State)
			require.Equal(t, operator, es[0].FilledBy)
			require.Equal(t, "<b>refund</b>", string(es[0].Payload))

			es, err = s.Read(ctx, "parked", 0, 10)
			require.NoError(t, err)
			require.Equal(t, store.Leased, es[0].State, "unparked, not resolved")
			require.False(t, es[0].Parked())
			require.Zero(t, es[0].RecoveryAttempts)
			require.Equal(t, hostileError, es[0].LastRecoveryError, "the last error is kept")
			require.Equal(t, store.Gap, es[1].State)
			require.Equal(t, "given-up", es[1].GapReason)

			// Each action is recorded at INFO with its actor and reason.
			log := b.log.String()
			for _, a := range testActions {
				require.Contains(t, log, `"level":"INFO","msg":"ui: action","action":"`+a.name+`","actor":"alice","reason":"<script>alert(\"reason\")</script>'&"`)
			}
			require.Contains(t, log, `"ended":"job"`)
			require.Contains(t, log, `"gaps":2`)
			require.Contains(t, log, `"gap_reason":"given-up"`)

			// Acting again is refused and changes nothing.
			before := b.state(t)
			require.Equal(t, http.StatusConflict, request(t, b.h, http.MethodGet, testActions[0].confirm, nil, operator).status)
			require.Equal(t, http.StatusConflict, request(t, b.h, http.MethodGet, testActions[2].confirm, nil, operator).status)
			require.Equal(t, http.StatusConflict, request(t, b.h, http.MethodGet, testActions[3].confirm, nil, operator).status)
			require.Equal(t, http.StatusConflict, request(t, b.h, http.MethodGet, testActions[4].confirm, nil, operator).status)
			require.Equal(t, before, b.state(t))
		})
	}
}

func TestActionsRefused(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := prepareActions(t, s)
			before := b.state(t)
			for _, a := range testActions {
				valid := func() url.Values {
					f := form(t, b.h, a.confirm, operator)
					f.Set("reason", "the agent crashed")
					return f
				}
				with := func(k, v string) url.Values {
					f := valid()
					f.Set(k, v)
					return f
				}
				without := func(k string) url.Values {
					f := valid()
					f.Del(k)
					return f
				}
				target := "/actions/" + a.name
				otherTok := form(t, b.h, a.confirm, "bob").Get("token")
				otherField := valid()
				for k := range otherField {
					if k != "token" && k != "reason" {
						otherField.Set(k, otherField.Get(k)+"x")
						break
					}
				}
				tok := valid().Get("token")
				cases := []struct {
					name   string
					method string
					form   url.Values
					as     string
					hdr    []string
					status int
				}{
					{"no token", http.MethodPost, without("token"), operator, nil, http.StatusForbidden},
					{"bad token", http.MethodPost, with("token", tamper(tok)), operator, nil, http.StatusForbidden},
					{"token with unused bits set", http.MethodPost, with("token", setUnusedBits(tok)), operator, nil, http.StatusForbidden},
					{"garbage token", http.MethodPost, with("token", "x.y.z"), operator, nil, http.StatusForbidden},
					{"another actor's token", http.MethodPost, with("token", otherTok), operator, nil, http.StatusForbidden},
					{"token of another target", http.MethodPost, otherField, operator, nil, http.StatusForbidden},
					{"cross-site", http.MethodPost, valid(), operator, []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
					{"other origin", http.MethodPost, valid(), operator, []string{"Origin", "https://evil.example"}, http.StatusForbidden},
					{"not authenticated", http.MethodPost, valid(), "", nil, http.StatusUnauthorized},
					{"invalid actor", http.MethodPost, valid(), "eve\x07", nil, http.StatusForbidden},
					{"overlong actor", http.MethodPost, valid(), strings.Repeat("e", store.MaxNameLen+1), nil, http.StatusForbidden},
					{"no reason", http.MethodPost, without("reason"), operator, nil, http.StatusBadRequest},
					{"control character", http.MethodPost, with("reason", "crashed\nsee log"), operator, nil, http.StatusBadRequest},
					{"long reason", http.MethodPost, with("reason", strings.Repeat("r", ui.DefaultMaxReasonBytes+1)), operator, nil, http.StatusBadRequest},
					{"invalid UTF-8", http.MethodPost, with("reason", "\xff"), operator, nil, http.StatusBadRequest},
					{"GET", http.MethodGet, nil, operator, nil, http.StatusMethodNotAllowed},
					{"PUT", http.MethodPut, valid(), operator, nil, http.StatusMethodNotAllowed},
				}
				for _, c := range cases {
					r := request(t, b.h, c.method, target, c.form, c.as, c.hdr...)
					require.Equal(t, c.status, r.status, "%s %s: %s", a.name, c.name, r.body)
					requireSafe(t, r)
					require.Equal(t, before, b.state(t), "%s %s changed the store", a.name, c.name)
				}

				// An expired token.
				f := valid()
				b.offset.Store(int64(ui.DefaultTokenTTL + time.Second))
				r := request(t, b.h, http.MethodPost, target, f, operator)
				b.offset.Store(0)
				require.Equal(t, http.StatusForbidden, r.status, r.body)
				require.Contains(t, r.body, "expired")

				// The confirmation page needs authentication too.
				r = request(t, b.h, http.MethodGet, a.confirm, nil, "")
				require.Equal(t, http.StatusUnauthorized, r.status)
				require.NotContains(t, r.body, `name="token"`)
			}
			r := request(t, b.h, http.MethodPost, "/actions/drop-table", url.Values{}, operator)
			require.Equal(t, http.StatusNotFound, r.status)
			require.Equal(t, before, b.state(t))
			require.NotContains(t, b.log.String(), `"outcome":"done"`)
		})
	}
}

func TestActionsDisabled(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	b := prepareActions(t, s)
	before := b.state(t)
	// A token from a handler with actions, offered to one without.
	f := form(t, b.h, q("/force-release", "name", "job"), operator)
	f.Set("reason", "the agent crashed")

	_, err := ui.New(&ui.Config{Store: s, Actions: &ui.ActionsConfig{}})
	require.ErrorContains(t, err, "Config.Actions.Authenticate is required")
	_, err = ui.New(&ui.Config{Store: struct{ ui.Source }{s}, Actions: &ui.ActionsConfig{Authenticate: authenticate}})
	require.ErrorContains(t, err, "ui.ActionStore")
	_, err = ui.New(&ui.Config{Store: s, Actions: &ui.ActionsConfig{Authenticate: authenticate, Secret: []byte("short")}})
	require.ErrorContains(t, err, "Config.Actions.Secret")

	h := newHandler(t, s, nil)
	for _, target := range []string{q("/lease", "name", "job"), q("/stream", "name", "stalled"), q("/gaps", "stream", "orders")} {
		r := request(t, h, http.MethodGet, target, nil, operator)
		require.Equal(t, http.StatusOK, r.status)
		require.NotContains(t, r.body, "<form")
		require.NotContains(t, r.body, `class="action"`)
		require.Contains(t, r.header.Get("Content-Security-Policy"), "form-action 'none'")
	}
	for _, a := range testActions {
		require.Equal(t, http.StatusNotFound, request(t, h, http.MethodGet, a.confirm, nil, operator).status)
		require.Equal(t, http.StatusNotFound, request(t, h, http.MethodGet, "/actions/"+a.name, nil, operator).status)
		r := request(t, h, http.MethodPost, "/actions/"+a.name, f, operator)
		require.Equal(t, http.StatusMethodNotAllowed, r.status)
		require.Equal(t, "GET, HEAD", r.header.Get("Allow"))
	}
	require.Equal(t, before, b.state(t))
}

// TestActionsMountedUnderPrefix drives a force-release through a real
// server under a prefix: the form's action and the redirect are relative.
func TestActionsMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	b := prepareActions(t, memory.New(nil))
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", b.h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	f := form(t, http.StripPrefix("/ops", b.h), "/ops/force-release?name=job", operator)
	page := request(t, http.StripPrefix("/ops", b.h), http.MethodGet, "/ops/force-release?name=job", nil, operator)
	require.Contains(t, page.body, `action="actions/force-release"`)
	f.Set("reason", "stuck")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/ops/actions/force-release", strings.NewReader(f.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(operatorHeader, operator)
	req.Header.Set("Origin", srv.URL)
	res, err := http.DefaultClient.Do(req) // follows the 303 with a GET
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "/ops/lease", res.Request.URL.Path)
	var buf bytes.Buffer
	_, err = buf.ReadFrom(res.Body)
	require.NoError(t, err)
	require.Contains(t, buf.String(), "Force-released named lease job of agent-1 (fence 1).")
}

// tamper changes one character well inside the token's MAC, to another:
// cutting in "AA" at the end left the token as it was when it already
// ended so (1 in about 1,000 runs), and the low bits of the last base64
// character may be ignored by the decoder.
func tamper(tok string) string {
	b := []byte(tok)
	i := len(b) - 10
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// setUnusedBits sets the bits of the token's last base64 character that
// encode nothing (a 32-byte MAC leaves two): a lenient decoder reads the
// same MAC from it, so only a strict one refuses it.
func setUnusedBits(tok string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	return tok[:len(tok)-1] + string(alphabet[last|1])
}
