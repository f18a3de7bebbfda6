package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seqlease/seqlease/store"
)

// The Store in the application's transaction. InTx returns a Store whose
// every call runs in the caller's pgx.Tx, so the application's rows and
// the stream's entries commit or roll back together; a rollback takes the
// counter's increment back with the entries, so no number is lost.
//
// Notices of what such a Store resolved (see Notices in notice.go) cannot
// be sent after the commit by the Store, which does not see the commit;
// notifying inside the transaction would serialize the commits of every
// notifying transaction in the cluster (measured: 16 clients inserting a
// business row and appending an entry ran about 6,200 transactions a
// second without NOTIFY and 3,000 with it). So, while a Watch of the root
// Store runs, the Store in the transaction hands what it resolved to the
// root, with the transaction's id (pg_current_xact_id(), returned by the
// resolving statement itself where it can). The root's Watch then asks,
// in one read-only statement for every transaction awaited (confirm), each
// one's fate: for a transaction that committed (and whose commit its
// snapshot sees), whether what was handed over holds now (a savepoint
// rolled back inside a committed transaction undid its part, and that
// part is not noticed); those resolutions are noticed as the root's own,
// in process and to the other processes. An aborted transaction's are
// dropped. A transaction still running is asked about again later,
// backing off from confirmFirst to confirmMax, and the statements are at
// least confirmGap apart. Without a running Watch the Store notifies in
// the transaction. A notice missed anyway (the Watch stopped before the
// transaction ended; more than maxAwaited transactions awaited) only
// delays the other processes' wake-ups until their barrier's safety poll
// re-reads the stream.

const (
	// confirmFirst is how long after a hand-over the root first asks: an
	// application's transaction usually commits within a few
	// milliseconds of its last statement.
	confirmFirst = 2 * time.Millisecond
	// confirmMax bounds the back-off of the question about a transaction
	// that is still running.
	confirmMax = time.Second
	// confirmGap is the least time between two confirm statements of a
	// Watch: at most 100 a second, however many transactions hand over,
	// each followed by at most one notices statement. Measured with 16
	// workers appending in their transactions, 2 ms (up to 500 of each a
	// second) cost about 20% of the throughput, 10 ms nothing measurable.
	confirmGap = 10 * time.Millisecond
	// maxAwaited bounds the transactions awaited; beyond it, a Store in a
	// transaction notifies in it.
	maxAwaited = 10_000
)

// InTx returns the Store as seen from inside the caller's transaction tx:
// every call runs in tx (a Begin inside it, as CommitTx's, is a
// savepoint), with s's schema, statements and logger. What it writes
// commits or rolls back with tx, the application's own rows included; a
// rollback leaves no hole (the counter's increment rolls back too).
//
// Calls that cannot work inside a caller's transaction fail with an error
// matching store.ErrUnsupported: Watch and WatchLeases (watch s instead).
// Once tx is committed or rolled back, every call fails with an error
// matching pgx.ErrTxClosed and changes nothing. Like tx, the returned
// Store is for one goroutine at a time.
//
// Other processes learn of what the transaction resolved once it commits:
// through s's running Watch, to which the returned Store hands its
// resolutions, or, when no Watch of s runs, through notices sent inside
// tx. The first costs one read-only statement for many transactions; the
// second serializes the commits of notifying transactions cluster-wide.
// InTx of a Store that is itself in a transaction binds to the same root.
func (s *Store) InTx(tx pgx.Tx) *Store {
	root := s
	if s.root != nil {
		root = s.root
	}
	var db DB = tx
	if tx == nil {
		db = nilTx{}
	}
	t := &Store{db: db, q: root.q, inq: root.inq, ckq: root.ckq, channel: root.channel, logger: root.logger, root: root}
	t.notes = newNotices(t)
	t.notes.root = root.notes
	return t
}

// errInTx explains why a call is not supported inside a caller's
// transaction.
func (s *Store) errInTx(op string) error {
	return fmt.Errorf("%s: %w: a Store in a caller's transaction (InTx, or New on a pgx.Tx) cannot; use the Store on the pool", op, store.ErrUnsupported)
}

// inTx reports whether the notices' Store runs in a caller's transaction.
func (n *notices) inTx() bool {
	if n.root != nil {
		return true
	}
	_, ok := n.s.db.(pgx.Tx)
	return ok
}

