package jobs

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

func TestStartExitAndLogs(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Shell: "echo hello; echo oops >&2", Name: "greet", Description: "say hello"})
	if !strings.HasPrefix(s.Handle, "job_") || s.PID <= 0 || s.StartedAt == "" {
		t.Fatalf("start status %+v", s)
	}
	if s.Status != StatusRunning && !s.Ended() {
		t.Fatalf("start status %q", s.Status)
	}
	f := waitFor(t, st, ForExit, s.Handle)
	if f.Status != StatusExited || f.ExitCode == nil || *f.ExitCode != 0 || f.EndedAt == nil {
		t.Fatalf("final %+v", f)
	}
	if f.StdoutBytes != 6 || f.StderrBytes != 5 || f.Name != "greet" || f.Description != "say hello" || f.Command != "echo hello; echo oops >&2" {
		t.Fatalf("final %+v", f)
	}
	if _, err := time.Parse(time.RFC3339, *f.EndedAt); err != nil || !strings.HasSuffix(*f.EndedAt, "Z") || len(*f.EndedAt) != len("2026-11-29T18:00:00.000Z") {
		t.Fatalf("ended_at %q", *f.EndedAt)
	}
	c, err := st.ReadLog("greet", Stdout, 0, ReadOptions{MaxBytes: 0})
	if err != nil || string(c.Data) != "hello\n" || c.NextOffset != 6 || !c.EOF {
		t.Fatalf("stdout %+v %q, %v", c, c.Data, err)
	}
	c, _ = st.ReadLog(s.Handle, Stderr, 2, ReadOptions{MaxBytes: 2})
	if string(c.Data) != "ps" || c.Offset != 2 || c.NextOffset != 4 || c.EOF {
		t.Fatalf("stderr slice %+v %q", c, c.Data)
	}
	if got := eventTypes(t, st, s.Handle); strings.Join(got, ",") != "started,exited" {
		t.Fatalf("events %v", got)
	}
}

func TestFailedExitCode(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sh", "-c", "exit 3"}})
	f := waitFor(t, st, ForExit, s.Handle)
	if f.Status != StatusFailed || f.ExitCode == nil || *f.ExitCode != 3 || f.Signal != nil {
		t.Fatalf("final %+v", f)
	}
	if cmd, ok := f.Command.([]string); !ok || len(cmd) != 3 {
		t.Fatalf("command %#v", f.Command)
	}
}

func TestStartFailures(t *testing.T) {
	st := newStore(t)
	ctx := ctxT(t, 30*time.Second)
	cases := []struct {
		spec Spec
		code string
	}{
		{Spec{Argv: []string{"agentplane-no-such-program"}, Cwd: t.TempDir()}, result.CodeCommandNotFound},
		{Spec{Argv: []string{"/nonexistent/prog"}, Cwd: t.TempDir()}, result.CodeCommandNotFound},
		{Spec{Argv: []string{"true"}, Cwd: "/nonexistent/dir"}, result.CodeCwdNotFound},
		{Spec{Argv: []string{os.DevNull}, Cwd: t.TempDir()}, result.CodeCommandNotExecutable},
		{Spec{Cwd: t.TempDir()}, result.CodeInvalidRequest},
		{Spec{Argv: []string{"true"}, Ready: Probe{Log: "("}}, result.CodeInvalidRequest},
		{Spec{Argv: []string{"true"}, Restart: "sometimes"}, result.CodeInvalidRequest},
		{Spec{Argv: []string{"true"}, Name: "job_x"}, result.CodeInvalidRequest},
	}
	for _, c := range cases {
		_, err := st.Start(ctx, c.spec)
		if code(err) != c.code {
			t.Errorf("Start(%+v) = %v (code %q), want %s", c.spec, err, code(err), c.code)
		}
	}
	if l, _ := st.List(); len(l) != 0 {
		t.Fatalf("failed starts left jobs: %+v", l)
	}
}

func TestTimeout(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "60"}, Timeout: 300 * time.Millisecond, KillGrace: time.Second})
	f := waitFor(t, st, ForExit, s.Handle)
	if f.Status != StatusTimeout || f.Signal == nil || *f.Signal != "SIGTERM" {
		t.Fatalf("final %+v", f)
	}
	if rec := recordOf(t, st, f); proctree.Alive(rec.PID, rec.PIDStart) {
		t.Fatal("timed out job still alive")
	}
}

