package ui

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"path"
	"runtime/debug"
	"strings"
	"time"

	"github.com/seqlease/seqlease/cleanup"
	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/store"
)

// StreamSource lists streams and reads what the streams pages show, by the
// backend's clock: *postgres.Store and *memory.Store.
type StreamSource interface {
	Streams(ctx context.Context, after string, limit int) ([]string, error)
	Stats(ctx context.Context, stream string) (store.StreamStats, error)
	Read(ctx context.Context, stream string, after int64, limit int) ([]store.Entry, error)
	// SummarizeStreams (store.StreamSummarizer) reads the rows of the
	// streams page, throughput included, a statement for many streams.
	SummarizeStreams(ctx context.Context, streams []string, p *store.SummaryParams) ([]store.StreamSummary, error)
	ListExpired(ctx context.Context, p *store.ListExpiredParams) ([]store.Entry, error)
	Now(ctx context.Context) (time.Time, error)
}

// GapSource lists and counts a stream's gaps: *postgres.Store and
// *memory.Store.
type GapSource interface {
	ListGaps(ctx context.Context, stream string, p *store.ListGapsParams) ([]store.Entry, error)
	CountGaps(ctx context.Context, stream string) (int64, error)
}

// LeaseSource reads the named leases, their audit history and their
// waiters: *postgres.Store and *memory.Store.
type LeaseSource interface {
	ListLeases(ctx context.Context, p *store.ListLeasesParams) ([]store.NamedLease, error)
	GetLease(ctx context.Context, name string, p *store.LeaseOpParams) (store.NamedLease, error)
	LeaseHistory(ctx context.Context, name string, p *store.LeaseHistoryParams) ([]store.LeaseEvent, error)
	ListLeaseWaiters(ctx context.Context, p *store.ListLeaseWaitersParams) ([]store.LeaseWaiter, error)
}

// CheckpointSource lists the readers' checkpoints with their streams'
// watermarks: *postgres.Store and *memory.Store.
type CheckpointSource interface {
	ListCheckpoints(ctx context.Context, p *store.ListCheckpointsParams) ([]store.Checkpoint, error)
}

// Cleaner tells whether a cleanup loop runs and what its last full pass
// came to: a *cleanup.Service (Config.Cleanup).
type Cleaner interface {
	Status() cleanup.Status
}

// Source is everything the pages read. Both backends satisfy it.
type Source interface {
	StreamSource
	GapSource
	LeaseSource
	CheckpointSource
}

// Defaults of Config.
const (
	DefaultPageSize     = 100
	DefaultMaxPageSize  = 500
	DefaultPreviewBytes = 64
	DefaultRefresh      = 5 * time.Second
	DefaultTimeout      = 10 * time.Second
	DefaultSpan         = 40
	DefaultChartWindow  = 10 * time.Minute
	DefaultChartSample  = 200
)

// MinChartWindow is the shortest Config.ChartWindow accepted.
const MinChartWindow = time.Second

// ConfigError reports a Config field New refuses. It matches
// store.ErrInvalidArgument.
type ConfigError struct {
	Field   string // the field's path under Config, e.g. "ChartWindow"
	Problem string // what is wrong with it
}

// Error returns "ui: Config.FIELD PROBLEM".
func (e *ConfigError) Error() string { return "ui: Config." + e.Field + " " + e.Problem }

// Is makes a ConfigError match store.ErrInvalidArgument.
func (e *ConfigError) Is(target error) bool { return target == store.ErrInvalidArgument }

