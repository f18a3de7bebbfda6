package barrier

import "time"

// StreamCount returns how many streams the barrier keeps state for, for
// tests of eviction.
func StreamCount(b *Barrier) int {
	n := 0
	b.streams.Range(func(any, any) bool { n++; return true })
	return n
}

// SetRetryPauses sets a follower's first and longest pause between failed
// reads (RetryInitialInterval, RetryMaxInterval), before b is used.
func SetRetryPauses(b *Barrier, initial, longest time.Duration) {
	b.retryPauses = [2]time.Duration{initial, longest}
}
