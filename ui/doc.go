// Package ui is a web interface to a seqlease store, read-only unless its
// actions are turned on: an http.Handler that an application mounts in its own mux, and that
// `seqlease serve` runs on its own.
//
//	h, err := ui.New(&ui.Config{Store: st}) // *postgres.Store or *memory.Store
//	if err != nil {
//		return err
//	}
//	mux.Handle("/seqlease/", http.StripPrefix("/seqlease", h))
//
// # Pages
//
// Every page answers one question an operator asks when a stream stalls:
//
//	/            all streams: next number, watermark, lag (handed out
//	             beyond the watermark), in flight, expired leases, the
//	             oldest unresolved number and its age, open gaps, and the
//	             throughput over the last ChartWindow as a bar chart;
//	             above them, whether the cleanup loop of this process
//	             runs and when its last full pass ended (Config.Cleanup)
//	/stream      one stream (name): its figures and a timeline of the
//	             numbers around the watermark, each committed, leased,
//	             expired, a gap or filled, with its holder, expiry, gap
//	             reason, recovery and a payload preview; pages by after
//	/gaps        the streams with their open gap counts; with stream, its
//	             gaps with reasons and where their work went: recovered
//	             as, committed again under a later number with the same
//	             operation id (store.CommitFinder, over at most
//	             store.MaxFindSpan numbers), filled, or lost (reason,
//	             filled=1 to filter and widen; pages by after)
//	/leases      the live named leases: holder, fence, status, time
//	             remaining (expired=1 adds the expired holdings not yet
//	             marked), and the processes waiting for names
//	/lease       one named lease (name): its holding with its status and
//	             time remaining, its waiters, and its audit history newest
//	             first with reasons and, for a force-release, who and why
//	             (before to page backwards, after forwards)
//	/readers     the readers' checkpoints with their streams' watermarks
//	             and lag
//	/parked      the parked entries (store.Parker): recovery kept failing,
//	             so each holds its stream until an operator chooses; with
//	             the attempts and the last error (stream to filter;
//	             after_stream, after to page)
//
// The streams page marks a stream's parked entries among its expired ones
// (no extra query: the expired listing carries ParkedAt), and the stream
// page labels them parked. A store that is not a store.Parker has no
// parked work: the page says so. Statuses are the store's
// (NamedLease.Status, by the backend's clock: a holding past its expiry
// that maintenance has not marked reads expired); waiters are the store's
// announcements of blocked acquires (ListLeaseWaiters), pending.
//
// # Actions
//
// With Config.Actions, these actions write: force-release a named lease's
// holder (store ForceReleaseLeases with the operator as Actor and the
// form's reason as Reason, recorded in the history of each lease it ends,
// as `seqlease force-release -by -reason`), resolve
// a stream's expired entries (one pass of a cleanup.Service over the
// stream, gaps only, under the stream's cleanup lease, as `seqlease
// cleanup STREAM`), fill a gap (gap.Gaps.Fill, as `seqlease fill-gap`),
// and, on a store.Parker, unpark a parked entry (UnparkEntry, as
// `seqlease unpark`) or give it up as a gap with reason "given-up"
// (ResolveExpired, as `seqlease give-up`). Each is two requests, without
// JavaScript:
//
//	GET  /force-release?name=N           confirmation page: what will happen,
//	GET  /resolve-expired?stream=S       a form with the bound fields, a
//	GET  /fill-gap?stream=S&number=N     token and a reason input
//	GET  /unpark?stream=S&number=N
//	GET  /give-up?stream=S&number=N
//	POST /actions/NAME                   checks, acts, 303 to the page it is
//	                                     about with a signed result message
//
// The POST is refused, changing nothing, in this order: a cross-origin
// request (http.CrossOriginProtection, 403); no actor from
// ActionsConfig.Authenticate (401; an invalid actor 403); a token that is
// missing, altered, expired or drawn for another actor, action or bound
// fields (403: an HMAC-SHA256 under ActionsConfig.Secret); a missing,
// long or control-character reason (400, store.ErrInvalidArgument). Then
// the store call; its refusals (the lease changed since the confirmation,
// not a gap, no longer parked) answer 409. Every action that passed the checks is one INFO
// record in Config.Logger with its actor, reason, fields and outcome: the
// store has no place yet for the actor and the reason. Without Actions no
// action link or form is rendered, the confirmation pages answer 404 and a
// POST 405: no action is reachable without an authentication function.
//
// A token has no nonce and the handler keeps no state: until it expires
// (ActionsConfig.TokenTTL) its operator may post it again, and the
// store's state checks (holder and fence, an open gap, a parked entry)
// refuse most such replays. The result message is signed with the page
// it is for and the same expiry, and shows the operator's free-text
// reason quoted, apart from the store's outcome.
//
// # Design
//
// The pages are rendered on the server by html/template from templates
// embedded with the binary, with one small stylesheet and one small script
// (embed.FS, no build step, no framework). Every page works without
// JavaScript: links page through listings, and reloading shows the present.
// Where JavaScript runs, static/ui.js fetches the same URL every Refresh
// and swaps in the new <main>, skipping while the tab is hidden.
//
// The store seam is four small interfaces defined here (StreamSource,
// GapSource, LeaseSource, CheckpointSource), the read methods the CLI and
// the health package already use; *postgres.Store and *memory.Store
// satisfy Source, their union. Times are the store's clock (Now), read
// once per request, so ages and expiries agree with the database.
//
// The streams page reads its rows with store.StreamSummarizer: a page of
// streams in a few statements side by side (streamWorkers), each
// summarizing a share of them in one snapshot, rather than a few round
// trips per stream; no entry and no payload is read. The store keeps no
// counters, so the throughput chart is counted by the store from the
// entries' resolution times (store.Throughput): exactly when at most
// ChartSample numbers were resolved since the window began, else
// estimated from every Stride-th number, marked "≈". The chart is one SVG
// path, so a page of 100 charts costs a few escaped attributes each, not
// a hundred.
//
// # Security
//
// Stream names, owners, reasons, reader and lease names and payloads are
// user input. html/template escapes each by context (text, attribute,
// URL); no template value is marked safe. Payload previews are cut at
// PreviewBytes and Go-quoted, so control characters and invalid UTF-8 show
// as escapes. Format characters (Unicode Cf: bidirectional overrides,
// isolates and marks, zero-width joiners), which the store accepts in
// names and text, show as escapes too (\u202e) on every page, in text,
// attributes and titles alike: the rendered page goes through one filter,
// so an override in a name cannot reverse the page's own words after it.
// The bound fields of an action's form are Go-quoted for the same reason,
// and unquoted when posted. Query parameters are validated before any store read (the
// store's own name and text rules, page sizes 1..MaxPageSize, numbers of
// at least 0): a bad one answers 400 with a message that quotes it through
// store.QuoteInput (short, single line), never a panic. Every listing is
// bounded and paginated with a cursor (after, after_reader/after_stream);
// counts of expired leases stop at 100 (shown as 100+). Without Actions
// the handler only reads: GET and HEAD, 405 for any other method. Every answer carries a
// Content-Security-Policy (script-src 'self', no inline script or style,
// frame-ancestors 'none'), X-Content-Type-Options: nosniff,
// X-Frame-Options: DENY and Referrer-Policy: no-referrer; pages are
// Cache-Control: no-store. With Config.AllowedHosts, a request whose Host
// is not listed answers 403 before anything else: on a loopback address
// this refuses the requests a web page sends through a name of its own
// pointed at the machine (DNS rebinding), which a browser would
// otherwise treat as that page's own origin; `seqlease serve` sets it.
//
// # Failure handling
//
// Each request reads under Config.Timeout. An unknown stream or lease
// answers 404, a store error 500: the error goes to the Logger under a
// random reference, and the page, which needs no login, shows only the
// reference (store and database errors can name schemas, hosts and
// statements). A page is rendered whole into a buffer before anything is
// sent, so a failure never leaves half a page. A panic while reading a
// page, in the request's goroutine or in the streams page's readers,
// answers 500 the same way: the readers' goroutines are the handler's
// own, and a panic nobody recovers there would end the process. A resolve
// action's cleanup pass starts and stops its service within the request.
package ui
