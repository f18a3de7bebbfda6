package lease

import (
	"context"
	"log/slog"
	"time"

	"github.com/seqlease/seqlease/store"
)

// Cross-process hand-off, roughly first come, first served.
//
// In one process, blocked acquires of a name queue and only the first (the
// head) tries, so they are served in order. Across processes, each head
// that finds the name held announces itself to the other processes (a
// backend notice: store.LeaseWaiter) with the time its acquire began, by the
// backend's clock (its ticket). When the name may have become free, a head
// that knows of an older waiter elsewhere (a rival) holds back for
// HandoffGrace so the rival can take it, then tries anyway. The merge of
// per-process FIFO queues by their heads' tickets is a global FIFO.
//
// Announcements cost a NOTIFY, no table write: one when a head starts to
// wait (only if the holder is another process or a rival is known: a single
// process never announces), one when the head changes, a refresh every
// announceRefresh while it waits, a reply when a process announces itself
// for the first time, and a withdrawal when the last waiter gives up. The
// withdrawal goes in the background; it is not sent if a new waiter came
// meanwhile, and a new head that announced while it was out announces
// again once it is through, so a late withdrawal never hides a waiter. A
// rival is forgotten when it is seen holding or having held the name (a
// larger fence than it announced: the holding read by a failed try, or by
// a plain read before and while holding back), when it withdraws, when its
// announcement is older than announceTTL (its process died), and when this
// process neither holds nor waits for the name. A rival that was held back
// for during a full grace and did not take the name is not held back for
// again until it announces anew, so a dead or slow waiter costs at most one
// grace.

const (
	// announceRefresh is how often a waiting head repeats its announcement.
	announceRefresh = 3 * time.Second
	// announceTTL is how long an announcement counts without a refresh.
	announceTTL = 10 * time.Second
)

// rival is a waiter of another process for a name, as it announced itself.
type rival struct {
	since    time.Time // backend clock: when its acquire began
	fence    int64     // the last holding of the name it saw
	heard    time.Time // local: when the announcement arrived
	holdFrom time.Time // local: when a waiter here began to hold back for it
	passed   bool      // held back for a full grace, and it did not take the name
}

// older reports whether ticket a of owner x comes before ticket b of owner y.
func older(a time.Time, x string, b time.Time, y string) bool {
	if c := a.Compare(b); c != 0 {
		return c < 0
	}
	return x < y
}

// ticket returns the backend-clock time at which w asked, estimated from
// the last held error's clock reading; false before any. m.qmu must be
// held.
func (m *Manager) ticket(w *waiter) (time.Time, bool) {
	if w.since.IsZero() && !m.refLocal.IsZero() {
		w.since = m.refDB.Add(w.asked.Sub(m.refLocal))
	}
	return w.since, !w.since.IsZero()
}

// holdBack returns how long the head w of name must still hold back for
// older rivals. A head that has not yet found the name held (it just came
// first in this process's queue, most often because the waiter before it
// took the name) tries at once. m.qmu must be held.
func (m *Manager) holdBack(name string, w *waiter) time.Duration {
	rs := m.rivals[name]
	if len(rs) == 0 || !w.waited {
		return 0
	}
	t, ok := m.ticket(w)
	if !ok {
		return 0
	}
	now := m.now()
	var hold time.Duration
	for owner, r := range rs {
		switch {
		case now.Sub(r.heard) > announceTTL:
			delete(rs, owner)
			continue
		case r.passed || !older(r.since, owner, t, m.owner):
			continue
		}
		if r.holdFrom.IsZero() {
			r.holdFrom = now
		}
		hold = max(hold, r.holdFrom.Add(m.handoffGrace).Sub(now))
	}
	return hold
}

// won is called when the head of name acquired it: the rivals it held back
// for during a full grace did not take it, so they are passed over until
// they announce anew.
func (m *Manager) won(name string) {
	m.qmu.Lock()
	defer m.qmu.Unlock()
	for _, r := range m.rivals[name] {
		if !r.holdFrom.IsZero() {
			r.passed, r.holdFrom = true, time.Time{}
		}
	}
}

