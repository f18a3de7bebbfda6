package main

import (
	"context"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/examples/internal/natsrun"
	"github.com/seqlease/seqlease/sequence"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/memory"
)

// setupBroker starts an embedded server and the JetStream stream of a run
// with one stream.
func setupBroker(t *testing.T) (*broker, names) {
	t.Helper()
	s, err := natsrun.Start(nil)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	n := newNames()
	n.streams = 1
	b, err := dialBroker(t.Context(), s.URL(), n, true, time.Minute)
	require.NoError(t, err)
	t.Cleanup(b.close)
	return b, n
}

// entryWriter returns a function that writes the entries from..to of
// stream on st: each committed with its number as payload, but the numbers
// in gaps, which are released (gaps).
func entryWriter(t *testing.T, st *memory.Store, stream string) func(from, to int, gaps ...int) {
	leaser, err := sequence.New(st, &sequence.Config{UnorderedOnly: true}) // completes and releases
	require.NoError(t, err)
	return func(from, to int, gaps ...int) {
		for i := from; i <= to; i++ {
			l, err := leaser.Lease(t.Context(), stream, nil)
			require.NoError(t, err)
			if slices.Contains(gaps, i) {
				require.NoError(t, l.Release(t.Context()))
				continue
			}
			require.NoError(t, l.Complete(t.Context(), []byte(strconv.Itoa(i))))
		}
	}
}

// TestBrokerFence checks what the relay counts on from JetStream: a
// publish that expects a stale last message on the subject is refused
// (errFenced) and stores nothing; a republish of a stored message is acked
// as a duplicate; the position is the number in the last message's id.
func TestBrokerFence(t *testing.T) {
	ctx := t.Context()
	b, n := setupBroker(t)
	rt := n.route(0)
	pos := brokerPosition{b}
	at, err := pos.Load(ctx, rt)
	require.NoError(t, err)
	require.Zero(t, at, "nothing published yet")

	first, err := b.publish(ctx, rt, 1, []byte("one"), 0, 1, "a")
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	// A deposed relay that still believes the subject empty.
	_, err = b.publish(ctx, rt, 2, []byte("two"), 0, 1, "a")
	require.ErrorIs(t, err, errFenced)
	// The same message again, expecting the right last message: a duplicate.
	again, err := b.publish(ctx, rt, 1, []byte("one"), first.Sequence, 2, "b")
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.Sequence, again.Sequence)
	at, err = pos.Load(ctx, rt)
	require.NoError(t, err)
	require.EqualValues(t, 1, at)

	second, err := b.publish(ctx, rt, 2, []byte("two"), first.Sequence, 2, "b")
	require.NoError(t, err)
	require.False(t, second.Duplicate)
	at, err = pos.Load(ctx, rt)
	require.NoError(t, err)
	require.EqualValues(t, 2, at)
	total, err := b.messages(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, total, "the refused and the duplicate publishes stored nothing")
}

// TestParseMsgID refuses ids of other streams and malformed ones.
func TestParseMsgID(t *testing.T) {
	n, err := parseMsgID("s", msgID("s", 42))
	require.NoError(t, err)
	require.EqualValues(t, 42, n)
	for _, id := range []string{"", "s", "s#", "s#x", "s#0", "s#-1", "t#1", "s#1#2"} {
		_, err := parseMsgID("s", id)
		require.Error(t, err, id)
	}
}

