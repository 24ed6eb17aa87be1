package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/internal/testkit"
	"github.com/agentplane/agentplane/pkg/proctree"
)

// runAgentjob runs this test binary as agentjob on the state directory dir
// and returns its stdout and exit status.
func runAgentjob(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	cmd := agentjobCmd(dir, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("agentjob %v: %v", args, err)
	}
	return out.String(), code
}

func agentjobCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"--state-dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "AGENTJOB_TEST_MAIN=1")
	cmd.Stderr = os.Stderr
	return cmd
}

// TestConcurrentStartStatus: 20 concurrent start and status processes on
// one environment lose no job, mix up no logs, and leave every state file
// parseable with a gap-free event log.
func TestConcurrentStartStatus(t *testing.T) {
	dir := t.TempDir()
	const n = 20
	handles := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			out, code := runAgentjob(t, dir, "start", "--", "sh", "-c", fmt.Sprintf("echo job-%d", i))
			h := gjson.Get(out, "handle").String()
			if code != 0 || !strings.HasPrefix(h, "job_") {
				errs <- fmt.Errorf("start %d: exit %d: %s", i, code, out)
				return
			}
			handles[i] = h
			out, code = runAgentjob(t, dir, "status", h)
			if code != 0 || gjson.Get(out, "handle").String() != h {
				errs <- fmt.Errorf("status %d: exit %d: %s", i, code, out)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	seen := map[string]bool{}
	for _, h := range handles {
		if seen[h] {
			t.Fatalf("handle %s given twice", h)
		}
		seen[h] = true
	}
	out, code := runAgentjob(t, dir, append([]string{"wait", "--timeout", "120s"}, handles...)...)
	if code != 0 {
		// What a supervisor that died said about it, if anything.
		logs, _ := filepath.Glob(filepath.Join(dir, "jobs", "*", "supervisor.log"))
		for _, l := range logs {
			if b, _ := os.ReadFile(l); len(b) > 0 {
				t.Logf("%s:\n%s", l, b)
			}
		}
		t.Fatalf("wait: exit %d: %s", code, out)
	}
	for i, h := range handles {
		out, _ := runAgentjob(t, dir, "logs", h, "--stream", "stdout")
		if got, want := gjson.Get(out, "data").String(), fmt.Sprintf("job-%d\n", i); got != want {
			t.Errorf("job %d logged %q, want %q", i, got, want)
		}
	}
	out, _ = runAgentjob(t, dir, "list")
	if got := gjson.Get(out, "jobs.#").Int(); got != n {
		t.Fatalf("list has %d jobs, want %d: %s", got, n, out)
	}
	checkStateParses(t, dir)
	out, _ = runAgentjob(t, dir, "events")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	started := 0
	for i, l := range lines[:len(lines)-1] {
		if seq := gjson.Get(l, "seq").Int(); seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap or a duplicate", i+1, seq)
		}
		if gjson.Get(l, "type").String() == "started" {
			started++
		}
	}
	if started != n {
		t.Fatalf("%d started events, want %d", started, n)
	}
}

// checkStateParses fails if any JSON file of the state directory does not
// parse.
func checkStateParses(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
		} else if !json.Valid(b) {
			t.Errorf("%s does not parse: %q", path, b)
		}
		return nil
	})
}

// TestJobSurvivesCallerGroupKill: SIGKILL to the whole process group of
// the program that called agentjob start leaves the job running.
func TestJobSurvivesCallerGroupKill(t *testing.T) {
	dir := t.TempDir()
	caller := exec.Command("sh", "-c", `"$0" --state-dir "$1" start -- sleep 8601 && exec sleep 8602`, os.Args[0], dir)
	caller.Env = append(os.Environ(), "AGENTJOB_TEST_MAIN=1")
	caller.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := caller.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := caller.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the start result: %v", err)
	}
	h := gjson.Get(line, "handle").String()
	pid := int(gjson.Get(line, "pid").Int())
	if err := syscall.Kill(-caller.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = caller.Wait()
	if got := testkit.LiveProcesses("sleep 8602"); len(got) != 0 {
		t.Fatalf("the caller's group survived: %v", got)
	}
	out, _ := runAgentjob(t, dir, "status", h)
	if s := gjson.Get(out, "status").String(); s != "running" {
		t.Fatalf("after the caller's group was killed the job is %q: %s", s, out)
	}
	if st, err := proctree.ReadStat(pid); err != nil || st.Dead() {
		t.Fatalf("job process %d is gone: %v", pid, err)
	}
	out, _ = runAgentjob(t, dir, "stop", h)
	if s := gjson.Get(out, "status").String(); s != "stopped" {
		t.Fatalf("stop: %s", out)
	}
}

