package sandbox

import (
	"os"

	"golang.org/x/sys/unix"
)

// endReports: the Linux helper reports the command's end before its own
// exit (Prepared.Ended).
const endReports = true

// specChannel returns the two ends of the spec's channel, both
// close-on-exec (the helper's is passed by dup2): a socket pair when the
// helper reports the end on it, this process's end non-blocking so that
// Cleanup's close wakes a waiting Ended; else a pipe, ours the write end.
func specChannel(report bool) (theirs, ours *os.File, err error) {
	if !report {
		r, w, err := os.Pipe()
		return r, w, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.SetNonblock(fds[1], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "sandbox-spec"), os.NewFile(uintptr(fds[1]), "sandbox-end"), nil
}

// shutWrite ends the spec on the socket f: the helper reads end-of-file,
// and f stays open for the report.
func shutWrite(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_WR) })
	}
}