// sawHeld is called when the head w of name found it held: it keeps the
// backend clock's reading, forgets the rival that got its turn, and
// announces w when due. It returns how long w may wait before it must
// announce again (0: no announcement out).
func (m *Manager) sawHeld(ctx context.Context, name string, w *waiter, held *HeldError, at time.Time) time.Duration {
	m.qmu.Lock()
	m.refDB, m.refLocal = held.AsOf, at
	rs := m.rivals[name]
	if r := rs[held.Owner]; r != nil && r.fence < held.Fence {
		delete(rs, held.Owner) // it got its turn
	}
	for _, r := range rs {
		r.holdFrom = time.Time{} // the name was not free: the grace tested nothing
	}
	w.waited = true
	q := m.queues[name]
	since, _ := m.ticket(w)
	var due bool
	if q.announced.IsZero() {
		due = held.Owner != m.owner || len(rs) > 0
	} else {
		due = q.reply || !q.since.Equal(since) || at.Sub(q.announced) >= announceRefresh
	}
	if due {
		q.announced, q.since, q.reply = at, since, false
	}
	next := time.Duration(0)
	if !q.announced.IsZero() {
		next = max(q.announced.Add(announceRefresh).Sub(at), time.Millisecond)
	}
	m.qmu.Unlock()
	if due {
		m.announce(ctx, store.LeaseWaiter{Name: name, Waiter: m.owner, Since: since, Fence: held.Fence})
	}
	return next
}

// refreshRivals reads the holding of name (a plain read) and forgets the
// rival it shows got its turn: the current or last holder, if it holds or
// held the name with a larger fence than it announced.
func (m *Manager) refreshRivals(ctx context.Context, name string) {
	qctx, cancel := m.queryContext(ctx)
	defer cancel()
	g, err := m.store.GetLease(qctx, name, nil)
	if err != nil {
		return // the hold-back goes on; the next read tells
	}
	m.qmu.Lock()
	defer m.qmu.Unlock()
	if r := m.rivals[name][g.Owner]; r != nil && r.fence < g.Fence {
		delete(m.rivals[name], g.Owner)
	}
}

// announce sends an announcement (or a withdrawal), best effort.
func (m *Manager) announce(ctx context.Context, w store.LeaseWaiter) {
	actx, cancel := m.queryContext(ctx)
	defer cancel()
	if err := m.store.AnnounceLeaseWaiter(actx, w); err != nil && ctx.Err() == nil {
		m.logger.Warn("lease: announcing a waiter failed", slog.String("name", w.Name), slog.Any("error", err))
	}
}

// heard records another process's announcement, if this process holds or
// waits for the name, and wakes the head when that may change its course.
func (m *Manager) heard(w store.LeaseWaiter) {
	if w.Waiter == m.owner {
		return
	}
	m.qmu.Lock()
	q := m.queues[w.Name]
	if q == nil && m.held[w.Name] == nil {
		m.qmu.Unlock()
		return
	}
	rs := m.rivals[w.Name]
	var wake bool
	switch r := rs[w.Waiter]; {
	case w.Withdrawn():
		delete(rs, w.Waiter)
		if len(rs) == 0 {
			delete(m.rivals, w.Name)
		}
		wake = r != nil && q != nil && q.holding
	default:
		now := m.now()
		if rs == nil {
			rs = map[string]*rival{}
			m.rivals[w.Name] = rs
		}
		for owner, x := range rs {
			if now.Sub(x.heard) > announceTTL {
				delete(rs, owner)
			}
		}
		n := &rival{since: w.Since, fence: w.Fence, heard: now}
		if r != nil && r.since.Equal(w.Since) {
			n.holdFrom = r.holdFrom // a refresh: the grace goes on
		}
		rs[w.Waiter] = n
		if q != nil {
			if r == nil && !q.announced.IsZero() {
				q.reply = true // a newcomer: tell it about this process's head
			}
			wake = q.reply || q.holding
		}
	}
	var head *waiter
	if wake {
		head = q.waiters[0]
	}
	m.qmu.Unlock()
	if head != nil {
		head.poke()
	}
}

// forgetRivals drops the rivals of name once this process neither holds nor
// waits for it. m.qmu must be held.
func (m *Manager) forgetRivals(name string) {
	if m.queues[name] == nil && m.held[name] == nil {
		delete(m.rivals, name)
	}
}
