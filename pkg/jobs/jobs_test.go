package jobs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
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
		// A crash test may ask the supervisor to SIGKILL itself at a
		// chosen moment.
		die := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
		var h hooks
		switch os.Getenv(killAtEnv) {
		case "after_begin":
			h.afterBegin = die
		case "after_job_start":
			h.afterJobStart = die
		}
		if err := runSupervisor(context.Background(), d, os.Args[3], "", h); err != nil {
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
	os.Exit(m.Run())
}

// killAtEnv names the moment at which a test supervisor kills itself.
const killAtEnv = "JOBS_TEST_SUPERVISOR_KILL_AT"

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
	c, err := st.ReadLog("greet", Stdout, 0, 0)
	if err != nil || string(c.Data) != "hello\n" || c.NextOffset != 6 || !c.EOF {
		t.Fatalf("stdout %+v %q, %v", c, c.Data, err)
	}
	c, _ = st.ReadLog(s.Handle, Stderr, 2, 2)
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

func TestStopKillsTreeIncludingSetsidGrandchild(t *testing.T) {
	st := newStore(t)
	s, gc := startTree(t, st)
	gcStat, err := proctree.ReadStat(gc)
	if err != nil {
		t.Fatal(err)
	}
	svPID, _ := svOf(t, st, s)
	if below := liveBelow(svPID); len(below) < 3 {
		t.Fatalf("expected shell, sleep and setsid sleep below the supervisor, got %+v", below)
	}
	f, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, 2*time.Second)
	if err != nil || f.Status != StatusStopped {
		t.Fatalf("stop: %+v, %v", f, err)
	}
	if proctree.Alive(gc, gcStat.StartTime) {
		t.Fatal("setsid grandchild survived stop")
	}
	if rec := recordOf(t, st, f); proctree.Alive(rec.PID, rec.PIDStart) {
		t.Fatal("job process survived stop")
	}
	if below := liveBelow(svPID); len(below) != 0 {
		t.Fatalf("processes left: %+v", below)
	}
	again, err := st.Stop(ctxT(t, 10*time.Second), s.Handle, syscall.SIGTERM, time.Second)
	if err != nil || again.Status != StatusStopped {
		t.Fatalf("second stop: %+v, %v", again, err)
	}
	if got := eventTypes(t, st, s.Handle); strings.Join(got, ",") != "started,ready,stopped" {
		t.Fatalf("events %v", got)
	}
}

func TestExitKillsLeftoverDescendants(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Shell: "setsid sleep 300 & echo $!"})
	f := waitFor(t, st, ForExit, s.Handle)
	if f.Status != StatusExited {
		t.Fatalf("final %+v", f)
	}
	c, _ := st.ReadLog(s.Handle, Stdout, 0, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(c.Data)))
	if s, err := proctree.ReadStat(pid); err == nil && !s.Dead() && s.SID == pid {
		t.Fatalf("background process %d outlived its job", pid)
	}
}

