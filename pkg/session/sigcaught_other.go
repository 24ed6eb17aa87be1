//go:build !linux

package session

import "syscall"

// catches cannot tell on this system: the interrupt goes by the trap.
func catches(pid int, sig syscall.Signal) (caught, ok bool) { return false, false }

// ignores cannot tell on this system: such a process waits for SIGKILL.
func ignores(pid int, sig syscall.Signal) bool { return false }

// exePath is unknown on this system.
func exePath(pid int) string { return "" }

// interruptSig is the signal that interrupts the shell's line (see
// interrupt): SIGUSR2, where there are no real-time signals.
const (
	interruptSig  = syscall.SIGUSR2
	interruptSpec = "USR2"
	interruptName = "SIGUSR2"
)
