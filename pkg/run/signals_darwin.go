package run

import "syscall"

// platformSignals are the signal names only macOS (of the systems
// agentplane runs on) has.
var platformSignals = map[string]syscall.Signal{
	"SIGEMT": syscall.SIGEMT, "SIGINFO": syscall.SIGINFO,
}
