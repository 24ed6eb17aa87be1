package session

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// catches reports whether process pid has a handler for sig (the SigCgt
// mask of /proc/PID/status); ok is false when that cannot be read.
func catches(pid int, sig syscall.Signal) (caught, ok bool) {
	return inMask(pid, "SigCgt:", sig)
}

// ignores reports whether process pid ignores sig (the SigIgn mask).
func ignores(pid int, sig syscall.Signal) bool {
	ign, _ := inMask(pid, "SigIgn:", sig)
	return ign
}

// inMask reports whether sig is in the signal mask field of
// /proc/PID/status; ok is false when that cannot be read.
func inMask(pid int, field string, sig syscall.Signal) (in, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, false
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if v, found := bytes.CutPrefix(l, []byte(field)); found {
			mask, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
			if err != nil {
				return false, false
			}
			return mask&(1<<(uint(sig)-1)) != 0, true
		}
	}
	return false, false
}

// exePath is the executable process pid runs ("" when unknown).
func exePath(pid int) string {
	p, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return p
}

// interruptSig is the signal whose trap (the call's varsUsr2) interrupts
// the shell's line (see interrupt): SIGRTMAX-2, a real-time signal that
// commands leave alone, so that a command's own USR1/USR2 trap (a
// reload handler, say) is never run by a timeout, nor takes it away.
// interruptSpec names it to trap (glibc's SIGRTMAX is 64 for bash too),
// interruptName as trap -p prints it.
const (
	interruptSig  = syscall.Signal(62)
	interruptSpec = "RTMAX-2"
	interruptName = "SIGRTMAX-2"
)
