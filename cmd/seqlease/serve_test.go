package main

import (
	"bufio"
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// served is a running seqlease serve: the URL it printed, and how to stop
// it.
type served struct {
	url    string
	line   string // its JSON line
	cancel context.CancelFunc
	done   chan int
	errOut *syncWriter
}

// startServe runs seqlease -json serve with args on schema until stop, and
// reads the URL it prints.
func startServe(t *testing.T, schema string, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	s := &served{cancel: cancel, done: make(chan int, 1), errOut: &syncWriter{}}
	go func() {
		s.done <- run(ctx, append([]string{"-dsn", pgtest.URL(), "-schema", schema, "-json", "serve"}, args...), pw, s.errOut)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		<-s.done
		t.Fatalf("serve printed no address: %v; stderr: %s", err, s.errOut.String())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }() // nothing more is expected; never block the command
	var got serveRow
	require.NoError(t, json.Unmarshal([]byte(line), &got))
	s.url, s.line = got.URL, line
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop interrupts the command and checks that it ended well; safe twice.
func (s *served) stop(t *testing.T) {
	t.Helper()
	if s.done == nil {
		return
	}
	s.cancel()
	require.Equal(t, 0, <-s.done, s.errOut.String())
	s.done = nil
}

// syncWriter is a strings.Builder safe for the command's goroutine and the
// test.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func serveSchema(t *testing.T) (*postgres.Store, string) {
	t.Helper()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	return s, schema
}

// TestServe runs seqlease serve on a free port, reads its address from
// its JSON line, fetches pages, and stops it by cancelling its context.
func TestServe(t *testing.T) {
	t.Parallel()
	s, schema := serveSchema(t)
	_, err := s.Lease(t.Context(), "<orders>", []store.LeaseRequest{{TTL: time.Hour}}, &store.LeaseParams{Owner: "w1"})
	require.NoError(t, err)

	sv := startServe(t, schema, "-addr", "127.0.0.1:0", "-allow-host", "ops.example")
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/$`, sv.url)
	for _, k := range jsonKeys(t, sv.line) {
		require.Regexp(t, snakeCase, k)
	}

	for host, status := range map[string]int{"attacker.example": http.StatusForbidden, "attacker.example:80": http.StatusForbidden,
		"localhost": http.StatusOK, "ops.example:8080": http.StatusOK, "": http.StatusOK} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, sv.url, nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host // as a DNS rebinding page's requests name it
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, status, res.StatusCode, "Host %q", host)
	}
	body := httpGet(t, sv.url, http.StatusOK)
	require.Contains(t, body, "&lt;orders&gt;")
	require.NotContains(t, body, "<orders>")
	httpGet(t, sv.url+"stream?name=%3Corders%3E", http.StatusOK)
	httpGet(t, sv.url+"stream?name=", http.StatusBadRequest)
	res, err := http.Post(sv.url, "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)

	sv.stop(t)
	require.Empty(t, sv.errOut.String(), "a loopback address draws no warning")
}

// TestServeUnspecifiedAddress binds every interface (-addr :PORT, 0.0.0.0,
// [::]): the URL serve prints answers 200, not 403 for the host it names.
func TestServeUnspecifiedAddress(t *testing.T) {
	t.Parallel()
	_, schema := serveSchema(t)
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		sv := startServe(t, schema, "-addr", addr)
		require.Regexp(t, `^http://[^/]+:\d+/$`, sv.url, addr)
		httpGet(t, sv.url, http.StatusOK)
		httpGet(t, sv.url+"leases", http.StatusOK)
		sv.stop(t)
		require.Contains(t, sv.errOut.String(), "answers other machines", addr)
	}
}

func httpGet(t *testing.T, url string, status int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, status, res.StatusCode, "%s: %s", url, b)
	return string(b)
}

