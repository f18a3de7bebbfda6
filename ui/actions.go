package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/recovery"
	"github.com/seqlease/seqlease/store"
)

// ActionStore is what the actions write through, besides what the pages
// read: the stores of the cleanup pass, the named leases and the gaps.
// *postgres.Store and *memory.Store satisfy it.
type ActionStore interface {
	Source
	cleanup.Store
	lease.Store
	gap.Store
}

// AuthenticateFunc returns the actor of an action request (an operator's
// name, recorded with what the action did), or an error when the request
// is not authenticated: the action answers 401 and changes nothing. The
// actor must be a valid store text (at most store.MaxTextLen bytes of
// UTF-8 without control characters), else the action answers 403.
type AuthenticateFunc func(r *http.Request) (actor string, err error)

// Defaults of ActionsConfig.
const (
	DefaultTokenTTL       = 10 * time.Minute
	DefaultMaxReasonBytes = 200
	// MinSecretBytes is the shortest ActionsConfig.Secret accepted.
	MinSecretBytes = 32
)

// ActionsConfig turns the actions on: force-release a named lease's
// holder, resolve a stream's expired entries, fill a gap. Authenticate is
// required; the zero value of every other field means its default.
type ActionsConfig struct {
	// Authenticate names the actor of every confirmation page and action;
	// required.
	Authenticate AuthenticateFunc
	// Secret keys the HMAC-SHA256 of the forms' tokens, at least
	// MinSecretBytes (32) bytes. Default: 32 random bytes drawn by New, so
	// tokens do not outlive the process and are not shared by replicas:
	// give every replica the same Secret behind a load balancer.
	Secret []byte
	// TokenTTL is how long a confirmation page's token is accepted, and
	// how long the page an action leads to shows its result; default
	// DefaultTokenTTL (10 minutes). A token has no nonce: until it
	// expires, its operator can post it again (see docs/ui.md).
	TokenTTL time.Duration
	// TrustedOrigins are origins ("https://ops.example.com") allowed to
	// post actions besides the request's own host, as
	// http.CrossOriginProtection.AddTrustedOrigin takes them; default none.
	TrustedOrigins []string
	// MaxReasonBytes is the longest reason an action accepts; default
	// DefaultMaxReasonBytes (200), at most store.MaxTextLen.
	MaxReasonBytes int
	// Now is the clock of token expiry; nil means time.Now.
	Now func() time.Time
}

// actions is the validated ActionsConfig with what New derived from it.
type actions struct {
	store     ActionStore
	auth      AuthenticateFunc
	secret    []byte
	ttl       time.Duration
	maxReason int
	now       func() time.Time
	origins   *http.CrossOriginProtection
	owner     string // the owner of the cleanup pass's stream leases
}

func newActions(st Source, c *ActionsConfig) (*actions, error) {
	if c.Authenticate == nil {
		return nil, errors.New("ui: Config.Actions.Authenticate is required: no action without authentication")
	}
	as, ok := st.(ActionStore)
	if !ok {
		return nil, fmt.Errorf("ui: Config.Actions needs a Config.Store that writes (ui.ActionStore); %T does not", st)
	}
	switch {
	case c.Secret != nil && len(c.Secret) < MinSecretBytes:
		return nil, fmt.Errorf("ui: Config.Actions.Secret is %d bytes, want at least %d", len(c.Secret), MinSecretBytes)
	case c.TokenTTL < 0:
		return nil, fmt.Errorf("ui: Config.Actions.TokenTTL %v is negative", c.TokenTTL)
	case c.MaxReasonBytes < 0 || c.MaxReasonBytes > store.MaxTextLen:
		return nil, fmt.Errorf("ui: Config.Actions.MaxReasonBytes %d is not in 0..%d", c.MaxReasonBytes, store.MaxTextLen)
	}
	a := &actions{store: as, auth: c.Authenticate, secret: c.Secret, ttl: cmp(c.TokenTTL, DefaultTokenTTL),
		maxReason: cmp(c.MaxReasonBytes, DefaultMaxReasonBytes), now: c.Now, origins: http.NewCrossOriginProtection()}
	if a.secret == nil {
		a.secret = make([]byte, MinSecretBytes)
		_, _ = rand.Read(a.secret) // never fails (crypto/rand panics instead)
	}
	if a.now == nil {
		a.now = time.Now
	}
	for _, o := range c.TrustedOrigins {
		if err := a.origins.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("ui: Config.Actions.TrustedOrigins: %w", err)
		}
	}
	host, _ := os.Hostname()
	a.owner = fmt.Sprintf("seqlease-ui:%s:%d", host, os.Getpid())
	return a, nil
}

