package store_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/seqlease/seqlease/store"
)

func TestQuoteInput(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"orders", `"orders"`},
		{"", `""`},
		{"a\n\x1b[31m", `"a\n\x1b[31m"`},
		{"\xff\xfe", `"\xff\xfe"`},
		{strings.Repeat("a", 64), `"` + strings.Repeat("a", 64) + `"`},
		{strings.Repeat("a", 70), `"` + strings.Repeat("a", 64) + `"…(+6 bytes)`},
		// A 2-byte rune straddles byte 64: the cut moves back to its start.
		{strings.Repeat("a", 63) + "é" + "b", `"` + strings.Repeat("a", 63) + `"…(+3 bytes)`},
		// Escapes count: 16 ESC bytes fill the 64 bytes as \x1b each.
		{strings.Repeat("\x1b", 20), `"` + strings.Repeat(`\x1b`, 16) + `"…(+4 bytes)`},
	} {
		if got := store.QuoteInput(tc.in); got != tc.want {
			t.Errorf("QuoteInput(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	huge := store.QuoteInput(strings.Repeat("\x1b", 10<<20))
	if len(huge) > 100 || !utf8.ValidString(huge) || strings.ContainsRune(huge, 0x1b) {
		t.Errorf("QuoteInput of 10 MB of ESC = %d bytes %q", len(huge), huge)
	}
}
