//go:build linux && !amd64 && !arm64

package proctree

// frontELF is nil where no watchdog front is built: the watchdog is the
// shell from the start (watchFront).
var frontELF []byte