// The actions' routes: a confirmation page (GET, at the top level so that
// the layout's relative links hold) and the action itself (POST only).
const (
	actForceRelease   = "force-release"
	actResolveExpired = "resolve-expired"
	actFillGap        = "fill-gap"
)

// boundFields are the form fields each action's token binds: a token
// drawn for one lease or gap does not act on another.
var boundFields = map[string][]string{
	actForceRelease:   {"name", "owner", "fence"},
	actResolveExpired: {"stream"},
	actFillGap:        {"stream", "number"},
	actUnpark:         {"stream", "number"},
	actGiveUp:         {"stream", "number"},
}

// routeActions adds the confirmation pages and the action route to h.
func (h *Handler) routeActions() {
	h.mux.HandleFunc("GET /"+actForceRelease, h.page(h.authed(h.confirmForceRelease)))
	h.mux.HandleFunc("GET /"+actResolveExpired, h.page(h.authed(h.confirmResolveExpired)))
	h.mux.HandleFunc("GET /"+actFillGap, h.page(h.authed(h.confirmFillGap)))
	if h.parker() != nil {
		h.mux.HandleFunc("GET /"+actUnpark, h.page(h.authed(h.confirmUnpark)))
		h.mux.HandleFunc("GET /"+actGiveUp, h.page(h.authed(h.confirmGiveUp)))
	}
	h.mux.HandleFunc("/actions/{action}", h.post)
}

// Errors of the actions, each an answer other than 200.
var (
	errUnauthenticated = &httpError{http.StatusUnauthorized, "not authenticated: actions need an authenticated operator"}
	errBadActor        = &httpError{http.StatusForbidden, "the authenticated actor is not a valid name (at most 200 bytes of UTF-8, no control characters)"}
	errCrossOrigin     = &httpError{http.StatusForbidden, "cross-origin request refused: actions are posted from this interface's own pages"}
	errNoToken         = &httpError{http.StatusForbidden, "the form's token is missing: open the confirmation page again"}
	errBadToken        = &httpError{http.StatusForbidden, "the form's token is not valid for this action and operator: open the confirmation page again"}
	errExpiredToken    = &httpError{http.StatusForbidden, "the form's token has expired: open the confirmation page again"}
)

// authenticate returns the request's actor, or the error to answer.
func (h *Handler) authenticate(r *http.Request) (string, error) {
	actor, err := h.act.auth(r)
	if err != nil || actor == "" {
		h.cfg.Logger.WarnContext(r.Context(), "ui: action refused: not authenticated", slog.String("path", r.URL.Path), slog.Any("error", err))
		return "", errUnauthenticated
	}
	// The lease history keeps actors of at most store.MaxNameLen bytes.
	if len(actor) > store.MaxNameLen || store.ValidateText("actor", actor) != nil {
		h.cfg.Logger.WarnContext(r.Context(), "ui: action refused: invalid actor", slog.String("path", r.URL.Path), slog.String("actor", store.QuoteInput(actor)))
		return "", errBadActor
	}
	return actor, nil
}

// authed wraps a confirmation page: it renders only for an authenticated
// actor, with a token bound to that actor.
func (h *Handler) authed(fn func(ctx context.Context, r *http.Request, now time.Time, actor string) (string, any, error)) func(context.Context, *http.Request, time.Time) (string, any, error) {
	return func(ctx context.Context, r *http.Request, now time.Time) (string, any, error) {
		actor, err := h.authenticate(r)
		if err != nil {
			return "", nil, err
		}
		return fn(ctx, r, now, actor)
	}
}

