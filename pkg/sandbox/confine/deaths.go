package confine

import "syscall"

// A resource limit a descendant of the command hits is reported even when
// the command exits 0, where the kernel lets anyone see it. Without
// CAP_SYS_PACCT (process accounting, acct_linux.go in package sandbox) only
// a process that waits for another learns how it died, and two processes
// wait for more than their own children: the PID namespace's init, which
// reaps every orphan of the run (this helper, or the runtime policy guard
// when one traces the run), and a ptrace tracer, which is told of every
// traced process's death before its parent is (the guard). Each keeps
// Deaths: the deaths by a signal a limit sends, with the CPU time of each
// (wait4's rusage), so that the runner can tell a CPU limit's SIGKILL from
// another.

// Death counts the processes that died of one signal a limit sends.
type Death struct {
	Signal int `json:"signal"`
	Count  int `json:"count"`
	// CPUMillis is the most CPU time (user and system) any of them used.
	CPUMillis int64 `json:"cpu_ms"`
}

// Deaths is at most one Death per signal.
type Deaths []Death

// Note records a death with wait status ws after cpuMillis of CPU time,
// when it is one a limit could have caused: SIGXCPU (the CPU soft limit),
// SIGXFSZ (the file size limit), SIGKILL (the CPU hard limit, the OOM
// killer, or anything else: the runner decides by the CPU time).
func (d *Deaths) Note(ws syscall.WaitStatus, cpuMillis int64) {
	if !ws.Signaled() {
		return
	}
	sig := ws.Signal()
	if sig != syscall.SIGXCPU && sig != syscall.SIGXFSZ && sig != syscall.SIGKILL {
		return
	}
	ms := cpuMillis
	for i := range *d {
		if x := &(*d)[i]; x.Signal == int(sig) {
			x.Count++
			x.CPUMillis = max(x.CPUMillis, ms)
			return
		}
	}
	*d = append(*d, Death{Signal: int(sig), Count: 1, CPUMillis: ms})
}

// CPUMillis is the user and system time of a wait4 rusage.
func CPUMillis(ru *syscall.Rusage) int64 {
	return (ru.Utime.Nano() + ru.Stime.Nano()) / 1e6
}