func TestServeRefusals(t *testing.T) {
	t.Parallel()
	code, _, errOut := seqlease(t, "serve", "-refresh", "-1s")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "-refresh must not be negative")
	code, _, errOut = seqlease(t, "serve", "unexpected")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unexpected "unexpected"`)
	code, _, errOut = seqlease(t, "serve", "-addr", "256.0.0.1:0")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "serve: listen tcp")
	code, _, errOut = seqlease(t, "serve", "-addr", "127.0.0.1:0", "-allow-host", "ops.example:8080")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "AllowedHosts")
	code, out, _ := seqlease(t, "serve", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, out, `(default "127.0.0.1:8080")`)
}

// operatorToken is a token strong enough for an operators file.
const operatorToken = "k3J9xQ2mV7pL0sT4wY8zB1nC6dF5gH-_"

// writeOperators writes an operators file with mode perm and returns its
// path.
func writeOperators(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "operators")
	require.NoError(t, os.WriteFile(path, []byte(content), perm))
	require.NoError(t, os.Chmod(path, perm)) // whatever the umask
	return path
}

// TestServeOperators runs serve with an operators file: every request
// needs an operator's HTTP Basic credentials; an operator force-releases
// a named lease through the confirmation form, and the history records
// them; the same POST without credentials, or with a wrong token, is
// refused and changes nothing.
func TestServeOperators(t *testing.T) {
	t.Parallel()
	s, schema := serveSchema(t)
	ctx := t.Context()
	_, err := s.AcquireLease(ctx, "job", "agent-1", &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	path := writeOperators(t, "# who may act\nana:"+operatorToken+"\n\nbob:"+strings.ToUpper(operatorToken)+"x\n", 0o600)
	sv := startServe(t, schema, "-addr", "127.0.0.1:0", "-operators", path)

	send := func(method, target string, body url.Values, user, token string) (*http.Response, string) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			rd = strings.NewReader(body.Encode())
		}
		req, err := http.NewRequestWithContext(ctx, method, sv.url+target, rd)
		require.NoError(t, err)
		if body != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if user != "" {
			req.SetBasicAuth(user, token)
		}
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(b)
	}

	for _, c := range []struct{ user, token string }{{"", ""}, {"ana", "wrong"}, {"eve", operatorToken}, {"ana", operatorToken + "x"}} {
		res, _ := send(http.MethodGet, "", nil, c.user, c.token)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, "%+v", c)
		require.Contains(t, res.Header.Get("WWW-Authenticate"), `Basic realm="seqlease"`)
	}
	res, body := send(http.MethodGet, "lease?name=job", nil, "ana", operatorToken)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `id="force-release"`, "the actions are on")

	res, body = send(http.MethodGet, "force-release?name=job", nil, "ana", operatorToken)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `Acting as <span class="owner">ana</span>`)
	form := url.Values{"reason": {"agent-1 is stuck"}}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]*)" value="([^"]*)">`).FindAllStringSubmatch(body, -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	require.NotEmpty(t, form.Get("token"))

	for _, c := range []struct{ user, token string }{{"", ""}, {"ana", "wrong"}} {
		res, _ = send(http.MethodPost, "actions/force-release", form, c.user, c.token)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, "%+v", c)
	}
	res, _ = send(http.MethodPost, "actions/force-release", form, "bob", strings.ToUpper(operatorToken)+"x")
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a token drawn for ana")
	l, err := s.GetLease(ctx, "job", nil)
	require.NoError(t, err)
	require.True(t, l.Held(), "a refused action changed nothing")

	res, body = send(http.MethodPost, "actions/force-release", form, "ana", operatorToken)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	l, err = s.GetLease(ctx, "job", nil)
	require.NoError(t, err)
	require.False(t, l.Held())
	evs, err := s.LeaseHistory(ctx, "job", &store.LeaseHistoryParams{Newest: true, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "ana", evs[0].Actor)
	require.Equal(t, "agent-1 is stuck", evs[0].Comment)

	sv.stop(t)
	require.Contains(t, sv.errOut.String(), `msg="ui: action" action=force-release actor=ana`)
}

// TestServeOperatorsRefused: a malformed or weak operators file is
// refused, naming the file, and nothing is served.
func TestServeOperatorsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		content string
		perm    os.FileMode
		want    string
	}{
		{"ana:" + operatorToken + "\n", 0o644, "chmod 600"},
		{"ana:" + operatorToken + "\n", 0o640, "readable by others than its owner"},
		{"ana " + operatorToken + "\n", 0o600, ":1: want NAME:TOKEN"},
		{"ana:short\n", 0o600, "is 5 characters, want at least 32"},
		{"ana:" + strings.Repeat("ab", 20) + "\n", 0o600, "2 distinct characters"},
		{"ana:" + operatorToken + " x\n", 0o600, "spaces or control characters"},
		{"ana:" + operatorToken + "\nana:" + operatorToken + "\n", 0o600, `:2: operator "ana" is given twice`},
		{":" + operatorToken + "\n", 0o600, "operator name"},
		{"an\x1ba:" + operatorToken + "\n", 0o600, "operator name"},
		{"# nobody\n\n", 0o600, "names no operator"},
	} {
		path := writeOperators(t, c.content, c.perm)
		code, out, errOut := seqlease(t, "serve", "-addr", "127.0.0.1:0", "-operators", path)
		require.Equal(t, 2, code, "%q: %s", c.content, errOut)
		require.Empty(t, out, "nothing is served")
		require.Contains(t, errOut, path)
		require.Contains(t, errOut, c.want, "%q", c.content)
		require.NotContains(t, errOut, operatorToken, "the error does not repeat a token")
	}
	code, _, errOut := seqlease(t, "serve", "-operators", filepath.Join(t.TempDir(), "missing"))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "no such file")
}
