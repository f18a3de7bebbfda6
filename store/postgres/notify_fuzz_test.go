package postgres

import (
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Fuzz targets of the parsers of the NOTIFY payloads that the listeners
// read: parsePayload (the barrier's resolution notices, formatted by
// streamNotice.appendRecords and pack) and parseWaiter (the named-lease waiters'
// announcements, sent by AnnounceLeaseWaiter, whose SQL formatWaiter below
// models). Any session that can connect may NOTIFY on the channel, so a
// parser must refuse whatever its formatter cannot send: each target checks
// the round trip of valid values and that a raw payload is accepted exactly
// when it has the documented form, with its values.

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

// payloadSeeds are raw payloads every parser target starts from, those a
// parser once accepted though they are not of its form among them.
var payloadSeeds = []string{
	"", "r", "r\t", "r\ts", "r\ts\t1", "r\ts\t9223372036854775807", "r\ts\t9223372036854775808", "r\ts\t1 ",
	"r\ts\t1\t", "r\ts\tt\t1", "l\ts", "w\tn\to\t1\t1", "n\to\t1\t0", "n\to\t0\t0", "n\to\t1700000000000000\t7",
	"n\to\t1", "n\to\t1\t1\t1", "n\to\t1\t9223372036854775808", "n\to\t1\t1 ",
	"r\ts\t01", "r\ts\t+1", "r\ts\t0", "r\t\t1", "r\tnul\x00\t1", "0",
	"r\ts\t1,2", "r\ts\t1-3,5", "r\ts\t3-1", "r\ts\t1-1", "r\ts\t1,,2", "r\ts\t1-", "r\ts\t-1", "r\ts\t1-2-3",
	"r\ts\t1-10000", "r\ts\t1-10001", "r\ts\t1-9223372036854775807", "t\ts\t5", "t\ts\t0", "t\ts\t5,6", "w\ts\t5", "s\ts", "s\t", "s\ts\t1",
}

// refRecord parses a record by the documented form, with regular
// expressions: a reference for parseRecord.
func refRecord(raw string) (notice, bool) {
	kind, rest, ok := strings.Cut(raw, "\t")
	switch {
	case !ok:
		return notice{}, false
	case kind == "s":
		return notice{kind: 's', stream: rest}, store.ValidateStream(rest) == nil
	case kind != "t" && kind != "r":
		return notice{}, false
	}
	i := strings.LastIndexByte(rest, '\t')
	if i < 0 || store.ValidateStream(rest[:i]) != nil {
		return notice{}, false
	}
	nt := notice{kind: kind[0], stream: rest[:i]}
	list := rest[i+1:]
	if nt.kind == 't' {
		n, ok := nonNegative(list)
		nt.through = n
		return nt, ok && n >= 1
	}
	if !listForm.MatchString(list) {
		return notice{}, false
	}
	var listed int64
	for _, item := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		a, ok := nonNegative(lo)
		if !ok || a < 1 {
			return notice{}, false
		}
		b := a
		if isRange {
			if b, ok = nonNegative(hi); !ok || b <= a || b-a >= maxListed {
				return notice{}, false
			}
		}
		if listed += b - a + 1; listed > maxListed {
			return notice{}, false
		}
		nt.ranges = append(nt.ranges, [2]int64{a, b})
	}
	return nt, true
}

// listForm is the form of the list of an "r" notice.
var listForm = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)

// refPayload parses a payload by the documented form: a reference for
// parsePayload.
func refPayload(raw string) (string, []notice, bool) {
	lines := strings.Split(raw, "\n")
	if len(lines) < 2 || !storeID.MatchString(lines[0]) {
		return "", nil, false
	}
	var out []notice
	for _, l := range lines[1:] {
		nt, ok := refRecord(l)
		if !ok {
			return "", nil, false
		}
		out = append(out, nt)
	}
	return lines[0], out, true
}

// storeID is the form of a Store's id in a payload.
var storeID = regexp.MustCompile(`^[0-9a-f]{16}$`)

