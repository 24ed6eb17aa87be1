package faultpoint

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

func TestMain(m *testing.M) {
	if step := os.Getenv("FAULTPOINT_TEST_CHILD"); step != "" {
		for range 3 {
			Hit(step)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestHit runs a child that passes the step three times and checks how it
// ended for each arming.
func TestHit(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		arm    string
		killed bool
	}{
		{"", false},
		{"other", false},
		{"step", true},
		{"other,step=kill", true},
		{"step#3", true},
		{"step#4", false},
		{"step#x", false},
		{"step=late", false},
	} {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "FAULTPOINT_TEST_CHILD=step", Env+"="+tc.arm)
		err := cmd.Run()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if got := ws.Signaled() && ws.Signal() == syscall.SIGKILL; got != tc.killed {
			t.Errorf("%q: killed %v, want %v (%v)", tc.arm, got, tc.killed, err)
		}
	}
}

// TestStop freezes the child at the step; the test sees it stopped and
// lets it go on.
func TestStop(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "FAULTPOINT_TEST_CHILD=step", Env+"=step#2=stop")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		t.Fatalf("child not stopped: %v %v", ws, err)
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child after SIGCONT: %v", err)
	}
}

func TestLate(t *testing.T) {
	for arm, want := range map[string]bool{"": false, "step": false, "step=late": true, "other=late": false, "other,step=late": true} {
		t.Setenv(Env, arm)
		if got := Late("step"); got != want {
			t.Errorf("%q: Late %v, want %v", arm, got, want)
		}
	}
}