// token returns the form token of action on fields for actor, accepted
// until exp: "EXP.MAC", MAC an HMAC-SHA256 under the secret of the
// length-prefixed actor, action, expiry and fields.
func (a *actions) token(actor, action string, fields []string, exp int64) string {
	return strconv.FormatInt(exp, 10) + "." + base64.RawURLEncoding.EncodeToString(a.mac("seqlease-ui-token-v1", actor, action, strconv.FormatInt(exp, 10), fields))
}

// mac is the HMAC-SHA256 of domain and parts, each length-prefixed so that
// no two lists of parts sign alike.
func (a *actions) mac(domain string, parts ...any) []byte {
	m := hmac.New(sha256.New, a.secret)
	write := func(s string) {
		_ = binary.Write(m, binary.BigEndian, uint32(len(s)))
		_, _ = m.Write([]byte(s))
	}
	write(domain)
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			write(p)
		case []string:
			for _, s := range p {
				write(s)
			}
		}
	}
	return m.Sum(nil)
}

// newToken returns a token for a confirmation page.
func (a *actions) newToken(actor, action string, fields []string) string {
	return a.token(actor, action, fields, a.now().Add(a.ttl).Unix())
}

// checkToken checks the posted token of action on fields for actor.
func (a *actions) checkToken(tok, actor, action string, fields []string) error {
	if tok == "" {
		return errNoToken
	}
	exps, macs, ok := strings.Cut(tok, ".")
	exp, err := strconv.ParseInt(exps, 10, 64)
	got, derr := base64.RawURLEncoding.Strict().DecodeString(macs)
	if !ok || err != nil || derr != nil {
		return errBadToken
	}
	if !hmac.Equal(got, a.mac("seqlease-ui-token-v1", actor, action, exps, fields)) {
		return errBadToken
	}
	if !a.now().Before(time.Unix(exp, 0)) {
		return errExpiredToken
	}
	return nil
}

// result is what an action did, shown on the page it was about: the
// store's outcome, and the operator's reason and name, shown apart from
// it (the reason is free text).
type result struct {
	Message, Reason, Actor string
}

// resultKeys are the query parameters of a result.
var resultKeys = []string{"done", "reason", "by", "exp", "sig"}