// Config configures a Handler. Store is required; the zero value of every
// other field means its default.
type Config struct {
	// Store is what the pages read: a *postgres.Store or a *memory.Store.
	Store Source
	// Title is shown in the header of every page; default "seqlease".
	Title string
	// PageSize is the rows of a listing when the request names none;
	// default DefaultPageSize (100).
	PageSize int
	// MaxPageSize caps the limit a request may ask for; default
	// DefaultMaxPageSize (500), at most store.DefaultListLimit (1000).
	MaxPageSize int
	// PreviewBytes is the most bytes of a payload shown on the stream page;
	// default DefaultPreviewBytes (64).
	PreviewBytes int
	// Refresh is how often the pages refresh themselves where JavaScript
	// runs; default DefaultRefresh (5 s). Negative turns it off.
	Refresh time.Duration
	// Timeout bounds the store reads of one request; default
	// DefaultTimeout (10 s).
	Timeout time.Duration
	// ChartWindow is the span of the throughput chart of the streams page;
	// default DefaultChartWindow (10 minutes), at least MinChartWindow (1 s).
	ChartWindow time.Duration
	// ChartSample is the most numbers of a stream the chart reads
	// (store.SummaryParams.Samples): up to it the counts are exact, beyond
	// it estimated from every Stride-th number. Default DefaultChartSample
	// (200), at most store.MaxListLimit.
	ChartSample int
	// Logger receives the store errors of requests and, with Actions, a
	// record of every action at INFO; nil discards them.
	Logger *slog.Logger
	// AllowedHosts are the host names (or IP addresses) the handler
	// answers for, matched case-insensitively against the request's Host
	// without its port; a request for any other host answers 403. Default
	// (nil): any host, the application's server deciding. A server on a
	// loopback address should list its names: a web page can make a
	// browser send requests to it under a name the page's author controls
	// (DNS rebinding) and read the answers. IPv6 addresses without
	// brackets.
	AllowedHosts []string
	// Cleanup is the cleanup loop of this process (a *cleanup.Service),
	// when the handler runs in the application that runs it: the streams
	// page shows whether it runs, its interval and when its last full
	// pass ended, marked when none ended for
	// health.DefaultCleanupStaleIntervals intervals. Default (nil): the
	// page says the loop is not known here (the store keeps no record of
	// the loops of other processes: their health checks report them).
	Cleanup Cleaner
	// Actions turns on the actions (force-release, resolve expired entries,
	// fill a gap) for the operators its Authenticate names; nil (the
	// default) leaves the interface read-only: no action form, and every
	// action route answers 404 (GET) or 405 (POST). Store must then be an
	// ActionStore.
	Actions *ActionsConfig
}