// TestRelayResumes stops the relays halfway and starts new ones (another
// owner): they resume where JetStream has the stream, so the subject holds
// every committed entry once, in order, the second relays publish only the
// new entries, and the gap is skipped.
func TestRelayResumes(t *testing.T) {
	ctx := t.Context()
	b, n := setupBroker(t)
	rt := n.route(0)
	st := memory.New(nil)
	write := entryWriter(t, st, rt.stream)
	col, err := collect(ctx, b)
	require.NoError(t, err)
	defer col.stop()
	upTo := func(number int64) {
		require.NoError(t, col.wait(ctx, func(c *collector) bool { return c.last[rt.subject] >= number }))
	}

	write(1, 5, 3) // 3 a gap
	r1, err := startRelays(ctx, st, b, []route{rt}, relayConfig{owner: "first", ttl: 30 * time.Second})
	require.NoError(t, err)
	upTo(5)
	c1 := r1.stop()
	require.Equal(t, relayCounts{Published: 4, Gaps: 1, Takeovers: 1}, c1)
	at, err := st.Checkpoint(ctx, relayReader, rt.stream)
	require.NoError(t, err)
	require.EqualValues(t, 5, at, "the checkpoint follows the acked publishes")

	write(6, 8)
	r2, err := startRelays(ctx, st, b, []route{rt}, relayConfig{owner: "second", ttl: 30 * time.Second})
	require.NoError(t, err)
	upTo(8)
	c2 := r2.stop()
	require.Equal(t, relayCounts{Published: 3, Takeovers: 1}, c2, "only the new entries")
	at, err = st.Checkpoint(ctx, relayReader, rt.stream)
	require.NoError(t, err)
	require.EqualValues(t, 8, at)

	msgs, err := col.result()
	require.NoError(t, err)
	var got []int64
	var relays []string
	for _, m := range msgs {
		got = append(got, m.number)
		require.Equal(t, strconv.FormatInt(m.number, 10), string(m.data))
		relays = append(relays, m.relay)
	}
	require.Equal(t, []int64{1, 2, 4, 5, 6, 7, 8}, got)
	require.Equal(t, []string{"first", "first", "first", "first", "second", "second", "second"}, relays)
	require.Greater(t, msgs[6].fence, msgs[0].fence, "the second holding has a larger fence")
}

// TestVerifyCatches feeds the check a faithful read-back and broken ones:
// it must pass the first and name the fault in each of the others.
func TestVerifyCatches(t *testing.T) {
	n := names{run: "t", streams: 1}
	rt := n.route(0)
	payload := func(order string, seq int) []byte {
		return []byte(`{"order":"` + order + `","customer":"c1","seq":` + strconv.Itoa(seq) + `,"amount":1}`)
	}
	ledger := map[route][]store.Entry{rt: {
		{Number: 1, State: store.Committed, Payload: payload("o1", 1)},
		{Number: 2, State: store.Gap},
		{Number: 3, State: store.Committed, Payload: payload("o2", 2)},
		{Number: 4, State: store.Committed, Payload: payload("o3", 3)},
	}}
	rows := map[string]int{"o1": 1, "o2": 2, "o3": 3}
	msg := func(number int64, fence int64, data []byte) received {
		return received{subject: rt.subject, number: number, id: msgID(rt.stream, number), data: data, fence: fence}
	}
	good := []received{msg(1, 1, payload("o1", 1)), msg(3, 1, payload("o2", 2)), msg(4, 2, payload("o3", 3))}
	check := func(msgs []received, rows map[string]int) *report {
		r := &report{placed: 3, jsMessages: len(msgs)}
		r.verify(ledger, msgs, rows)
		return r
	}
	require.NoError(t, check(good, rows).err())
	rep := &report{placed: 3, jsMessages: 3, checkpoints: map[route]int64{rt: 4}}
	rep.verify(ledger, good, rows)
	require.NoError(t, rep.err(), "the checkpoint at the last number")
	rep = &report{placed: 3, jsMessages: 3, checkpoints: map[route]int64{rt: 3}}
	rep.verify(ledger, good, rows)
	require.Contains(t, strings.Join(rep.problems, "\n"), "checkpoint of reader outbox-relay at 3, want the stream's last number 4")
	holed := map[route][]store.Entry{rt: {ledger[rt][0], ledger[rt][2], ledger[rt][3]}}
	rep = &report{placed: 3, jsMessages: 3}
	rep.verify(holed, good, rows)
	require.Contains(t, strings.Join(rep.problems, "\n"), "a hole")

	for name, tc := range map[string]struct {
		msgs []received
		rows map[string]int
		want string
	}{
		"lost":          {msgs: good[:2], want: "3 committed entries, 2 messages"},
		"duplicated":    {msgs: append(append([]received{}, good...), good[2]), want: "published twice"},
		"reordered":     {msgs: []received{good[0], good[2], good[1]}, want: "want entry 3"},
		"gap published": {msgs: []received{good[0], msg(2, 1, nil), good[1], good[2]}, want: "gap 2 was published"},
		"wrong payload": {msgs: []received{good[0], msg(3, 1, payload("o9", 2)), good[2]}, want: "want entry 3"},
		"fence back":    {msgs: []received{good[0], good[1], msg(4, 0, payload("o3", 3))}, want: "under fence 0 after fence 1"},
		"row missing":   {msgs: good, rows: map[string]int{"o1": 1, "o2": 2}, want: "without its row"},
		"message lost":  {msgs: good[:2], rows: map[string]int{"o1": 1, "o2": 2, "o3": 3}, want: "o3 has a row but no message"},
	} {
		t.Run(name, func(t *testing.T) {
			r := rows
			if tc.rows != nil {
				r = tc.rows
			}
			rep := check(tc.msgs, r)
			require.Error(t, rep.err())
			require.Contains(t, strings.Join(rep.problems, "\n"), tc.want)
		})
	}
}

