package testkit

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// NextPIDKnob is Linux's next-pid knob, which only root may set (elsewhere
// it does not exist, and StrangerAt skips).
const NextPIDKnob = "/proc/sys/kernel/ns_last_pid"

// StrangerAt starts a process that leads a session of its own with pid
// exactly pid, through NextPIDKnob: a test's stand-in for whoever gets a
// recycled pid. Other processes of a busy machine take pids too, so it
// tries until it gets it, and skips the test when it never does or the
// knob cannot be set. The caller waits for and kills what it returns.
func StrangerAt(t testing.TB, pid int) *exec.Cmd {
	t.Helper()
	for range 200 {
		if err := os.WriteFile(NextPIDKnob, []byte(strconv.Itoa(pid-1)), 0o644); err != nil {
			t.Skipf("cannot set %s: %v", NextPIDKnob, err)
		}
		c := exec.Command("sleep", "7811")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if c.Process.Pid == pid {
			return c
		}
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	t.Skipf("pid %d was never handed out again", pid)
	return nil
}
