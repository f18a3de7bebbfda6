package postgres

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Fuzz targets of the parsers of the NOTIFY payloads that the listeners
// read: parseResolution (the barrier's resolutions, sent by notifyExpr) and
// parseWaiter (the named-lease waiters' announcements, sent by
// AnnounceLeaseWaiter). The formatters are SQL; formatResolution and
// formatWaiter below model them. Any session that can connect may NOTIFY on
// the channel, so a parser must refuse whatever its formatter cannot send:
// each target checks the round trip of valid values and that a raw payload
// is accepted exactly when it has the documented form, with its values.

// formatResolution is notifyExpr's payload: 'r' || chr(9) || stream ||
// chr(9) || number::text.
func formatResolution(stream string, number int64) string {
	return "r\t" + stream + "\t" + strconv.FormatInt(number, 10)
}

// formatWaiter is AnnounceLeaseWaiter's payload after "w<TAB>": name,
// waiter, since in microseconds (0: withdrawn; at least 1 otherwise) and
// fence, separated by tabs.
func formatWaiter(w store.LeaseWaiter) string {
	var since int64
	if !w.Since.IsZero() {
		since = max(w.Since.UnixMicro(), 1)
	}
	return w.Name + "\t" + w.Waiter + "\t" + strconv.FormatInt(since, 10) + "\t" + strconv.FormatInt(w.Fence, 10)
}

// decimal is how PostgreSQL prints a bigint that is not negative: no sign,
// no leading zero.
var decimal = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// nonNegative parses s as PostgreSQL prints a bigint >= 0.
func nonNegative(s string) (int64, bool) {
	if !decimal.MatchString(s) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// payloadSeeds are raw payloads every parser target starts from; the
// payloads a parser once accepted though they are not of its form are kept
// under testdata/fuzz.
var payloadSeeds = []string{
	"", "r", "r\t", "r\ts", "r\ts\t1", "r\ts\t9223372036854775807", "r\ts\t9223372036854775808", "r\ts\t1 ",
	"r\ts\t1\t", "r\ts\tt\t1", "l\ts", "w\tn\to\t1\t1", "n\to\t1\t0", "n\to\t0\t0", "n\to\t1700000000000000\t7",
	"n\to\t1", "n\to\t1\t1\t1", "n\to\t1\t9223372036854775808", "n\to\t1\t1 ",
}

func FuzzParseResolution(f *testing.F) {
	for _, p := range payloadSeeds {
		f.Add("s", int64(1), p)
	}
	for _, s := range []string{"orders", "a\tb", "日本語", strings.Repeat("s", store.MaxNameLen)} {
		for _, n := range []int64{1, 1<<63 - 1} {
			f.Add(s, n, formatResolution(s, n))
		}
	}
	f.Fuzz(func(t *testing.T, stream string, number int64, raw string) {
		// The round trip: every valid resolution comes back as sent, and
		// nothing else is read from what the formatter would make of it.
		valid := store.ValidateStream(stream) == nil && number >= 1
		s, n, ok := parseResolution(formatResolution(stream, number))
		switch {
		case valid && (!ok || s != stream || n != number):
			t.Fatalf("parseResolution(formatResolution(%q, %d)) = %q, %d, %v", stream, number, s, n, ok)
		case !valid && ok:
			t.Fatalf("parseResolution(formatResolution(%q, %d)) accepted a resolution the store cannot send", stream, number)
		}

		// The documented form: "r", a valid stream name, a number >= 1 as
		// PostgreSQL prints it, separated by tabs.
		wantOK := false
		var wantS string
		var wantN int64
		if kind, rest, found := strings.Cut(raw, "\t"); found && kind == "r" {
			if i := strings.LastIndexByte(rest, '\t'); i >= 0 {
				wantS = rest[:i]
				wantN, wantOK = nonNegative(rest[i+1:])
				wantOK = wantOK && wantN >= 1 && store.ValidateStream(wantS) == nil
			}
		}
		s, n, ok = parseResolution(raw)
		switch {
		case ok != wantOK:
			t.Fatalf("parseResolution(%q) ok = %v, want %v (%q, %d)", raw, ok, wantOK, s, n)
		case ok && (s != wantS || n != wantN):
			t.Fatalf("parseResolution(%q) = %q, %d, want %q, %d", raw, s, n, wantS, wantN)
		}
	})
}

func FuzzParseWaiter(f *testing.F) {
	for _, p := range payloadSeeds {
		f.Add("name", "owner", int64(1), int64(1), p)
	}
	for _, s := range []string{"n", "a\tb", "日本語", strings.Repeat("n", store.MaxNameLen)} {
		for _, since := range []int64{0, 1, -1, 1700000000000000, 1<<63 - 1, -1 << 63} {
			f.Add(s, "o", since, int64(0), "n\t"+s+"\t1\t0")
			f.Add("n", s, since, int64(7), "")
		}
	}
	f.Fuzz(func(t *testing.T, name, waiter string, sinceMicro, fence int64, raw string) {
		// The round trip, Since at the microsecond the announcement
		// carries (and at least 1 µs after the epoch: 0 means withdrawn).
		w := store.LeaseWaiter{Name: name, Waiter: waiter, Fence: fence}
		if sinceMicro != 0 {
			w.Since = time.UnixMicro(sinceMicro)
		}
		valid := store.ValidateLeaseWaiter(w) == nil
		got, ok := parseWaiter(formatWaiter(w))
		want := w
		if sinceMicro != 0 {
			want.Since = time.UnixMicro(max(sinceMicro, 1))
		}
		switch {
		case valid && (!ok || !sameWaiter(got, want)):
			t.Fatalf("parseWaiter(formatWaiter(%+v)) = %+v, %v, want %+v", w, got, ok, want)
		case !valid && ok:
			t.Fatalf("parseWaiter(formatWaiter(%+v)) accepted an announcement the store cannot send: %+v", w, got)
		}

		// The documented form: a valid lease name, a valid owner, since
		// and fence as PostgreSQL prints a bigint >= 0, separated by tabs.
		fields := strings.Split(raw, "\t")
		wantOK := len(fields) == 4 && store.ValidateLeaseName(fields[0]) == nil && store.ValidateLeaseOwner(fields[1]) == nil
		var since, fenceN int64
		if wantOK {
			var ok1, ok2 bool
			since, ok1 = nonNegative(fields[2])
			fenceN, ok2 = nonNegative(fields[3])
			wantOK = ok1 && ok2
		}
		got, ok = parseWaiter(raw)
		switch {
		case ok != wantOK:
			t.Fatalf("parseWaiter(%q) ok = %v, want %v (%+v)", raw, ok, wantOK, got)
		case !ok:
			return
		case got.Name != fields[0] || got.Waiter != fields[1] || got.Fence != fenceN ||
			(since == 0) != got.Since.IsZero() || (since != 0 && got.Since.UnixMicro() != since):
			t.Fatalf("parseWaiter(%q) = %+v", raw, got)
		}
	})
}

func sameWaiter(a, b store.LeaseWaiter) bool {
	return a.Name == b.Name && a.Waiter == b.Waiter && a.Fence == b.Fence && a.Since.Equal(b.Since)
}