// resultTarget is the page a result is for: path (relative, as link makes
// it) and its query without the result's own parameters, keys sorted.
func resultTarget(path string, q url.Values) string {
	q = maps.Clone(q)
	for _, k := range resultKeys {
		delete(q, k)
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// resultQuery returns the query parameters that make page back show res
// until the token TTL passes: res, its expiry and a MAC of both and of
// back, so that a link can neither make a page show a result no action
// had, nor show a real one on another page or later.
func (a *actions) resultQuery(back string, res result) (url.Values, error) {
	u, err := url.Parse(back)
	if err != nil {
		return nil, err // a bug: back is made by link
	}
	exp := strconv.FormatInt(a.now().Add(a.ttl).Unix(), 10)
	mac := a.mac("seqlease-ui-result-v2", res.Message, res.Reason, res.Actor, exp, resultTarget(u.Path, u.Query()))
	return url.Values{"done": {res.Message}, "reason": {res.Reason}, "by": {res.Actor}, "exp": {exp},
		"sig": {base64.RawURLEncoding.EncodeToString(mac)}}, nil
}

// result returns the signed result of r's query if it is for r's page and
// has not expired; else nil.
func (h *Handler) result(r *http.Request) *result {
	if h.act == nil {
		return nil
	}
	q := r.URL.Query()
	res := result{Message: q.Get("done"), Reason: q.Get("reason"), Actor: q.Get("by")}
	exps := q.Get("exp")
	exp, err := strconv.ParseInt(exps, 10, 64)
	if res.Message == "" || err != nil || !h.act.now().Before(time.Unix(exp, 0)) {
		return nil
	}
	got, err := base64.RawURLEncoding.Strict().DecodeString(q.Get("sig"))
	target := resultTarget(strings.TrimPrefix(r.URL.Path, "/"), q)
	if err != nil || !hmac.Equal(got, h.act.mac("seqlease-ui-result-v2", res.Message, res.Reason, res.Actor, exps, target)) {
		return nil
	}
	return &res
}

// ValidateReason checks an action's reason: required, at most max bytes of
// valid UTF-8 with no control characters. Its errors match
// store.ErrInvalidArgument (store.ErrInvalidText).
func ValidateReason(reason string, max int) error {
	switch {
	case reason == "":
		return fmt.Errorf("%w: a reason is required", store.ErrInvalidText)
	case len(reason) > max:
		return fmt.Errorf("%w: the reason is %d bytes, limit %d", store.ErrInvalidText, len(reason), max)
	}
	return store.ValidateText("reason", reason)
}

// confirmData is a confirmation page: what the action will do and the form
// that does it.
type confirmData struct {
	Action    string // the route: force-release, resolve-expired, fill-gap
	Heading   string
	Facts     [][2]string // label, value
	Notes     []string
	Hidden    [][2]string // the bound fields: name, Go-quoted value
	Token     string
	Actor     string
	MaxReason int
	Payload   bool   // the form asks for a payload (fill-gap)
	Back      string // the page the action is about
}

// confirm completes d with its bound fields and token.
func (h *Handler) confirm(d confirmData, actor string, values ...string) (string, any, error) {
	names := boundFields[d.Action]
	for i, n := range names {
		d.Hidden = append(d.Hidden, [2]string{n, strconv.Quote(values[i])})
	}
	d.Token = h.act.newToken(actor, d.Action, values)
	d.Actor, d.MaxReason = actor, h.act.maxReason
	return "confirm", d, nil
}

func (h *Handler) confirmForceRelease(ctx context.Context, r *http.Request, now time.Time, actor string) (string, any, error) {
	name, err := nameParam(r, "name", true, store.ValidateLeaseName)
	if err != nil {
		return "", nil, err
	}
	l, err := h.act.store.GetLease(ctx, name, &store.LeaseOpParams{Now: &now})
	if err != nil {
		return "", nil, err
	}
	if !l.Held() {
		return "", nil, &httpError{http.StatusConflict, "named lease " + store.QuoteInput(name) + " is not held: nothing to force-release"}
	}
	d := confirmData{Action: actForceRelease, Heading: "Force-release named lease " + name,
		Back: link("lease", "name", name),
		Facts: [][2]string{{"Lease", name}, {"Holder", l.Owner}, {"Fence", itoa(l.Fence)},
			{"Expiry", stamp(l.ExpiresAt) + " (" + since(now, l.ExpiresAt) + ")"}}}
	d.Notes = []string{
		"Only this holding ends, fenced by its token: the holder's other leases are kept, and a later holding of the name is never touched. To end every lease of a crashed holder, run seqlease force-release OWNER.",
		"The holder learns of the loss at its next renewal (ErrForceReleased); later holders get larger fences. The lease history records it as force-released, with you as its actor and your reason as its comment.",
	}
	return h.confirm(d, actor, name, l.Owner, itoa(l.Fence))
}

func (h *Handler) confirmResolveExpired(ctx context.Context, r *http.Request, now time.Time, actor string) (string, any, error) {
	name, err := nameParam(r, "stream", true, store.ValidateStream)
	if err != nil {
		return "", nil, err
	}
	st, err := h.act.store.Stats(ctx, name)
	if err != nil {
		return "", nil, err
	}
	es, err := h.act.store.ListExpired(ctx, &store.ListExpiredParams{Stream: name, Limit: expiredCap + 1, Now: &now})
	if err != nil {
		return "", nil, err
	}
	d := confirmData{Action: actResolveExpired, Heading: "Resolve the expired entries of stream " + name,
		Back: link("stream", "name", name),
		Facts: [][2]string{{"Stream", name}, {"Watermark", itoa(st.Watermark)},
			{"Expired now", atLeast(min(len(es), expiredCap), len(es) > expiredCap)}},
		Notes: []string{
			"Runs one pass of the cleanup loop over this stream, as seqlease cleanup STREAM does: each expired lease becomes a gap with reason \"expired\", in number order, under the stream's cleanup lease, so it never races a running cleaner (a stream another cleaner leads is skipped).",
			"An expired lease behind a live earlier lease waits for it. The pass resolves by gaps only: recovering the work needs the application's trackers, and the application's hooks do not run.",
		}}
	return h.confirm(d, actor, name)
}

func (h *Handler) confirmFillGap(ctx context.Context, r *http.Request, now time.Time, actor string) (string, any, error) {
	name, err := nameParam(r, "stream", true, store.ValidateStream)
	if err != nil {
		return "", nil, err
	}
	n, given, err := numberParam(r, "number", 0)
	if err != nil {
		return "", nil, err
	}
	if !given || n < 1 {
		return "", nil, badRequest("the number parameter is required: a number of at least 1")
	}
	g, err := h.gaps().Get(ctx, name, n)
	if err != nil {
		return "", nil, err
	}
	switch {
	case g.Filled():
		return "", nil, &httpError{http.StatusConflict, fmt.Sprintf("%d of %s is already filled", n, store.QuoteInput(name))}
	case g.RecoveredAs != 0:
		return "", nil, &httpError{http.StatusConflict, fmt.Sprintf("%d of %s was recovered as %d: filling it would apply its work twice", n, store.QuoteInput(name), g.RecoveredAs)}
	}
	if err := h.refuseCommittedAgain(ctx, g); err != nil {
		return "", nil, err
	}
	d := confirmData{Action: actFillGap, Heading: fmt.Sprintf("Fill gap %d of stream %s", n, name), Payload: true,
		Back: link("gaps", "stream", name, "after", itoa(n-1)),
		Facts: [][2]string{{"Stream", name}, {"Number", itoa(n)}, {"Gap reason", g.Reason},
			{"Operation", g.OperationID}, {"Kind", g.Kind}, {"Filled by", actor}},
		Notes: []string{
			"Commits the payload under the gap through the gap package's fill policy, as seqlease fill-gap does: the entry becomes committed, keeps its gap reason, and records you as its filler.",
			"Filling does not move the watermark: readers already past the number saw it as a gap.",
		}}
	return h.confirm(d, actor, name, itoa(n))
}

// refuseCommittedAgain answers 409 when the operation of gap g was
// committed under a later number (see gapRows): filling g would apply its
// work twice.
func (h *Handler) refuseCommittedAgain(ctx context.Context, g gap.Gap) error {
	st, err := h.act.store.Stats(ctx, g.Stream)
	if err != nil {
		return err
	}
	rows, err := h.gapRows(ctx, st, []store.Entry{{Stream: g.Stream, Number: g.Number, State: store.Gap, OperationID: g.OperationID}})
	if err != nil {
		return err
	}
	if r := rows[0]; r.Work == workAgain {
		return &httpError{http.StatusConflict, fmt.Sprintf("the operation of %d of %s was committed again as %d: filling it would apply its work twice",
			g.Number, store.QuoteInput(g.Stream), r.WentTo)}
	}
	return nil
}

func (h *Handler) gaps() *gap.Gaps {
	g, err := gap.New(h.act.store, nil)
	if err != nil {
		panic(err) // a nil config is always valid
	}
	return g
}

// maxForm bounds an action's form: a payload of gap.DefaultMaxPayload
// bytes, percent-encoded, and the other fields.
const maxForm = 3*gap.DefaultMaxPayload + 64<<10

// post performs a posted action: origin, actor, token, reason, then the
// store call; it answers 303 to the page the action is about with the
// result, or an error page. Every refusal changes nothing.
func (h *Handler) post(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		h.fail(w, r, http.StatusMethodNotAllowed, "method "+store.QuoteInput(r.Method)+" not allowed: actions are posted from their confirmation page")
		return
	}
	action := r.PathValue("action")
	fields, ok := boundFields[action]
	if !ok {
		h.fail(w, r, http.StatusNotFound, "no action "+store.QuoteInput(action))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	back, res, err := h.perform(ctx, w, r, action, fields)
	if err != nil {
		h.answer(w, r, err, "the action failed")
		return
	}
	rq, err := h.act.resultQuery(back, res)
	if err != nil {
		h.answer(w, r, err, "the action's result could not be shown")
		return
	}
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	// Relative to /actions/ACTION, so that it holds under any prefix.
	w.Header().Set("Location", "../"+back+sep+rq.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

// perform checks r and runs action: the page to go back to and the result,
// or the error to answer.
func (h *Handler) perform(ctx context.Context, w http.ResponseWriter, r *http.Request, action string, fields []string) (string, result, error) {
	if err := h.act.origins.Check(r); err != nil {
		h.cfg.Logger.WarnContext(ctx, "ui: action refused: cross-origin", slog.String("action", action), slog.Any("error", err))
		return "", result{}, errCrossOrigin
	}
	actor, err := h.authenticate(r)
	if err != nil {
		return "", result{}, err
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return "", result{}, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("the form is larger than %d bytes", maxForm)}
		}
		return "", result{}, badRequest("the form could not be read: %v", err)
	}
	f := r.PostForm
	values, err := boundValues(f, fields)
	if err == nil {
		err = h.act.checkToken(f.Get("token"), actor, action, values)
	}
	if err != nil {
		h.cfg.Logger.WarnContext(ctx, "ui: action refused: token", slog.String("action", action), slog.String("actor", actor), slog.Any("error", err))
		return "", result{}, err
	}
	reason := f.Get("reason")
	if err := ValidateReason(reason, h.act.maxReason); err != nil {
		return "", result{}, badRequest("reason %s: %v", store.QuoteInput(reason), err)
	}
	attrs := []slog.Attr{slog.String("action", action), slog.String("actor", actor), slog.String("reason", reason)}
	for i, n := range fields {
		attrs = append(attrs, slog.String(n, values[i]))
	}
	var back, msg string
	switch action {
	case actForceRelease:
		back, msg, err = h.forceRelease(ctx, values[0], values[1], values[2], actor, reason, &attrs)
	case actResolveExpired:
		back, msg, err = h.resolveExpired(ctx, values[0], &attrs)
	case actFillGap:
		back, msg, err = h.fillGap(ctx, values[0], values[1], actor, []byte(f.Get("payload")), &attrs)
	case actUnpark:
		back, msg, err = h.unpark(ctx, values[0], values[1])
	case actGiveUp:
		back, msg, err = h.giveUp(ctx, values[0], values[1], &attrs)
	}
	if err != nil {
		attrs = append(attrs, slog.String("outcome", "refused"), slog.Any("error", err))
		h.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "ui: action", attrs...)
		return "", result{}, err
	}
	attrs = append(attrs, slog.String("outcome", "done"), slog.String("result", msg))
	h.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "ui: action", attrs...)
	return back, result{Message: msg, Reason: reason, Actor: actor}, nil
}

