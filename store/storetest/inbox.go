package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/store"
)

// InboxStore is the contract of inbox records (store/inbox.go): which
// messages a consumer received, so that a redelivered message has its
// effect once. Every method validates its input first: bad input returns an
// error matching store.ErrInvalidArgument and its specific sentinel, and
// writes nothing.
type InboxStore interface {
	// MarkReceived records that consumer received messageID, at the
	// backend's now (or p.Now), and reports first = true; if the pair was
	// already recorded it writes nothing and reports first = false (a
	// duplicate). Of concurrent calls with one pair exactly one reports
	// first. On PostgreSQL, run in a transaction (a Store over a pgx.Tx),
	// it waits for a concurrent transaction that recorded the pair and has
	// not ended: first = false if that one commits, true if it rolls back.
	MarkReceived(ctx context.Context, consumer, messageID string, p *store.ReceiveParams) (first bool, err error)

	// Received reports whether consumer's record of messageID exists, and
	// when it was received.
	Received(ctx context.Context, consumer, messageID string) (receivedAt time.Time, ok bool, err error)

	// CountReceived counts consumer's records; "" counts every consumer's.
	// On PostgreSQL it reads every record it counts: an operator's tool,
	// not a hot path.
	CountReceived(ctx context.Context, consumer string) (int64, error)

	// PurgeReceived deletes up to the effective limit of the records
	// received strictly before the cutoff (store.PurgeCutoff: p.Before, or
	// the backend's now minus p.OlderThan), of p.Consumer only if it is
	// set, the oldest first, and returns how many it deleted. Fewer than
	// the limit means none is left below the cutoff, but those a
	// concurrent PurgeReceived is deleting: concurrent purges delete
	// different records.
	PurgeReceived(ctx context.Context, p *store.PurgeReceivedParams) (int64, error)
}

// markReceived calls MarkReceived at base+at and checks that it succeeded.
func (b *bundle) markReceived(consumer, id string, at time.Duration) bool {
	b.t.Helper()
	first, err := b.s.MarkReceived(b.ctx, consumer, id, &store.ReceiveParams{Now: b.at(at)})
	require.NoError(b.t, err, "MarkReceived %s/%s", consumer, id)
	return first
}

// received returns the receive time of consumer's record of id, and
// whether it exists.
func (b *bundle) received(consumer, id string) (time.Time, bool) {
	b.t.Helper()
	at, ok, err := b.s.Received(b.ctx, consumer, id)
	require.NoError(b.t, err, "Received %s/%s", consumer, id)
	return normTime(at), ok
}

// countReceived counts consumer's records.
func (b *bundle) countReceived(consumer string) int64 {
	b.t.Helper()
	n, err := b.s.CountReceived(b.ctx, consumer)
	require.NoError(b.t, err, "CountReceived %q", consumer)
	return n
}

// purge purges with p and checks that it succeeded.
func (b *bundle) purge(p *store.PurgeReceivedParams) int64 {
	b.t.Helper()
	n, err := b.s.PurgeReceived(b.ctx, p)
	require.NoError(b.t, err, "PurgeReceived %+v", p)
	return n
}