// TestSupervisorKilled SIGKILLs the supervisor at several moments; the
// status must parse and must never claim the job runs.
func TestSupervisorKilled(t *testing.T) {
	st := newStore(t)

	t.Run("right after start", func(t *testing.T) {
		s := start(t, st, Spec{Argv: []string{"sleep", "300"}})
		killSupervisor(t, st, s)
		got, err := st.Status(s.Handle)
		if err != nil || got.Status != StatusLost || got.LostReason != LostSupervisorDied {
			t.Fatalf("status %+v, %v", got, err)
		}
		// The job itself lives on in its own group: an orphan that Stop
		// can still kill.
		if got.OrphanPID != s.PID {
			t.Fatalf("orphan_pid %d, want %d", got.OrphanPID, s.PID)
		}
		rec := recordOf(t, st, got)
		f, err := st.Stop(ctxT(t, 20*time.Second), s.Handle, syscall.SIGTERM, time.Second)
		if err != nil || f.Status != StatusLost || f.OrphanPID != 0 {
			t.Fatalf("stop orphan: %+v, %v", f, err)
		}
		if proctree.Alive(rec.PID, rec.PIDStart) {
			t.Fatal("orphan survived stop")
		}
	})

	t.Run("while ready", func(t *testing.T) {
		s, gc := startTree(t, st)
		gcStat, _ := proctree.ReadStat(gc)
		killSupervisor(t, st, s)
		got, _ := st.Status(s.Handle)
		if got.Status != StatusLost || got.Ready {
			t.Fatalf("status %+v", got)
		}
		rec := recordOf(t, st, got)
		// Kill the job ourselves: lost now with nothing left alive.
		_ = proctree.SignalGroup(rec.PID, syscall.SIGKILL)
		_ = syscall.Kill(gc, syscall.SIGKILL)
		_ = proctree.Wait(ctxT(t, 10*time.Second), proctree.ID{PID: rec.PID, Start: rec.PIDStart})
		_ = proctree.Wait(ctxT(t, 10*time.Second), proctree.ID{PID: gc, Start: gcStat.StartTime})
		got, _ = st.Status(s.Handle)
		if got.Status != StatusLost || got.LostReason != LostSupervisorDied || got.OrphanPID != 0 {
			t.Fatalf("status %+v", got)
		}
		n := 0
		for _, typ := range eventTypes(t, st, s.Handle) {
			if typ == StatusLost {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d lost events, want exactly 1", n)
		}
	})

	t.Run("after exit recorded", func(t *testing.T) {
		s := start(t, st, Spec{Argv: []string{"true"}})
		f := waitFor(t, st, ForExit, s.Handle)
		killSupervisor(t, st, s)
		got, _ := st.Status(s.Handle)
		if got.Status != StatusExited || f.Status != StatusExited {
			t.Fatalf("status %+v", got)
		}
	})

	t.Run("wait wakes when the supervisor dies", func(t *testing.T) {
		s := start(t, st, Spec{Argv: []string{"sleep", "300"}})
		done := make(chan Status, 1)
		ready := make(chan struct{})
		go func() {
			close(ready)
			got, _ := st.Wait(ctxT(t, 30*time.Second), []string{s.Handle}, ForExit, false)
			if len(got) == 1 {
				done <- got[0]
			}
			close(done)
		}()
		<-ready
		killSupervisor(t, st, s)
		if got := <-done; got.Status != StatusLost {
			t.Fatalf("wait returned %+v", got)
		}
	})
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

func TestHostRestarted(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}})
	real := st.bootID
	st.bootID = "another-boot"
	// Runs before start's cleanup, so that cleanup can stop the job.
	t.Cleanup(func() { st.bootID = real })
	got, _ := st.Status(s.Handle)
	if got.Status != StatusLost || got.LostReason != LostHostRestarted {
		t.Fatalf("status %+v", got)
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
		c, _ := st.ReadLog(s.Handle, Stdout, 0, 0)
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

func TestLogCapKeepsNewest(t *testing.T) {
	st := newStore(t)
	// seq 1 20000 writes 108894 bytes; the cap keeps the newest part.
	s := start(t, st, Spec{Argv: []string{"seq", "1", "20000"}, LogLimit: 10000})
	f := waitFor(t, st, ForExit, s.Handle)
	var full strings.Builder
	for i := 1; i <= 20000; i++ {
		full.WriteString(strconv.Itoa(i) + "\n")
	}
	want := full.String()
	if f.StdoutBytes != int64(len(want)) {
		t.Fatalf("stdout_bytes %d, want %d", f.StdoutBytes, len(want))
	}
	c, err := st.ReadLog(s.Handle, Stdout, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if c.DroppedBytes == 0 || c.Offset != c.DroppedBytes || c.NextOffset != int64(len(want)) || !c.EOF {
		t.Fatalf("chunk %+v", c)
	}
	if len(c.Data) > 10000 || string(c.Data) != want[c.Offset:] {
		t.Fatalf("kept %d bytes that are not the newest", len(c.Data))
	}
	c2, _ := st.ReadLog(s.Handle, Stdout, int64(len(want))-6, 100)
	if string(c2.Data) != "20000\n" || c2.DroppedBytes != 0 {
		t.Fatalf("read at the end: %+v %q", c2, c2.Data)
	}
	tail, _ := st.Tail(s.Handle, Stdout, 2, 0)
	if string(tail.Data) != "19999\n20000\n" || tail.Offset != int64(len(want))-12 {
		t.Fatalf("tail %+v %q", tail, tail.Data)
	}
}

func TestSinceLastCursor(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Shell: "echo one; echo two >&2"})
	waitFor(t, st, ForExit, s.Handle)
	c, err := st.ReadSince(s.Handle, Stdout, "default", 0)
	if err != nil || string(c.Data) != "one\n" {
		t.Fatalf("first read %q, %v", c.Data, err)
	}
	c, _ = st.ReadSince(s.Handle, Stdout, "default", 0)
	if len(c.Data) != 0 || c.Offset != 4 || !c.EOF {
		t.Fatalf("second read %+v %q", c, c.Data)
	}
	c, _ = st.ReadSince(s.Handle, Stderr, "default", 0)
	if string(c.Data) != "two\n" {
		t.Fatalf("stderr read %q", c.Data)
	}
	c, _ = st.ReadSince(s.Handle, Stdout, "other", 2)
	if string(c.Data) != "on" {
		t.Fatalf("other reader %q", c.Data)
	}
	c, _ = st.ReadSince(s.Handle, Stdout, "other", 0)
	if string(c.Data) != "e\n" {
		t.Fatalf("other reader continued %q", c.Data)
	}
	if _, err := st.ReadSince(s.Handle, Stdout, "../x", 0); code(err) != result.CodeInvalidRequest {
		t.Fatalf("bad reader: %v", err)
	}
}

func TestWaitReadyTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}, Ready: Probe{TCP: ln.Addr().String()}})
	r := waitFor(t, st, ForReady, s.Handle)
	if r.Status != StatusReady || !r.Ready {
		t.Fatalf("status %+v", r)
	}
}

func TestReadyTimeoutFails(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}, Ready: Probe{Cmd: "false", Timeout: 300 * time.Millisecond}, KillGrace: time.Second})
	r := waitFor(t, st, ForReady, s.Handle)
	if r.Status != StatusFailed || r.Reason != "ready_timeout" || r.Ready {
		t.Fatalf("status %+v", r)
	}
}

func TestWaitAnyAndTimeout(t *testing.T) {
	st := newStore(t)
	slow := start(t, st, Spec{Argv: []string{"sleep", "300"}})
	fast := start(t, st, Spec{Argv: []string{"true"}})
	got, err := st.Wait(ctxT(t, 30*time.Second), []string{slow.Handle, fast.Handle}, ForExit, true)
	if err != nil || got[1].Status != StatusExited || got[0].Ended() {
		t.Fatalf("any: %+v, %v", got, err)
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	got, err = st.Wait(short, []string{slow.Handle}, ForExit, false)
	if !errors.Is(err, context.DeadlineExceeded) || len(got) != 1 || got[0].Status != StatusRunning {
		t.Fatalf("timeout: %+v, %v", got, err)
	}
}

func TestRestartPolicyOnFailure(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Shell: "echo run; exit 1", Restart: RestartOnFailure, MaxRestarts: 2})
	f := waitFor(t, st, ForExit, s.Handle)
	if f.Status != StatusFailed || f.Restarts != 2 || *f.ExitCode != 1 {
		t.Fatalf("final %+v", f)
	}
	if got := strings.Join(eventTypes(t, st, s.Handle), ","); got != "started,restarted,restarted,failed" {
		t.Fatalf("events %s", got)
	}
	c, _ := st.ReadLog(s.Handle, Stdout, 0, 0)
	if string(c.Data) != "run\nrun\nrun\n" {
		t.Fatalf("log %q", c.Data)
	}
	ok := start(t, st, Spec{Argv: []string{"true"}, Restart: RestartOnFailure, MaxRestarts: 2})
	if f := waitFor(t, st, ForExit, ok.Handle); f.Status != StatusExited || f.Restarts != 0 {
		t.Fatalf("success restarted: %+v", f)
	}
}