// boundValues returns the values of the bound fields of a posted form,
// which confirm Go-quoted (so that escapeFormat leaves them as they are);
// errBadToken when one is not quoted: not the value the page was drawn
// for.
func boundValues(f url.Values, fields []string) ([]string, error) {
	values := make([]string, len(fields))
	for i, n := range fields {
		v, err := strconv.Unquote(f.Get(n))
		if err != nil {
			return nil, errBadToken
		}
		values[i] = v
	}
	return values, nil
}

// forceRelease ends the holding of name by owner with fence, the one on
// the confirmation page, in one statement fenced by its token, recording
// actor and reason in its history; 409 when it changed since (released,
// expired, taken over), nothing changed.
func (h *Handler) forceRelease(ctx context.Context, name, owner, fence, actor, reason string, attrs *[]slog.Attr) (string, string, error) {
	back := link("lease", "name", name)
	if err := store.ValidateLeaseName(name); err != nil {
		return "", "", badRequest("name %s: %v", store.QuoteInput(name), err)
	}
	f, err := strconv.ParseInt(fence, 10, 64)
	if err != nil || f < 1 {
		return "", "", badRequest("fence %s is not a fencing token", store.QuoteInput(fence))
	}
	ended, err := h.act.store.ForceReleaseLeases(ctx, owner, &store.LeaseOpParams{Name: name, Fence: f, Actor: actor, Reason: reason})
	if err != nil {
		return "", "", err
	}
	if len(ended) == 0 {
		return "", "", &httpError{http.StatusConflict, "named lease " + store.QuoteInput(name) +
			" changed since the confirmation page (released, expired or taken by another holder): nothing changed"}
	}
	*attrs = append(*attrs, slog.String("ended", name)) // the bound fields carry owner and fence
	return back, fmt.Sprintf("Force-released named lease %s of %s (fence %d).", name, owner, f), nil
}

