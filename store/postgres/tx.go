package postgres

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seqlease/seqlease/store"
)

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
	// each followed by at most one notices statement (a shorter gap costs
	// throughput: docs/internals/architecture.md).
	confirmGap = 10 * time.Millisecond
	// maxAwaited bounds the transactions awaited; beyond it, a Store in a
	// transaction notifies in it, and the root counts it and warns (at
	// most once every overflowLogEvery).
	maxAwaited       = 10_000
	overflowLogEvery = time.Minute
	// maxAwaitAge bounds how long a transaction is awaited: one still
	// running after it is asked about no more, its notice left to the
	// other processes' safety poll (and a warning logged).
	maxAwaitAge = 5 * time.Minute
	// maxClaimRanges bounds the ranges of numbers a transaction's claim
	// of one stream keeps; beyond it the claim becomes a re-read of the
	// stream (notice "s"), which is always correct.
	maxClaimRanges = 32
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
// Either may run a statement in tx after the call's own write (the
// NOTIFY; the query of the transaction's id, for a resolution whose
// statement does not return it); if that statement fails (ctx ended, the
// connection broke), PostgreSQL has aborted tx, and the call returns an
// error saying so: nothing of tx commits, the call's write included.
// InTx of a Store that is itself in a transaction binds to the same root.
//
// The transaction holds the stream's counter row from its first lease or
// append until it ends. Whatever else must update that row waits for it:
// other leases and appends, and the cleanup loop's moves of expired work
// (RecoverExpired, RecoverExpiredBatch), which take the next number. So a
// transaction that leases n, then commits n in order while a number m < n
// of another holder expired, deadlocks with the cleanup: the ordered
// commit waits for m to be resolved, and the move that would resolve m
// waits for the counter row until its query times out; the ordered
// commit fails with ErrExpired at its lease's deadline. Lease or append
// last, keep the transaction short, and do not commit in order a number
// leased in the same transaction (append instead, or lease outside and
// use CommitTx), where cleanup moves expired work.
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

// awaitedTx is what a transaction handed over, awaiting its end: one
// claim per stream, however many calls handed over.
type awaitedTx struct {
	claims map[string]*txClaim
	gen    int           // bumped by each hand-over
	since  time.Time     // the first hand-over
	delay  time.Duration // the current back-off
	next   time.Time     // when to ask next
}

// txClaim is what a transaction claims to have resolved of one stream:
// every number up to through (0: none), the numbers in ranges (sorted,
// disjoint, not adjacent, all above through), and with reread, more than
// maxClaimRanges ranges: the stream is to be re-read.
type txClaim struct {
	through int64
	ranges  [][2]int64
	reread  bool
}

// merge adds what sn claims of the stream to c.
func (c *txClaim) merge(sn *streamNotice) {
	ranges := make([][2]int64, len(sn.numbers))
	for i, num := range sn.numbers {
		ranges[i] = [2]int64{num, num}
	}
	c.mergeClaim(&txClaim{through: sn.through, ranges: ranges, reread: sn.reread})
}

