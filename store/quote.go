package store

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxQuoted is the most bytes of escaped user text QuoteInput keeps between
// its quotes.
const MaxQuoted = 64

// QuoteInput returns s as it should appear in an error message: Go-quoted
// (control characters, newlines, escape codes and invalid UTF-8 escaped) and
// cut at a rune boundary so that at most MaxQuoted bytes of escaped text
// stand between the quotes, followed by "…(+K bytes)" telling how many bytes
// of s were cut. Every error that repeats a stream name, lease name, owner,
// reader, consumer, message id, schema or token text formats it through
// QuoteInput, so a hostile input yields a short, single-line error.
func QuoteInput(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	i := 0
	for i < len(s) {
		_, size := utf8.DecodeRuneInString(s[i:])
		q := strconv.Quote(s[i : i+size])
		q = q[1 : len(q)-1]
		if b.Len()-1+len(q) > MaxQuoted {
			break
		}
		b.WriteString(q)
		i += size
	}
	b.WriteByte('"')
	if i < len(s) {
		b.WriteString("…(+" + strconv.Itoa(len(s)-i) + " bytes)")
	}
	return b.String()
}
