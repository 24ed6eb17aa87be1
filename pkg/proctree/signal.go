package proctree

import (
	"strconv"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/pkg/result"
	"golang.org/x/sys/unix"
)

// The one table of signal names is the kernel's, as golang.org/x/sys/unix
// spells it for the platform (unix.SignalName, unix.SignalNum): agentsh,
// agentjob and the session server all name and parse signals here, so a
// name printed by one is accepted by the others.

// SignalName returns "SIGTERM" for syscall.SIGTERM, and "SIG34" for a
// signal without a name (the real-time ones).
func SignalName(s syscall.Signal) string {
	if name := unix.SignalName(s); name != "" {
		return name
	}
	return "SIG" + strconv.Itoa(int(s))
}

// maxSignal is the largest signal number the kernel accepts (SIGRTMAX).
const maxSignal = 64

// ParseSignal accepts a signal as a name with or without SIG, in any case,
// or as a number: "TERM", "SIGKILL", "int", "9", and the "SIG34" that
// SignalName prints. A bad value is a *result.Error with code usage_error
// (signals are given on flags); its message does not name the flag, which
// the caller adds.
func ParseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > maxSignal {
			return 0, result.Errorf(result.CodeUsage, "signal number %d is out of range 1-%d", n, maxSignal)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	if n, err := strconv.Atoi(name[3:]); err == nil && n > 0 && n <= maxSignal {
		return syscall.Signal(n), nil
	}
	return 0, result.Errorf(result.CodeUsage, "unknown signal %q", s)
}
