package jobs

import (
	"context"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// waitProcess blocks until the process (pid, start) is gone, returning nil,
// or ctx ends. It uses a pidfd, which becomes readable when the process
// exits; the start time is checked after opening it, so the pidfd cannot
// belong to a recycled PID.
func waitProcess(ctx context.Context, pid int, start uint64) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil // already gone
	}
	defer unix.Close(fd)
	if !proctree.Alive(pid, start) {
		return nil
	}
	// A pipe whose write end is closed when ctx ends wakes the poll.
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	stop := context.AfterFunc(ctx, func() { w.Close() })
	defer func() {
		if stop() {
			w.Close()
		}
	}()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(r.Fd()), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if fds[0].Revents != 0 {
			// Readable means exited, but a zombie still has its stat, so
			// Alive is what callers will see: it says dead for zombies.
			return nil
		}
		if fds[1].Revents != 0 {
			return ctx.Err()
		}
	}
}
