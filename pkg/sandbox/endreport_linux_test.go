package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/run"
)

// The helper reports the command's end on its spec socket once its PID
// namespace is empty, before its own exit (which waits for the kernel to
// tear the namespaces down); the runner finishes on the report.

// holdCommand is a hidden mode of the test binary: it seizes the process
// given by pid with ptrace, stops it at the start of its exit
// (PTRACE_EVENT_EXIT, before the namespaces are torn down) and prints
// "exit-stop", then lets it go on at a line on stdin. It is another
// process than the runner, whose wait must not see the tracee's stops.
const holdCommand = "__hold"

func hold(args []string) int {
	runtime.LockOSThread()
	pid, _ := strconv.Atoi(args[0])
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, unix.PTRACE_O_TRACEEXIT, 0, 0); e != 0 {
		fmt.Println("seize:", e)
		return 1
	}
	fmt.Println("seized")
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
			fmt.Println("wait:", err)
			return 1
		}
		if !ws.Stopped() {
			fmt.Println("gone")
			return 0
		}
		if ws.TrapCause() == unix.PTRACE_EVENT_EXIT {
			fmt.Println("exit-stop")
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
			_ = unix.PtraceDetach(pid)
			return 0
		}
		sig := 0
		if ws.TrapCause() <= 0 && ws.StopSignal() != unix.SIGTRAP {
			sig = int(ws.StopSignal()) // a signal-delivery stop: deliver it
		}
		_ = unix.PtraceCont(pid, sig)
	}
}

// pidNS is the inode of pid's PID namespace ("" when pid is gone).
func pidNS(pid int) string {
	l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return l
}

