package proctree

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// macOS has no cgroups, so a Guard there is always in environ mode: the
// watchdog kills, once the guarded process is gone, every process whose
// environment (read through kern.procargs2) carries the guard's token and
// every member of a watched session. What that mode lets escape is in the
// Guard doc: a descendant that clears its environment and leaves the
// session.

func makeCgroup(string) (string, int, error) {
	return "", -1, errors.New("proctree: macOS has no cgroups")
}

func (g *Guard) dropCgroup() bool { return true }

// killFile is nil: there is no cgroup to kill.
func (g *Guard) killFile() *os.File { return nil }

// removeWhenEmpty has no cgroup to remove.
func removeWhenEmpty(string, time.Duration) bool { return true }

// startSweep does nothing: no cgroups, none to sweep.
func (g *Guard) startSweep() {}

// Apply does nothing on macOS: there is no cgroup to start the process in.
func (g *Guard) Apply(*syscall.SysProcAttr) {}

// Empty is false: in environ mode only a scan can tell.
func (g *Guard) Empty() bool { return false }

// EmptyBut is false, as Empty.
func (g *Guard) EmptyBut(int) bool { return false }

// Members is nil: there is no cgroup to list.
func (g *Guard) Members() []int { return nil }

// Kill does nothing and reports false, as in environ mode on Linux: the
// caller kills its descendants itself.
func (g *Guard) Kill(time.Duration) bool { return false }

// watchdogAttr is how the watchdog starts: in a process group of its own
// (macOS has no parent-death signal).
func watchdogAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func (g *Guard) watchdogArgvs(argv []string) [][]string {
	return [][]string{append([]string{argv[0]}, append(argv[:len(argv):len(argv)], g.mode, g.token, g.cgDir)...)}
}

func killGuardCgroup(string) bool { return false }

func leaveGuardCgroup(*exec.Cmd) (func(), error) { return func() {}, nil }

func openEvents(string) int { return -1 }

func killGuardCgroupOnly(string) bool { return false }

func dropLeftCgroup(string) {}