// TestValidate refuses command lines that cannot run, naming the flag.
func TestValidate(t *testing.T) {
	ok := config{orders: 1, writers: 1, streams: 1, customers: 1, procs: 1, relayTTL: time.Second, dedupe: time.Minute}
	require.NoError(t, ok.validate())
	for want, mutate := range map[string]func(*config){
		"-orders":         func(c *config) { c.orders = 0 },
		"-streams must":   func(c *config) { c.streams = 101 },
		"-decline":        func(c *config) { c.decline = -1 },
		"-relay-ttl":      func(c *config) { c.relayTTL = time.Millisecond },
		"-dedupe":         func(c *config) { c.dedupe = 0 },
		"-procs needs":    func(c *config) { c.procs = 2 },
		"-kill needs":     func(c *config) { c.kill = true },
		"-compare-writes": func(c *config) { c.compare = true },
	} {
		c := ok
		mutate(&c)
		require.ErrorContains(t, c.validate(), want)
	}
	_, _, err := parseChild("run")
	require.Error(t, err)
	run, i, err := parseChild("abc:2")
	require.NoError(t, err)
	require.Equal(t, "abc", run)
	require.Equal(t, 2, i)
}

// TestRelayBrokerOutage stops the NATS server while the relay runs and
// entries keep coming, then starts it again on the same port and files:
// the relay, which kept its lease, retries until the broker is back and
// catches up, and the subject holds every entry once, in order.
func TestRelayBrokerOutage(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s1, err := natsrun.Start(&natsrun.Options{Dir: dir})
	require.NoError(t, err)
	defer s1.Stop()
	u, err := url.Parse(s1.URL())
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	n := newNames()
	n.streams = 1
	rt := n.route(0)
	b, err := dialBroker(ctx, s1.URL(), n, true, time.Minute)
	require.NoError(t, err)
	defer b.close()

	st := memory.New(nil)
	write := entryWriter(t, st, rt.stream)
	errs := make(chan error, 1)
	write(1, 5)
	r, err := startRelays(ctx, st, b, []route{rt}, relayConfig{owner: "relay", ttl: 30 * time.Second, errs: errs})
	require.NoError(t, err)
	col, err := collect(ctx, b)
	require.NoError(t, err)
	require.NoError(t, col.wait(ctx, func(c *collector) bool { return c.last[rt.subject] >= 5 }))
	col.stop()

	s1.Stop()   // the broker goes away
	write(6, 8) // the writers go on
	select {
	case err := <-errs: // the relay tried to publish 6 and failed
		require.Error(t, err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	s2, err := natsrun.Start(&natsrun.Options{Port: port, Dir: dir})
	require.NoError(t, err)
	defer s2.Stop()
	write(9, 10)

	b2, err := dialBroker(ctx, s2.URL(), n, false, 0)
	require.NoError(t, err)
	defer b2.close()
	col2, err := collect(ctx, b2)
	require.NoError(t, err)
	defer col2.stop()
	require.NoError(t, col2.wait(ctx, func(c *collector) bool { return c.last[rt.subject] >= 10 }))
	counts := r.stop()
	msgs, err := col2.result()
	require.NoError(t, err)
	var got []int64
	for _, m := range msgs {
		got = append(got, m.number)
	}
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, got)
	require.EqualValues(t, 10, counts.Published)
	require.NotZero(t, counts.Errors, "the outage was felt")
	require.EqualValues(t, 1, counts.Takeovers, "the relay kept its lease through the outage")
}

// errorLog records the messages of the error records logged to it.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// TestRelayCheckpointAhead checks the relays' seqlease checkpoint against
// JetStream's position: a checkpoint ahead of it by skipped gaps only (a
// gap at the end of the stream, which JetStream never sees) is no alarm;
// ahead by committed entries, it means the broker lost acked messages, and
// the relay says so at error level, resumes from JetStream, publishes the
// lost messages again in order, and the checkpoint ends at the stream's
// last number.
func TestRelayCheckpointAhead(t *testing.T) {
	ctx := t.Context()
	b, n := setupBroker(t)
	rt := n.route(0)
	st := memory.New(nil)
	write := entryWriter(t, st, rt.stream)
	relayTo := func(b *broker, last, checkpoint int64, log *errorLog) relayCounts {
		col, err := collect(ctx, b)
		require.NoError(t, err)
		defer col.stop()
		r, err := startRelays(ctx, st, b, []route{rt}, relayConfig{owner: "relay", ttl: 30 * time.Second, logger: slog.New(log)})
		require.NoError(t, err)
		require.NoError(t, col.wait(ctx, func(c *collector) bool { return c.last[rt.subject] >= last }))
		require.NoError(t, waitCheckpoints(ctx, st, map[route]int64{rt: checkpoint}))
		return r.stop()
	}

	// 1 2 (3) 4 5 (6): the checkpoint ends at the trailing gap, 6,
	// JetStream's position at 5.
	write(1, 6, 3, 6)
	var quiet errorLog
	require.Equal(t, relayCounts{Published: 4, Gaps: 2, Takeovers: 1}, relayTo(b, 5, 6, &quiet))
	// Resumed from 5 (skipping 6 again) with the checkpoint at 6: no alarm.
	write(7, 7)
	require.Equal(t, relayCounts{Published: 1, Gaps: 1, Takeovers: 1}, relayTo(b, 7, 7, &quiet))
	require.Empty(t, quiet.logged())

	// A broker that lost everything after 2 (a new one, holding 1 and 2).
	s, err := natsrun.Start(nil)
	require.NoError(t, err)
	defer s.Stop()
	lossy, err := dialBroker(ctx, s.URL(), n, true, time.Minute)
	require.NoError(t, err)
	defer lossy.close()
	one, err := lossy.publish(ctx, rt, 1, []byte("1"), 0, 1, "relay")
	require.NoError(t, err)
	_, err = lossy.publish(ctx, rt, 2, []byte("2"), one.Sequence, 1, "relay")
	require.NoError(t, err)
	var loud errorLog
	require.Equal(t, relayCounts{Published: 3, Gaps: 2, Takeovers: 1}, relayTo(lossy, 7, 7, &loud), "4, 5 and 7 again")
	logged := loud.logged()
	require.Len(t, logged, 1)
	require.Contains(t, logged[0], "ahead of JetStream")
	require.Contains(t, logged[0], "checkpoint=7 jetstream=2 lost=3")

	col, err := collect(ctx, lossy)
	require.NoError(t, err)
	defer col.stop()
	require.NoError(t, col.wait(ctx, func(c *collector) bool { return c.last[rt.subject] >= 7 }))
	msgs, err := col.result()
	require.NoError(t, err)
	var got []int64
	for _, m := range msgs {
		got = append(got, m.number)
	}
	require.Equal(t, []int64{1, 2, 4, 5, 7}, got)
	at, err := st.Checkpoint(ctx, relayReader, rt.stream)
	require.NoError(t, err)
	require.EqualValues(t, 7, at)
}
