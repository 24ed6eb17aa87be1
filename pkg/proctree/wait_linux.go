package proctree

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Wait blocks until the process id is gone (exited: a zombie counts as
// gone) and returns nil, or until ctx ends and returns ctx.Err(). It does
// not reap and does not poll: a pidfd becomes readable when the process
// exits, and the start time is checked after the pidfd is open, so the
// pidfd cannot belong to a recycled pid. It works for any process, not
// only children of the caller.
//
// A process has exited when all its threads have: a main thread that
// ended first shows the process a zombie while the others still run (a
// SIGKILLed one's threads die one by one), and they hold its descriptors
// and the locks on them. The pidfd answers for the whole process, and so
// Wait does.
func Wait(ctx context.Context, id ID) error {
	if id.PID <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		return nil // no such process: already gone
	}
	defer unix.Close(fd)
	if !Present(id.PID, id.Start) {
		return nil
	}
	if ctx.Done() == nil {
		return pollForever(fd)
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
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if fds[0].Revents != 0 {
			return nil
		}
		if fds[1].Revents != 0 {
			return ctx.Err()
		}
	}
}

func pollForever(fd int) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err
	}
}

// WaitChild blocks until the caller's child pid has exited, without
// reaping it (waitid WNOWAIT). While the child stays a zombie its pid, and
// with it the process group and session it leads, cannot be handed to
// another process: a kill of that group after WaitChild and before the
// reap (os.Process.Wait) can only reach what the child left behind.
func WaitChild(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