func TestManualRestart(t *testing.T) {
	st := newStore(t)
	// The first run exits; the second finds its marker and keeps running.
	s := start(t, st, Spec{Shell: "echo hi; test -f marker && exec sleep 300; touch marker", Name: "again"})
	waitFor(t, st, ForExit, s.Handle)
	if l, _ := st.List(); len(l) != 1 || l[0].Status != StatusExited {
		t.Fatalf("list before restart %+v", l)
	}
	r, err := st.Restart(ctxT(t, 30*time.Second), "again")
	if err != nil || r.Handle != s.Handle || r.Restarts != 1 || r.Status != StatusRunning || r.EndedAt != nil {
		t.Fatalf("restart %+v, %v", r, err)
	}
	// List must not serve the first run's cached end.
	if l, _ := st.List(); len(l) != 1 || l[0].Status != StatusRunning {
		t.Fatalf("list after restart %+v", l)
	}
	f, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, time.Second)
	if err != nil || f.Status != StatusStopped || f.StdoutBytes != 6 {
		t.Fatalf("after restart %+v, %v", f, err)
	}
	if got := strings.Join(eventTypes(t, st, s.Handle), ","); got != "started,exited,restarted,stopped" {
		t.Fatalf("events %s", got)
	}
	if l, _ := st.List(StatusStopped); len(l) != 1 {
		t.Fatalf("list stopped %+v", l)
	}
}

func TestHandlesRemoveAndGC(t *testing.T) {
	st := newStore(t)
	other := newStore(t)
	s := start(t, st, Spec{Argv: []string{"true"}, Name: "gone"})
	waitFor(t, st, ForExit, s.Handle)
	if _, err := other.Status(s.Handle); code(err) != result.CodeInvalidHandle {
		t.Fatalf("other environment: %v", err)
	}
	tampered := s.Handle[:len(s.Handle)-1] + map[bool]string{true: "b", false: "a"}[strings.HasSuffix(s.Handle, "a")]
	if _, err := st.Status(tampered); code(err) != result.CodeInvalidHandle {
		t.Fatalf("tampered: %v", err)
	}
	if _, err := st.Status("nobody"); code(err) != result.CodeJobNotFound {
		t.Fatalf("unknown name: %v", err)
	}
	running := start(t, st, Spec{Argv: []string{"sleep", "300"}})
	if _, err := st.Remove(ctxT(t, 10*time.Second), running.Handle, false); code(err) != result.CodeJobRunning {
		t.Fatalf("remove running: %v", err)
	}
	if _, err := st.Remove(ctxT(t, 10*time.Second), "gone", false); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Status(s.Handle); code(err) != result.CodeJobExpired {
		t.Fatalf("removed: %v", err)
	}
	if _, err := st.Status("gone"); code(err) != result.CodeJobNotFound {
		t.Fatalf("removed name: %v", err)
	}
	done := start(t, st, Spec{Argv: []string{"true"}})
	waitFor(t, st, ForExit, done.Handle)
	if got, _ := st.GC(time.Hour, time.Now()); len(got) != 0 {
		t.Fatalf("gc removed young jobs: %+v", got)
	}
	got, err := st.GC(time.Hour, time.Now().Add(2*time.Hour))
	if err != nil || len(got) != 1 || got[0].Handle != done.Handle {
		t.Fatalf("gc %+v, %v", got, err)
	}
	if _, err := st.Status(done.Handle); code(err) != result.CodeJobExpired {
		t.Fatalf("gc'd: %v", err)
	}
	if _, err := st.Status(running.Handle); err != nil {
		t.Fatalf("gc touched a running job: %v", err)
	}
}

