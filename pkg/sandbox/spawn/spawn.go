// Package spawn starts a sandboxed run's helper (package confine's side)
// before the run is prepared, so that the helper's start (the clone that
// builds its namespaces, its exec, its Go runtime's start: about 1.7 ms of
// a sandboxed call on a quiet machine, and the longest step of it) runs
// beside the caller's own start and the run's preparation, where it came
// after both. The helper waits for its spec on a socket only the caller
// holds, with an empty environment, /dev/null for its streams and / for its
// directory, and does nothing before the spec comes: the target's argv,
// environment, directory and streams come with it (confine.ReadEarlySpec).
// One that gets none (the call was refused, or its sandbox was prepared
// otherwise) reads end of file and exits. It dies with the caller (a
// parent-death signal), and everything in its namespaces with it: it is
// PID 1 there.
//
// Package sandbox hands a prepared run to such a helper
// (sandbox.Prepared.Adopt). This package is small (the standard library's
// core and golang.org/x/sys/unix) so that agentsh can start the helper
// while its other packages are still being initialised, beside the guard's
// watchdog (package early).
package spawn

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Program is the name of the helper's own small program. When it is
// installed beside the calling executable it is run instead of the caller
// itself: it links only package confine, so it starts faster than the
// full programs, and the helper's start-up is much of a sandboxed call's
// overhead.
const Program = "agentplane-sandbox"

// HelperPath returns the helper program beside self when there is one,
// else self (which must route confine.Command to confine.Main), and, when
// the helper program is a symbolic link, the file it leads to ("" else):
// its directory is to be protected as the programs' (a development build
// linked into the installed programs' directory).
func HelperPath(self string) (string, string) {
	p := filepath.Join(filepath.Dir(self), Program)
	st, err := os.Lstat(p)
	target := ""
	if err == nil && st.Mode()&os.ModeSymlink != 0 {
		if target, err = filepath.EvalSymlinks(p); err == nil {
			st, err = os.Stat(target)
		}
	}
	if err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p, target
	}
	return self, ""
}

// A Helper is a run's helper started ahead of the run (New, Start).
type Helper struct {
	path    string
	program string
	attr    *syscall.SysProcAttr // its namespaces, as Attr made them
	started chan struct{}        // closed once Start is over
	proc    *os.Process          // nil when it failed
	ours    *os.File             // this process's end of the spec's socket
	slack   int                  // the target's timer slack (TimerSlack)

	mu    sync.Mutex
	taken bool // by Take
	ended bool // by Discard
}

// Path is the helper's executable, as HelperPath chose it.
func (h *Helper) Path() string { return h.path }

// Started waits for Start and reports whether the helper runs (a guard
// without a cgroup starts none).
func (h *Helper) Started() bool {
	<-h.started
	return h.proc != nil
}

// TimerSlack is the timer slack, in nanoseconds, the helper must give
// its target (confine.Spec.TimerSlack): the caller's, where the helper
// started with a coarser one; 0 when it kept the caller's.
func (h *Helper) TimerSlack() int {
	<-h.started
	return h.slack
}

// Take waits for Start and hands over the started helper and this
// process's end of its spec's socket, once (nil after that, or when it did
// not start): the caller sends the spec there and reads the end report.
func (h *Helper) Take() (*os.Process, *os.File) {
	<-h.started
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil || h.taken || h.ended {
		return nil, nil
	}
	h.taken = true
	return h.proc, h.ours
}

// Discard ends a helper that no run took: it reads end of file on its
// spec's socket and is killed, and reaped in the background. Nil, or a
// taken one, is left alone; it may be called more than once.
func (h *Helper) Discard() {
	if h == nil {
		return
	}
	<-h.started
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil || h.taken || h.ended {
		return
	}
	h.ended = true
	end(h.proc, h.ours)
}

// Abandon ends a helper taken (Take) whose run could not be started in
// it, as Discard ends one no run took.
func Abandon(proc *os.Process, ours *os.File) { end(proc, ours) }

func end(proc *os.Process, ours *os.File) {
	ours.Close()
	_ = proc.Kill()
	go func() { _, _ = proc.Wait() }()
}

// Command is the hidden first argument that marks a re-exec of a program
// as the sandbox helper: confine.Command (confine.TestSpawnSpecFD).
const Command = "__sandbox-exec"

// SpecFD is where the helper finds its spec, there being no control
// socket: confine.SpecFD(false), the first extra file. Not imported from
// there: agentsh starts the helper from package early, which must be
// initialised before confine's dependencies are (confine.TestSpawnSpecFD).
const SpecFD = 3
