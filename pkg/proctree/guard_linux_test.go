package proctree

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestGuardCgroupLifecycle: the watchdog runs in a process group of its
// own (a killpg of the caller's group misses it) but not a session of its
// own; a command under the guard is a member of its cgroup, Empty tells a
// live member from none, and Release removes the cgroup and lets the
// watchdog exit.
func TestGuardCgroupLifecycle(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, err := StartGuard([]string{self, "-test.run=^$"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Mode() != GuardCgroup {
		g.Release()
		t.Skip("no writable cgroup v2 with cgroup.kill here")
	}
	wd, err := Identify(g.wd.Pid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadStat(wd.PID)
	if err != nil {
		t.Fatal(err)
	}
	if st.PGID != wd.PID || st.PGID == syscall.Getpgrp() {
		t.Errorf("watchdog %d is in process group %d (ours %d), want its own", wd.PID, st.PGID, syscall.Getpgrp())
	}
	if sid, _ := getsid(0); st.SID != sid {
		t.Errorf("watchdog's session %d, want ours (%d): a session of its own costs an autogroup", st.SID, sid)
	}

	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	g.Apply(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if m := g.Members(); len(m) != 1 || m[0] != cmd.Process.Pid {
		t.Errorf("members %v, want [%d]", m, cmd.Process.Pid)
	}
	if g.Empty() {
		t.Error("Empty with a live member")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !g.Empty() {
		t.Error("not Empty after the member was reaped")
	}
	dir := g.cgDir
	g.Release()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still there after Release: %v", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Wait(ctx, wd); err != nil {
		t.Errorf("the watchdog did not exit after Release: %v", err)
	}
}

func getsid(pid int) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// TestGuardWatchdogKilled: a watchdog killed before Release (by the
// command, or anyone) is noticed through its pipe, without a wait(2)
// blocking a thread, and the tree is killed at once; the dead watchdog is
// reaped, not left a zombie of a long-lived guarded process.
func TestGuardWatchdogKilled(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, err := StartGuard([]string{self, "-test.run=^$"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	if g.Mode() != GuardCgroup {
		t.Skip("no writable cgroup v2 with cgroup.kill here")
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	g.Apply(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	wd := g.wd.Pid
	if err := syscall.Kill(wd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the command outlived its killed watchdog")
	}
	if !g.Lost() {
		t.Error("Lost is false after the watchdog was killed")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(wd)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed watchdog %d was never reaped", wd)
		}
		time.Sleep(5 * time.Millisecond) // polling /proc for the reap
	}
}

// BenchmarkGuard is the guard's share of a one-shot call: the cgroup and
// the watchdog, a command started into the cgroup, the check that it left
// nothing, and Release.
func BenchmarkGuard(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		g, err := StartGuard([]string{self, "-test.run=^$"})
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		g.Apply(cmd.SysProcAttr)
		cmd.Env = g.Env(os.Environ())
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		if g.Mode() == GuardCgroup && !g.Empty() {
			b.Fatal("the cgroup is not empty after the command")
		}
		g.Release()
	}
}