// mergeClaim adds o to c.
func (c *txClaim) mergeClaim(o *txClaim) {
	c.through = max(c.through, o.through)
	if c.reread = c.reread || o.reread; c.reread {
		c.ranges = nil
		return
	}
	c.ranges = append(c.ranges, o.ranges...)
	slices.SortFunc(c.ranges, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	out := c.ranges[:0]
	for _, r := range c.ranges {
		r[0] = max(r[0], c.through+1)
		switch {
		case r[1] < r[0]: // within through
		case len(out) > 0 && r[0] <= out[len(out)-1][1]+1:
			out[len(out)-1][1] = max(out[len(out)-1][1], r[1])
		default:
			out = append(out, r)
		}
	}
	c.ranges = out
	if len(c.ranges) > maxClaimRanges {
		c.ranges, c.reread = nil, true
	}
}

// checks returns the checks of c of stream for the confirm statement.
func (c *txClaim) checks(out []txCheck, stream string) []txCheck {
	if c.through > 0 {
		out = append(out, txCheck{stream: stream, hi: c.through, through: true})
	}
	if c.reread {
		return append(out, txCheck{stream: stream, lo: 1, hi: 0})
	}
	for _, r := range c.ranges {
		out = append(out, txCheck{stream: stream, lo: r[0], hi: r[1]})
	}
	return out
}

// checks returns the checks of every claim of a.
func (a *awaitedTx) checks() []txCheck {
	var out []txCheck
	for stream, c := range a.claims {
		out = c.checks(out, stream)
	}
	return out
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
// none runs (or too many transactions are awaited): then what is pending
// includes again all this Store handed over before, and the caller sends
// it in the transaction, so that a Watch that stopped meanwhile loses
// nothing. An error is that of a statement in the caller's transaction,
// which is aborted.
func (n *notices) handOff(ctx context.Context) (bool, error) {
	if n.root == nil || !n.root.serves() {
		n.takeBack(nil)
		return false, nil
	}
	xid := n.xid.Load()
	if xid == 0 {
		if err := n.s.db.QueryRow(ctx, n.s.q.xactID).Scan(&xid); err != nil {
			return false, err
		}
		n.xid.Store(xid)
	}
	n.mu.Lock()
	taken := n.pending
	n.pending = make(map[string]*streamNotice, len(taken))
	n.mu.Unlock()
	if len(taken) == 0 {
		return true, nil
	}
	if !n.root.await(xid, taken) {
		n.takeBack(taken)
		return false, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handed == nil {
		n.handed = map[string]*streamNotice{}
	}
	for stream, sn := range taken {
		mergeNotice(n.handed, stream, sn)
	}
	return true, nil
}

// takeBack puts taken and everything handed over before back into what
// is pending.
func (n *notices) takeBack(taken map[string]*streamNotice) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for stream, sn := range taken {
		mergeNotice(n.pending, stream, sn)
	}
	for stream, sn := range n.handed {
		mergeNotice(n.pending, stream, sn)
	}
	n.handed = nil
}

// mergeNotice adds sn of stream to m.
func mergeNotice(m map[string]*streamNotice, stream string, sn *streamNotice) {
	to := m[stream]
	if to == nil {
		to = &streamNotice{}
		m[stream] = to
	}
	to.through = max(to.through, sn.through)
	if to.reread = to.reread || sn.reread; to.reread {
		to.numbers = nil
		return
	}
	to.numbers = append(to.numbers, sn.numbers...)
	if len(to.numbers) > maxListed {
		to.numbers, to.reread = nil, true
	}
}

// serves reports whether a Watch of the Store runs.
func (n *notices) serves() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.serving > 0
}

// await records the claims of transaction xid until its fate is known;
// false if no Watch runs or too many transactions are awaited.
func (n *notices) await(xid int64, claims map[string]*streamNotice) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.awaited[xid]
	switch {
	case n.serving == 0:
		return false
	case a == nil && len(n.awaited) >= n.maxAwaited:
		total := n.overflows.Add(1)
		if now := time.Now(); now.Sub(n.overflowLogged) >= overflowLogEvery {
			n.overflowLogged = now
			n.s.logger.Warn("postgres: too many callers' transactions awaited; a Store in a transaction notifies in it, which serializes the commits of the notifying transactions",
				slog.Int("awaited", len(n.awaited)), slog.Int64("refused_total", total))
		}
		return false
	case a == nil:
		now := time.Now()
		a = &awaitedTx{claims: map[string]*txClaim{}, since: now, delay: confirmFirst, next: now.Add(confirmFirst)}
		n.awaited[xid] = a
	}
	for stream, sn := range claims {
		c := a.claims[stream]
		if c == nil {
			c = &txClaim{}
			a.claims[stream] = c
		}
		c.merge(sn)
	}
	a.gen++
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
		_ = n.confirmDue(cctx, last) // logged
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
// notices the checks that hold of those that committed (of a range of
// which a savepoint rolled back a part, the numbers resolved), drops those that aborted, and backs off from the others, but
// for those awaited longer than maxAwaitAge, which it drops.
// The error is the statement's, logged already.
func (n *notices) confirmDue(ctx context.Context, now time.Time) error {
	// The due stay in awaited while asked about (so that its bound
	// holds), not due again before the answer; what is handed over
	// meanwhile bumps their gen, and is asked about next time.
	var xids, los, his []int64
	var streams []string
	var thru []bool
	due := map[int64]int{} // xid: its gen when asked
	n.mu.Lock()
	for xid, a := range n.awaited {
		if a.next.After(now) {
			continue
		}
		due[xid] = a.gen
		a.next = now.Add(noticeTimeout)
		for _, c := range a.checks() {
			xids, streams, los, his, thru = append(xids, xid), append(streams, c.stream), append(los, c.lo), append(his, c.hi), append(thru, c.through)
		}
	}
	n.mu.Unlock()
	if len(due) == 0 {
		return nil
	}
	rows, err := n.s.db.Query(ctx, n.s.q.confirm, xids, streams, los, his, thru)
	fate := map[int64]string{}
	var rs []resolution
	if err == nil {
		var (
			ord            int64
			status         string
			visible, holds bool
			resolved       []int64
		)
		_, err = pgx.ForEachRow(rows, []any{&ord, &status, &visible, &holds, &resolved}, func() error {
			i := ord - 1
			xid := xids[i]
			switch {
			case status == "committed" && visible:
				fate[xid] = "committed"
				switch {
				case holds:
					rs = append(rs, checkResolution(txCheck{stream: streams[i], lo: los[i], hi: his[i], through: thru[i]}))
				case len(resolved) > 0: // a savepoint rolled back part of the range
					rs = append(rs, resolution{stream: streams[i], numbers: slices.Clone(resolved)})
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
	aged := 0
	for xid, gen := range due {
		a := n.awaited[xid]
		switch f := fate[xid]; {
		case a == nil: // dropped by another Watch's round
		case (f == "committed" || f == "ended") && a.gen == gen:
			delete(n.awaited, xid)
		case f == "committed" || f == "ended":
			a.next = now // handed more meanwhile: ask again at once
		case now.Sub(a.since) >= n.maxAwaitAge:
			delete(n.awaited, xid)
			aged++
		default:
			a.delay = min(2*a.delay, confirmMax)
			a.next = now.Add(a.delay)
		}
	}
	n.mu.Unlock()
	if aged > 0 {
		n.s.logger.WarnContext(ctx, "postgres: callers' transactions awaited too long; their notices are left to the other processes' safety poll",
			slog.Int("transactions", aged), slog.Duration("max_age", n.maxAwaitAge))
	}
	if len(rs) > 0 {
		n.add(rs...)
		_ = n.flush(ctx) // the root's: never fails, logs
	}
	return err
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

// noticeFailed is the error of a call op whose write succeeded in the
// caller's transaction but whose notices statement there (the NOTIFY, or
// the query of the transaction's id) failed, err: PostgreSQL aborted the
// transaction, so nothing of it commits, the write included.
func noticeFailed(op string, err error) error {
	return fmt.Errorf("%s: written, but noticing it in the caller's transaction failed, which aborted that transaction (nothing of it commits): %w", op, err)
}