// sawXact records the id of the caller's transaction, as a resolving
// statement returned it (0: none).
func (n *notices) sawXact(xid int64) {
	if n.root != nil && xid != 0 {
		n.xid.Store(xid)
	}
}

// awaitedTx is what a transaction handed over, awaiting its end.
type awaitedTx struct {
	checks []txCheck
	delay  time.Duration // the current back-off
	next   time.Time     // when to ask next
}

// txCheck is one claim of a transaction that resolved something: every
// number of stream in [lo, hi] is resolved, or, with through, every
// number up to hi; with reread (lo > hi), the stream is to be re-read.
type txCheck struct {
	stream  string
	lo, hi  int64
	through bool
}

// handOff hands what is pending to the root's running Watch; false if
// none runs (or too many transactions are awaited), and the caller sends
// the notices in the transaction instead.
func (n *notices) handOff(ctx context.Context) bool {
	if n.root == nil || !n.root.serves() {
		return false
	}
	xid := n.xid.Load()
	if xid == 0 {
		if err := n.s.db.QueryRow(ctx, n.s.q.xactID).Scan(&xid); err != nil {
			return false // the notices statement will meet the same error
		}
		n.xid.Store(xid)
	}
	n.mu.Lock()
	taken := n.pending
	n.pending = make(map[string]*streamNotice, len(taken))
	n.mu.Unlock()
	if len(taken) == 0 {
		return true
	}
	var checks []txCheck
	for stream, sn := range taken {
		checks = sn.appendChecks(checks, stream)
	}
	if n.root.await(xid, checks) {
		return true
	}
	n.mu.Lock()
	for stream, sn := range taken {
		n.addLocked(stream, sn.through, sn.numbers)
		if sn.reread {
			n.pending[stream].numbers, n.pending[stream].reread = nil, true
		}
	}
	n.mu.Unlock()
	return false
}

// appendChecks appends the claims of sn of stream: its through, and its
// numbers as ranges of consecutive numbers above it.
func (sn *streamNotice) appendChecks(out []txCheck, stream string) []txCheck {
	if sn.through > 0 {
		out = append(out, txCheck{stream: stream, hi: sn.through, through: true})
	}
	if sn.reread {
		return append(out, txCheck{stream: stream, lo: 1, hi: 0})
	}
	nums := slices.Compact(slices.Sorted(slices.Values(sn.numbers)))
	for len(nums) > 0 {
		j := 1
		for j < len(nums) && nums[j] == nums[j-1]+1 {
			j++
		}
		if nums[j-1] > sn.through {
			out = append(out, txCheck{stream: stream, lo: max(nums[0], sn.through+1), hi: nums[j-1]})
		}
		nums = nums[j:]
	}
	return out
}

// serves reports whether a Watch of the Store runs.
func (n *notices) serves() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.serving > 0
}

// await records the checks of transaction xid until its fate is known;
// false if no Watch runs or too many transactions are awaited.
func (n *notices) await(xid int64, checks []txCheck) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.awaited[xid]
	switch {
	case n.serving == 0:
		return false
	case a == nil && len(n.awaited) >= maxAwaited:
		return false
	case a == nil:
		a = &awaitedTx{delay: confirmFirst, next: time.Now().Add(confirmFirst)}
		n.awaited[xid] = a
	}
	a.checks = append(a.checks, checks...)
	select {
	case n.awaitWake <- struct{}{}:
	default: // woken already
	}
	return true
}

