//go:build !linux

package sandbox

// WatchReplaced is nil here: Seatbelt's rules name paths, so a file
// replaced at one is held to the same rule (see Stale).
func (p *Prepared) WatchReplaced() (replaced <-chan string, stop func()) {
	return nil, func() {}
}

// KeptIDs is nil here: Seatbelt's rules hold whatever file is at a path.
func (p *Prepared) KeptIDs() map[string]string { return nil }
