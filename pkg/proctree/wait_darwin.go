package proctree

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Wait blocks until the process id is gone (exited: a zombie counts as
// gone) and returns nil, or until ctx ends and returns ctx.Err(). It does
// not reap and does not poll: a kqueue EVFILT_PROC NOTE_EXIT event fires
// when the process exits, and the start time is checked after the event is
// registered, so a recycled pid is never waited for. It works for any
// process the caller may see, not only its children.
func Wait(ctx context.Context, id ID) error {
	pid := id.PID
	if pid <= 0 {
		return nil
	}
	kq, err := unix.Kqueue()
	if err != nil {
		return err
	}
	defer unix.Close(kq)
	var proc unix.Kevent_t
	unix.SetKevent(&proc, pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_ONESHOT)
	proc.Fflags = unix.NOTE_EXIT
	if _, err := unix.Kevent(kq, []unix.Kevent_t{proc}, nil, nil); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil // already gone
		}
		return err
	}
	if !id.Alive() {
		return nil
	}
	changes := []unix.Kevent_t{}
	var r *os.File
	if ctx.Done() != nil {
		// A pipe whose write end is closed when ctx ends wakes the wait.
		var w *os.File
		if r, w, err = os.Pipe(); err != nil {
			return err
		}
		defer r.Close()
		stop := context.AfterFunc(ctx, func() { w.Close() })
		defer func() {
			if stop() {
				w.Close()
			}
		}()
		var rd unix.Kevent_t
		unix.SetKevent(&rd, int(r.Fd()), unix.EVFILT_READ, unix.EV_ADD)
		changes = append(changes, rd)
	}
	events := make([]unix.Kevent_t, 2)
	for {
		n, err := unix.Kevent(kq, changes, events, nil)
		changes = nil
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			switch ev.Filter {
			case unix.EVFILT_PROC:
				return nil
			case unix.EVFILT_READ:
				return ctx.Err()
			}
		}
	}
}

// WaitChild blocks until the caller's child pid has exited, without
// reaping it: kqueue's NOTE_EXIT fires when the child becomes a zombie.
// While it stays one its pid, and with it the process group and session
// it leads, cannot be handed to another process: a kill of that group
// after WaitChild and before the reap can only reach what it left behind.
func WaitChild(pid int) error {
	st, err := ReadStat(pid)
	if err != nil {
		return err
	}
	return Wait(context.Background(), ID{PID: pid, Start: st.StartTime})
}
