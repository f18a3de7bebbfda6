package memory

import (
	"slices"

	"github.com/seqlease/seqlease/store"
)

// chunkBits sets the ledger's chunk size: 256 entries, about 80 KiB.
const (
	chunkBits = 8
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// ledger holds the retained entries of one stream, low..last, in fixed-size
// chunks: leasing appends without ever copying the entries already there
// (a growing slice would copy the whole ledger under the stream's lock),
// and Trim drops whole chunks. Entry number n lives in slot n-base.
type ledger struct {
	chunks []*[chunkSize]store.Entry
	base   int64 // the number of chunks[0][0]
	low    int64 // the first retained number; Trim raises it
	last   int64 // the highest number handed out (N)
}

func newLedger() ledger { return ledger{base: 1, low: 1} }

// at returns the entry of number n, low <= n <= last.
func (l *ledger) at(n int64) *store.Entry {
	i := n - l.base
	return &l.chunks[i>>chunkBits][i&chunkMask]
}

// add appends e as number last+1 and returns it in the ledger.
func (l *ledger) add(e store.Entry) *store.Entry {
	n := l.last + 1
	if int((n-l.base)>>chunkBits) == len(l.chunks) {
		l.chunks = append(l.chunks, new([chunkSize]store.Entry))
	}
	p := l.at(n)
	*p = e
	l.last = n
	return p
}

// clone returns copies of the entries from..to-1 (payloads included), for a
// caller outside the stream's lock.
func (l *ledger) clone(from, to int64) []store.Entry {
	if to <= from {
		return nil
	}
	out := make([]store.Entry, 0, to-from)
	for n := from; n < to; n++ {
		e := *l.at(n)
		e.Payload = slices.Clone(e.Payload)
		out = append(out, e)
	}
	return out
}

// trim forgets the entries below bound (low < bound <= last+1) and returns
// how many of them were open gaps. The chunks wholly below bound go, so
// their memory can be collected; the rest of the trimmed entries are
// cleared.
func (l *ledger) trim(bound int64) (gaps int64) {
	for n := l.low; n < bound; n++ {
		e := l.at(n)
		if e.State == store.Gap {
			gaps++
		}
		*e = store.Entry{}
	}
	l.low = bound
	if k := int((bound - l.base) >> chunkBits); k > 0 {
		clear(l.chunks[:k])
		if k > len(l.chunks)/2 { // re-slice into a fresh array, so the old one goes too
			l.chunks = append([]*[chunkSize]store.Entry(nil), l.chunks[k:]...)
		} else {
			l.chunks = l.chunks[k:]
		}
		l.base += int64(k) << chunkBits
	}
	return gaps
}
