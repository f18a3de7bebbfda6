package lease

import (
	"time"

	"github.com/seqlease/seqlease/store"
)

// OnWaiting makes m call f whenever a blocking acquire joins the queue of a
// name, with the queue's new length.
func OnWaiting(m *Manager, f func(name string, queued int)) { m.testHooks.waiting = f }

// OnWanted makes m call f whenever it hears the announcement of a waiter
// of another process, after recording it.
func OnWanted(m *Manager, f func(w store.LeaseWaiter)) { m.testHooks.wanted = f }

// Rivals returns how many announcements of other processes' waiters m
// keeps.
func Rivals(m *Manager) int {
	return m.queues.rivalCount()
}

// OnReset makes m call f whenever its watch starts listening. Set it before
// Start.
func OnReset(m *Manager, f func()) { m.testHooks.reset = f }

// OnPaused makes m call f whenever a blocked acquire found the name held
// and starts to wait.
func OnPaused(m *Manager, f func(name string)) { m.testHooks.paused = f }

// OnHolding makes m call f whenever the first waiter of a name holds back
// for an older waiter of another process.
func OnHolding(m *Manager, f func(name string)) { m.testHooks.holding = f }

// OnFreed makes m call f whenever its watch reports that a holding of
// name ended. Set it before Start.
func OnFreed(m *Manager, f func(name string)) { m.testHooks.freed = f }

// OnEnded makes m call f whenever one of its leases ends, right after its
// Context was cancelled (under the lease's lock: f must not call it).
func OnEnded(m *Manager, f func(name string, fence int64, err error)) { m.testHooks.ended = f }

// OnLate makes m call f whenever an acquire attempt returned a grant past
// its lease's local deadline, before it releases it.
func OnLate(m *Manager, f func(name string, fence int64)) { m.testHooks.late = f }

// OnDrain makes m's Stop call f when it starts to wait for the acquire
// attempts in flight.
func OnDrain(m *Manager, f func()) { m.testHooks.drain = f }

// OnRenewWaits makes m call f whenever a renewal of one of its leases waits
// for the renewal in progress.
func OnRenewWaits(m *Manager, f func(name string)) { m.testHooks.renewWaits = f }

// OnCleanup makes m call f whenever it releases a holding whose lease is
// over, in the background or from the keep-alive (releaseAfterEnd), before
// the release is sent.
func OnCleanup(m *Manager, f func(name string, fence int64)) { m.testHooks.cleanup = f }

// SetListPage sets how many holdings m lists per statement.
func SetListPage(m *Manager, n int) { m.listPage = n }

// Queued returns how many acquires and releases of m wait for a batch.
func Queued(m *Manager) (acquires, releases int) {
	return m.calls.acquires.Queued(), m.calls.releases.Queued()
}

// SetWaveClock makes m's batching read now instead of the time.
func SetWaveClock(m *Manager, now func() time.Time) { m.calls.wave.SetClock(now) }

// SetWaveWait makes m's leaders wait for a wave at least d (instead of a
// share of the last backend call, which the memory backend makes tiny).
func SetWaveWait(m *Manager, d time.Duration) { m.calls.wave.SetMinWait(d) }

// InFlight returns how many backend calls of m's acquires and releases are
// out.
func InFlight(m *Manager) (acquires, releases int) {
	return m.calls.acquires.InFlight(), m.calls.releases.InFlight()
}

// FireDeadline runs l's local-deadline timer now, as when it fires: the
// lease ends if its local deadline passed by the Manager's clock
// (Config.Now), and is left alone otherwise.
func FireDeadline(l *Lease) { l.onDeadline() }

// OnSettings makes m call f whenever it re-read the settings table after a
// notice or a reset. Set it before Start.
func OnSettings(m *Manager, f func()) { m.testHooks.settings = f }

// InForce returns the configuration m applies now: its Config with the
// settings table's values, and whether the maintenance loop marks expiry.
func InForce(m *Manager) (Config, bool) {
	t := m.tuned.Load()
	return t.cfg, !t.noExpiry
}

// OnOrphan makes m call f whenever, looking for the grant of an acquire of
// unknown outcome, it found a live holding of its Owner: with ok when it
// took it for that grant and released it.
func OnOrphan(m *Manager, f func(name string, fence int64, ok bool)) { m.testHooks.orphan = f }