func FuzzParsePayload(f *testing.F) {
	for _, p := range payloadSeeds {
		f.Add("s", int64(0), uint64(1), 1, p)
		f.Add("s", int64(0), uint64(1), 1, "0123456789abcdef\n"+p)
		f.Add("s", int64(0), uint64(1), 1, "0123456789abcdef\nt\ta\t1\n"+p)
	}
	for _, p := range []string{"0123456789abcdef", "0123456789ABCDEF\nt\ts\t1", "0123456789abcde\nt\ts\t1", "0123456789abcdef\n\nt\ts\t1"} {
		f.Add("s", int64(0), uint64(1), 1, p)
	}
	for _, s := range []string{"orders", "a\tb", "a\nb", "日本語", strings.Repeat("s", store.MaxNameLen), ""} {
		for _, through := range []int64{0, 1, 7, 1<<63 - 1} {
			f.Add(s, through, uint64(0x5eed), 40, "")
		}
	}
	const id = "0123456789abcdef"
	f.Fuzz(func(t *testing.T, stream string, through int64, seed uint64, count int, raw string) {
		// The round trip: the payloads of any collection of resolutions
		// of a valid stream come back as collected, from their sender, and
		// a record of an invalid one is refused. Another stream's record
		// shares the payloads, as records do.
		sn := &streamNotice{through: min(max(through, 0), 1<<62)} // numbers above it stay below 2^63
		r := rand.New(rand.NewPCG(seed, seed))
		for range min(max(count, 0), 3*maxListed) {
			sn.numbers = append(sn.numbers, sn.through+1+r.Int64N(1+int64(r.IntN(3))*500))
		}
		if len(sn.numbers) > maxListed {
			sn.numbers, sn.reread = nil, true
		}
		valid := store.ValidateStream(stream) == nil
		gotThrough, got, reread := int64(0), map[int64]bool{}, false
		for _, p := range pack(id, sn.appendRecords([]string{"t\tother\t3"}, stream)) {
			if len(p) > maxPayload {
				t.Fatalf("payload of %d bytes", len(p))
			}
			sender, records, ok := parsePayload(p)
			if !valid {
				if ok && slices.ContainsFunc(records, func(nt notice) bool { return nt.stream != "other" }) {
					t.Fatalf("parsePayload(%q) accepted a record of an invalid stream", p)
				}
				continue
			}
			if !ok || sender != id {
				t.Fatalf("parsePayload(%q) = %q, %+v, %v", p, sender, records, ok)
			}
			for _, nt := range records {
				switch {
				case nt.stream == "other" && stream != "other":
					continue
				case nt.stream != stream:
					t.Fatalf("parsePayload(%q): a record of %q", p, nt.stream)
				}
				switch nt.kind {
				case 't':
					gotThrough = max(gotThrough, nt.through)
				case 's':
					reread = true
				case 'r':
					for _, rg := range nt.ranges {
						for n := rg[0]; n <= rg[1]; n++ {
							got[n] = true
						}
					}
				}
			}
		}
		if valid && stream != "other" {
			want := map[int64]bool{}
			for _, n := range sn.numbers {
				if n > sn.through {
					want[n] = true
				}
			}
			switch {
			case gotThrough != sn.through:
				t.Fatalf("through %d, want %d", gotThrough, sn.through)
			case reread != sn.reread:
				t.Fatalf("reread %v, want %v", reread, sn.reread)
			case len(got) != len(want):
				t.Fatalf("%d numbers back, want %d", len(got), len(want))
			}
			for n := range want {
				if !got[n] {
					t.Fatalf("number %d lost", n)
				}
			}
		}

		// The documented form.
		wantID, wantRecords, wantOK := refPayload(raw)
		gotID, gotRecords, ok := parsePayload(raw)
		switch {
		case ok != wantOK:
			t.Fatalf("parsePayload(%q) ok = %v, want %v (%+v)", raw, ok, wantOK, gotRecords)
		case ok && (gotID != wantID || !reflect.DeepEqual(gotRecords, wantRecords)):
			t.Fatalf("parsePayload(%q) = %q %+v, want %q %+v", raw, gotID, gotRecords, wantID, wantRecords)
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
