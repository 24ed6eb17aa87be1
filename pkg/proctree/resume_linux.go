package proctree

import "golang.org/x/sys/unix"

// ResumeStops keeps a helper of the guarded process (its child: the
// watchdog, a keeper) from being held stopped: each time it stops, by a
// SIGSTOP from the command (unsandboxed, it runs as the same user and may
// signal its keeper, its $PPID, or the watchdog) or anyone, it is
// continued at once. A stopped keeper reports nothing, so the call waited
// for it past its timeout, for ever; a stopped watchdog or keeper kills
// nothing when the guarded process is SIGKILLed. It returns once the
// child has exited; pid must be a child of the caller not yet reaped (it
// is named by a pidfd opened now, so a recycled pid is never signalled).
func ResumeStops(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	go func() {
		defer unix.Close(fd)
		for {
			// Only stops are asked for, so the exit is left to the
			// child's own Wait: once it has exited (a zombie, or
			// reaped), there is no stop left to wait for, and the
			// call fails (ECHILD).
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WSTOPPED, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return
			}
			_ = unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0)
		}
	}()
}
