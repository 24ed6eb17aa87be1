package proctree

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// loneThreadArg makes the test binary a process whose main thread exits
// while its other threads run on, as a SIGKILLed process's may for a
// moment: its main thread shows a zombie, yet the process holds its
// descriptors (and the locks on them) until its last thread is gone.
const loneThreadArg = "proctree-test-lone-thread"

func init() {
	if len(os.Args) > 1 && os.Args[1] == loneThreadArg {
		// Keep the main goroutine on the main thread, which runLoneThread ends.
		runtime.LockOSThread()
	}
}

// runLoneThread reports ready and ends the main thread alone (exit, not
// exit_group); the runtime's other threads keep the process until it is
// killed.
func runLoneThread() {
	os.Stdout.WriteString("ready\n")
	unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0)
}

// TestWaitMainThreadZombie: a process whose main thread is a zombie while
// another thread runs is not Alive, but present, and Wait does not take it
// for gone until its last thread is.
func TestWaitMainThreadZombie(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, loneThreadArg)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(20 * time.Second)
	var s Stat
	for {
		if s, err = ReadStat(pid); err != nil {
			t.Fatal(err)
		}
		if s.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the main thread did not end: %+v", s)
		}
		time.Sleep(20 * time.Millisecond) // a thread's exit has no event to wait on
	}
	id := ID{PID: pid, Start: s.StartTime}
	if id.Alive() || !Present(pid, s.StartTime) {
		t.Fatalf("alive %v, present %v", id.Alive(), Present(pid, s.StartTime))
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Wait(done, id); err == nil {
		t.Fatal("Wait took a process whose other threads run for gone")
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Wait(ctx, id); err != nil {
		t.Fatalf("Wait after the kill: %v", err)
	}
}
