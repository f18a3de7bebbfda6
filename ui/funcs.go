package ui

import (
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// funcs are the templates' helpers. None returns template.HTML: every
// value a template prints is escaped by html/template.
var funcs = template.FuncMap{
	"dur":     dur,
	"ago":     func(now, t time.Time) string { return since(now, t) },
	"stamp":   stamp,
	"atLeast": atLeast,
}

// dur prints a duration rounded for reading: 850ms, 12.3s, 4m05s, 2h10m.
func dur(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = d.Round(time.Millisecond).String()
	case d < time.Minute:
		s = d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		s = d.Round(time.Second).String()
	default:
		s = d.Round(time.Minute).String()
	}
	if neg {
		return "-" + s
	}
	return s
}

// since prints t relative to now: "3.2s ago", "in 4.1s"; "-" for no time.
func since(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + dur(-d)
	}
	return dur(d) + " ago"
}

// stamp prints t in UTC to the millisecond; "-" for no time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// atLeast prints a count that stopped at a cap: 100+.
func atLeast(n int, capped bool) string {
	if capped {
		return strconv.Itoa(n) + "+"
	}
	return strconv.Itoa(n)
}

// isFormat reports whether r is a format character (Unicode category Cf):
// bidirectional overrides, embeddings, isolates and marks, zero-width
// joiners, the byte order mark. The store accepts them in names and text;
// shown as they are, an override reverses the rest of its line, the page's
// own words included.
func isFormat(r rune) bool { return unicode.Is(unicode.Cf, r) }

// escapeFormat returns page with every format character written as a Go
// escape (\u202e), as payload previews show them. It runs on every page
// rendered, so that no user string, in text, attribute or title, is shown
// with one; the templates have none of their own. Links are unaffected:
// html/template percent-encodes them. The bound fields of an action's
// form are Go-quoted (confirm, boundValues), so that they post back the
// values the page was drawn for.
func escapeFormat(page string) string {
	if strings.IndexFunc(page, isFormat) < 0 {
		return page
	}
	var b strings.Builder
	b.Grow(len(page) + 16)
	for len(page) > 0 {
		r, size := utf8.DecodeRuneInString(page)
		if isFormat(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		} else {
			b.WriteString(page[:size]) // as it was, an invalid byte too
		}
		page = page[size:]
	}
	return b.String()
}
