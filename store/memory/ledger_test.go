package memory_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// TestLedgerKeepsEntriesExactly: the ledger stores its entries without
// pointers (microsecond times, and the texts, locations and payloads in
// side tables of each chunk), yet every entry reads back exactly as it was
// written: times in their own location (equal by == as well as by Equal),
// payloads of every size on both sides of the chunk's byte arena limit, a
// nil payload apart from an empty one, owners, kinds and operation ids
// that repeat or not, across chunk boundaries and after a trim that cuts a
// chunk.
func TestLedgerKeepsEntriesExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memory.New(nil)
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("east", 5*3600+1800), time.FixedZone("west", -7*3600)}
	payloads := [][]byte{
		nil, {}, []byte("p"),
		bytes.Repeat([]byte("s"), 4<<10), bytes.Repeat([]byte("l"), 4<<10+1), bytes.Repeat([]byte("h"), 64<<10),
	}
	base := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	at := func(i int, d time.Duration) time.Time {
		return base.Add(time.Duration(i)*time.Millisecond + d).In(zones[(i+int(d/time.Second))%len(zones)])
	}

	const n = 700 // more than two chunks of 256
	want := make([]store.Entry, n)
	for i := range n {
		leased := at(i, 0)
		es, err := s.Lease(ctx, "l", []store.LeaseRequest{{
			OperationID: fmt.Sprint("op-", i%5), Kind: []string{"", "a", "b"}[i%3], TTL: time.Minute,
		}}, &store.LeaseParams{Owner: fmt.Sprint("owner-", i/100), Now: &leased})
		require.NoError(t, err)
		e := es[0]
		require.Equal(t, leased, e.LeasedAt)
		switch i % 4 {
		case 0, 1:
			p := bytes.Clone(payloads[i%len(payloads)])
			resolved := at(i, time.Second)
			_, err := s.Commit(ctx, "l", e.Number, e.Token, &store.CommitParams{Payload: p, Now: &resolved})
			require.NoError(t, err)
			if len(p) > 0 {
				p[0]++ // the store keeps its own copy
			}
			e.State, e.ResolvedAt, e.Payload = store.Committed, resolved, payloads[i%len(payloads)]
		case 2:
			released := at(i, 2*time.Second)
			require.NoError(t, s.Release(ctx, "l", e.Number, e.Token, &store.ReleaseParams{Now: &released}))
			e.State, e.ResolvedAt, e.GapReason = store.Gap, released, store.ReasonReleased
		case 3:
			extended := at(i, 3*time.Second)
			now, expires, err := s.Extend(ctx, "l", e.Number, e.Token, &store.ExtendParams{TTL: time.Hour, Now: &extended})
			require.NoError(t, err)
			require.Equal(t, extended, now)
			e.ExpiresAt, e.Renewals = expires, 1
		}
		want[i] = e
	}
	// Fill two released gaps, one with a payload of its own block.
	for _, i := range []int{2, 258} {
		filled := at(i, 4*time.Second)
		p := payloads[3+(i/2)%3] // 4 KiB in the chunk's arena, or more in a block of its own
		require.NoError(t, s.FillGap(ctx, "l", int64(i+1), &store.FillParams{Payload: p, FilledBy: "filler", Now: &filled}))
		want[i].State, want[i].Payload, want[i].FilledAt, want[i].FilledBy = store.Committed, p, filled, "filler"
	}

	got := readAll(t, s, "l", 0)
	require.Equal(t, want, got)
	got[4].Payload[0]++ // a read hands out copies
	require.Equal(t, want, readAll(t, s, "l", 0))

	// Trim inside the second chunk (numbers 257..512), once every entry
	// below 300 is resolved: the rest reads back unchanged.
	for i := 3; i < 299; i += 4 { // the extended leases
		e := want[i]
		released := at(i, 5*time.Second)
		require.NoError(t, s.Release(ctx, "l", e.Number, e.Token, &store.ReleaseParams{Now: &released}))
		want[i].State, want[i].ResolvedAt, want[i].GapReason = store.Gap, released, store.ReasonReleased
	}
	low, err := s.Trim(ctx, "l", 300)
	require.NoError(t, err)
	require.Equal(t, int64(300), low)
	require.Equal(t, want[299:], readAll(t, s, "l", 299))
	_, err = s.Read(ctx, "l", 298, 1)
	require.ErrorAs(t, err, new(*store.TrimmedError))
}

func readAll(t *testing.T, s *memory.Store, stream string, after int64) []store.Entry {
	var out []store.Entry
	for {
		es, err := s.Read(context.Background(), stream, after, 100)
		require.NoError(t, err)
		if len(es) == 0 {
			return out
		}
		out = append(out, es...)
		after = es[len(es)-1].Number
	}
}