// Handler serves the pages: GET and HEAD only, and POST to the action
// routes when Config.Actions is set.
type Handler struct {
	cfg   Config
	hosts map[string]bool // nil: any host
	act   *actions        // nil: read-only
	pages map[string]*template.Template
	mux   *http.ServeMux
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pageNames are the templates, each rendered with layout.html and the
// parts shared by several pages (parts.html).
var pageNames = []string{"streams", "stream", "gaps", "leases", "lease", "readers", "parked", "error", "confirm"}

// New returns the handler of cfg, or an error naming the field that is
// wrong.
func New(cfg *Config) (*Handler, error) {
	if cfg == nil || cfg.Store == nil {
		return nil, &ConfigError{Field: "Store", Problem: "is required"}
	}
	c := *cfg
	bad := func(field, format string, args ...any) (*Handler, error) {
		return nil, &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.PageSize < 0:
		return bad("PageSize", "%d is negative", c.PageSize)
	case c.MaxPageSize < 0 || c.MaxPageSize > store.DefaultListLimit:
		return bad("MaxPageSize", "%d is not in 0..%d", c.MaxPageSize, store.DefaultListLimit)
	case c.PreviewBytes < 0:
		return bad("PreviewBytes", "%d is negative", c.PreviewBytes)
	case c.Timeout < 0:
		return bad("Timeout", "%v is negative", c.Timeout)
	case c.ChartWindow < 0 || (c.ChartWindow > 0 && c.ChartWindow < MinChartWindow):
		return bad("ChartWindow", "%v is neither 0 (the default) nor at least %v", c.ChartWindow, MinChartWindow)
	case c.ChartSample < 0 || c.ChartSample > store.MaxListLimit:
		return bad("ChartSample", "%d is not in 0..%d", c.ChartSample, store.MaxListLimit)
	}
	c.Title = cmp(c.Title, "seqlease")
	c.MaxPageSize = cmp(c.MaxPageSize, DefaultMaxPageSize)
	c.PageSize = min(cmp(c.PageSize, DefaultPageSize), c.MaxPageSize)
	c.PreviewBytes = cmp(c.PreviewBytes, DefaultPreviewBytes)
	c.Refresh = cmp(c.Refresh, DefaultRefresh)
	c.Timeout = cmp(c.Timeout, DefaultTimeout)
	c.ChartWindow = cmp(c.ChartWindow, DefaultChartWindow)
	c.ChartSample = cmp(c.ChartSample, DefaultChartSample)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: c, pages: map[string]*template.Template{}, mux: http.NewServeMux()}
	if c.AllowedHosts != nil {
		h.hosts = map[string]bool{}
		for _, host := range c.AllowedHosts {
			if host == "" || strings.ContainsAny(host, "/[]@ ") || (strings.Contains(host, ":") && net.ParseIP(host) == nil) {
				return bad("AllowedHosts", "has %s: want a host name or an IP address, without port or brackets", store.QuoteInput(host))
			}
			h.hosts[strings.ToLower(host)] = true
		}
	}
	if c.Actions != nil {
		a, err := newActions(c.Store, c.Actions)
		if err != nil {
			return nil, err
		}
		h.act = a
		h.routeActions()
	}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", name, err) // a bug: the templates are embedded
		}
		h.pages[name] = t
	}
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	h.mux.HandleFunc("/static/", func(w http.ResponseWriter, r *http.Request) {
		// Files only: no directory listing.
		if fi, err := fs.Stat(static, strings.TrimPrefix(r.URL.Path, "/static/")); err != nil || fi.IsDir() {
			h.fail(w, r, http.StatusNotFound, "no page at "+store.QuoteInput(r.URL.Path))
			return
		}
		files.ServeHTTP(w, r)
	})
	h.mux.HandleFunc("/{$}", h.page(h.streamsPage))
	h.mux.HandleFunc("/stream", h.page(h.streamPage))
	h.mux.HandleFunc("/gaps", h.page(h.gapsPage))
	h.mux.HandleFunc("/leases", h.page(h.leasesPage))
	h.mux.HandleFunc("/lease", h.page(h.leasePage))
	h.mux.HandleFunc("/readers", h.page(h.readersPage))
	h.mux.HandleFunc("/parked", h.page(h.parkedPage))
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "no page at "+store.QuoteInput(r.URL.Path))
	})
	return h, nil
}