// TestSupervisorKilledAtAnyMoment SIGKILLs the supervisor of a flapping
// job (restarting constantly, so status.json and the logs are being
// rewritten) at several moments: afterwards every state file parses and
// the job is never reported as live.
func TestSupervisorKilledAtAnyMoment(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			dir := t.TempDir()
			out, code := runAgentjob(t, dir, "start", "--restart", "always", "-c", "echo tick; echo tock >&2")
			if code != 0 {
				t.Fatalf("start: %s", out)
			}
			h := gjson.Get(out, "handle").String()
			// The delay only picks the moment of the crash; nothing
			// waits on it for correctness.
			time.Sleep(delay)
			sv := testkit.LiveProcesses("__supervise " + dir + " ")
			for _, p := range sv {
				pid, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			deadline := time.Now().Add(30 * time.Second)
			for len(testkit.LiveProcesses("__supervise "+dir+" ")) > 0 {
				if time.Now().After(deadline) {
					t.Fatal("the supervisor survived SIGKILL")
				}
				time.Sleep(5 * time.Millisecond)
			}
			checkStateParses(t, dir)
			out, code = runAgentjob(t, dir, "status", h)
			if code != 0 {
				t.Fatalf("status: exit %d: %s", code, out)
			}
			switch s := gjson.Get(out, "status").String(); s {
			case "lost", "exited", "failed":
			default:
				t.Fatalf("after the supervisor's death the job is %q: %s", s, out)
			}
			out, _ = runAgentjob(t, dir, "stop", h)
			if gjson.Get(out, "orphan_pid").Exists() {
				t.Fatalf("stop left the orphan: %s", out)
			}
		})
	}
}

// TestWaitSignalled: SIGTERM or SIGINT to a wait ends the wait, not the
// job: the answer is the job's status as it is, wait_cancelled, and
// 128+N, never a bare internal error.
func TestWaitSignalled(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(proctree.SignalName(sig), func(t *testing.T) {
			dir := t.TempDir()
			out, code := runAgentjob(t, dir, "start", "--", "sleep", "7611")
			h := gjson.Get(out, "handle").String()
			if code != 0 || h == "" {
				t.Fatalf("start: exit %d: %s", code, out)
			}
			t.Cleanup(func() { runAgentjob(t, dir, "stop", h) })
			cmd := agentjobCmd(dir, "wait", h)
			var buf bytes.Buffer
			cmd.Stdout = &buf
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The wait is armed once it watches the job's directory:
			// its inotify descriptor shows in /proc (the signal handler
			// is installed before any command runs).
			deadline := time.Now().Add(60 * time.Second)
			for !hasInotify(cmd.Process.Pid) {
				if time.Now().After(deadline) {
					_ = cmd.Process.Kill()
					t.Fatal("the wait never watched the job")
				}
				time.Sleep(5 * time.Millisecond) // polling another process's descriptors
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
				t.Fatalf("wait: %v, want exit %d; %s", err, 128+int(sig), buf.String())
			}
			got := buf.String()
			if c := gjson.Get(got, "error.code").String(); c != "wait_cancelled" {
				t.Fatalf("error code %q: %s", c, got)
			}
			if s := gjson.Get(got, "status").String(); s != "running" {
				t.Fatalf("status %q: %s", s, got)
			}
			out, _ = runAgentjob(t, dir, "status", h)
			if s := gjson.Get(out, "status").String(); s != "running" {
				t.Fatalf("the job did not go on: %s", out)
			}
		})
	}
}

func hasInotify(pid int) bool {
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, fd := range fds {
		if l, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); l == "anon_inode:inotify" {
			return true
		}
	}
	return false
}
