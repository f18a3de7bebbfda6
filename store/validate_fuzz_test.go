package store_test

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/seqlease/seqlease/store"
)

// Fuzz targets of the validators and parsers of package store. Each checks
// its function against an independent statement of the rule (the oracle)
// and that every refusal is typed: it matches its own sentinel and
// store.ErrInvalidArgument. Plain `go test` runs the seeds as regression
// tests; `go test -fuzz '^FuzzX$' ./store/` explores.

// hostileSeeds are inputs every text fuzz target starts from.
var hostileSeeds = []string{
	"", "a", "orders", "x'; DROP TABLE entries; --", `x"; DROP SCHEMA public CASCADE; --`,
	"nul\x00byte", "tab\tnew\nline", "del\x7f", "\xff\xfe", "\xc0\xaf", "\xed\xa0\x80", "é", "日本語",
	"\u202eRTL", "\u200bzero-width", "\ufeffBOM", "\u0085next-line", "emoji 🚀",
	strings.Repeat("s", store.MaxNameLen), strings.Repeat("s", store.MaxNameLen+1),
	strings.Repeat("é", store.MaxNameLen/2), strings.Repeat("é", store.MaxNameLen/2) + "x",
	strings.Repeat("t", store.MaxTextLen), strings.Repeat("t", store.MaxTextLen+1),
}

// wellFormed is the oracle of the text rule: valid UTF-8 without control
// characters (Unicode category Cc).
func wellFormed(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.Is(unicode.Cc, r) {
			return false
		}
	}
	return true
}

// checkVerdict fails t unless err is nil exactly when valid, and typed
// (sentinel and ErrInvalidArgument) when not nil.
func checkVerdict(t *testing.T, what, s string, valid bool, err, sentinel error) {
	t.Helper()
	switch {
	case valid && err != nil:
		t.Fatalf("%s(%q) refused a valid input: %v", what, s, err)
	case !valid && err == nil:
		t.Fatalf("%s(%q) accepted an invalid input", what, s)
	case err != nil && (!errors.Is(err, sentinel) || !errors.Is(err, store.ErrInvalidArgument)):
		t.Fatalf("%s(%q): %v does not match %v and ErrInvalidArgument", what, s, err, sentinel)
	case err != nil && !store.IsInvalid(err):
		t.Fatalf("%s(%q): IsInvalid(%v) is false", what, s, err)
	}
	if valid && strings.ContainsRune(s, 0) {
		t.Fatalf("%s accepted a NUL byte, which PostgreSQL text cannot store: %q", what, s)
	}
}

// nameOK is the oracle of stream names, lease names and owners.
func nameOK(s string) bool { return s != "" && len(s) <= store.MaxNameLen && wellFormed(s) }

func FuzzValidateStream(f *testing.F) {
	for _, s := range hostileSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkVerdict(t, "ValidateStream", s, nameOK(s), store.ValidateStream(s), store.ErrInvalidStream)
	})
}

func FuzzValidateReader(f *testing.F) {
	for _, s := range hostileSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkVerdict(t, "ValidateReader", s, nameOK(s), store.ValidateReader(s), store.ErrInvalidReader)
		// A checkpoint's key and a save add only the stream and the position.
		checkVerdict(t, "ValidateCheckpointKey(reader)", s, nameOK(s), store.ValidateCheckpointKey(s, "orders"), store.ErrInvalidReader)
		checkVerdict(t, "ValidateSaveCheckpoint(reader)", s, nameOK(s), store.ValidateSaveCheckpoint(s, "orders", 0), store.ErrInvalidReader)
		checkVerdict(t, "ValidateCheckpointKey(stream)", s, nameOK(s), store.ValidateCheckpointKey("r", s), store.ErrInvalidStream)
	})
}

func FuzzValidateLeaseName(f *testing.F) {
	for _, s := range hostileSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkVerdict(t, "ValidateLeaseName", s, nameOK(s), store.ValidateLeaseName(s), store.ErrInvalidLeaseName)
	})
}

func FuzzValidateLeaseOwner(f *testing.F) {
	for _, s := range hostileSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkVerdict(t, "ValidateLeaseOwner", s, nameOK(s), store.ValidateLeaseOwner(s), store.ErrInvalidOwner)
		// The triple that names a holding adds only the fence.
		err := store.ValidateHoldingOf("name", s, 1)
		checkVerdict(t, "ValidateHoldingOf(owner)", s, nameOK(s), err, store.ErrInvalidOwner)
	})
}

