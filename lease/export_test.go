package lease

// OnWaiting makes m call f whenever a blocking acquire joins the queue of a
// name, with the queue's new length.
func OnWaiting(m *Manager, f func(name string, queued int)) { m.testHooks.waiting = f }

// OnWanted makes m call f whenever it hears that a waiter of another
// process lost a race for a name.
func OnWanted(m *Manager, f func(name, waiter string)) { m.testHooks.wanted = f }

// OnReset makes m call f whenever its watch starts listening. Set it before
// Start.
func OnReset(m *Manager, f func()) { m.testHooks.reset = f }

// OnPaused makes m call f whenever a blocked acquire found the name held
// and starts to wait.
func OnPaused(m *Manager, f func(name string)) { m.testHooks.paused = f }
