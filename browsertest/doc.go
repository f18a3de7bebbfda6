// Package browsertest drives the web interface (package ui) in a real
// browser: Debian's chromium, headless, through the DevTools protocol
// (github.com/chromedp/chromedp), against PostgreSQL.
//
// It is a module of its own, so that chromedp stays out of the library's
// go.mod; it has no code besides its tests. Run it with
//
//	make browser
//
// which installs chromium when it is missing (scripts/ensure-chromium,
// with apt-get, as root or through passwordless sudo) and runs
//
//	cd browsertest && go test -race -count=1 ./...
//
// # What the test sees
//
// TestBrowser serves the handler on httptest, mounted under a prefix as an
// application would, and opens the streams page. It leases numbers on a
// stream and commits all but one, then lets that one's lease expire: the
// page, refreshed by its own script (the test never reloads it), marks the
// stream stalled with one expired lease holding the watermark, and the
// cleanup loop (Config.Cleanup) not started. A cleanup pass
// (cleanup.Service.RunOnce) declares the number a gap and the page shows
// the stream recover: the watermark moves past it, nothing expired, and
// the pass is shown. It then follows the links to every other page (a
// named lease's history newest first), and force-releases a named lease
// as an operator (the handler's actions on, Authenticate naming the
// operator): the confirmation page's form with its CSRF token altered in
// the page is refused with 403, on a page whose stylesheet applies, and
// the lease stays held; the form as served, with a reason typed in,
// releases it, and the test checks the store, the page's result box and
// the handler's log record. A 404 below a sub-path is styled too, and its
// navigation leads back. Every wait is a
// condition on the DOM (chromedp.Poll), never a sleep, bounded by
// waitTimeout (generous: the machines are small and shared). One browser
// serves the whole run.
//
// # Screenshots
//
// With SEQLEASE_SCREENSHOTS=1 the test writes a screenshot of each page
// (1200x800 PNG), the force-release's confirmation and its result included,
// into docs/ui/, the ones docs/ui.md shows; without it, it writes nothing.
//
// # Requirements
//
// A test that cannot start chromium fails, never skips, saying how to
// install it; the database is found as in every other package
// (internal/pgtest: SEQLEASE_TEST_DATABASE_URL or 127.0.0.1:5432/test), and
// the test works in a schema of its own.
package browsertest