// inNamespace lists the processes of the PID namespace ns but skip.
func inNamespace(ns string, skip int) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == skip {
			continue
		}
		if pidNS(pid) == ns {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			found = append(found, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	return found
}

// endedRun runs argv sandboxed with pkg/run finishing on the helper's
// report (Request.Ended); onStart and onOutput are the request's hooks.
// The run gets two minutes before the test fails.
func endedRun(t *testing.T, p Policy, dir string, onStart func(int), onOutput func(string, []byte), argv ...string) (*run.Result, *Prepared) {
	t.Helper()
	prep, err := Prepare(p, self(t))
	must(t, err)
	t.Cleanup(prep.Cleanup)
	files, started, err := prep.Launch()
	must(t, err)
	t.Cleanup(started)
	type ran struct {
		res *run.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := run.Run(context.Background(), run.Request{
			Argv: prep.Argv(argv), Dir: dir, Env: append(os.Environ(), prep.Env...),
			Timeout: 10 * time.Minute, KillAfter: time.Second, Drain: 200 * time.Millisecond, MaxOutput: 64 << 10,
			SysProcAttr: prep.SysProcAttr, ExtraFiles: files, Ended: prep.Ended,
			OnStart: onStart, OnOutput: onOutput,
		})
		done <- ran{res, err}
	}()
	select {
	case r := <-done:
		must(t, r.err)
		r.res.ExitCode, r.res.Signal = prep.ExitStatus(r.res.ExitCode, r.res.Signal)
		return r.res, prep
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not finish on the helper's report")
		return nil, nil
	}
}

// The runner gives the result while the helper is held at the start of
// its exit, so it did not wait for that exit; by then every other process
// of the namespace is gone, the background ones the command left too
// (setsid, ignoring SIGTERM), none even a zombie; the command's exit
// status and its signal death come through the report; and the helper is
// reaped once it is let go.
func TestEndReportBeforeExit(t *testing.T) {
	requireSandbox(t)
	requireRoot(t) // ptrace of the undumpable helper from another process
	_, ws, _ := dirs(t)
	for _, tc := range []struct {
		name, script string
		code         int
		signal       string
	}{
		{"exit", "exit 7", 7, ""},
		{"signal", "kill -TERM $$", 143, "SIGTERM"},
		// The helper reports without kill(-1) only when wait4 says it has
		// no child at all: a zombie under a live orphan and a process
		// whose parent is itself left behind count as left.
		{"zombies", `sh -c '(exit 3) & exec sleep 600' & sh -c 'sh -c "sleep 600"; :' & exit 5`, 5, ""},
		{"stopped", `sh -c 'kill -STOP $$; sleep 600' & exit 6`, 6, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fifo := filepath.Join(ws, tc.name+".fifo")
			must(t, unix.Mkfifo(fifo, 0o600))
			var holder *exec.Cmd
			var holderIn *os.File
			var holderOut *bufio.Reader
			var helperNS string
			helper := 0
			onStart := func(pid int) {
				helper = pid
				helperNS = pidNS(pid)
				holder = exec.Command(self(t), holdCommand, strconv.Itoa(pid))
				r, w, err := os.Pipe()
				must(t, err)
				holder.Stdin, holderIn = r, w
				out, err := holder.StdoutPipe()
				must(t, err)
				must(t, holder.Start())
				r.Close()
				holderOut = bufio.NewReader(out)
				if line, _ := holderOut.ReadString('\n'); line != "seized\n" {
					t.Errorf("holder: %q", line)
				}
				// Only now may the command end.
				f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				must(t, err)
				f.Close()
			}
			t.Cleanup(func() {
				if holder != nil {
					holderIn.Close()
					_ = holder.Wait()
				}
			})
			script := `sleep 600 & setsid sh -c 'trap "" TERM; sleep 600' & (trap "" TERM HUP; sleep 600) & read x < ` + fifo + `; ` + tc.script
			res, _ := endedRun(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone}, ws, onStart, nil, "sh", "-c", script)
			if res.ExitCode != tc.code || res.Signal != tc.signal {
				t.Errorf("exit %d %q, want %d %q (stderr %q)", res.ExitCode, res.Signal, tc.code, tc.signal, text(res.Stderr))
			}
			// The helper is still there, held at its exit: the result did
			// not wait for it.
			if line, _ := holderOut.ReadString('\n'); line != "exit-stop\n" {
				t.Fatalf("holder: %q", line)
			}
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", helper)); err != nil || !strings.Contains(string(st), ") t ") {
				t.Errorf("the helper is not held at its exit: %q %v", st, err)
			}
			if left := inNamespace(helperNS, helper); len(left) > 0 {
				t.Errorf("processes of the command outlived the result: %v", left)
			}
			holderIn.Close()
			// Reaped (by the runner's background wait) once its exit is
			// done: the pid leaves /proc.
			deadline := time.Now().Add(time.Minute)
			for {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", helper)); os.IsNotExist(err) {
					break
				}
				if time.Now().After(deadline) {
					st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", helper))
					t.Fatalf("the helper was never reaped: %s", st)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// A helper SIGKILLed before it reports (while the command runs): the
// runner falls back to its exit status, and the kernel's teardown of the
// namespace leaves nothing behind.
func TestEndReportHelperKilled(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	helper, ns := 0, ""
	onStart := func(pid int) { helper, ns = pid, pidNS(pid) }
	killed := false
	onOutput := func(_ string, p []byte) {
		if !killed && strings.Contains(string(p), "ready") {
			killed = true
			_ = syscall.Kill(helper, syscall.SIGKILL)
		}
	}
	res, _ := endedRun(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone}, ws, onStart, onOutput,
		"sh", "-c", `sleep 600 & echo ready; sleep 600`)
	if res.ExitCode != 137 || res.Signal != "SIGKILL" {
		t.Errorf("exit %d %q, want the helper's SIGKILL", res.ExitCode, res.Signal)
	}
	if left := inNamespace(ns, helper); ns != "" && len(left) > 0 {
		t.Errorf("processes of the command outlived the result: %v", left)
	}
}

// A helper that never reports (stopped from outside while the command
// runs) is ended by the timeout, with its tree.
func TestEndReportHelperSilent(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone}, self(t))
	must(t, err)
	t.Cleanup(prep.Cleanup)
	files, started, err := prep.Launch()
	must(t, err)
	t.Cleanup(started)
	helper, ns := 0, ""
	stopped := false
	res, err := run.Run(context.Background(), run.Request{
		Argv: prep.Argv([]string{"sh", "-c", "echo ready; exec sleep 600"}), Dir: ws, Env: append(os.Environ(), prep.Env...),
		Timeout: 3 * time.Second, KillAfter: time.Second, MaxOutput: 64 << 10,
		SysProcAttr: prep.SysProcAttr, ExtraFiles: files, Ended: prep.Ended,
		OnStart: func(pid int) { helper, ns = pid, pidNS(pid) },
		OnOutput: func(_ string, p []byte) {
			if !stopped && strings.Contains(string(p), "ready") {
				stopped = true
				_ = syscall.Kill(helper, syscall.SIGSTOP)
			}
		},
	})
	must(t, err)
	if !res.TimedOut || !stopped {
		t.Errorf("status %s (stopped %v), want a timeout", res.Status, stopped)
	}
	if left := inNamespace(ns, helper); ns != "" && len(left) > 0 {
		t.Errorf("processes of the command outlived the result: %v", left)
	}
}

// The report cannot be forged: the command writes an end report of exit
// 0 on every descriptor it has and tries to reach the helper's (its
// /proc/1/fd, pidfd_getfd); the result is still the command's exit 7.
func TestEscapeForgeEndReport(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	for name, p := range map[string]Policy{
		"net-none":  {Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone},
		"read-only": {Mode: ModeReadOnly},
	} {
		t.Run(name, func(t *testing.T) {
			res, _ := endedRun(t, p, ws, nil, nil, self(t), attackCommand, "endreport")
			o := out(res)
			if res.ExitCode != 7 {
				t.Errorf("exit %d, want the command's 7: %s %s", res.ExitCode, o, text(res.Stderr))
			}
			for _, w := range []string{"getfd: ok", "procfd: ok", "procfd-link: ok"} {
				if strings.Contains(o, w) {
					t.Errorf("the command reached the helper's descriptors (%s): %s", w, o)
				}
			}
			if !strings.Contains(o, "procfd: ") {
				t.Errorf("the attack did not run: %s %s", o, text(res.Stderr))
			}
		})
	}
}
