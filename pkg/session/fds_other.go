//go:build !linux

package session

// keepFdsFromShells: no close_range here; the launcher's descriptors are
// close-on-exec in Go already.
func keepFdsFromShells() {}
