package confine

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// catchSignals keeps the helper alive through the signals meant for the
// target, without leaving any of them ignored for the target.
//
// The helper is PID 1 of the sandbox's PID namespace, for which the kernel
// drops every signal left at SIG_DFL but SIGKILL (and SIGSTOP from
// outside the namespace). What would end the helper is the Go runtime's
// own handler, installed at start for most signals, which exits on a
// SIGTERM, SIGHUP or SIGINT nobody asked for with os/signal. So the
// signals the runtime handles that way go back to SIG_DFL here, with
// rt_sigaction directly, before anything else: a signal the helper's
// caller left ignored stays ignored (as it would for the command without
// the sandbox), and the target inherits exactly what it would have
// (TestSignals). Catching them with os/signal.Notify instead costs a round
// trip to the runtime's signal thread per signal: about 1 ms in all on a
// quiet machine, ten times that on a loaded one, on every sandboxed call.
// A helper that is not PID 1 (no PID namespace: not something prepare
// builds) falls back to it.
func catchSignals() {
	if os.Getpid() != 1 {
		go func() {
			sigs := make(chan os.Signal, 16)
			signal.Notify(sigs)
			for range sigs {
			}
		}()
		return
	}
	for _, s := range runtimeHandled {
		old := setDisposition(s, sigDFL)
		if old == sigIGN {
			setDisposition(s, sigIGN)
		}
	}
}

// runtimeHandled are the signals the Go runtime catches at start and
// turns into an exit (or a throw) unless os/signal asks for them, but
// those it needs itself (SIGURG for preemption, SIGCHLD, SIGPROF, the
// synchronous faults) and signals 32 to 34 (libc's and the runtime's own).
var runtimeHandled = func() []syscall.Signal {
	sigs := []syscall.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGABRT, unix.SIGUSR1, unix.SIGUSR2,
		unix.SIGPIPE, unix.SIGALRM, unix.SIGTERM, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM, unix.SIGIO,
		unix.SIGPWR, unix.SIGSTKFLT}
	for s := 35; s <= 64; s++ { // real-time signals
		sigs = append(sigs, syscall.Signal(s))
	}
	return sigs
}()

const (
	sigDFL = 0
	sigIGN = 1
)

// kernelSigaction is struct sigaction as rt_sigaction(2) takes it on the
// 64-bit architectures the sandbox runs on (seccompArch).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// setDisposition sets sig to SIG_DFL or SIG_IGN behind the runtime's back
// and returns the handler it had.
func setDisposition(sig syscall.Signal, handler uintptr) uintptr {
	sa, old := kernelSigaction{handler: handler}, kernelSigaction{}
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	return old.handler
}
