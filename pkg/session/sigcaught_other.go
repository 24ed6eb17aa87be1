//go:build !linux

package session

import "syscall"

// catches cannot tell on this system: the interrupt goes by the trap.
func catches(pid int, sig syscall.Signal) (caught, ok bool) { return false, false }

// exePath is unknown on this system.
func exePath(pid int) string { return "" }
