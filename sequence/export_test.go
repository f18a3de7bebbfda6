package sequence

// QueuedLeases returns how many Lease calls wait in the coalescing queue,
// for tests that need to know a call joined it.
func QueuedLeases(l *Leaser) int {
	if l.leases == nil {
		return 0
	}
	return l.leases.Queued()
}

// QueuedCommits returns how many groups of commits wait in the queue of the
// commit engine.
func QueuedCommits(l *Leaser) int {
	if l.commits == nil {
		return 0
	}
	return l.commits.Queued()
}
