package run

import "syscall"

// platformSignals are the signal names only Linux has.
var platformSignals = map[string]syscall.Signal{
	"SIGSTKFLT": syscall.SIGSTKFLT, "SIGPWR": syscall.SIGPWR,
}
