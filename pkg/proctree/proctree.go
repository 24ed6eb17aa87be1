// Package proctree is the one home of process control for agentsh, its
// session servers and the job supervisor: process identity (ID, Identify),
// the verdict on a recorded owner (Owner.Check: pid, start time and boot
// id), waiting for any process without polling (Wait, through a pidfd), the
// kill sequence with grace (Terminate over a Tree) and signal names
// (SignalName, ParseSignal). It finds process trees on Linux through /proc.
//
// A process is identified by its PID and its start time (field 22 of
// /proc/PID/stat), because PIDs are recycled: a PID alone never proves that
// the process we started is still the one running. Descendants are found by
// walking parent links in one snapshot of /proc, which also sees processes
// that called setsid or double-forked, provided the caller is a child
// subreaper (SetSubreaper) so that orphans are reparented to it instead of to
// PID 1.
package proctree

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Stat is the part of /proc/PID/stat this package needs.
type Stat struct {
	PID       int
	PPID      int
	PGID      int
	SID       int
	State     byte   // R, S, D, Z, T, X, …
	StartTime uint64 // clock ticks since boot
}

// Dead reports whether the process has exited and only its zombie remains.
func (s Stat) Dead() bool { return s.State == 'Z' || s.State == 'X' }

// ReadStat parses /proc/PID/stat. The command name may contain spaces and
// parentheses, so the fields are counted from the last ')'.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return parseStat(pid, b)
}

func parseStat(pid int, b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return Stat{}, fmt.Errorf("proctree: malformed stat for pid %d", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("proctree: short stat for pid %d", pid)
	}
	s := Stat{PID: pid, State: f[0][0]}
	var errs [4]error
	s.PPID, errs[0] = strconv.Atoi(f[1])
	s.PGID, errs[1] = strconv.Atoi(f[2])
	s.SID, errs[2] = strconv.Atoi(f[3])
	s.StartTime, errs[3] = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return Stat{}, fmt.Errorf("proctree: stat for pid %d: %w", pid, err)
	}
	return s, nil
}

// StartTime returns the start time of pid in clock ticks since boot.
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

// BootID returns the kernel's random boot id, which changes on every boot.
func BootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Snapshot reads the stat of every process in /proc. Processes that vanish
// while it reads are skipped.
func Snapshot() ([]Stat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make([]Stat, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		s, err := ReadStat(pid)
		if err != nil {
			continue
		}
		out = append(out, s)
	}
	return out, nil
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

// SetSubreaper makes the calling process a child subreaper: orphaned
// descendants are reparented to it rather than to PID 1, so they stay
// findable through Descendants and can be killed.
func SetSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// SignalGroup sends sig to the process group pgid. A group that no longer
// exists is not an error.
func SignalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("proctree: refusing to signal process group %d", pgid)
	}
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
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

// hasChildren reports whether the calling process has any child, live or
// zombie, without reaping it.
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return !errors.Is(err, unix.ECHILD)
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
