package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

// TestServe runs seqlease serve on a free port, reads its address from
// its JSON line, fetches pages, and stops it by cancelling its context.
func TestServe(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)
	_, err = s.Lease(t.Context(), "<orders>", []store.LeaseRequest{{TTL: time.Hour}}, &store.LeaseParams{Owner: "w1"})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	var errOut strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-dsn", pgtest.URL(), "-schema", schema, "-json", "serve", "-addr", "127.0.0.1:0", "-allow-host", "ops.example"}, pw, &errOut)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err, "serve printed its address")
	go func() { _, _ = io.Copy(io.Discard, pr) }() // nothing more is expected; never block the command
	var got serveRow
	require.NoError(t, json.Unmarshal([]byte(line), &got))
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/$`, got.URL)
	for _, k := range jsonKeys(t, line) {
		require.Regexp(t, snakeCase, k)
	}

	for host, status := range map[string]int{"attacker.example": http.StatusForbidden, "attacker.example:80": http.StatusForbidden,
		"localhost": http.StatusOK, "ops.example:8080": http.StatusOK, "": http.StatusOK} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, got.URL, nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host // as a DNS rebinding page's requests name it
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, status, res.StatusCode, "Host %q", host)
	}
	body := httpGet(t, got.URL, http.StatusOK)
	require.Contains(t, body, "&lt;orders&gt;")
	require.NotContains(t, body, "<orders>")
	httpGet(t, got.URL+"stream?name=%3Corders%3E", http.StatusOK)
	httpGet(t, got.URL+"stream?name=", http.StatusBadRequest)
	res, err := http.Post(got.URL, "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)

	cancel()
	require.Equal(t, 0, <-done, errOut.String())
	require.Empty(t, errOut.String(), "a loopback address draws no warning")
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
