package sequence

// QueuedLeases returns how many Lease calls wait in the coalescing queue of
// stream, for tests that need to know a call joined it.
func QueuedLeases(l *Leaser, stream string) int {
	v, ok := l.leaseQueues.Load(stream)
	if !ok {
		return 0
	}
	q := v.(*leaseQueue)
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}
