package proctree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// TestGuardCgroupSweep: the cgroups of guards whose owner is dead (the
// guarded process and its watchdog both SIGKILLed) are removed by the
// sweep, a member left in one killed first; a live owner's cgroup, empty
// as it is before its command starts, is kept, and so is a directory
// whose name names no owner.
func TestGuardCgroupSweep(t *testing.T) {
	g, err := StartGuard([]string{"/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	if g.Mode() != GuardCgroup {
		t.Skip("no writable cgroup v2 with cgroup.kill here")
	}
	parent := filepath.Dir(g.cgDir)

	// A dead owner: a child that has exited and been reaped.
	dead := exec.Command("true")
	if err := dead.Start(); err != nil {
		t.Fatal(err)
	}
	deadStart, err := StartTime(dead.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	_ = dead.Wait()
	if Alive(dead.Process.Pid, deadStart) {
		t.Skip("the dead owner's pid was recycled at once")
	}
	owner := func(pid int, start uint64, tok string) string {
		return filepath.Join(parent, cgroupPrefix+strconv.Itoa(pid)+"."+strconv.FormatUint(start, 10)+"."+tok)
	}
	selfStart, err := StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	emptyDead := owner(dead.Process.Pid, deadStart, "sweeptest1")
	busyDead := owner(dead.Process.Pid, deadStart, "sweeptest2")
	live := owner(os.Getpid(), selfStart, "sweeptest3")
	noOwner := filepath.Join(parent, cgroupPrefix+"sweeptest4")
	for _, d := range []string{emptyDead, busyDead, live, noOwner} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		defer syscall.Rmdir(d)
	}
	// Jobs' tree cgroups, named after their dead maker as pkg/jobs names
	// them: the tree outlives its maker on purpose (a lost job, until
	// stop), and is never killed by the sweep; an empty one goes.
	deadMaker := strconv.Itoa(dead.Process.Pid) + "." + strconv.FormatUint(deadStart, 10)
	tree, err := MakeTreeCgroup("job-sweeptest5-" + deadMaker)
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Remove()
	busyTree, err := MakeTreeCgroup("job-sweep-test-6-" + deadMaker)
	if err != nil {
		t.Fatal(err)
	}
	defer busyTree.Remove()
	if pid, _, ok := guardCgroupOwner(filepath.Base(tree.Dir)); ok {
		t.Errorf("the tree cgroup %s names a guard's owner (%d): the sweep would kill a lost job once its maker is dead", filepath.Base(tree.Dir), pid)
	}
	lost := exec.Command("sleep", "60")
	lost.SysProcAttr = &syscall.SysProcAttr{}
	busyTree.Apply(lost.SysProcAttr)
	if err := lost.Start(); err != nil {
		t.Fatal(err)
	}
	lostWaited := make(chan error, 1)
	go func() { lostWaited <- lost.Wait() }()
	defer func() {
		_ = lost.Process.Kill()
		<-lostWaited
	}()
	// A member left behind in the dead owner's cgroup.
	fd, err := syscall.Open(busyDead, unix.O_PATH|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	left := exec.Command("sleep", "60")
	left.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	err = left.Start()
	syscall.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- left.Wait() }()
	defer left.Process.Kill()

	sweepGuardCgroups(parent)

	for _, d := range []string{emptyDead, busyDead, tree.Dir} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s of a dead owner was not swept", filepath.Base(d))
		}
	}
	select {
	case <-lostWaited:
		t.Error("the sweep killed a lost job's process in its tree cgroup")
	default:
	}
	for _, d := range []string{live, noOwner, g.cgDir, busyTree.Dir} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was swept: %v", filepath.Base(d), err)
		}
	}
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Error("the member left in a dead owner's cgroup is still running")
	}
}

