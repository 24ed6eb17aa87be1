package faultpoint

import (
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// raise sends sig to the calling thread itself, not to the process: a
// process-directed SIGSTOP is taken by whichever thread the kernel picks
// (the main thread first), and until that thread starts the group stop the
// caller runs on past the step. A signal for this thread is taken on the
// way out of tgkill, before the next instruction of the step.
func raise(sig syscall.Signal) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Tgkill(os.Getpid(), unix.Gettid(), sig)
}