// confirm asks, until ctx ends, about the transactions awaited, and
// notices what committed; it is run by each Watch, which waits for it.
// A hand-over wakes it; it looks for the earliest transaction due only
// when the hand-over could be due before the time it waits for, so that
// many hand-overs between two statements cost it nothing each.
func (n *notices) confirm(ctx context.Context) {
	timer := time.NewTimer(confirmMax)
	defer timer.Stop()
	var last, armed time.Time // the last statement; when the timer fires (zero: to be set)
	for {
		if armed.IsZero() {
			armed = time.Now().Add(confirmMax)
			n.mu.Lock()
			for _, a := range n.awaited {
				armed = minTime(armed, a.next)
			}
			n.mu.Unlock()
			if gap := last.Add(confirmGap); gap.After(armed) {
				armed = gap
			}
			timer.Reset(max(time.Until(armed), 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-n.awaitWake:
			if armed.After(time.Now().Add(confirmFirst)) {
				armed = time.Time{} // the new one is due earlier
			}
			continue
		case <-timer.C:
			armed = time.Time{}
		}
		last = time.Now()
		cctx, cancel := context.WithTimeout(ctx, noticeTimeout)
		n.confirmDue(cctx, last)
		cancel()
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// confirmDue asks about the transactions due at now, in one statement,
// notices the checks that hold of those that committed, drops those that
// aborted, and backs off from the others.
func (n *notices) confirmDue(ctx context.Context, now time.Time) {
	n.mu.Lock()
	due := map[int64]*awaitedTx{}
	for xid, a := range n.awaited {
		if !a.next.After(now) {
			due[xid] = a
			delete(n.awaited, xid)
		}
	}
	n.mu.Unlock()
	if len(due) == 0 {
		return
	}
	var xids, los, his []int64
	var streams []string
	var thru []bool
	for xid, a := range due {
		for _, c := range a.checks {
			xids, streams, los, his, thru = append(xids, xid), append(streams, c.stream), append(los, c.lo), append(his, c.hi), append(thru, c.through)
		}
	}
	rows, err := n.s.db.Query(ctx, n.s.q.confirm, xids, streams, los, his, thru)
	fate := map[int64]string{}
	var rs []resolution
	if err == nil {
		var (
			ord            int64
			status         string
			visible, holds bool
		)
		_, err = pgx.ForEachRow(rows, []any{&ord, &status, &visible, &holds}, func() error {
			i := ord - 1
			xid := xids[i]
			switch {
			case status == "committed" && visible:
				fate[xid] = "committed"
				if holds {
					rs = append(rs, checkResolution(txCheck{stream: streams[i], lo: los[i], hi: his[i], through: thru[i]}))
				}
			case status == "committed" || status == "in progress":
				fate[xid] = "running"
			default: // aborted, or too old to tell
				fate[xid] = "ended"
			}
			return nil
		})
	}
	if err != nil {
		n.s.logger.WarnContext(ctx, "postgres: could not ask about callers' transactions; asking again", slog.Any("error", err))
		rs = nil
		clear(fate)
	}
	n.mu.Lock()
	for xid, a := range due {
		if f := fate[xid]; f == "committed" || f == "ended" {
			continue
		}
		a.delay = min(2*a.delay, confirmMax)
		a.next = now.Add(a.delay)
		if b := n.awaited[xid]; b != nil { // handed more meanwhile
			a.checks = append(a.checks, b.checks...)
		}
		n.awaited[xid] = a
	}
	n.mu.Unlock()
	if len(rs) > 0 {
		n.add(rs...)
		n.flush(ctx)
	}
}

// checkResolution is the resolution a check that holds states.
func checkResolution(c txCheck) resolution {
	switch {
	case c.through:
		return resolution{stream: c.stream, through: c.hi}
	case c.hi < c.lo:
		return resolution{stream: c.stream, reread: true}
	}
	nums := make([]int64, 0, min(c.hi-c.lo+1, maxListed+1))
	for k := c.lo; k <= c.hi && len(nums) <= maxListed; k++ {
		nums = append(nums, k)
	}
	return resolution{stream: c.stream, numbers: nums}
}

// nilTx is the DB of InTx(nil): every call fails with pgx.ErrTxClosed.
type nilTx struct{}

var errNilTx = fmt.Errorf("%w: nil transaction", pgx.ErrTxClosed)

func (nilTx) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{} }
func (nilTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNilTx
}
func (nilTx) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errNilTx }
func (nilTx) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults  { return errBatch{} }
func (nilTx) Begin(context.Context) (pgx.Tx, error)                   { return nil, errNilTx }

type errRow struct{}

func (errRow) Scan(...any) error { return errNilTx }

type errBatch struct{}

func (errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, errNilTx }
func (errBatch) Query() (pgx.Rows, error)         { return nil, errNilTx }
func (errBatch) QueryRow() pgx.Row                { return errRow{} }
func (errBatch) Close() error                     { return errNilTx }
func (errBatch) Tx() pgx.Tx                       { return nil }