func FuzzValidateText(f *testing.F) {
	for _, s := range hostileSeeds {
		f.Add("owner", s)
	}
	f.Add("operation id", "op-1")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, field, s string) {
		valid := len(s) <= store.MaxTextLen && wellFormed(s)
		err := store.ValidateText(field, s)
		checkVerdict(t, "ValidateText", s, valid, err, store.ErrInvalidText)
		if err != nil && !strings.Contains(err.Error(), field) {
			t.Fatalf("ValidateText(%q, %q): %v does not name the field", field, s, err)
		}
		// The lease request fields and the gap reason use the same rule.
		_, err = store.ExpiryReason("s", 1, &store.ResolveExpiredParams{Reason: s})
		checkVerdict(t, "ExpiryReason", s, valid && s != store.ReasonReleased, err, store.ErrInvalidText)
		err = store.ValidateLease("s", []store.LeaseRequest{{OperationID: s, Kind: s, TTL: time.Second}}, &store.LeaseParams{Owner: s})
		checkVerdict(t, "ValidateLease(text)", s, valid, err, store.ErrInvalidText)
	})
}

func FuzzValidateTTL(f *testing.F) {
	for _, d := range []int64{0, -1, 1, 999, 1000, int64(time.Second), int64(store.MaxTTL), int64(store.MaxTTL) + 1,
		1<<63 - 1, -1 << 63} {
		f.Add(d, int64(0))
		f.Add(d, int64(time.Hour))
	}
	f.Fuzz(func(t *testing.T, ttl, limit int64) {
		max := time.Duration(limit)
		if max <= 0 || max > store.MaxTTL {
			max = store.MaxTTL
		}
		valid := time.Duration(ttl) >= time.Microsecond && time.Duration(ttl) <= max
		err := store.ValidateTTL(time.Duration(ttl), time.Duration(limit))
		checkVerdict(t, "ValidateTTL", time.Duration(ttl).String(), valid, err, store.ErrInvalidTTL)
	})
}

// FuzzParseTokenOracle extends FuzzParseToken (entry_test.go), which checks
// the round trip: here ParseToken must accept exactly the strings that are
// 32 hex digits, not all zero, once the hyphens are removed, and return
// their bytes.
func FuzzParseTokenOracle(f *testing.F) {
	f.Add(store.NewToken().String())
	f.Add(strings.ToUpper(strings.ReplaceAll(store.NewToken().String(), "-", "")))
	f.Add("")
	f.Add("----")
	f.Add(strings.Repeat("0", 32))
	f.Add("0123456789abcdef-0123456789ABCDEF")
	f.Add("{00000000-0000-0000-0000-000000000001}")
	f.Add("0x" + strings.Repeat("a", 30))
	f.Add(strings.Repeat("é", 16))
	f.Fuzz(func(t *testing.T, s string) {
		digits := strings.ReplaceAll(s, "-", "")
		want, decodeErr := hex.DecodeString(digits)
		valid := len(digits) == 32 && decodeErr == nil && strings.Trim(digits, "0") != ""
		tok, err := store.ParseToken(s)
		checkVerdict(t, "ParseToken", s, valid, err, store.ErrInvalidToken)
		if valid && string(tok[:]) != string(want) {
			t.Fatalf("ParseToken(%q) = %x, want %x", s, tok, want)
		}
		if err != nil && !tok.IsZero() {
			t.Fatalf("ParseToken(%q) failed but returned a token %v", s, tok)
		}
	})
}

// FuzzValidateReceive checks the (consumer, message id) rule of inbox
// records: each non-empty, within its limit, well formed.
func FuzzValidateReceive(f *testing.F) {
	for _, s := range hostileSeeds {
		f.Add(s, "m-1")
		f.Add("payments", s)
	}
	f.Add("payments", strings.Repeat("m", store.MaxMessageIDLen))
	f.Add("payments", strings.Repeat("m", store.MaxMessageIDLen+1))
	f.Fuzz(func(t *testing.T, consumer, id string) {
		err := store.ValidateReceive(consumer, id)
		consumerOK := consumer != "" && len(consumer) <= store.MaxConsumerLen && wellFormed(consumer)
		idOK := id != "" && len(id) <= store.MaxMessageIDLen && wellFormed(id)
		switch {
		case !consumerOK:
			checkVerdict(t, "ValidateReceive consumer", consumer, false, err, store.ErrInvalidConsumer)
		default:
			checkVerdict(t, "ValidateReceive id", id, idOK, err, store.ErrInvalidMessageID)
		}
		if err == nil && (strings.ContainsRune(consumer, 0) || strings.ContainsRune(id, 0)) {
			t.Fatalf("accepted a NUL byte: %q %q", consumer, id)
		}
	})
}
