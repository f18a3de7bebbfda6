package cleanup

// RefusedStreams is how many streams sv holds as refused (lost history).
func RefusedStreams(sv *Service) int {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return len(sv.refused)
}
