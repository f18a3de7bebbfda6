package ui

import (
	"html/template"
	"strconv"
	"time"
)

// funcs are the templates' helpers. None returns template.HTML: every
// value a template prints is escaped by html/template.
var funcs = template.FuncMap{
	"dur":     dur,
	"ago":     func(now, t time.Time) string { return since(now, t) },
	"stamp":   stamp,
	"atLeast": atLeast,
	"fillLink": func(stream string, number int64) string {
		return link(actFillGap, "stream", stream, "number", itoa(number))
	},
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
