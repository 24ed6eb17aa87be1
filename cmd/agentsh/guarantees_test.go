package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/internal/testkit"
)

// agentshCmd runs this test binary as agentsh.
func agentshCmd(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	return cmd, &out
}

// TestBoundedMemory writes 1 GiB through agentsh and checks that capture
// stayed bounded: peak RSS well under the output size, and the counts exact.
func TestBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1 GiB")
	}
	cmd, out := agentshCmd(t, "-c", "head -c 1073741824 /dev/zero")
	if err := cmd.Run(); err != nil {
		t.Fatalf("agentsh: %v\n%s", err, out)
	}
	res := out.String()
	if got := gjson.Get(res, "stdout_bytes").Int(); got != 1<<30 {
		t.Fatalf("stdout_bytes = %d, want %d", got, 1<<30)
	}
	if !gjson.Get(res, "stdout_truncated").Bool() {
		t.Fatal("1 GiB of output not reported as truncated")
	}
	if n := len(gjson.Get(res, "stdout").String()); n > 40000 {
		t.Fatalf("captured %d bytes, want at most ~30000", n)
	}
	rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux
	t.Logf("peak RSS %d KiB", rss)
	if raceEnabled {
		t.Skipf("RSS bound not checked under the race detector (peak %d KiB)", rss)
	}
	// About 15 MiB on a quiet machine; up to 35 MiB was seen with the
	// package's other tests running on two busy cores (more threads, and
	// the runtime's and libc's per-thread memory). Output held in memory
	// would be the whole GiB: the bound is far below that.
	if rss > 64*1024 {
		t.Fatalf("peak RSS %d KiB, want under 64 MiB", rss)
	}
}

// TestCancelSIGTERM: SIGTERM to agentsh stops the tree and still prints
// the result, exiting 128+15.
func TestCancelSIGTERM(t *testing.T) {
	dir := t.TempDir()
	flag := filepath.Join(dir, "started")
	cmd, out := agentshCmd(t, "-c", "echo begun; touch "+flag+"; sleep 6041")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(flag); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("command never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 143 {
		t.Fatalf("exit: %v, want status 143\n%s", err, out)
	}
	res := out.String()
	if s := gjson.Get(res, "status").String(); s != "cancelled" {
		t.Fatalf("status %q, want cancelled\n%s", s, res)
	}
	if s := gjson.Get(res, "stdout").String(); s != "begun\n" {
		t.Fatalf("stdout %q", s)
	}
	if left := testkit.LiveProcesses("sleep 6041"); len(left) > 0 {
		t.Fatalf("processes outlived the call: %v", left)
	}
}

// TestAuditConcurrent: 20 concurrent agentsh calls on one environment
// leave exactly 20 parseable audit lines, one per call.
func TestAuditConcurrent(t *testing.T) {
	dir := t.TempDir()
	const n = 20
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			cmd, out := agentshCmd(t, "--state-dir", dir, "--description", "call "+strconv.Itoa(i), "-c", "echo "+strconv.Itoa(i))
			if err := cmd.Run(); err != nil {
				errs <- fmt.Errorf("call %d: %v: %s", i, err, out)
				return
			}
			errs <- nil
		}(i)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d audit lines, want %d:\n%s", len(lines), n, data)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		if !gjson.Valid(l) {
			t.Fatalf("unparsable audit line %q", l)
		}
		r := gjson.Parse(l)
		if r.Get("program").String() != "agentsh" || r.Get("status").String() != "completed" || r.Get("exit_code").Int() != 0 {
			t.Fatalf("record %s", l)
		}
		if r.Get("stdout").Exists() {
			t.Fatalf("the audit log must not hold output: %s", l)
		}
		seen[r.Get("description").String()] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct calls recorded, want %d", len(seen), n)
	}
}

// TestPrivateHome: the tests run with a HOME and an XDG state directory of
// their own (TestMain sets them up), so an agentsh call that names no
// state directory writes its audit record there, not in the user's.
func TestPrivateHome(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Skip("no user entry:", err)
	}
	home, stateHome := os.Getenv("HOME"), os.Getenv("XDG_STATE_HOME")
	for _, d := range []string{home, stateHome} {
		if d == "" || d == u.HomeDir || strings.HasPrefix(d, u.HomeDir+"/") {
			t.Fatalf("HOME=%q XDG_STATE_HOME=%q: not private to the tests (the user's home is %s)", home, stateHome, u.HomeDir)
		}
	}
	mark := "private-home-" + strconv.Itoa(os.Getpid())
	cmd, out := agentshCmd(t, "-c", "echo "+mark)
	if err := cmd.Run(); err != nil {
		t.Fatalf("agentsh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(stateHome, "agentplane", "audit.jsonl"))
	if err != nil || !strings.Contains(string(b), mark) {
		t.Fatalf("the call's audit record is not in the private state directory: %v\n%s", err, b)
	}
}