func TestConcurrentStartsAndStatus(t *testing.T) {
	st := newStore(t)
	const n = 20
	handles := make([]string, n)
	var wg sync.WaitGroup
	ctx := ctxT(t, 60*time.Second)
	for i := 0; i < n; i++ {
		wg.Go(func() {
			s, err := st.Start(ctx, Spec{Shell: "echo " + strconv.Itoa(i), Cwd: os.TempDir(), Name: "same"})
			if err != nil {
				t.Error(err)
				return
			}
			handles[i] = s.Handle
			if _, err := st.Status(s.Handle); err != nil {
				t.Error(err)
			}
			if _, err := st.List(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	got, err := st.Wait(ctx, handles, ForExit, false)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, s := range got {
		if s.Status != StatusExited || seen[s.Handle] {
			t.Fatalf("job %d: %+v", i, s)
		}
		seen[s.Handle] = true
		c, _ := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{MaxBytes: 0})
		if string(c.Data) != strconv.Itoa(i)+"\n" {
			t.Fatalf("job %d logged %q", i, c.Data)
		}
	}
	l, _ := st.List()
	if len(l) != n {
		t.Fatalf("list has %d jobs", len(l))
	}
	for i := 1; i < len(l); i++ {
		a, _ := strconv.Atoi(l[i-1].ID)
		b, _ := strconv.Atoi(l[i].ID)
		if a <= b {
			t.Fatal("list is not newest first")
		}
	}
	if s, err := st.Status("same"); err != nil || s.ID != l[0].ID {
		t.Fatalf("name resolves to %+v, newest is %s: %v", s, l[0].ID, err)
	}
}

func TestJobSurvivesCallerTreeKill(t *testing.T) {
	st := newStore(t)
	h, caller := startInProcess(t, st, "exec sleep 300")
	t.Cleanup(func() { _, _ = st.Stop(context.Background(), h, syscall.SIGKILL, time.Second) })
	if err := syscall.Kill(-caller.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = caller.Wait()
	s, err := st.Status(h)
	if err != nil || s.Status != StatusRunning {
		t.Fatalf("after the caller's group was killed: %+v, %v", s, err)
	}
	if f, err := st.Stop(ctxT(t, 30*time.Second), h, syscall.SIGTERM, time.Second); err != nil || f.Status != StatusStopped {
		t.Fatalf("stop %+v, %v", f, err)
	}
}

func TestConcurrentStartProcesses(t *testing.T) {
	st := newStore(t)
	const n = 20
	handles := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Go(func() {
			h, caller := startInProcess(t, st, "echo "+strconv.Itoa(i))
			_ = caller.Process.Kill()
			_ = caller.Wait()
			handles[i] = h
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	got, err := st.Wait(ctxT(t, 60*time.Second), handles, ForExit, false)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, s := range got {
		c, _ := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{MaxBytes: 0})
		if s.Status != StatusExited || seen[s.ID] || string(c.Data) != strconv.Itoa(i)+"\n" {
			t.Fatalf("job %d: %+v %q", i, s, c.Data)
		}
		seen[s.ID] = true
	}
	if l, _ := st.List(); len(l) != n {
		t.Fatalf("list has %d jobs, want %d", len(l), n)
	}
}

// TestSupervisorRunsTheLaunchersSpec: a spec file rewritten between the
// launcher's decision and the supervisor's start (by a command that can
// write a state directory it did not name) is refused, not run.
func TestSupervisorRunsTheLaunchersSpec(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"true"}})
	if _, err := st.Wait(ctxT(t, 30*time.Second), []string{s.Handle}, ForExit, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(st.jobDir(s.ID), specFile)
	decided, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec Spec
	if err := json.Unmarshal(decided, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Argv = []string{"sh", "-c", "echo rewritten"}
	if err := state.WriteJSONAtomic(path, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.launch(ctxT(t, 30*time.Second), s.ID, SpecDigest(decided)); code(err) != result.CodeStateCorrupt {
		t.Fatalf("a rewritten spec: %v, want state_corrupt", err)
	}
	c, _ := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{MaxBytes: 0})
	if strings.Contains(string(c.Data), "rewritten") {
		t.Fatalf("the rewritten spec ran: %q", c.Data)
	}
}

func TestSecondSupervisorRefused(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}})
	if err := st.launch(ctxT(t, 30*time.Second), s.ID, ""); code(err) != result.CodeJobRunning {
		t.Fatalf("second supervisor: %v", err)
	}
	if got, _ := st.Status(s.Handle); got.Status != StatusRunning || got.PID != s.PID {
		t.Fatalf("first run disturbed: %+v", got)
	}
}

// TestDevServer is the scenario of the issue: a real HTTP server started
// with an HTTP readiness probe, its log read, then stopped with nothing
// left listening.
func TestDevServer(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	// python3 may be a pyenv shim (a shell script); ask for the real one.
	if out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output(); err == nil {
		py = strings.TrimSpace(string(out))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	st := newStore(t)
	s := start(t, st, Spec{
		Argv:  []string{py, "-u", "-m", "http.server", port, "--bind", "127.0.0.1"},
		Name:  "web",
		Ready: Probe{HTTP: "http://127.0.0.1:" + port + "/", Timeout: 20 * time.Second},
	})
	if r := waitFor(t, st, ForReady, "web"); r.Status != StatusReady {
		t.Fatalf("not ready: %+v", r)
	}
	// The probe's own request shows in the server's log.
	m, err := st.Grep("web", Stderr, regexp.MustCompile(`"GET / HTTP`), 1)
	if err != nil || len(m) != 1 {
		t.Fatalf("log: %v %v", m, err)
	}
	f, err := st.Stop(ctxT(t, 30*time.Second), "web", syscall.SIGTERM, 2*time.Second)
	if err != nil || f.Status != StatusStopped {
		t.Fatalf("stop: %+v, %v", f, err)
	}
	if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
		c.Close()
		t.Fatalf("something still listens on %s after stop (job %+v)", port, s)
	}
}