func cmp[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// ServeHTTP answers GET and HEAD, and with Actions POST to /actions/
// (405 otherwise), with the security headers on every answer. Mount it
// under a prefix with http.StripPrefix (the prefix with or without its
// trailing slash): every link of the pages is relative, and an error page
// below the top level (a 404 at /leases/) links up with "../". A path that
// is not clean ("//leases") answers 404: the mux's redirect to the clean
// path would leave the prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	formAction := "'none'"
	if h.act != nil {
		formAction = "'self'"
	}
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; base-uri 'none'; form-action "+formAction+"; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	if !h.allowedHost(r) {
		h.fail(w, r, http.StatusForbidden, "host "+store.QuoteInput(r.Host)+" not allowed: open this interface by one of its own names")
		return
	}
	posted := h.act != nil && r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/actions/")
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !posted {
		hd.Set("Allow", "GET, HEAD")
		h.fail(w, r, http.StatusMethodNotAllowed, "method "+store.QuoteInput(r.Method)+" not allowed: this interface is read-only")
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/") { // mounted with http.StripPrefix("/prefix/", ...)
		r2 := *r
		u := *r.URL
		u.Path = "/" + u.Path
		if u.RawPath != "" {
			u.RawPath = "/" + u.RawPath
		}
		r2.URL = &u
		r = &r2
	}
	if p := r.URL.Path; cleanPath(p) != p {
		// The mux would redirect to the clean path, an absolute one: out
		// of the prefix the handler is mounted under.
		h.fail(w, r, http.StatusNotFound, "no page at "+store.QuoteInput(p))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// cleanPath returns p without empty, "." and ".." elements, keeping a
// trailing slash, as http.ServeMux cleans paths.
func cleanPath(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// root returns the relative link from r's page to the handler's root: ""
// at the top level, where every page is, and "../" for each level below,
// where only error pages are (a 404 at /leases/, a refused action at
// /actions/NAME). The pages' links are relative, so that they hold under
// any prefix; the Content-Security-Policy forbids <base>.
func root(r *http.Request) string {
	return strings.Repeat("../", strings.Count(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/"))
}

// allowedHost reports whether r's Host is one of Config.AllowedHosts.
func (h *Handler) allowedHost(r *http.Request) bool {
	if h.hosts == nil {
		return true
	}
	host := r.Host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		host = hp
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return h.hosts[strings.ToLower(host)]
}

// httpError is an answer other than 200: its status and message.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// badRequest is a 400 for a bad query parameter; the user's text goes
// through store.QuoteInput.
func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// view is what the layout renders around a page's data.
type view struct {
	Title   string
	Root    string // the link to the handler's root, "" at the top level (see root)
	Page    string // the nav entry to highlight
	Now     time.Time
	Refresh int     // seconds; 0: no refresh
	Actions bool    // the action links are shown
	Result  *result // the result of the action that led here
	Data    any
}

// page adapts a page function: it runs under the request's timeout,
// renders the page's template, and turns errors into answers.
func (h *Handler) page(fn func(ctx context.Context, r *http.Request, now time.Time) (string, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				h.internal(w, r, "the page failed", fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
		defer cancel()
		now, err := h.cfg.Store.Now(ctx)
		var name string
		var data any
		if err == nil {
			name, data, err = fn(ctx, r, now)
		}
		if err != nil {
			h.answer(w, r, err, "the store could not be read")
			return
		}
		refresh := h.refresh()
		if name == "confirm" {
			refresh = 0 // a refresh would wipe the form being filled
		}
		h.render(w, r, http.StatusOK, name, view{Title: h.cfg.Title, Page: name, Now: now, Refresh: refresh,
			Actions: h.act != nil, Result: h.result(r), Data: data})
	}
}

// answer turns err into an error page: an *httpError's status, 409 for a
// refused gap or a trimmed number, 400 for bad input, 404 for something
// unknown, else 500 with failed and the error.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, err error, failed string) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		h.fail(w, r, he.status, he.msg)
	case errors.Is(err, gap.ErrNotGap), errors.Is(err, gap.ErrRecovered), errors.Is(err, gap.ErrFillRefused),
		errors.Is(err, store.ErrTrimmed):
		h.fail(w, r, http.StatusConflict, "refused, nothing changed: "+err.Error())
	case errors.Is(err, store.ErrInvalidArgument):
		h.fail(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, store.ErrStreamNotFound), errors.Is(err, store.ErrLeaseNotFound), errors.Is(err, store.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, err.Error())
	default:
		h.internal(w, r, failed, err)
	}
}

// internal answers 500 for err. The error goes to the Logger only, under
// a reference the page shows: store and database errors can name
// schemas, hosts and statements, and the pages need no login.
func (h *Handler) internal(w http.ResponseWriter, r *http.Request, failed string, err error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	ref := hex.EncodeToString(b[:])
	h.cfg.Logger.ErrorContext(r.Context(), "ui: "+failed, slog.String("path", r.URL.Path), slog.String("ref", ref), slog.Any("error", err))
	h.fail(w, r, http.StatusInternalServerError, failed+"; the error is in the server's log under ref="+ref)
}

func (h *Handler) refresh() int {
	if h.cfg.Refresh < 0 {
		return 0
	}
	return max(int(h.cfg.Refresh/time.Second), 1)
}

// fail answers status with msg on the error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", view{Title: h.cfg.Title, Page: "error", Actions: h.act != nil, Data: errorData{
		Status: status, StatusText: http.StatusText(status), Message: msg}})
}

type errorData struct {
	Status     int
	StatusText string
	Message    string
}

// render executes page into a buffer first, so that a template error
// answers 500 rather than half a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	v.Root = root(r)
	var b strings.Builder
	if err := h.pages[page].Execute(&b, v); err != nil {
		h.cfg.Logger.ErrorContext(r.Context(), "ui: render failed", slog.String("page", page), slog.Any("error", err))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("seqlease ui: the page could not be rendered\n"))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(escapeFormat(b.String())))
	}
}
