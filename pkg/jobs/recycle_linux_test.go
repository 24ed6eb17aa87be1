package jobs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/proctree"
)

// TestGroupKillSparesRecycledPID: the supervisor kills the job's process
// group only while the job's main process is an unreaped zombie, whose id
// no other process can get. The supervisor is frozen right after the reap
// (supervisor.reaped); a stranger is then given the main process's very
// pid as the leader of a session of its own (the kernel's next-pid knob),
// and the supervisor, thawed, must leave it alone, whether the job ended
// by itself or was terminated by its timeout.
func TestGroupKillSparesRecycledPID(t *testing.T) {
	const knob = "/proc/sys/kernel/ns_last_pid"
	if os.Geteuid() != 0 {
		t.Skip("needs root to set " + knob)
	}
	if _, err := os.Stat(knob); err != nil {
		t.Skip("no " + knob)
	}
	for _, tc := range []struct {
		name    string
		shell   string
		timeout time.Duration
	}{
		{"exited", `echo $$ > "$PIDFILE"; exit 3`, 0},
		{"timeout", `echo $$ > "$PIDFILE"; exec sleep 300`, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(t)
			t.Setenv(faultpoint.Env, "supervisor.reaped=stop")
			pidfile := filepath.Join(t.TempDir(), "pid")
			s := start(t, st, Spec{Shell: tc.shell, Timeout: tc.timeout, KillGrace: time.Second,
				Env: append(os.Environ(), "PIDFILE="+pidfile)})
			sv, svStart := svOf(t, st, s)
			t.Cleanup(func() { _ = syscall.Kill(sv, syscall.SIGKILL) })
			deadline := time.Now().Add(60 * time.Second)
			for {
				st, err := proctree.ReadStat(sv)
				if err == nil && st.StartTime == svStart && st.State == 'T' {
					break
				}
				if err != nil || time.Now().After(deadline) {
					t.Fatalf("the supervisor never stopped at supervisor.reaped (%v)", err)
				}
				time.Sleep(5 * time.Millisecond) // polling another process's state
			}
			b, err := os.ReadFile(pidfile)
			if err != nil {
				t.Fatal(err)
			}
			leader, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("pid file: %q", b)
			}
			stranger := strangerAt(t, knob, leader)
			strangerExited := make(chan struct{})
			go func() { _ = stranger.Wait(); close(strangerExited) }()
			t.Cleanup(func() { _ = stranger.Process.Kill(); <-strangerExited })
			if err := syscall.Kill(sv, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			got := waitFor(t, st, ForExit, s.Handle)
			if !got.Ended() {
				t.Fatalf("status %+v", got)
			}
			select {
			case <-strangerExited:
				t.Fatalf("the supervisor killed process %d, which got its job's pid after the reap", leader)
			default:
			}
			if err := syscall.Kill(leader, 0); err != nil {
				t.Fatalf("the stranger with pid %d is gone: %v", leader, err)
			}
		})
	}
}

// strangerAt starts a process that leads a session of its own with pid
// exactly pid, through the kernel's next-pid knob; other processes of a
// busy machine take pids too, so it tries until it gets it.
func strangerAt(t *testing.T, knob string, pid int) *exec.Cmd {
	t.Helper()
	for range 200 {
		if err := os.WriteFile(knob, []byte(strconv.Itoa(pid-1)), 0o644); err != nil {
			t.Skipf("cannot set %s: %v", knob, err)
		}
		c := exec.Command("sleep", "7301")
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
