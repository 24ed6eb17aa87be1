package sandbox

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/sandbox/spawn"
)

// endReports: the Linux helper reports the command's end before its own
// exit (Prepared.Ended).
const endReports = true

// specChannel returns the two ends of the spec's channel, both
// close-on-exec (the helper's is passed by dup2): a socket pair when the
// helper reports the end on it (spawn.SpecSocket), this process's end
// non-blocking so that Cleanup's close wakes a waiting Ended; else a pipe,
// ours the write end.
func specChannel(report bool) (theirs, ours *os.File, err error) {
	if !report {
		r, w, err := os.Pipe()
		return r, w, err
	}
	return spawn.SpecSocket()
}

// shutWrite ends the spec on the socket f: the helper reads end-of-file,
// and f stays open for the report.
func shutWrite(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_WR) })
	}
}