func TestEventsFollow(t *testing.T) {
	st := newStore(t)
	ctx := ctxT(t, 30*time.Second)
	got := make(chan []state.Event, 1)
	go func() {
		evs, _ := st.WaitEvents(ctx, 0, "")
		got <- evs
	}()
	s := start(t, st, Spec{Argv: []string{"true"}})
	evs := <-got
	if len(evs) == 0 || evs[0].Type != "started" || evs[0].Handle != s.Handle || evs[0].Seq != 1 {
		t.Fatalf("events %+v", evs)
	}
}

// BenchmarkList2000 lists an environment with 2,000 finished jobs.
func BenchmarkList2000(b *testing.B) {
	st := fakeFinished(b, 2000)
	b.ResetTimer()
	for b.Loop() {
		l, err := st.List()
		if err != nil || len(l) != 2000 {
			b.Fatal(len(l), err)
		}
	}
}

// BenchmarkStatus2000 reads one status among 2,000 jobs; it must not
// depend on the number of jobs.
func BenchmarkStatus2000(b *testing.B) {
	st := fakeFinished(b, 2000)
	h := st.dir.Mint("job", "1000")
	b.ResetTimer()
	for b.Loop() {
		if _, err := st.Status(h); err != nil {
			b.Fatal(err)
		}
	}
}

func fakeFinished(b *testing.B, n int) *Store {
	st := newStore(b)
	for i := 1; i <= n; i++ {
		id, err := st.dir.NextID("job")
		if err != nil {
			b.Fatal(err)
		}
		dir := st.jobDir(strconv.FormatUint(id, 10))
		os.MkdirAll(dir, 0o700)
		zero := 0
		rec := record{Status: StatusExited, Final: true, Argv: []string{"true"}, Cwd: "/",
			StartedAt: state.FormatTime(time.Now()), EndedAt: state.FormatTime(time.Now()), ExitCode: &zero}
		b2, _ := json.Marshal(rec)
		if err := state.WriteFileAtomic(filepath.Join(dir, statusFile), b2, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return st
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
		c, _ := st.ReadLog(s.Handle, Stdout, 0, 0)
		if s.Status != StatusExited || seen[s.ID] || string(c.Data) != strconv.Itoa(i)+"\n" {
			t.Fatalf("job %d: %+v %q", i, s, c.Data)
		}
		seen[s.ID] = true
	}
	if l, _ := st.List(); len(l) != n {
		t.Fatalf("list has %d jobs, want %d", len(l), n)
	}
}

func TestWaitReadyHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(ln)
	defer srv.Close()
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}, Ready: Probe{HTTP: "http://" + ln.Addr().String() + "/"}})
	if r := waitFor(t, st, ForReady, s.Handle); r.Status != StatusReady {
		t.Fatalf("status %+v", r)
	}
}

// TestWaitReadyOfJobThatExits: waiting for readiness ends when the job
// ends without becoming ready.
func TestWaitReadyOfJobThatExits(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"false"}, Ready: Probe{Log: "never"}})
	if r := waitFor(t, st, ForReady, s.Handle); r.Status != StatusFailed || r.Ready {
		t.Fatalf("status %+v", r)
	}
}

