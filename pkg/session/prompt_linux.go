package session

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// readsPrompt reports whether process pid is blocked in bash's own read
// of its next line from ctl: a read(2) of descriptor 0, which is ctl, of
// more than one byte (bash's line reader asks for a buffer; the read and
// mapfile builtins read a pipe one byte at a time, so a command that
// reads the control FIFO itself does not pass for the prompt). known is
// false when the kernel would not tell (then nothing can be checked).
func readsPrompt(pid int, ctl os.FileInfo) (ok, known bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/syscall")
	if err != nil {
		return false, false
	}
	f := strings.Fields(string(b))
	if len(f) < 4 || f[0] != strconv.Itoa(syscall.SYS_READ) || f[1] != "0x0" || f[3] == "0x1" {
		return false, true
	}
	st, err := os.Stat(dir + "/fd/0")
	return err == nil && os.SameFile(st, ctl), true
}

// othersHold reports whether a process below the server other than the
// trusted ones (the shell, the sandbox helper or policy guard it runs
// under) holds ctl open: such a process could read the line the server
// writes there before the shell does. It reads the children lists from
// the server and the trusted ones down (orphans come to the server, a
// subreaper, or to the sandbox helper), not every process of the machine.
func othersHold(ctl os.FileInfo, trusted ...int) bool {
	var roots []int
	for _, pid := range append([]int{os.Getpid()}, trusted...) {
		threads := 0 // the server's (and a guard's) threads each have a list
		if len(trusted) > 0 && pid == trusted[0] {
			threads = 1 // the shell has one thread
		}
		if kids, err := proctree.Children(pid, threads); err == nil {
			roots = append(roots, kids...)
		}
	}
	return len(holdersAmong(ctl, roots, trusted...)) > 0
}

func containsPID(pids []int, pid int) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}

// nofileLimit is process pid's descriptor limit (soft, hard), from
// /proc/PID/limits; zeros when unknown or unlimited.
func nofileLimit(pid int) [2]uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return [2]uint64{}
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Max open files"); ok {
			f := strings.Fields(rest)
			if len(f) < 2 {
				break
			}
			soft, err1 := strconv.ParseUint(f[0], 10, 64)
			hard, err2 := strconv.ParseUint(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				break
			}
			return [2]uint64{soft, hard}
		}
	}
	return [2]uint64{}
}

// holdersAmong returns those of the processes pids, and of what they
// started since, that hold ctl open, but the trusted ones. It reads only
// those processes (no scan of the machine): it runs before every call
// line, with the processes a previous call left running as pids.
func holdersAmong(ctl os.FileInfo, pids []int, trusted ...int) []proctree.ID {
	var out []proctree.ID
	seen := map[int]bool{}
	for len(pids) > 0 && len(seen) < 4096 {
		pid := pids[len(pids)-1]
		pids = pids[:len(pids)-1]
		if seen[pid] || containsPID(trusted, pid) {
			continue
		}
		seen[pid] = true
		if kids, err := proctree.Children(pid, 0); err == nil {
			pids = append(pids, kids...)
		}
		dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if st, err := os.Stat(dir + e.Name()); err == nil && os.SameFile(st, ctl) {
				if id, err := proctree.Identify(pid); err == nil {
					out = append(out, id)
				}
				break
			}
		}
	}
	return out
}
