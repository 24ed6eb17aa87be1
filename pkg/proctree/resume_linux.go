package proctree

import (
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ResumeStops keeps a helper of the guarded process (its child: the
// watchdog, a keeper) from being held stopped: each time it stops, by a
// SIGSTOP from the command (unsandboxed, it runs as the same user and may
// signal its keeper, its $PPID, or the watchdog) or anyone, it is
// continued at once. A stopped keeper reports nothing, so the call waited
// for it past its timeout, for ever; a stopped watchdog or keeper kills
// nothing when the guarded process is SIGKILLed. pid must be a child of
// the caller not yet reaped: it is named by a pidfd opened now, so a
// recycled pid is never signalled, and it is forgotten once it has exited.
//
// A child's stop raises SIGCHLD in its parent; the helpers are looked at
// then, without a thread held in a wait for each (a process with a tight
// RLIMIT_NPROC has few threads to spare).
func ResumeStops(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	resumer.mu.Lock()
	if resumer.fds == nil {
		resumer.fds = map[int]bool{}
	}
	resumer.fds[fd] = true
	resumer.mu.Unlock()
	resumer.once.Do(func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGCHLD)
		go func() {
			for range c {
				resumeStopped()
			}
		}()
	})
	resumeStopped() // a stop before the notification was in place
}

var resumer struct {
	mu   sync.Mutex
	fds  map[int]bool // pidfds of the helpers to keep running
	once sync.Once
}

// resumeStopped continues every helper that is stopped, and forgets those
// that have exited.
func resumeStopped() {
	resumer.mu.Lock()
	defer resumer.mu.Unlock()
	for fd := range resumer.fds {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WSTOPPED|unix.WNOHANG, nil)
		for err == unix.EINTR {
			err = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WSTOPPED|unix.WNOHANG, nil)
		}
		switch {
		case err != nil:
			// Exited (a zombie, or reaped): only stops were asked for,
			// so the exit is left to the child's own Wait, and there is
			// no stop left to wait for.
			unix.Close(fd)
			delete(resumer.fds, fd)
		case info.Signo == int32(unix.SIGCHLD):
			_ = unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0)
		}
	}
}

// Seal makes the calling process undumpable: a process of the same user
// (an unsandboxed command) can then no longer take its descriptors
// (pidfd_getfd), trace it or open its /proc files, as it could, and so
// hold a copy of the guarded process's end of the watchdog's or the
// keeper's stream: their end of file, the news of its death, never came
// and a SIGKILL of it left the tree running. Only root (CAP_SYS_PTRACE)
// still may. It lasts until the process execs.
func Seal() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }

// OwnerFD is the descriptor number at which a guard's watchdog finds the
// guarded process's pidfd (ownPidfd): the watchdog front and the
// watchdog (RunWatchdog) watch it beside their stream (see shutdownAtExit).
const OwnerFD = 3

// KillFD is the descriptor number at which a guard's watchdog in cgroup
// mode finds the cgroup's cgroup.kill, open for writing: the front writes
// "1" there first thing once the guarded process is gone.
const KillFD = 4

// ownPidfd returns a pidfd of the calling process, for its watchdog's
// OwnerFD, or nil where there is none (before Linux 5.3).
func ownPidfd() *os.File {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "pidfd")
}

// shutdownAtParentExit is shutdownAtExit for the caller's parent: the
// keeper's, which starts the command itself, so no command exists yet when
// it calls this first thing (if the parent is gone already, getppid names
// a reaper, and the stream's end of file, which nothing can hold off yet,
// says so instead).
func shutdownAtParentExit(fd int) {
	if pfd, err := unix.PidfdOpen(os.Getppid(), 0); err == nil {
		shutdownAtExit(pfd, fd)
	}
}

// shutdownAtOwnerExit is shutdownAtExit for the guarded process whose
// pidfd the watchdog got as OwnerFD, if it got one.
func shutdownAtOwnerExit(fd int) {
	if link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(OwnerFD)); err == nil && link == "anon_inode:[pidfd]" {
		unix.CloseOnExec(OwnerFD)
		shutdownAtExit(OwnerFD, fd)
	}
}

// shutdownAtExit shuts the stream socket fd down for reading once the
// process of pidfd (the guarded process) exits, so that a helper reading
// the guarded process's end of fd (the keeper, the watchdog) reads what it
// wrote and then end of file, even while another process holds a copy of
// its end: root, unsandboxed, can take one from the undumpable guarded
// process with pidfd_getfd, and end of file alone then never came. The
// wait is in the runtime's poller, not on a thread of its own.
func shutdownAtExit(pidfd, fd int) {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return
	}
	go func() {
		defer f.Close()
		exited := false
		err := rc.Read(func(pfd uintptr) bool {
			p := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
			n, err := unix.Poll(p, 0)
			exited = err == nil && n > 0
			return exited
		})
		if err == nil && exited {
			_ = unix.Shutdown(fd, unix.SHUT_RD)
		}
	}()
}