// oneStream is the store a pass over one stream runs on: its listing of
// expired leases sees that stream only.
type oneStream struct {
	cleanup.Store
	stream string
}

// ListExpired lists the expired leases of the one stream.
func (s oneStream) ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error) {
	q := *p
	q.Stream = s.stream
	return s.Store.ListExpired(ctx, &q)
}

// resolveExpired runs one cleanup pass over stream, gaps only, under the
// per-stream named lease of the cleanup loop (as seqlease cleanup STREAM).
func (h *Handler) resolveExpired(ctx context.Context, stream string, attrs *[]slog.Attr) (string, string, error) {
	if err := store.ValidateStream(stream); err != nil {
		return "", "", badRequest("stream %s: %v", store.QuoteInput(stream), err)
	}
	if _, err := h.act.store.Stats(ctx, stream); err != nil {
		return "", "", err
	}
	m, err := lease.New(h.act.store, &lease.Config{Owner: h.act.owner, CleanupInterval: -1, DisableHistory: true, Logger: h.cfg.Logger})
	if err != nil {
		return "", "", err
	}
	defer m.Stop()
	elector, err := cleanup.NewLeaseElector(m, 0)
	if err != nil {
		return "", "", err
	}
	st := oneStream{h.act.store, stream}
	pipeline, err := recovery.New(st, &recovery.Config{Owner: "seqlease-ui"})
	if err != nil {
		return "", "", err
	}
	sv, err := cleanup.New(st, &cleanup.Config{Pipeline: pipeline, Elector: elector, Logger: h.cfg.Logger})
	if err != nil {
		return "", "", err
	}
	cr, err := sv.RunOnce(ctx)
	sv.Stop()
	gaps := 0
	for _, n := range cr.Resolved {
		gaps += n
	}
	*attrs = append(*attrs, slog.Int("expired", cr.Expired), slog.Int("gaps", gaps), slog.Int("elsewhere", cr.Elsewhere),
		slog.Int("failed", cr.Failed), slog.Int("waiting", cr.Deferred), slog.Int("skipped", cr.NotLeader))
	if err != nil && gaps == 0 {
		return "", "", err
	}
	msg := fmt.Sprintf("Cleanup pass over %s: %d expired, %d made gaps, %d resolved elsewhere, %d failed, %d wait behind a live lease.",
		stream, cr.Expired, gaps, cr.Elsewhere, cr.Failed, cr.Deferred)
	if cr.NotLeader > 0 {
		msg += " Skipped: another cleaner leads the stream."
	}
	if err != nil {
		msg += " Error: " + err.Error()
	}
	return link("stream", "name", stream), msg, nil
}