func testInbox(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("the first receipt is first, a repeat is a duplicate", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("-consumer")
		require.True(t, b.markReceived(c, "m-1", time.Second))
		require.False(t, b.markReceived(c, "m-1", 2*time.Second), "the same message again is a duplicate")
		require.False(t, b.markReceived(c, "m-1", 3*time.Second))
		at, ok := b.received(c, "m-1")
		require.True(t, ok)
		requireTime(t, b.time(time.Second), at, "a duplicate does not move the receive time")
		require.True(t, b.markReceived(c, "m-2", time.Second), "another message is first")
		require.Equal(t, int64(2), b.countReceived(c))
	})

	t.Run("consumers keep their records apart", func(t *testing.T) {
		b := setup(t, newStore)
		c1, c2 := b.name("-a"), b.name("-b")
		require.True(t, b.markReceived(c1, "m", 0))
		require.True(t, b.markReceived(c2, "m", 0), "another consumer's first receipt of the same id")
		require.False(t, b.markReceived(c2, "m", 0))
		require.Equal(t, int64(1), b.countReceived(c1))
		require.Equal(t, int64(1), b.countReceived(c2))
		_, ok := b.received(b.name("-none"), "m")
		require.False(t, ok, "no record for a consumer that received nothing")
		require.Zero(t, b.countReceived(b.name("-none")))
	})

	t.Run("the receive time is the backend's clock", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		first, err := b.s.MarkReceived(b.ctx, c, "m", nil)
		require.NoError(t, err)
		require.True(t, first)
		at, ok := b.received(c, "m")
		require.True(t, ok)
		now, err := b.s.Now(b.ctx)
		require.NoError(t, err)
		require.False(t, at.Before(b.base), "received at %v, before the test began at %v", at, b.base)
		require.False(t, at.After(now), "received at %v, after the backend's now %v", at, now)
	})

	t.Run("ids are compared byte for byte", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		ids := []string{"m", "M", "m ", "é", "e\u0301", strings.Repeat("x", store.MaxMessageIDLen)}
		for _, id := range ids {
			require.True(t, b.markReceived(c, id, 0), "%q", id)
		}
		for _, id := range ids {
			require.False(t, b.markReceived(c, id, 0), "%q", id)
		}
		require.Equal(t, int64(len(ids)), b.countReceived(c))
	})

	t.Run("concurrent receipts of one message: exactly one is first", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		const n = 8
		var wg sync.WaitGroup
		firsts := make(chan string, n*10)
		for w := range n {
			wg.Go(func() {
				for m := range 10 {
					first, err := b.s.MarkReceived(b.ctx, c, fmt.Sprint("m-", m), nil)
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					if first {
						firsts <- fmt.Sprint("m-", m)
					}
				}
			})
		}
		wg.Wait()
		close(firsts)
		seen := map[string]int{}
		for id := range firsts {
			seen[id]++
		}
		require.Len(t, seen, 10)
		for id, k := range seen {
			require.Equal(t, 1, k, "%s was first %d times", id, k)
		}
	})

	t.Run("purge deletes what was received before the cutoff, oldest first, in batches", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		for i := range 5 {
			b.markReceived(c, fmt.Sprint("m-", i), time.Duration(i)*time.Second)
		}
		b.markReceived(c, "late", time.Hour)
		cut := b.time(10 * time.Second)
		require.Equal(t, int64(2), b.purge(&store.PurgeReceivedParams{Consumer: c, Before: cut, Limit: 2}))
		for i := range 2 {
			_, ok := b.received(c, fmt.Sprint("m-", i))
			require.False(t, ok, "m-%d is among the oldest: purged first", i)
		}
		_, ok := b.received(c, "m-2")
		require.True(t, ok, "m-2 waits for the next batch")
		require.Equal(t, int64(2), b.purge(&store.PurgeReceivedParams{Consumer: c, Before: cut, Limit: 2}))
		require.Equal(t, int64(1), b.purge(&store.PurgeReceivedParams{Consumer: c, Before: cut, Limit: 2}), "a short batch: done")
		require.Zero(t, b.purge(&store.PurgeReceivedParams{Consumer: c, Before: cut, Limit: 2}))
		require.Equal(t, int64(1), b.countReceived(c), "the record after the cutoff stays")
		_, ok = b.received(c, "late")
		require.True(t, ok)
		require.True(t, b.markReceived(c, "m-0", 2*time.Hour), "a purged record is forgotten: the id is first again")
	})

	t.Run("concurrent purges delete each record once", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		const records = 200
		for i := range records {
			b.markReceived(c, fmt.Sprint(i), time.Duration(i)*time.Microsecond)
		}
		var wg sync.WaitGroup
		deleted := make([]int64, 8)
		for w := range deleted {
			wg.Go(func() {
				for {
					n, err := b.s.PurgeReceived(b.ctx, &store.PurgeReceivedParams{Consumer: c, Before: b.time(time.Second), Limit: 7})
					if err != nil {
						t.Errorf("purger %d: %v", w, err)
						return
					}
					deleted[w] += n
					if n < 7 {
						return
					}
				}
			})
		}
		wg.Wait()
		var sum int64
		for _, n := range deleted {
			sum += n
		}
		require.Equal(t, int64(records), sum, "every record deleted by exactly one purge")
		require.Zero(t, b.countReceived(c))
	})

	t.Run("the cutoff is strict", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		b.markReceived(c, "at", time.Second)
		require.Zero(t, b.purge(&store.PurgeReceivedParams{Consumer: c, Before: b.time(time.Second)}))
		require.Equal(t, int64(1), b.purge(&store.PurgeReceivedParams{Consumer: c, Before: b.time(time.Second + time.Microsecond)}))
	})

	t.Run("OlderThan counts from the backend's now", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		b.markReceived(c, "old", 0)
		b.markReceived(c, "new", time.Minute)
		p := &store.PurgeReceivedParams{Consumer: c, OlderThan: time.Minute, Now: b.at(time.Minute)}
		require.Zero(t, b.purge(p), "received exactly a minute before now: kept (the cutoff is strict)")
		p.Now = b.at(time.Minute + time.Microsecond)
		require.Equal(t, int64(1), b.purge(p), "received more than a minute before now: purged")
		_, ok := b.received(c, "new")
		require.True(t, ok)
		p = &store.PurgeReceivedParams{Consumer: c, OlderThan: time.Minute, Now: b.at(2*time.Minute - time.Microsecond)}
		require.Zero(t, b.purge(p), "not yet a minute old")
		require.Equal(t, int64(1), b.purge(&store.PurgeReceivedParams{Consumer: c, Now: b.at(time.Hour)}),
			"OlderThan 0: everything received before now")
	})

	t.Run("purge of one consumer leaves the others", func(t *testing.T) {
		b := setup(t, newStore)
		c1, c2 := b.name("-a"), b.name("-b")
		for i := range 3 {
			b.markReceived(c1, fmt.Sprint(i), 0)
			b.markReceived(c2, fmt.Sprint(i), 0)
		}
		require.Equal(t, int64(3), b.purge(&store.PurgeReceivedParams{Consumer: c1, Before: b.time(time.Second)}))
		require.Zero(t, b.countReceived(c1))
		require.Equal(t, int64(3), b.countReceived(c2))
		require.Equal(t, int64(3), b.purge(&store.PurgeReceivedParams{Before: b.time(time.Second)}), "no consumer: every consumer's")
		require.Zero(t, b.countReceived(""))
	})

	t.Run("a nil purge uses the defaults", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		for i := range store.DefaultPurgeLimit + 1 {
			b.markReceived(c, fmt.Sprint(i), -time.Minute)
		}
		require.Equal(t, int64(store.DefaultPurgeLimit), b.purge(nil), "at most DefaultPurgeLimit")
		require.Equal(t, int64(1), b.purge(nil))
		require.Zero(t, b.countReceived(c))
	})

	t.Run("bad input is refused and writes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		b.markReceived(c, "kept", 0)
		long := strings.Repeat("x", store.MaxMessageIDLen+1)
		cases := []struct {
			name         string
			consumer, id string
			want         error
		}{
			{"empty consumer", "", "m", store.ErrInvalidConsumer},
			{"long consumer", strings.Repeat("c", store.MaxConsumerLen+1), "m", store.ErrInvalidConsumer},
			{"consumer not UTF-8", "c\xff", "m", store.ErrInvalidConsumer},
			{"consumer with a control character", "c\n", "m", store.ErrInvalidConsumer},
			{"empty id", c, "", store.ErrInvalidMessageID},
			{"long id", c, long, store.ErrInvalidMessageID},
			{"id not UTF-8", c, "m\xc3", store.ErrInvalidMessageID},
			{"id with NUL", c, "m\x00", store.ErrInvalidMessageID},
			{"id with DEL", c, "m\x7f", store.ErrInvalidMessageID},
			{"id with a C1 control", c, "m\u0085", store.ErrInvalidMessageID},
		}
		for _, tc := range cases {
			_, err := b.s.MarkReceived(b.ctx, tc.consumer, tc.id, nil)
			require.ErrorIs(t, err, store.ErrInvalidArgument, tc.name)
			require.ErrorIs(t, err, tc.want, tc.name)
			_, _, err = b.s.Received(b.ctx, tc.consumer, tc.id)
			require.ErrorIs(t, err, tc.want, "Received: %s", tc.name)
		}
		_, err := b.s.CountReceived(b.ctx, "c\xff")
		require.ErrorIs(t, err, store.ErrInvalidConsumer)
		badPurges := []struct {
			name string
			p    store.PurgeReceivedParams
			want error
		}{
			{"negative OlderThan", store.PurgeReceivedParams{OlderThan: -time.Second}, store.ErrInvalidCutoff},
			{"Before and OlderThan", store.PurgeReceivedParams{Before: b.time(time.Hour), OlderThan: time.Second}, store.ErrInvalidCutoff},
			{"negative limit", store.PurgeReceivedParams{Limit: -1}, store.ErrInvalidCount},
			{"limit too large", store.PurgeReceivedParams{Limit: store.MaxPurgeLimit + 1}, store.ErrInvalidCount},
			{"bad consumer", store.PurgeReceivedParams{Consumer: "c\x01"}, store.ErrInvalidConsumer},
		}
		for _, tc := range badPurges {
			tc.p.Now = b.at(time.Hour)
			n, err := b.s.PurgeReceived(b.ctx, &tc.p)
			require.ErrorIs(t, err, store.ErrInvalidArgument, tc.name)
			require.ErrorIs(t, err, tc.want, tc.name)
			require.Zero(t, n, tc.name)
		}
		require.Equal(t, int64(1), b.countReceived(""), "only the valid record exists")
		_, ok := b.received(c, "kept")
		require.True(t, ok, "the refused purges deleted nothing")
	})

	t.Run("a cancelled context is not bad input and writes nothing", func(t *testing.T) {
		b := setup(t, newStore)
		c := b.name("")
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		_, err := b.s.MarkReceived(ctx, c, "m", nil)
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, store.IsInvalid(err))
		_, ok := b.received(c, "m")
		require.False(t, ok)
		b.markReceived(c, "m", 0)
		_, err = b.s.PurgeReceived(ctx, &store.PurgeReceivedParams{Now: b.at(time.Hour)})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, int64(1), b.countReceived(c))
	})
}
