package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/seqlease/seqlease/store"
)

// Limits of an operators file (serve -operators).
const (
	// minTokenLen is the shortest token accepted: 32 characters, as
	// `openssl rand -base64 32` (44) or `openssl rand -hex 16` (32) print.
	minTokenLen = 32
	// minTokenChars is the fewest distinct characters a token must have,
	// to refuse "aaaa...": random tokens of 32 characters have more
	// than 10 (about 14 in hex, 24 in base64).
	minTokenChars = 10
	// maxOperators bounds the file.
	maxOperators = 1000
)

// operators are the operators of serve -operators: each name with the
// SHA-256 of its token (the file's tokens are not kept).
type operators struct {
	tokens map[string][sha256.Size]byte
}

// loadOperators reads an operators file: one "NAME:TOKEN" per line, blank
// lines and lines starting with # ignored. It refuses, naming the file and
// line, a file that group or others can read, a line without a colon, a
// name that is not a valid actor (at most store.MaxNameLen bytes of UTF-8
// without control characters) or is given twice, a token shorter than
// minTokenLen or with fewer than minTokenChars distinct characters or with
// spaces or control characters, and a file with no operator.
func loadOperators(path string) (*operators, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others than its owner (mode %v): its tokens are passwords; chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	o := &operators{tokens: map[string][sha256.Size]byte{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", path, n, fmt.Sprintf(format, args...))
		}
		name, token, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, bad("want NAME:TOKEN")
		case name == "" || len(name) > store.MaxNameLen || store.ValidateText("name", name) != nil:
			return nil, bad("operator name %s: want 1 to %d bytes of UTF-8 without control characters", store.QuoteInput(name), store.MaxNameLen)
		}
		if _, dup := o.tokens[name]; dup {
			return nil, bad("operator %s is given twice", store.QuoteInput(name))
		}
		if err := checkToken(token); err != nil {
			return nil, bad("the token of %s %v", store.QuoteInput(name), err)
		}
		if len(o.tokens) == maxOperators {
			return nil, bad("more than %d operators", maxOperators)
		}
		o.tokens[name] = sha256.Sum256([]byte(token))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(o.tokens) == 0 {
		return nil, fmt.Errorf("%s names no operator: want lines NAME:TOKEN", path)
	}
	return o, nil
}

// checkToken refuses a weak or malformed token.
func checkToken(token string) error {
	distinct := map[rune]bool{}
	for _, r := range token {
		if r <= ' ' || r == 0x7f {
			return errors.New("has spaces or control characters")
		}
		distinct[r] = true
	}
	switch {
	case len(token) < minTokenLen:
		return fmt.Errorf("is %d characters, want at least %d (openssl rand -base64 32)", len(token), minTokenLen)
	case len(distinct) < minTokenChars:
		return fmt.Errorf("has %d distinct characters, want at least %d: use a random one (openssl rand -base64 32)", len(distinct), minTokenChars)
	}
	return nil
}

// errNotAuthenticated is authenticate's refusal.
var errNotAuthenticated = errors.New("not authenticated: HTTP Basic authentication with an operator's name and token")

// authenticate returns the operator of r's HTTP Basic credentials, or
// errNotAuthenticated. Tokens are compared as SHA-256 digests, in
// constant time; an unknown name costs the same comparison.
func (o *operators) authenticate(r *http.Request) (string, error) {
	name, token, ok := r.BasicAuth()
	if !ok {
		return "", errNotAuthenticated
	}
	want, known := o.tokens[name]
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || !known {
		return "", errNotAuthenticated
	}
	return name, nil
}

// require answers 401 with a Basic challenge to every request that is not
// an operator's, and passes the others to h: with -operators, reading the
// pages needs a login too.
func (o *operators) require(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := o.authenticate(r); err != nil {
			hd := w.Header()
			hd.Set("WWW-Authenticate", `Basic realm="seqlease", charset="UTF-8"`)
			hd.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
			hd.Set("X-Content-Type-Options", "nosniff")
			hd.Set("Cache-Control", "no-store")
			http.Error(w, "seqlease: "+err.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