// fillGap commits payload under the open gap number of stream, filled by
// actor, as seqlease fill-gap does.
func (h *Handler) fillGap(ctx context.Context, stream, number, actor string, payload []byte, attrs *[]slog.Attr) (string, string, error) {
	n, err := strconv.ParseInt(number, 10, 64)
	if err != nil || n < 1 {
		return "", "", badRequest("number %s: want a number of at least 1", store.QuoteInput(number))
	}
	if err := store.ValidateFill(stream, n, &store.FillParams{Payload: payload, FilledBy: actor}); err != nil {
		return "", "", err
	}
	g, err := h.gaps().Get(ctx, stream, n)
	if err != nil {
		return "", "", err
	}
	if err := h.refuseCommittedAgain(ctx, g); err != nil {
		return "", "", err
	}
	approve := gap.FillPolicyFunc(func(context.Context, gap.Gap) (bool, error) {
		return true, nil // the confirmed form is the operator's approval
	})
	*attrs = append(*attrs, slog.Int("payload_bytes", len(payload)))
	if err := h.gaps().Fill(ctx, stream, n, payload, &gap.FillOpts{FilledBy: actor, Policy: approve}); err != nil {
		return "", "", err
	}
	return link("gaps", "stream", stream, "after", itoa(n-1), "filled", "1"),
		fmt.Sprintf("Filled gap %d of %s with %d bytes.", n, stream, len(payload)), nil
}