// TestReadLogWhileTrimming reads a capped log while the job writes it;
// every read must be a consistent piece of the stream.
func TestReadLogWhileTrimming(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"seq", "1", "300000"}, LogLimit: 4096})
	var full strings.Builder
	for i := 1; i <= 300000; i++ {
		full.WriteString(strconv.Itoa(i) + "\n")
	}
	want := full.String()
	check := func(c LogChunk) {
		if string(c.Data) != want[c.Offset:c.NextOffset] {
			t.Fatalf("read at %d..%d does not match the stream", c.Offset, c.NextOffset)
		}
	}
	var off int64
	for {
		got, _ := st.Status(s.Handle)
		c, err := st.ReadLog(s.Handle, Stdout, off, 1000)
		if err != nil {
			t.Fatal(err)
		}
		check(c)
		off = c.NextOffset
		if got.Ended() && c.EOF {
			break
		}
	}
	if off != int64(len(want)) {
		t.Fatalf("ended at %d, want %d", off, len(want))
	}
}

// TestFollowWithWatch follows a log the way `logs --follow` does: arm the
// watch, read, and read again after each signal until the job has ended.
func TestFollowWithWatch(t *testing.T) {
	st := newStore(t)
	cwd := t.TempDir()
	// The job waits for a file the test creates, so the test controls when
	// the second line appears.
	s := start(t, st, Spec{Shell: "echo first; while [ ! -f go ]; do sleep 0.01; done; echo second", Cwd: cwd})
	ctx := ctxT(t, 30*time.Second)
	changed, err := st.Watch(ctx, s.Handle)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var off int64
	created := false
	for {
		c, err := st.ReadLog(s.Handle, Stdout, off, 0)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(c.Data)
		off = c.NextOffset
		if !created && strings.Contains(got.String(), "first\n") {
			created = true
			if err := os.WriteFile(filepath.Join(cwd, "go"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		stt, _ := st.Status(s.Handle)
		if stt.Ended() {
			c, _ := st.ReadLog(s.Handle, Stdout, off, 0)
			got.Write(c.Data)
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("no change seen; have %q", got.String())
		}
	}
	if got.String() != "first\nsecond\n" {
		t.Fatalf("followed %q", got.String())
	}
}

// TestSupervisorKilledBeforeConfirming kills the supervisor before it
// confirmed the start: Start fails, and neither a job entry nor a job
// process remains.
func TestSupervisorKilledBeforeConfirming(t *testing.T) {
	for _, at := range []string{"after_begin", "after_job_start"} {
		t.Run(at, func(t *testing.T) {
			st := newStore(t)
			t.Setenv(killAtEnv, at)
			marker := "agentplane-test-" + at + "-" + strconv.Itoa(os.Getpid())
			_, err := st.Start(ctxT(t, 30*time.Second), Spec{Argv: []string{"sleep", "300", marker}, Cwd: t.TempDir()})
			if code(err) != result.CodeStartFailed {
				t.Fatalf("start: %v", err)
			}
			if l, _ := st.List(); len(l) != 0 {
				t.Fatalf("jobs left: %+v", l)
			}
			snap, _ := proctree.Snapshot()
			for _, p := range snap {
				cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
				if strings.Contains(string(cmdline), marker) && !p.Dead() {
					_ = syscall.Kill(p.PID, syscall.SIGKILL)
					t.Fatalf("job process %d survived its unconfirmed start", p.PID)
				}
			}
		})
	}
}

func TestSecondSupervisorRefused(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}})
	if err := st.launch(ctxT(t, 30*time.Second), s.ID); code(err) != result.CodeJobRunning {
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

// BenchmarkStartTrue measures Start of `true` through to the supervisor's
// confirmation (the test binary is the supervisor here, so this is an upper
// bound for a small CLI binary).
func BenchmarkStartTrue(b *testing.B) {
	st := newStore(b)
	ctx := context.Background()
	cwd := b.TempDir()
	var hs []string
	for b.Loop() {
		s, err := st.Start(ctx, Spec{Argv: []string{"true"}, Cwd: cwd})
		if err != nil {
			b.Fatal(err)
		}
		hs = append(hs, s.Handle)
	}
	b.StopTimer()
	if _, err := st.Wait(ctx, hs, ForExit, false); err != nil {
		b.Fatal(err)
	}
}
