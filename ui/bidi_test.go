package ui_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/ui"
)

// Names with format characters, which the store accepts (only control
// characters are refused): a right-to-left override (U+202E) reverses what
// follows it, up to the end of its paragraph, the page's own words
// included; isolates (U+2066..U+2069) and marks (U+200F) reorder too.
const (
	rtlStream   = "rtl \u202egnp.exe"
	rtlLease    = "lease \u2067x\u2069 \u202eevil"
	rtlOwner    = "worker \u202e7"
	rtlReader   = "reader \u200f\u202e"
	rtlOp       = "op \u2066"
	rtlKind     = "kind \u202e"
	rtlReason   = "why \u202etxt"
	rtlOperator = "ana \u202e"
	rtlTitle    = "ops \u202e"
)

// prepareRTL writes, on rtlStream: 1-2 committed with a payload, 3 a gap
// with rtlReason, 4 expired, 5 and 6 parked with an error; a named lease
// with history and a waiter, and a reader's checkpoint; every name, owner,
// operation, kind, reason and error with format characters.
func prepareRTL(t *testing.T, s backend) {
	t.Helper()
	ctx := t.Context()
	now, err := s.Now(ctx)
	require.NoError(t, err)
	es, err := s.Lease(ctx, rtlStream, []store.LeaseRequest{{TTL: time.Hour, OperationID: rtlOp, Kind: rtlKind}, {TTL: time.Hour}},
		&store.LeaseParams{Owner: rtlOwner})
	require.NoError(t, err)
	for _, e := range es {
		_, err := s.Commit(ctx, rtlStream, e.Number, e.Token, &store.CommitParams{Payload: []byte("pay \u202eload")})
		require.NoError(t, err)
	}
	past := now.Add(-time.Hour)
	reqs := make([]store.LeaseRequest, 4)
	for i := range reqs {
		reqs[i] = store.LeaseRequest{TTL: time.Minute, OperationID: rtlOp, Kind: rtlKind}
	}
	es, err = s.Lease(ctx, rtlStream, reqs, &store.LeaseParams{Owner: rtlOwner, Now: &past})
	require.NoError(t, err)
	_, err = s.ResolveExpiredBatch(ctx, rtlStream, []int64{3}, &store.ResolveExpiredParams{Reason: rtlReason})
	require.NoError(t, err)
	for _, e := range es[2:] {
		_, err := s.(store.Parker).RecordRecoveryFailure(ctx, rtlStream, e.Number, &store.RecoveryFailureParams{Error: "failed \u202erorre", ParkAfter: 1})
		require.NoError(t, err)
	}
	l, err := s.AcquireLease(ctx, rtlLease, rtlOwner, &store.AcquireLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	_, err = s.RenewLease(ctx, rtlLease, rtlOwner, l.Fence, &store.RenewLeaseParams{TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.AnnounceLeaseWaiter(ctx, store.LeaseWaiter{Name: rtlLease, Waiter: rtlOwner + "w", Since: now, Fence: l.Fence}))
	require.NoError(t, s.SaveCheckpoint(ctx, rtlReader, rtlStream, 2, nil))
}

// requireNoFormat checks that page shows no format character as it is, and
// shows them escaped.
func requireNoFormat(t *testing.T, target string, r response) {
	t.Helper()
	if i := strings.IndexFunc(r.body, func(c rune) bool { return unicode.Is(unicode.Cf, c) }); i >= 0 {
		t.Fatalf("%s: a format character is shown as it is: %q", target, r.body[max(0, i-80):min(len(r.body), i+80)])
	}
	require.Contains(t, r.body, `\u202e`, "%s: the override is shown escaped", target)
}

// TestFormatCharactersEscaped opens every page, confirmation page, result
// and error page with names full of format characters: none comes through
// as it is, so none reorders the page's text; each shows as an escape.
func TestFormatCharactersEscaped(t *testing.T) {
	t.Parallel()
	for name, s := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prepareRTL(t, s)
			h := newHandler(t, s, &ui.Config{Title: rtlTitle, Actions: &ui.ActionsConfig{Authenticate: authenticate,
				Secret: bytes.Repeat([]byte("k"), 32)}})
			for _, target := range []string{
				"/", q("/stream", "name", rtlStream), "/gaps", q("/gaps", "stream", rtlStream), "/leases",
				q("/lease", "name", rtlLease), "/readers", "/parked", q("/parked", "stream", rtlStream),
			} {
				r := request(t, h, http.MethodGet, target, nil, rtlOperator)
				require.Equal(t, http.StatusOK, r.status, "%s: %s", target, r.body)
				requireNoFormat(t, target, r)
			}
			for _, c := range []struct {
				target string
				status int
			}{
				{q("/stream", "name", "nope \u202e"), http.StatusNotFound},
				{"/x%E2%80%AE", http.StatusNotFound},
				{"/?limit=%E2%80%AE", http.StatusBadRequest},
			} {
				r := request(t, h, http.MethodGet, c.target, nil, rtlOperator)
				require.Equal(t, c.status, r.status, "%s: %s", c.target, r.body)
				requireNoFormat(t, c.target, r)
			}

			for _, a := range []struct{ name, confirm, result string }{
				{"force-release", q("/force-release", "name", rtlLease), `Force-released named lease lease \u2067x\u2069 \u202eevil of worker \u202e7`},
				{"resolve-expired", q("/resolve-expired", "stream", rtlStream), `Cleanup pass over rtl \u202egnp.exe: 3 expired, 1 made gaps`},
				{"fill-gap", q("/fill-gap", "stream", rtlStream, "number", "3"), `Filled gap 3 of rtl \u202egnp.exe`},
				{"unpark", q("/unpark", "stream", rtlStream, "number", "5"), `Unparked 5 of rtl \u202egnp.exe`},
				{"give-up", q("/give-up", "stream", rtlStream, "number", "6"), `Gave up 6 of rtl \u202egnp.exe`},
			} {
				page := request(t, h, http.MethodGet, a.confirm, nil, rtlOperator)
				require.Equal(t, http.StatusOK, page.status, "%s: %s", a.confirm, page.body)
				requireNoFormat(t, a.confirm, page)
				f := form(t, h, a.confirm, rtlOperator)
				f.Set("reason", rtlReason)
				f.Set("payload", "fill \u202e")
				r := request(t, h, http.MethodPost, "/actions/"+a.name, f, rtlOperator)
				require.Equal(t, http.StatusSeeOther, r.status, "%s: %s", a.name, r.body)
				target := "/" + strings.TrimPrefix(r.header.Get("Location"), "../")
				res := get(t, h, target)
				require.Equal(t, http.StatusOK, res.status, res.body)
				requireNoFormat(t, target, res)
				require.Contains(t, res.body, a.result)
				require.Contains(t, res.body, `Reason: <q class="reason">why \u202etxt</q> (by <span class="actor">ana \u202e</span>)`)
			}
		})
	}
}
