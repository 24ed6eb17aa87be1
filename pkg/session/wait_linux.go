package session

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// waitExit blocks until the process (pid, start) has exited, or timeout,
// without polling: a pidfd becomes readable when the process ends.
func waitExit(pid int, start uint64, timeout time.Duration) {
	if pid <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // already gone
	}
	defer unix.Close(fd)
	if !proctree.Alive(pid, start) {
		return // the pid was recycled, or it is a zombie
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	_, _ = unix.Poll(fds, int(timeout.Milliseconds()))
}
