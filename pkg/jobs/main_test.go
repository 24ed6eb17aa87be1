package jobs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

// superviseArg makes the test binary its own job supervisor: Start runs
// it as [test-binary __supervise STATE-DIR ID].
const superviseArg = "__supervise"

func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == superviseArg {
		d, err := state.Open(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// A fault test arms a step with faultpoint.Env.
		if err := RunSupervisor(context.Background(), d, os.Args[3], os.Getenv(SpecDigestEnv), SupervisorOptions{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) == 4 && os.Args[1] == startArg {
		// A caller that starts a job, reports it, then waits to be killed.
		d, err := state.Open(os.Args[2])
		if err != nil {
			os.Exit(1)
		}
		exe, _ := os.Executable()
		st := NewStore(d, []string{exe, superviseArg, d.Path()})
		s, err := st.Start(context.Background(), Spec{Shell: os.Args[3], Cwd: os.TempDir()})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(s.Handle)
		select {}
	}
	if len(os.Args) == 5 && os.Args[1] == callArg {
		os.Exit(call(os.Args[2], os.Args[3], os.Args[4]))
	}
	os.Exit(m.Run())
}

// callArg makes the test binary a caller of one Store operation, for the
// fault tests that kill the caller at a step: [test-binary __call
// STATE-DIR start|stop|restart ARG]. It prints the JSON of the status, or
// of the error, and exits 0 or 1.
const callArg = "__call"

func call(dir, op, arg string) int {
	d, err := state.Open(dir)
	if err != nil {
		return 2
	}
	exe, _ := os.Executable()
	st := NewStore(d, []string{exe, superviseArg, d.Path()})
	ctx := context.Background()
	var s Status
	switch op {
	case "start":
		s, err = st.Start(ctx, Spec{Shell: arg, Cwd: os.TempDir()})
	case "stop":
		s, err = st.Stop(ctx, arg, syscall.SIGTERM, 2*time.Second)
	case "restart":
		s, err = st.Restart(ctx, arg)
	default:
		return 2
	}
	if err != nil {
		b, _ := json.Marshal(map[string]string{"code": code(err), "error": err.Error()})
		fmt.Println(string(b))
		return 1
	}
	b, _ := json.Marshal(s)
	fmt.Println(string(b))
	return 0
}

// startArg makes the test binary a caller of Start, for tests that kill
// the caller or run many callers at once.
const startArg = "__start"

func newStore(t testing.TB) *Store {
	t.Helper()
	d, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return NewStore(d, []string{exe, superviseArg, d.Path()})
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T, st *Store, spec Spec) Status {
	t.Helper()
	if spec.Cwd == "" {
		spec.Cwd = t.TempDir()
	}
	s, err := st.Start(ctxT(t, 30*time.Second), spec)
	if err != nil {
		t.Fatalf("start %+v: %v", spec, err)
	}
	t.Cleanup(func() { _, _ = st.Stop(context.Background(), s.Handle, syscall.SIGKILL, time.Second) })
	return s
}

func waitFor(t *testing.T, st *Store, what string, h string) Status {
	t.Helper()
	got, err := st.Wait(ctxT(t, 30*time.Second), []string{h}, what, false)
	if err != nil {
		t.Fatalf("wait %s: %v (%+v)", what, err, got)
	}
	return got[0]
}

func code(err error) string {
	var e *result.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func eventTypes(t *testing.T, st *Store, h string) []string {
	t.Helper()
	evs, err := st.Events(0, h)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// recordOf reads the job's status.json as the supervisor wrote it.
func recordOf(t *testing.T, st *Store, s Status) record {
	t.Helper()
	var rec record
	if err := state.ReadJSON(filepath.Join(st.jobDir(s.ID), statusFile), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// readyLine starts a job that prints a setsid'd grandchild's PID and then
// "ready", and waits until the log probe saw it.
func startTree(t *testing.T, st *Store) (Status, int) {
	t.Helper()
	s := start(t, st, Spec{
		Shell: "setsid sleep 300 & echo gc=$!; sleep 300 & echo ready; wait",
		Ready: Probe{Log: "^ready$"},
	})
	r := waitFor(t, st, ForReady, s.Handle)
	if r.Status != StatusReady || !r.Ready {
		t.Fatalf("not ready: %+v", r)
	}
	m, err := st.Grep(s.Handle, Stdout, regexp.MustCompile(`^gc=`), 0)
	if err != nil || len(m) != 1 {
		t.Fatalf("grep: %v %v", m, err)
	}
	gc, _ := strconv.Atoi(strings.TrimPrefix(m[0].Line, "gc="))
	if gc <= 0 {
		t.Fatalf("grandchild pid in %q", m[0].Line)
	}
	return r, gc
}

// svOf returns the job's supervisor process.
func svOf(t *testing.T, st *Store, s Status) (int, uint64) {
	rec := recordOf(t, st, s)
	return rec.SupervisorPID, rec.SupervisorStart
}

// descendantsOf lists live processes below pid, read from /proc.
func liveBelow(pid int) []proctree.Stat {
	snap, _ := proctree.Snapshot()
	var out []proctree.Stat
	for _, s := range proctree.Descendants(snap, pid) {
		if !s.Dead() {
			out = append(out, s)
		}
	}
	return out
}

// killSupervisor SIGKILLs the job's supervisor and returns once it is gone.
func killSupervisor(t *testing.T, st *Store, s Status) {
	t.Helper()
	pid, start := svOf(t, st, s)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if err := proctree.Wait(ctxT(t, 10*time.Second), proctree.ID{PID: pid, Start: start}); err != nil {
		t.Fatal(err)
	}
	// status.json must parse whatever moment the kill hit.
	var rec record
	if err := state.ReadJSON(filepath.Join(st.jobDir(s.ID), statusFile), &rec); err != nil {
		t.Fatalf("status.json after SIGKILL: %v", err)
	}
}

// startInProcess runs a separate caller process that starts a job running
// shell; it returns the handle and the caller, still running, in its own
// process group.
func startInProcess(t *testing.T, st *Store, shell string) (string, *exec.Cmd) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, startArg, st.dir.Path(), shell)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "job_") {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		t.Fatalf("caller said %q, %v", line, err)
	}
	return strings.TrimSpace(line), cmd
}

// waitLogBytes waits, on the job's watch, until stream holds n bytes.
func waitLogBytes(t *testing.T, st *Store, h, stream string, n int64) {
	t.Helper()
	changed, err := st.Watch(ctxT(t, 30*time.Second), h)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if c, err := st.ReadLog(h, stream, 0, ReadOptions{Raw: true}); err == nil && c.NextOffset >= n {
			return
		}
		if _, ok := <-changed; !ok {
			t.Fatalf("%s never held %d bytes", stream, n)
		}
	}
}
