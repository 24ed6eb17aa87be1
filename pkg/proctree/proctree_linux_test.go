package proctree

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseStatCommWithParens(t *testing.T) {
	line := "4242 (we ird) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n"
	s, err := parseStat(4242, []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.PPID != 1 || s.PGID != 4242 || s.SID != 4242 || s.State != 'S' || s.StartTime != 987654 {
		t.Fatalf("parsed %+v", s)
	}
}

func TestParseStatMalformed(t *testing.T) {
	for _, in := range []string{"", "12 (x", "12 (x) S 1 2"} {
		if _, err := parseStat(12, []byte(in)); err == nil {
			t.Errorf("parseStat(%q) succeeded", in)
		}
	}
}

func TestBootID(t *testing.T) {
	id, err := BootID()
	if err != nil {
		t.Skip("no boot id:", err)
	}
	if len(id) < 32 {
		t.Fatalf("boot id %q", id)
	}
}

// TestDescendantsFindsSetsidGrandchild starts a shell whose child calls
// setsid and checks that the grandchild is found below the shell.
func TestDescendantsFindsSetsidGrandchild(t *testing.T) {
	cmd := exec.Command("sh", "-c", "setsid sleep 30 & echo $!; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = SignalGroup(cmd.Process.Pid, syscall.SIGKILL)
		_, _ = SignalDescendants(cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	want := strings.TrimSpace(string(buf[:n]))
	deadline := time.Now().Add(10 * time.Second)
	for {
		snap, err := Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range Descendants(snap, cmd.Process.Pid) {
			if want != "" && want == strconv.Itoa(d.PID) {
				if d.SID == cmd.Process.Pid {
					t.Fatalf("grandchild did not get its own session")
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("setsid grandchild %s not found below %d", want, cmd.Process.Pid)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc for a process that is being exec'd
	}
}

func TestCwdAndEnviron(t *testing.T) {
	dir := t.TempDir()
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
	// Start returns once the exec closed its close-on-exec pipe, which
	// the kernel does before it lays out the new image's environment: wait
	// for the layout rather than read a half-made process.
	env, err := Environ(cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); err == nil && !slices.Contains(env, "AGENTPLANE_TEST_MARK=here") && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		env, err = Environ(cmd.Process.Pid)
	}
	if err != nil || !slices.Contains(env, "AGENTPLANE_TEST_MARK=here") {
		t.Fatalf("Environ = %q, %v", env, err)
	}
}
