package barrier

// StreamCount returns how many streams the barrier keeps state for, for
// tests of eviction.
func StreamCount(b *Barrier) int {
	n := 0
	b.streams.Range(func(any, any) bool { n++; return true })
	return n
}