// TestGuardCgroupOwner: guard cgroup names parse into their owner, and
// nothing else does.
func TestGuardCgroupOwner(t *testing.T) {
	name := guardCgroupName("0123abcd")
	pid, start, ok := guardCgroupOwner(name)
	if want, _ := StartTime(os.Getpid()); !ok || pid != os.Getpid() || start != want {
		t.Errorf("guardCgroupOwner(%q) = %d, %d, %v", name, pid, start, ok)
	}
	for _, bad := range []string{"agentplane-guard-0123abcd", "agentplane-guard-1.2.", "agentplane-guard-x.2.t", "agentplane-guard--1.2.t", "agentplane-1.2.t", "agentplane-guard-1.2.t.u"} {
		if _, _, ok := guardCgroupOwner(bad); ok {
			t.Errorf("guardCgroupOwner(%q) ok", bad)
		}
	}
	if pid, start, ok := treeCgroupOwner("agentplane-guard-job-7-x-12.34"); !ok || pid != 12 || start != 34 {
		t.Errorf("treeCgroupOwner = %d, %d, %v", pid, start, ok)
	}
	for _, bad := range []string{"agentplane-guard-job-12.34", "agentplane-guard-7-12.34", "agentplane-guard-job-7-12", "agentplane-guard-job-7-0.34", "agentplane-guard-job-7-12.x"} {
		if _, _, ok := treeCgroupOwner(bad); ok {
			t.Errorf("treeCgroupOwner(%q) ok", bad)
		}
	}
}

// TestGuardEmptyBut: a member that told its runner it is exiting (a
// sandbox helper in its namespaces' teardown) is accepted as the cgroup's
// one member, nothing else is; Release with it still there hands the
// cgroup's removal to the watchdog (sh, or the Go one), which removes it
// once the guarded process (the end of its pipe) and the member are gone.
func TestGuardEmptyBut(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, watchdog := range []string{"sh", "go"} {
		t.Run(watchdog, func(t *testing.T) {
			g, err := StartGuard([]string{self, "-test.run=^$"})
			if err != nil {
				t.Fatal(err)
			}
			if g.Mode() != GuardCgroup {
				g.Release()
				t.Skip("no writable cgroup v2 with cgroup.kill here")
			}
			start := func() *exec.Cmd {
				cmd := exec.Command("sleep", "60")
				cmd.SysProcAttr = &syscall.SysProcAttr{}
				g.Apply(cmd.SysProcAttr)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				return cmd
			}
			a := start()
			if !g.EmptyBut(a.Process.Pid) || g.EmptyBut(a.Process.Pid+1) || g.Empty() {
				t.Errorf("one member %d: EmptyBut it %v, another %v", a.Process.Pid, g.EmptyBut(a.Process.Pid), g.EmptyBut(a.Process.Pid+1))
			}
			b := start()
			if g.EmptyBut(a.Process.Pid) || g.EmptyBut(b.Process.Pid) {
				t.Error("EmptyBut one of two members")
			}
			_ = b.Process.Kill()
			_ = b.Wait()
			// A cgroup below it is something else that may hold processes.
			sub := filepath.Join(g.cgDir, "sub")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			if g.EmptyBut(a.Process.Pid) {
				t.Error("EmptyBut with a cgroup below")
			}
			if err := os.Remove(sub); err != nil {
				t.Fatal(err)
			}
			dir := g.cgDir
			wd, _ := Identify(g.wd.Pid)
			if watchdog == "go" {
				// The Go watchdog (no /bin/sh) is told the same.
				if err := unix.Rmdir(dir); err == nil {
					t.Fatal("rmdir of a populated cgroup")
				}
				done := make(chan int, 1)
				go func() { done <- RunWatchdog([]string{GuardCgroup, g.token, dir}, stringsReader("rmdir\n")) }()
				_ = a.Process.Kill()
				_ = a.Wait()
				if rc := <-done; rc != 0 {
					t.Errorf("watchdog exit %d", rc)
				}
				g.Release()
			} else {
				g.Release() // a is still there
				if _, err := os.Stat(dir); err != nil {
					t.Fatalf("the cgroup went with a member in it: %v", err)
				}
				_ = a.Process.Kill()
				_ = a.Wait()
				// This process's exit, as the watchdog sees it: the
				// end of its pipe.
				if g.w == nil {
					t.Fatal("Release closed the watchdog's pipe with a member left")
				}
				g.w.Close()
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				if _, err := os.Stat(dir); os.IsNotExist(err) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("cgroup %s still there after its member is gone", dir)
				}
				time.Sleep(10 * time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := Wait(ctx, wd); err != nil {
				t.Errorf("the watchdog did not exit: %v", err)
			}
		})
	}
}

func stringsReader(s string) *os.File {
	r, w, _ := os.Pipe()
	go func() { _, _ = w.WriteString(s); w.Close() }()
	return r
}
