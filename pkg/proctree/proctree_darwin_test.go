package proctree

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run only on macOS; on Linux they are compiled and linked
// (scripts/test-darwin) but not run.

func TestDarwinReadStatSelf(t *testing.T) {
	s, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	sid, _ := syscall.Getsid(0)
	if s.PID != os.Getpid() || s.PPID != os.Getppid() || s.PGID != syscall.Getpgrp() || s.SID != sid || s.Dead() || s.StartTime == 0 {
		t.Fatalf("stat of self: %+v", s)
	}
	again, err := ReadStat(os.Getpid())
	if err != nil || again.StartTime != s.StartTime {
		t.Fatalf("start time not stable: %d then %d (%v)", s.StartTime, again.StartTime, err)
	}
	if _, err := ReadStat(1 << 30); err == nil {
		t.Fatal("a pid that does not exist has a stat")
	}
	snap, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(snap, func(x Stat) bool { return x.PID == s.PID && x.StartTime == s.StartTime }) {
		t.Fatal("the snapshot does not hold this process")
	}
}

func TestDarwinBootID(t *testing.T) {
	a, err := BootID()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := BootID()
	if a != b || a == "" {
		t.Fatalf("boot ids %q %q", a, b)
	}
}

func TestDarwinArgvAndExecutable(t *testing.T) {
	argv, err := Argv(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(argv, os.Args) {
		t.Fatalf("argv %q, want %q", argv, os.Args)
	}
	fi, err := Executable(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	want, _ := os.Stat(exe)
	if !os.SameFile(fi, want) {
		t.Fatalf("executable %v is not %s", fi.Name(), exe)
	}
}

// TestDarwinWait: Wait returns when the process exits (a zombie counts),
// and ctx bounds it.
func TestDarwinWait(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	id, err := Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := Wait(ctx, id); err == nil {
		t.Fatal("Wait returned nil while the process runs")
	}
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), id) }()
	_ = cmd.Process.Kill()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not return after the process was killed")
	}
}

// startOrphan runs script in a new session through sh; the process it
// leaves behind prints its pid once it is in place, and sh exits, so that
// process is then an orphan, reparented to launchd.
func startOrphan(t *testing.T, script string) (session, orphan int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("orphan pid %q", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s, err := ReadStat(pid); err == nil && s.PPID == 1 {
			return cmd.Process.Pid, pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d was not reparented to launchd", pid)
		}
		time.Sleep(10 * time.Millisecond) // waiting for the kernel to reparent
	}
}

func gone(pid int) bool {
	s, err := ReadStat(pid)
	return err != nil || s.Dead()
}

func waitGone(t *testing.T, pid int) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // the kill is asynchronous
	}
	return true
}

// TestDarwinSessionHoldsOrphanThatLeftItsGroup: an orphan that moved to a
// group of its own, but stayed in the session, is killed by SignalGroup
// of the session leader's group, although launchd is its parent.
func TestDarwinSessionHoldsOrphanThatLeftItsGroup(t *testing.T) {
	sid, orphan := startOrphan(t, `perl -e 'setpgrp(0,0); $|=1; print "$$\n"; close STDOUT; sleep 600' &`)
	if s, _ := ReadStat(orphan); s.PGID == sid || s.SID != sid {
		t.Fatalf("orphan %+v should be in session %d but not its group", s, sid)
	}
	if err := SignalGroup(sid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitGone(t, orphan) {
		t.Fatal("the orphan that left its group survived the session kill")
	}
}

// TestDarwinSetsidOrphanEscapes is the documented limit: without a
// subreaper, an orphan in a session of its own is reached by nothing.
// If this starts failing, macOS gained a way to hold it and the README
// should say so.
func TestDarwinSetsidOrphanEscapes(t *testing.T) {
	sid, orphan := startOrphan(t, `perl -MPOSIX -e 'POSIX::setsid(); $|=1; print "$$\n"; close STDOUT; sleep 600' &`)
	_ = SignalGroup(sid, syscall.SIGKILL)
	if waitGone(t, orphan) {
		t.Fatal("the setsid orphan was killed: update the README's Platforms section")
	}
}

func TestDarwinCwdAndEnviron(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "600")
	cmd.Dir = dir
	cmd.Env = []string{"AGENTPLANE_TEST_MARK=here", "PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got, err := Cwd(cmd.Process.Pid); err != nil || got != dir {
		t.Fatalf("Cwd = %q, %v; want %q", got, err, dir)
	}
	env, err := Environ(cmd.Process.Pid)
	if err != nil || !slices.Contains(env, "AGENTPLANE_TEST_MARK=here") {
		t.Fatalf("Environ = %q, %v", env, err)
	}
}
