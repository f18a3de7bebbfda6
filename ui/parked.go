package ui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/seqlease/seqlease/store"
)

// The parked page and its two actions. An entry is parked when its
// recovery failed as often as the cleanup loop allows (store.Parker): it
// stays leased, holds its stream's watermark, and waits for an operator.
// The page lists them; the actions are the CLI's `seqlease unpark` and
// `seqlease give-up`, through the same store calls.

// The parked entries' actions' routes.
const (
	actUnpark = "unpark"
	actGiveUp = "give-up"
)

// reasonGivenUp is the gap reason of a parked entry given up, as
// `seqlease give-up` records by default.
const reasonGivenUp = "given-up"

// errorBytes is the most bytes of an entry's last recovery error the
// parked page shows in its table; the whole (at most
// store.MaxRecoveryError bytes) is in the cell's title.
const errorBytes = 160

// parker returns the store's store.Parker, or nil when it keeps no parked
// work.
func (h *Handler) parker() store.Parker {
	p, _ := h.cfg.Store.(store.Parker)
	return p
}

// errNoParker answers a parked action on a store without parked work.
var errNoParker = &httpError{http.StatusNotFound, "parked work is not supported by this store"}

// readable returns s with every control character and invalid byte
// written as a Go escape (\n, \x1b), cut at n bytes with the count of
// bytes left out; html/template escapes the result again for HTML.
func readable(s string, n int) string {
	var b strings.Builder
	for i, r := range s {
		if b.Len() >= n {
			return b.String() + "…(+" + strconv.Itoa(len(s)-i) + " bytes)"
		}
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			q := strconv.Quote(s[i : i+1])
			b.WriteString(q[1 : len(q)-1])
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// parkedRow is one entry of the parked page.
type parkedRow struct {
	store.Entry
	StreamLink     string // the stream page at the entry
	Error, FullErr string // the last recovery error: cut, and whole
	Unpark, GiveUp string // the actions' confirmation pages
}

type parkedData struct {
	Supported  bool // the store keeps parked work
	Stream     string
	StreamLink string
	Total      int64 // parked entries of every stream
	Rows       []parkedRow
	Next       string
}

// parkedPage lists the parked entries (stream to filter; after_stream,
// after, limit to page), in (stream, number) order.
func (h *Handler) parkedPage(ctx context.Context, r *http.Request, now time.Time) (string, any, error) {
	name, err := nameParam(r, "stream", false, store.ValidateStream)
	if err != nil {
		return "", nil, err
	}
	afterStream, err := nameParam(r, "after_stream", false, store.ValidateStream)
	if err != nil {
		return "", nil, err
	}
	after, _, err := numberParam(r, "after", 0)
	if err != nil {
		return "", nil, err
	}
	limit, err := h.limitParam(r)
	if err != nil {
		return "", nil, err
	}
	pk := h.parker()
	if pk == nil {
		return "parked", parkedData{}, nil
	}
	d := parkedData{Supported: true, Stream: name}
	if name != "" {
		if _, err := h.cfg.Store.Stats(ctx, name); err != nil {
			return "", nil, err // 404 for an unknown stream
		}
		d.StreamLink = link("stream", "name", name)
	}
	if d.Total, err = pk.CountParked(ctx); err != nil {
		return "", nil, err
	}
	es, err := pk.ListParked(ctx, &store.ListParkedParams{Stream: name, AfterStream: afterStream, AfterNumber: after, Limit: limit + 1})
	if err != nil {
		return "", nil, err
	}
	if len(es) > limit {
		es = es[:limit]
		last := es[limit-1]
		d.Next = link("parked", "stream", name, "after_stream", last.Stream, "after", itoa(last.Number), "limit", r.URL.Query().Get("limit"))
	}
	for _, e := range es {
		row := parkedRow{Entry: e, Error: readable(e.LastRecoveryError, errorBytes),
			FullErr:    readable(e.LastRecoveryError, store.MaxRecoveryError),
			StreamLink: link("stream", "name", e.Stream, "after", itoa(max(e.Number-DefaultSpan/4, 0))) + "#n" + itoa(e.Number)}
		if h.act != nil {
			row.Unpark = link(actUnpark, "stream", e.Stream, "number", itoa(e.Number))
			row.GiveUp = link(actGiveUp, "stream", e.Stream, "number", itoa(e.Number))
		}
		d.Rows = append(d.Rows, row)
	}
	return "parked", d, nil
}

// entryRef is the stream and number parameters of a parked action's
// confirmation page.
func entryRef(r *http.Request) (string, int64, error) {
	name, err := nameParam(r, "stream", true, store.ValidateStream)
	if err != nil {
		return "", 0, err
	}
	n, given, err := numberParam(r, "number", 0)
	if err != nil {
		return "", 0, err
	}
	if !given || n < 1 {
		return "", 0, badRequest("the number parameter is required: a number of at least 1")
	}
	return name, n, nil
}

// parkedEntry returns entry number of stream if it is parked: 404 when
// the stream did not hand it out, 409 when it is not parked.
func (h *Handler) parkedEntry(ctx context.Context, stream string, number int64) (store.Entry, error) {
	es, err := h.cfg.Store.Read(ctx, stream, number-1, 1)
	switch {
	case err != nil:
		return store.Entry{}, err
	case len(es) == 0 || es[0].Number != number:
		return store.Entry{}, &httpError{http.StatusNotFound, fmt.Sprintf("%s has not handed out %d", store.QuoteInput(stream), number)}
	case !es[0].Parked():
		return store.Entry{}, &httpError{http.StatusConflict, fmt.Sprintf("%d of %s is %s, not parked: refused, nothing changed",
			number, store.QuoteInput(stream), es[0].State)}
	}
	return es[0], nil
}

// parkedFacts are what the confirmation pages show of a parked entry.
func parkedFacts(e store.Entry, now time.Time) [][2]string {
	return [][2]string{{"Stream", e.Stream}, {"Number", itoa(e.Number)}, {"Operation", e.OperationID}, {"Kind", e.Kind},
		{"Holder", e.Owner}, {"Failed recoveries", strconv.Itoa(e.RecoveryAttempts)},
		{"Parked", stamp(e.ParkedAt) + " (" + since(now, e.ParkedAt) + ")"},
		{"Last error", readable(e.LastRecoveryError, store.MaxRecoveryError)}}
}

func (h *Handler) confirmUnpark(ctx context.Context, r *http.Request, now time.Time, actor string) (string, any, error) {
	name, n, err := entryRef(r)
	if err != nil {
		return "", nil, err
	}
	e, err := h.parkedEntry(ctx, name, n)
	if err != nil {
		return "", nil, err
	}
	d := confirmData{Action: actUnpark, Heading: fmt.Sprintf("Unpark %d of stream %s", n, name),
		Back: link("parked", "stream", name), Facts: parkedFacts(e, now),
		Notes: []string{
			"Lets the cleanup loop try the entry again, from zero attempts, as seqlease unpark does: it recovers the work or, failing as often as before, parks the entry again. The last error is kept until the next failure.",
		}}
	return h.confirm(d, actor, name, itoa(n))
}

func (h *Handler) confirmGiveUp(ctx context.Context, r *http.Request, now time.Time, actor string) (string, any, error) {
	name, n, err := entryRef(r)
	if err != nil {
		return "", nil, err
	}
	e, err := h.parkedEntry(ctx, name, n)
	if err != nil {
		return "", nil, err
	}
	d := confirmData{Action: actGiveUp, Heading: fmt.Sprintf("Give up %d of stream %s", n, name),
		Back: link("parked", "stream", name), Facts: parkedFacts(e, now),
		Notes: []string{
			"Makes the entry a gap with reason \"" + reasonGivenUp + "\", as seqlease give-up does: its stream goes on past it.",
			"Its work is lost unless the pipeline redelivers it or an operator fills the gap; seqlease fill-parked commits it instead.",
		}}
	return h.confirm(d, actor, name, itoa(n))
}

// parkedRefusal turns the store's refusal of a parked action (the entry
// changed since the confirmation page) into a 409; other errors pass.
func parkedRefusal(err error) error {
	for _, r := range []error{store.ErrNotParked, store.ErrNotExpired, store.ErrCommitted, store.ErrReleased,
		store.ErrExpired, store.ErrGap, store.ErrParked} {
		if errors.Is(err, r) {
			return &httpError{http.StatusConflict, "refused, nothing changed: " + err.Error()}
		}
	}
	return err
}

// parkedAction checks the bound fields of a parked action and that the
// entry is still parked.
func (h *Handler) parkedAction(ctx context.Context, stream, number string) (store.Parker, int64, error) {
	pk := h.parker()
	if pk == nil {
		return nil, 0, errNoParker
	}
	n, err := strconv.ParseInt(number, 10, 64)
	if err != nil || n < 1 {
		return nil, 0, badRequest("number %s: want a number of at least 1", store.QuoteInput(number))
	}
	if err := store.ValidateStream(stream); err != nil {
		return nil, 0, badRequest("stream %s: %v", store.QuoteInput(stream), err)
	}
	if _, err := h.parkedEntry(ctx, stream, n); err != nil {
		return nil, 0, err
	}
	return pk, n, nil
}

// unpark lets the cleanup loop try a parked entry again, as seqlease
// unpark does.
func (h *Handler) unpark(ctx context.Context, stream, number string) (string, string, error) {
	pk, n, err := h.parkedAction(ctx, stream, number)
	if err != nil {
		return "", "", err
	}
	if err := pk.UnparkEntry(ctx, stream, n); err != nil {
		return "", "", parkedRefusal(err)
	}
	return link("parked", "stream", stream), fmt.Sprintf("Unparked %d of %s: the cleanup loop tries it again.", n, stream), nil
}

// giveUp makes a parked entry a gap, as seqlease give-up does.
func (h *Handler) giveUp(ctx context.Context, stream, number string, attrs *[]slog.Attr) (string, string, error) {
	_, n, err := h.parkedAction(ctx, stream, number)
	if err != nil {
		return "", "", err
	}
	if err := h.act.store.ResolveExpired(ctx, stream, n, &store.ResolveExpiredParams{Reason: reasonGivenUp}); err != nil {
		return "", "", parkedRefusal(err)
	}
	*attrs = append(*attrs, slog.String("gap_reason", reasonGivenUp))
	return link("parked", "stream", stream), fmt.Sprintf("Gave up %d of %s: a gap with reason %s; the stream goes on.", n, stream, reasonGivenUp), nil
}
