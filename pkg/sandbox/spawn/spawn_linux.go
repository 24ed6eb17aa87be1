package spawn

import (
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Attr is how a run's helper is started, with a network namespace of its
// own or not, by root or not, and the namespaces it gets by name. The
// caller adds the session and the cgroup.
func Attr(netns, root bool) (*syscall.SysProcAttr, []string) {
	attr := &syscall.SysProcAttr{
		// A new mount, PID and IPC namespace for every sandboxed run: the
		// command sees only its own processes (no signals, prlimit or
		// /proc/PID/root outside) and no host SysV IPC.
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC,
		// The helper is PID 1 of the namespace: when it dies, the kernel
		// kills everything inside, so the tree cannot outlive its runner.
		Pdeathsig: syscall.SIGKILL,
	}
	namespaces := []string{"mount", "pid", "ipc", "cgroup"}
	if netns {
		attr.Cloneflags |= syscall.CLONE_NEWNET
		namespaces = append(namespaces, "net")
	}
	if !root {
		// An unprivileged caller gets the namespaces through a user
		// namespace that maps only its own ids, so files keep their
		// owners and nothing gains privilege outside.
		uid, gid := os.Getuid(), os.Getgid()
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		// The helper keeps its own uid, which would lose the namespace's
		// capabilities at execve; ambient capabilities carry over the two
		// it needs for the mounts and the loopback, and it clears them
		// (Spec.ClearAmbient) before starting the target.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN}
		namespaces = append(namespaces, "user")
	}
	return attr, namespaces
}

// Cloneflags are the namespaces it was started with.
func (h *Helper) Cloneflags() uintptr { return h.attr.Cloneflags }

// SpecSocket returns the two ends of the socket pair a helper reads its
// spec from and reports the command's end on: the helper's (theirs) and
// this process's (ours, non-blocking), both close-on-exec.
func SpecSocket() (theirs, ours *os.File, err error) {
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

// New prepares the start of the helper of a run from self (the calling
// program's executable, run under the name program unless the helper's
// own program is beside it), with a network namespace or not, or returns
// nil when none can be started ahead: only root's run is, whose helper
// needs no user namespace and goes into the guard's cgroup at its clone.
func New(netns bool, self, program string) *Helper {
	if os.Geteuid() != 0 {
		return nil
	}
	path, _ := HelperPath(self)
	if path != self {
		program = Program
	}
	attr, _ := Attr(netns, true)
	return &Helper{path: path, program: program, attr: attr, started: make(chan struct{})}
}

// Start starts the helper in the cgroup cgroupFD (the run's guard's, which
// it must be in; the descriptor is only used during the call), or leaves
// it unstarted (Take then gives nothing). Call it once, on any goroutine:
// it takes as long as the clone and the exec, which the caller waits for.
// Until the guard's watchdog runs, only the parent-death signal kills the
// helper with the caller, which is enough: it is PID 1 of its namespaces.
func (h *Helper) Start(cgroupFD int) {
	defer close(h.started)
	if cgroupFD < 0 {
		return
	}
	theirs, ours, err := SpecSocket()
	if err != nil {
		return
	}
	defer theirs.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		ours.Close()
		return
	}
	defer null.Close()
	a := *h.attr
	a.Setsid = true // as the runner starts every main process
	a.UseCgroupFD, a.CgroupFD = true, cgroupFD
	// The helper, a Go program, lives a few milliseconds for most
	// commands, on a machine whose two cores run agentsh's start beside
	// its own: its runtime's monitor thread, which wakes every 20 us for
	// its first milliseconds (plus the thread's timer slack, 50 us by
	// default), and idle processors hunting for work both take a core
	// from the start itself. It gets one processor (GOMAXPROCS, in an
	// environment the target never sees: the helper replaces it with the
	// target's, Spec.Environ) and a coarse timer slack, inherited from the
	// thread that forks it, which it gives back to the target from the
	// spec (Spec.TimerSlack) before the target's fork. Both cut about
	// 0.2 ms each from a sandboxed `true` (docs/BENCHMARKS.md).
	runtime.LockOSThread()
	slack, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	coarse := err == nil && slack > 0 && unix.Prctl(unix.PR_SET_TIMERSLACK, helperSlack, 0, 0, 0) == nil
	// syscall's fork, not os's: the os package's first start of a process
	// checks that pidfds work by cloning a child of its own and waiting
	// for it, which here would delay the helper's start; it runs in
	// FindProcess instead, once the helper is on its way.
	n, t := null.Fd(), theirs.Fd()
	pid, err := syscall.ForkExec(h.path, []string{h.program, Command, strconv.Itoa(SpecFD)},
		&syscall.ProcAttr{Dir: "/", Env: []string{"GOMAXPROCS=1"}, Files: []uintptr{n, n, n, t}, Sys: &a})
	if coarse {
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0)
	}
	runtime.UnlockOSThread()
	if err != nil {
		ours.Close()
		return
	}
	// The helper is this process's child, not yet waited for: its pid
	// cannot name another process until it is reaped.
	proc, err := os.FindProcess(pid)
	if err != nil {
		ours.Close()
		return
	}
	h.proc, h.ours = proc, ours
	if coarse {
		h.slack = slack
	}
}

// helperSlack is the timer slack, in nanoseconds, a helper started ahead
// runs with: its runtime's timers may fire up to a millisecond late, which
// costs nothing to a process that only waits for its target.
const helperSlack = 1_000_000
