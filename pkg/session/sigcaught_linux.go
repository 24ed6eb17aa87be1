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
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, false
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if v, found := bytes.CutPrefix(l, []byte("SigCgt:")); found {
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
