//go:build !linux

package faultpoint

import (
	"os"
	"syscall"
)

// raise sends sig to the process (no thread-directed kill here).
func raise(sig syscall.Signal) { _ = syscall.Kill(os.Getpid(), sig) }
