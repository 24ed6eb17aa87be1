// Package proctree is the one home of process control for agentsh, its
// session servers and the job supervisor: process identity (ID, Identify),
// the verdict on a recorded owner (Owner.Check: pid, start time and boot
// id), waiting for any process without polling (Wait: a pidfd on Linux, a
// kqueue on macOS), the kill sequence with grace (Terminate over a Tree)
// and signal names (SignalName, ParseSignal). It finds process trees
// through the kernel's process table: /proc on Linux, sysctl kern.proc on
// macOS.
//
// A process is identified by its PID and its start time (field 22 of
// /proc/PID/stat on Linux, p_starttime of kinfo_proc on macOS), because PIDs
// are recycled: a PID alone never proves that the process we started is
// still the one running. Descendants are found by walking parent links in
// one snapshot of the process table.
//
// On Linux that walk also sees processes that called setsid or
// double-forked, provided the caller is a child subreaper (SetSubreaper) so
// that orphans are reparented to it instead of to PID 1.
//
// macOS has no subreaper: an orphan is reparented to launchd (PID 1) and
// drops out of the parent walk. What still holds it there is its process
// group and its session, which it keeps across the reparenting: the
// commands are started as session leaders, so on macOS SignalGroup(pid)
// reaches the command's group and also every process still in the session
// pid leads (Tree.Session). A descendant that double-forked and called
// setsid itself leaves both, is reparented to launchd and is found by no
// walk: on macOS such a process can outlive the call.
package proctree

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Errors of Environ and Argv.
var (
	// ErrEnvironUnknown says a process's environment stayed unreadable
	// because it was in the middle of an exec all the while: it proves
	// neither that the process carries an entry nor that it does not.
	ErrEnvironUnknown = errors.New("proctree: environment unknown: the process is in the middle of an exec")
	// ErrArgvUnknown says a process's command line stayed unreadable
	// the same way.
	ErrArgvUnknown = errors.New("proctree: command line unknown: the process is in the middle of an exec")
	// ErrProcessExited says the process exited while it was read.
	ErrProcessExited = errors.New("proctree: the process exited")
)

// Stat is the part of /proc/PID/stat this package needs.
type Stat struct {
	PID       int
	PPID      int
	PGID      int
	SID       int
	State     byte   // R, S, D, Z, T, X, …
	StartTime uint64 // Linux: clock ticks since boot; macOS: µs since the epoch
	Threads   int    // Linux: the number of threads; 0 where not known
}

// Dead reports whether the process has exited and only its zombie remains.
func (s Stat) Dead() bool { return s.State == 'Z' || s.State == 'X' }

// StartTime returns the start time of pid (units as in Stat.StartTime).
func StartTime(pid int) (uint64, error) {
	s, err := ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return s.StartTime, nil
}

// Alive reports whether the process pid that started at startTime still
// runs: the PID exists, has the same start time (so it was not recycled) and
// is not a zombie.
func Alive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	s, err := ReadStat(pid)
	if err != nil {
		return false
	}
	return s.StartTime == startTime && !s.Dead()
}

// Present reports whether pid is the process that started at startTime
// and has not been reaped: alive, or exited (a zombie). A process whose
// main thread is a zombie while other threads of it still run is present
// and not Alive.
func Present(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	s, err := ReadStat(pid)
	return err == nil && s.StartTime == startTime
}

// Descendants returns every process below root in the snapshot, children
// before grandchildren. root itself is not included.
func Descendants(snap []Stat, root int) []Stat {
	return DescendantsExcept(snap, root, nil)
}

// DescendantsExcept is Descendants without the processes for which exempt
// returns true and everything below them. exempt may be nil.
func DescendantsExcept(snap []Stat, root int, exempt func(Stat) bool) []Stat {
	kids := make(map[int][]Stat, len(snap))
	for _, s := range snap {
		kids[s.PPID] = append(kids[s.PPID], s)
	}
	var out []Stat
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range kids[p] {
			if seen[c.PID] {
				continue
			}
			seen[c.PID] = true
			if exempt != nil && exempt(c) {
				continue
			}
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// SignalGroup sends sig to the process group pgid. A group that no longer
// exists is not an error. On macOS it also signals every process of the
// session pgid leads, if there is one (see the package doc).
func SignalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("proctree: refusing to signal process group %d", pgid)
	}
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = nil
	}
	// Where no subreaper keeps orphans findable, the session the group's
	// leader started holds the members that moved to another group.
	signalSession(pgid, sig)
	return err
}

// SignalDescendants sends sig to every live descendant of root and returns
// how many it signalled. Processes are matched by (pid, start time) between
// the snapshot and the kill, so a recycled PID is never signalled.
func SignalDescendants(root int, sig syscall.Signal) (int, error) {
	snap, err := Snapshot()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range Descendants(snap, root) {
		if s.Dead() {
			continue
		}
		if !Alive(s.PID, s.StartTime) {
			continue
		}
		if err := syscall.Kill(s.PID, sig); err == nil {
			n++
		}
	}
	return n, nil
}

// KillAllDescendants SIGKILLs every descendant of the calling process until
// none is left alive, reaping the zombies of those that became its children.
// The caller must be a subreaper and must own every child it has (no
// concurrent exec.Cmd whose status it still wants), because zombies among
// its direct children are reaped here. It gives up after timeout and returns
// the PIDs still alive then.
func KillAllDescendants(timeout time.Duration) []int {
	return KillAllDescendantsExcept(timeout, nil)
}

// KillAllDescendantsExcept is KillAllDescendants leaving alone the
// processes for which exempt returns true, and everything below them: the
// detached servers a command started on purpose (a job supervisor) outlive
// the cleanup. exempt may be nil; it is not asked about zombies.
func KillAllDescendantsExcept(timeout time.Duration, exempt func(Stat) bool) []int {
	self := os.Getpid()
	if exempt != nil {
		live := exempt
		exempt = func(s Stat) bool { return !s.Dead() && live(s) }
	}
	deadline := time.Now().Add(timeout)
	backoff := time.Millisecond
	for {
		// A subreaper with no children has no descendants: every live
		// descendant has an ancestor that is a child of ours (orphans are
		// reparented to us). One waitid call spares a scan of /proc in
		// the common case of a command that left nothing behind.
		if !hasChildren() {
			return nil
		}
		snap, err := Snapshot()
		if err != nil {
			return nil
		}
		var alive []int
		for _, s := range DescendantsExcept(snap, self, exempt) {
			if s.PPID == self && s.Dead() {
				reap(s.PID)
				continue
			}
			if s.Dead() {
				continue // a grandchild zombie: its parent, or we after reparenting, reaps it
			}
			alive = append(alive, s.PID)
			// A fork loop may add processes between snapshots; the outer
			// loop repeats until a snapshot finds nothing alive.
			_ = syscall.Kill(s.PID, syscall.SIGKILL)
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return alive
		}
		// Processes killed above die asynchronously; wait for the reaping
		// to catch up without spinning.
		reapAny(self, snap)
		time.Sleep(backoff)
		if backoff < 20*time.Millisecond {
			backoff *= 2
		}
	}
}

// reap collects the exit status of a zombie child so that it disappears.
func reap(pid int) {
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
}

func reapAny(self int, snap []Stat) {
	for _, s := range snap {
		if s.PPID == self {
			reap(s.PID)
		}
	}
}

// ReapChildren collects every child of the calling process that has
// exited, without blocking, so that no zombie outlives it in /proc. Like
// KillAllDescendants it must only be called by a process that owns all of
// its children (no exec.Cmd whose status it still wants).
func ReapChildren() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
