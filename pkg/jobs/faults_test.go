package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
)

// The fault tests stop the supervisor (or the caller of Start, Stop or
// Restart) at each named step with internal/faultpoint and SIGKILL it
// there, then check with /proc and the state directory that the answers
// stayed honest: no process outlives a failed start, stop never reports
// success while a process of the job runs, offsets stay truthful.

// marker returns a string unique to this test, to find the job's
// processes by their command line.
func marker(t *testing.T) string {
	return fmt.Sprintf("jobs-fault-%d-%d", os.Getpid(), time.Now().UnixNano())
}

// markedLive lists the live processes whose command line or environment
// holds m.
func markedLive(m string) []proctree.Stat {
	snap, _ := proctree.Snapshot()
	var out []proctree.Stat
	for _, p := range snap {
		if p.Dead() {
			continue
		}
		// proctree's readers, not /proc's files: a process caught in the
		// middle of an exec (the gate's shell executing the job) reads
		// empty there for a moment.
		argv, _ := proctree.Argv(p.PID)
		env, _ := proctree.Environ(p.PID)
		if strings.Contains(strings.Join(argv, "\x00"), m) || slices.Contains(env, markEnv+"="+m) {
			out = append(out, p)
		}
	}
	return out
}

// markEnv carries a job's marker in the environment, which every process
// of the job inherits.
const markEnv = "JOBS_FAULT_MARK"

// noneLive fails the test if a process marked m runs, killing it first.
func noneLive(t *testing.T, m, when string) {
	t.Helper()
	if left := markedLive(m); len(left) > 0 {
		for _, p := range left {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		t.Fatalf("%s: job processes still run: %+v", when, left)
	}
}

// markedJob is a job whose every process carries m in its environment: a
// shell that starts a background child, a setsid'd one and a waiting
// foreground one, all ignoring SIGTERM.
func markedJob(m string) Spec {
	return Spec{Argv: []string{"sh", "-c", `trap '' TERM; sh -c 'trap "" TERM; sleep 300' & setsid sh -c 'sleep 300' & sleep 300 & wait`},
		Env: append(os.Environ(), markEnv+"="+m)}
}

// unanswered is the store of a test whose supervisor is alive but cannot
// answer a stop (frozen): Stop's wait for its answer ends sooner, and then
// Stop kills the supervisor and the job itself as ever.
func unanswered(st *Store) *Store {
	st.answerWait = time.Second
	return st
}

// unwaited is the store of a test in which no supervisor can answer a stop
// (none was launched, or it died before it recorded anything): Stop must
// find that out at once, and a Stop that waited for an answer would wait
// out the test's context instead (see stopAtOnce).
func unwaited(st *Store) *Store {
	st.answerWait = time.Hour
	return st
}

// stopAtOnce stops ref on a store made by unwaited, and fails the test if
// the stop waited for an answer until its context ended.
func stopAtOnce(t *testing.T, st *Store, ref string, sig syscall.Signal, grace time.Duration) (Status, error) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	s, err := st.Stop(ctx, ref, sig, grace)
	if ctx.Err() != nil {
		t.Fatalf("stop waited for a supervisor that cannot answer until its context ended: %+v, %v", s, err)
	}
	return s, err
}

// TestStartSupervisorKilledAtEachStep kills the supervisor at every step
// of a start: the start fails with start_failed, and leaves no job and no
// process behind, whatever moment it died at.
func TestStartSupervisorKilledAtEachStep(t *testing.T) {
	for _, step := range []string{"supervisor.locked", "supervisor.began", "supervisor.forked", "supervisor.recorded"} {
		for _, action := range []string{"kill", "stop"} {
			t.Run(step+"="+action, func(t *testing.T) {
				st := newStore(t)
				m := marker(t)
				t.Setenv(faultpoint.Env, step+"="+action)
				spec := markedJob(m)
				spec.Cwd = t.TempDir()
				// A frozen supervisor never answers: Start gives up at
				// its deadline and must kill what it started.
				ctx := ctxT(t, 30*time.Second)
				if action == "stop" {
					ctx = ctxT(t, 2*time.Second)
				}
				_, err := st.Start(ctx, spec)
				if code(err) != result.CodeStartFailed {
					t.Fatalf("start: %v", err)
				}
				if l, _ := st.List(); len(l) != 0 {
					t.Fatalf("jobs left: %+v", l)
				}
				noneLive(t, m, "after the failed start")
			})
		}
	}
}

// TestStartSupervisorKilledAfterConfirming: once Start confirmed, a dead
// supervisor's job is lost with its orphan, and stop kills all of it.
func TestStartSupervisorKilledAfterConfirming(t *testing.T) {
	st := newStore(t)
	m := marker(t)
	t.Setenv(faultpoint.Env, "supervisor.confirmed")
	spec := markedJob(m)
	s := start(t, st, spec)
	got := waitFor(t, st, ForExit, s.Handle)
	if got.Status != StatusLost || got.OrphanPID != s.PID {
		t.Fatalf("status %+v", got)
	}
	f, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, time.Second)
	if err != nil || f.Status != StatusLost || f.OrphanPID != 0 {
		t.Fatalf("stop: %+v, %v", f, err)
	}
	noneLive(t, m, "after stop")
}

// callProcess runs one Store operation in a child process (see callArg)
// with faultpoint.Env set to arm, and returns its output and whether it
// was SIGKILLed.
func callProcess(t *testing.T, st *Store, arm, op, arg string) (string, bool) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctxT(t, 60*time.Second), exe, callArg, st.dir.Path(), op, arg)
	cmd.Env = append(os.Environ(), faultpoint.Env+"="+arm)
	out, _ := cmd.Output()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return string(out), ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// TestStartCallerKilledAtEachStep kills the caller of Start at each of its
// steps: what it leaves is visible to list, stoppable, and removable by gc
// once it is old; no process runs that no handle reaches.
func TestStartCallerKilledAtEachStep(t *testing.T) {
	for _, step := range []string{"start.dir", "start.spec", "start.launched"} {
		t.Run(step, func(t *testing.T) {
			st := unwaited(newStore(t)) // before start.launched, no supervisor ever runs
			m := marker(t)
			out, killed := callProcess(t, st, step, "start", "sleep 300; : "+m)
			if !killed {
				t.Fatalf("caller not killed at %s: %s", step, out)
			}
			l, err := st.List()
			if err != nil || len(l) != 1 {
				t.Fatalf("list: %+v, %v", l, err)
			}
			s := l[0]
			if step == "start.launched" && s.Status != StatusRunning {
				t.Fatalf("a launched job: %+v", s)
			}
			want := StatusLost
			if step == "start.launched" {
				want = StatusStopped
			}
			if f, err := stopAtOnce(t, st, s.Handle, syscall.SIGKILL, 0); err != nil || f.Status != want {
				t.Fatalf("stop: %+v, %v", f, err)
			}
			if got, err := st.Status(s.Handle); err != nil || got.Status != want {
				t.Fatalf("status after the stop: %+v, %v", got, err)
			}
			noneLive(t, m, "after stop")
			if removed, err := st.GC(time.Minute, time.Now()); err != nil || len(removed) != 0 {
				t.Fatalf("gc removed a job that ended just now: %+v, %v", removed, err)
			}
			// Age the remains past the starting grace: gc removes them.
			old := time.Now().Add(-2 * startingGrace)
			dir := st.jobDir(s.ID)
			_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, old, old) })
			removed, err := st.GC(time.Minute, time.Now().Add(time.Hour))
			if err != nil || len(removed) != 1 {
				t.Fatalf("gc: %+v, %v", removed, err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("job directory left: %v", err)
			}
		})
	}
}

// TestWaitUnrecordedStartTurnsLost: a start whose caller died before it
// launched a supervisor leaves a starting job that turns lost once the
// starting grace is over, with no file changing then; a wait on it wakes
// and answers lost instead of waiting out its own timeout.
func TestWaitUnrecordedStartTurnsLost(t *testing.T) {
	st := newStore(t)
	if out, killed := callProcess(t, st, "start.spec", "start", "sleep 300"); !killed {
		t.Fatalf("caller not killed: %s", out)
	}
	soon := time.Now().Add(-startingGrace + time.Second)
	if err := os.Chtimes(filepath.Join(st.jobDir("1"), specFile), soon, soon); err != nil {
		t.Fatal(err)
	}
	got, err := st.Wait(ctxT(t, 30*time.Second), []string{st.dir.Mint("job", "1")}, ForExit, false)
	if err != nil || len(got) != 1 || got[0].Status != StatusLost {
		t.Fatalf("wait: %+v, %v", got, err)
	}
}

// TestRestartUnrecordedStart: a job whose start died before any supervisor
// recorded it can still be restarted: the restart's stop finds it lost at
// once, and the new supervisor runs it rather than taking that for a stop.
func TestRestartUnrecordedStart(t *testing.T) {
	st := unwaited(newStore(t))
	m := marker(t)
	if out, killed := callProcess(t, st, "start.spec", "start", "sleep 300; : "+m); !killed {
		t.Fatalf("caller not killed: %s", out)
	}
	ref := st.dir.Mint("job", "1")
	ctx := ctxT(t, 30*time.Second)
	s, err := st.Restart(ctx, ref)
	if err != nil || s.Status != StatusRunning || ctx.Err() != nil {
		t.Fatalf("restart: %+v, %v", s, err)
	}
	t.Cleanup(func() { _, _ = st.Stop(context.Background(), ref, syscall.SIGKILL, time.Second) })
	if len(markedLive(m)) == 0 {
		t.Fatal("the restarted job does not run")
	}
}

// TestStopUnrecordedStart: a start whose caller and supervisor both died
// after the supervisor took the run lock and before it recorded the job
// leaves a job no supervisor will ever answer for. Stop finds that out
// from the run lock at once, kills what the supervisor started (by the
// identity it left in the lock) and answers lost, as status does from then
// on. A supervisor that still lives there (frozen, holding the lock) is
// asked and given its wait, and then killed with what it started. One
// SIGKILLed a moment before the stop (killed) may still be dying, its
// main thread a zombie while another holds the lock: the stop waits for
// its end, not for an answer.
func TestStopUnrecordedStart(t *testing.T) {
	for _, step := range []string{"supervisor.began", "supervisor.forked"} {
		for _, sv := range []string{"dead", "killed", "frozen"} {
			t.Run(step+"/"+sv, func(t *testing.T) {
				st := unwaited(newStore(t))
				if sv == "frozen" {
					st = unanswered(st)
				}
				m := marker(t)
				exe, err := os.Executable()
				if err != nil {
					t.Fatal(err)
				}
				caller := exec.Command(exe, callArg, st.dir.Path(), "start", "sleep 300; : "+m)
				caller.Env = append(os.Environ(), faultpoint.Env+"="+step+"=stop", markEnv+"="+m)
				if err := caller.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = caller.Process.Kill(); _ = caller.Wait() })
				holder := frozenLockHolder(t, st, "1")
				_ = caller.Process.Kill()
				_ = caller.Wait()
				if sv != "frozen" {
					_ = syscall.Kill(holder.PID, syscall.SIGKILL)
				}
				if sv == "dead" {
					if err := proctree.Wait(ctxT(t, 10*time.Second), holder); err != nil {
						t.Fatalf("the killed supervisor did not end: %v", err)
					}
				}
				ref := st.dir.Mint("job", "1")
				f, err := stopAtOnce(t, st, ref, syscall.SIGTERM, time.Second)
				if err != nil || f.Status != StatusLost || f.OrphanPID != 0 {
					t.Fatalf("stop: %+v, %v", f, err)
				}
				if holder.Alive() {
					t.Fatal("the frozen supervisor was left")
				}
				noneLive(t, m, "after stop")
				if got, err := st.Status(ref); err != nil || got.Status != StatusLost {
					t.Fatalf("status after the stop: %+v, %v", got, err)
				}
			})
		}
	}
}

// frozenLockHolder waits until a supervisor of job id holds its run lock,
// has written its identity there and is frozen (a fault point's stop),
// within a generous bound, and returns it.
func frozenLockHolder(t *testing.T, st *Store, id string) proctree.ID {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if sv, ok := st.lockHolder(id); ok {
			if p, err := proctree.ReadStat(sv.PID); err == nil && p.State == 'T' {
				return proctree.ID{PID: sv.PID, Start: sv.StartTime}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no supervisor came to a stop holding the run lock")
		}
		time.Sleep(20 * time.Millisecond) // a process stopping has no event to wait on
	}
}

// TestStopSupervisorKilledDuringGrace: the supervisor dies while it waits
// out the grace of a job that ignores SIGTERM. Stop must not answer
// success while the job runs: it kills the rest itself.
func TestStopSupervisorKilledDuringGrace(t *testing.T) {
	for _, action := range []string{"kill", "stop"} {
		t.Run(action, func(t *testing.T) {
			st := unanswered(newStore(t))
			m := marker(t)
			t.Setenv(faultpoint.Env, "supervisor.stop.signalled="+action)
			s := start(t, st, markedJob(m))
			waitMarked(t, m, 4)
			f, err := st.Stop(ctxT(t, 60*time.Second), s.Handle, syscall.SIGTERM, time.Second)
			if err != nil {
				t.Fatalf("stop: %v", err)
			}
			if f.Status == StatusRunning || f.Status == StatusReady || f.OrphanPID != 0 {
				t.Fatalf("stop answered %+v", f)
			}
			noneLive(t, m, "after stop")
			if sv, svStart := svOf(t, st, s); proctree.Alive(sv, svStart) {
				t.Fatal("the frozen supervisor was left")
			}
		})
	}
}

// waitMarked waits until n processes marked m run (the job has started
// its children), within a generous bound.
func waitMarked(t *testing.T, m string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(markedLive(m)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d job processes came up", len(markedLive(m)), n)
		}
		time.Sleep(20 * time.Millisecond) // processes starting have no event to wait on
	}
}

// waitMarkedCmds waits until, for each of cmdlines, a live process marked
// m runs with exactly that /proc/PID/cmdline.
func waitMarkedCmds(t *testing.T, m string, cmdlines ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		seen := map[string]bool{}
		for _, p := range markedLive(m) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
			seen[string(b)] = true
		}
		missing := 0
		for _, c := range cmdlines {
			if !seen[c] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %q did not come up", missing, cmdlines)
		}
		time.Sleep(20 * time.Millisecond) // processes starting have no event to wait on
	}
}

// TestStopSupervisorFrozen: a supervisor frozen with SIGSTOP never acts on
// the stop; Stop kills it and the job and never answers running.
func TestStopSupervisorFrozen(t *testing.T) {
	st := unanswered(newStore(t))
	m := marker(t)
	s := start(t, st, markedJob(m))
	waitMarked(t, m, 4)
	sv, _ := svOf(t, st, s)
	_ = syscall.Kill(sv, syscall.SIGSTOP)
	f, err := st.Stop(ctxT(t, 60*time.Second), s.Handle, syscall.SIGTERM, 500*time.Millisecond)
	if err != nil || f.Status != StatusLost || f.OrphanPID != 0 {
		t.Fatalf("stop: %+v, %v", f, err)
	}
	noneLive(t, m, "after stop")
}

// TestStopCallerKilledAtEachStep kills the caller of Stop after it wrote
// the request and after it signalled: the job ends stopped anyway (the
// supervisor acts on the request), or a second stop finishes it.
func TestStopCallerKilledAtEachStep(t *testing.T) {
	for _, step := range []string{"stop.requested", "stop.signalled"} {
		t.Run(step, func(t *testing.T) {
			st := newStore(t)
			m := marker(t)
			s := start(t, st, markedJob(m))
			if _, killed := callProcess(t, st, step, "stop", s.Handle); !killed {
				t.Fatalf("caller not killed at %s", step)
			}
			f, err := st.Stop(ctxT(t, 60*time.Second), s.Handle, syscall.SIGTERM, time.Second)
			if err != nil || f.Status != StatusStopped {
				t.Fatalf("second stop: %+v, %v", f, err)
			}
			noneLive(t, m, "after stop")
		})
	}
}

// TestRestartKilledAtEachStep kills the caller of Restart between its stop
// and its launch, and the new supervisor at its first steps: the job is
// left ended (or lost) with nothing running, and a later restart works.
func TestRestartKilledAtEachStep(t *testing.T) {
	for _, step := range []string{"restart.stopped", "supervisor.began", "supervisor.forked", "supervisor.recorded"} {
		t.Run(step, func(t *testing.T) {
			// Each restart waits out the default grace of a job that
			// ignores SIGTERM; the steps share nothing (the fault is
			// armed in the caller's environment), so they wait together.
			t.Parallel()
			st := newStore(t)
			m := marker(t)
			s := start(t, st, markedJob(m))
			out, killed := callProcess(t, st, step, "restart", s.Handle)
			if step == "restart.stopped" && !killed {
				t.Fatalf("caller not killed: %s", out)
			}
			if step != "restart.stopped" && !strings.Contains(out, result.CodeStartFailed) {
				t.Fatalf("restart with its supervisor killed at %s: %s", step, out)
			}
			got, err := st.Status(s.Handle)
			if err != nil || !got.Ended() || got.OrphanPID != 0 {
				t.Fatalf("status after the killed restart: %+v, %v", got, err)
			}
			noneLive(t, m, "after the killed restart")
			again, err := st.Restart(ctxT(t, 60*time.Second), s.Handle)
			if err != nil || again.Status != StatusRunning {
				t.Fatalf("restart: %+v, %v", again, err)
			}
		})
	}
}

// TestRestartPolicyKilledInBackoff kills the supervisor between two runs
// of a restart policy: lost, nothing running.
func TestRestartPolicyKilledInBackoff(t *testing.T) {
	st := newStore(t)
	t.Setenv(faultpoint.Env, "supervisor.restart.backoff")
	s := start(t, st, Spec{Shell: "exit 3", Restart: RestartAlways})
	got := waitFor(t, st, ForExit, s.Handle)
	if got.Status != StatusLost || got.OrphanPID != 0 {
		t.Fatalf("status %+v", got)
	}
}

// TestFinalRecordKilled kills the supervisor around its final record: the
// end is either recorded (exited) or the job is lost, never running.
func TestFinalRecordKilled(t *testing.T) {
	for step, want := range map[string]string{"supervisor.final.event": StatusLost, "supervisor.final.saved": StatusExited} {
		t.Run(step, func(t *testing.T) {
			st := newStore(t)
			t.Setenv(faultpoint.Env, step)
			s := start(t, st, Spec{Shell: "echo done"})
			got := waitFor(t, st, ForExit, s.Handle)
			if got.Status != want {
				t.Fatalf("status %+v, want %s", got, want)
			}
			if want == StatusLost {
				evs := eventTypes(t, st, s.Handle)
				if strings.Join(evs, ",") != "started,exited,lost" {
					t.Fatalf("events %v", evs)
				}
			}
		})
	}
}

// TestTrimKilledAtEachStep kills the supervisor at each step of a log
// trim. Every line of the job's output is its own line number, so each
// byte's absolute offset says what it must be: after the kill, and after a
// restart that reopens the log, every read must agree, and no temp file
// may be left.
func TestTrimKilledAtEachStep(t *testing.T) {
	const lineLen = 9 // "%08d\n"
	for _, step := range []string{"log.trim.copied#2", "log.trim.announced#2", "log.trim.renamed#2"} {
		t.Run(step, func(t *testing.T) {
			st := newStore(t)
			t.Setenv(faultpoint.Env, step)
			// Once the flag exists, a run writes nothing.
			flag := filepath.Join(t.TempDir(), "flag")
			s := start(t, st, Spec{Shell: `[ -e ` + flag + ` ] && exec sleep 300; i=0; while [ $i -lt 20000 ]; do printf '%08d\n' $i; i=$((i+1)); done; sleep 300`,
				LogLimit: 8 << 10})
			got := waitFor(t, st, ForExit, s.Handle)
			if got.Status != StatusLost {
				t.Fatalf("status %+v", got)
			}
			check := func(when string) {
				c, err := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{Raw: true})
				if err != nil {
					t.Fatal(err)
				}
				if c.Offset%lineLen != 0 && c.DroppedBytes == 0 {
					t.Fatalf("%s: window at %d", when, c.Offset)
				}
				// The first whole line after the window's start.
				skip := (lineLen - int(c.Offset%lineLen)) % lineLen
				data := c.Data[min(skip, len(c.Data)):]
				for i := 0; i+lineLen <= len(data); i += lineLen {
					want := fmt.Sprintf("%08d\n", (c.Offset+int64(skip+i))/lineLen)
					if string(data[i:i+lineLen]) != want {
						t.Fatalf("%s: at offset %d read %q, want %q", when, c.Offset+int64(skip+i), data[i:i+lineLen], want)
					}
				}
			}
			check("after the kill")
			total := got.StdoutBytes
			if err := os.WriteFile(flag, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGKILL, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Restart(ctxT(t, 30*time.Second), s.Handle); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGKILL, 0); err != nil {
				t.Fatal(err)
			}
			check("after a restart")
			if c, _ := st.ReadLog(s.Handle, Stdout, total, ReadOptions{}); c.Offset != total || !c.EOF || len(c.Data) != 0 {
				t.Fatalf("the end moved: %+v, first run %d", c, total)
			}
			ents, _ := os.ReadDir(st.jobDir(s.ID))
			for _, e := range ents {
				if strings.Contains(e.Name(), ".tmp") || strings.Contains(e.Name(), ".trim") {
					t.Fatalf("temp file left: %s", e.Name())
				}
			}
		})
	}
}

// TestListKeepsExitCodeZero: the list cache must not turn exit code 0
// into null (gob drops zero values).
func TestListKeepsExitCodeZero(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"true"}})
	waitFor(t, st, ForExit, s.Handle)
	for i := range 3 {
		l, err := st.List()
		if err != nil || len(l) != 1 || l[0].ExitCode == nil || *l[0].ExitCode != 0 {
			b, _ := json.Marshal(l)
			t.Fatalf("list %d: %s, %v", i, b, err)
		}
	}
	l, _ := st.List(StatusExited)
	if len(l) != 1 || l[0].ExitCode == nil {
		t.Fatalf("list --status exited: %+v", l)
	}
	removed, err := st.GC(0, time.Now().Add(time.Hour))
	if err != nil || len(removed) != 1 || removed[0].ExitCode == nil || *removed[0].ExitCode != 0 {
		t.Fatalf("gc: %+v, %v", removed, err)
	}
}

// TestDamagedState plants garbage in each state file of a job.
func TestDamagedState(t *testing.T) {
	garbage := []byte("\x00{not json")

	t.Run("status of a running job", func(t *testing.T) {
		st := newStore(t)
		m := marker(t)
		s := start(t, st, markedJob(m))
		if err := os.WriteFile(filepath.Join(st.jobDir(s.ID), statusFile), garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Status(s.Handle); code(err) != "state_corrupt" {
			t.Fatalf("status: %v", err)
		}
		l, err := st.List()
		if err != nil || len(l) != 1 || l[0].Error == nil || l[0].Error.Code != "state_corrupt" || l[0].Status != StatusRunning {
			t.Fatalf("list: %+v, %v", l, err)
		}
		f, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, time.Second)
		if err != nil || f.Status != StatusStopped {
			t.Fatalf("stop: %+v, %v", f, err)
		}
		noneLive(t, m, "after stop")
	})

	t.Run("status of an ended job", func(t *testing.T) {
		st := newStore(t)
		s := start(t, st, Spec{Argv: []string{"true"}})
		waitFor(t, st, ForExit, s.Handle)
		sv, svStart := svOf(t, st, s)
		_ = proctree.Wait(ctxT(t, 10*time.Second), proctree.ID{PID: sv, Start: svStart})
		if err := os.WriteFile(filepath.Join(st.jobDir(s.ID), statusFile), garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := st.List()
		if err != nil || len(l) != 1 || l[0].Status != StatusLost || l[0].LostReason != LostStateCorrupt {
			t.Fatalf("list: %+v, %v", l, err)
		}
		if f, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, time.Second); code(err) != "state_corrupt" {
			t.Fatalf("stop: %+v, %v", f, err)
		}
		if removed, err := st.GC(0, time.Now().Add(time.Hour)); err != nil || len(removed) != 1 {
			t.Fatalf("gc: %+v, %v", removed, err)
		}
	})

	t.Run("id counter", func(t *testing.T) {
		st := newStore(t)
		a := start(t, st, Spec{Argv: []string{"true"}})
		b := start(t, st, Spec{Argv: []string{"true"}})
		waitFor(t, st, ForExit, b.Handle)
		if _, err := st.Remove(ctxT(t, 10*time.Second), b.Handle, false); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(st.dir.Join("ids", "job"), garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		c := start(t, st, Spec{Argv: []string{"true"}})
		if c.Handle == a.Handle || c.Handle == b.Handle {
			t.Fatalf("id reused: %s", c.Handle)
		}
		if _, err := st.Status(b.Handle); code(err) != result.CodeJobExpired {
			t.Fatalf("removed job: %v", err)
		}
	})

	t.Run("cursor", func(t *testing.T) {
		st := newStore(t)
		s := start(t, st, Spec{Shell: "echo hello"})
		waitFor(t, st, ForExit, s.Handle)
		if _, err := st.ReadSince(s.Handle, Stdout, "r", ReadOptions{}); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(st.jobDir(s.ID), cursorsDir, "r.json")
		if err := os.WriteFile(path, garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := st.ReadSince(s.Handle, Stdout, "r", ReadOptions{})
		if err != nil || !c.CursorReset || string(c.Data) != "hello\n" {
			t.Fatalf("read since a damaged cursor: %+v, %v", c, err)
		}
		c, err = st.ReadSince(s.Handle, Stdout, "r", ReadOptions{})
		if err != nil || c.CursorReset || len(c.Data) != 0 {
			t.Fatalf("the cursor was not repaired: %+v, %v", c, err)
		}
	})

	t.Run("log sidecar", func(t *testing.T) {
		st := newStore(t)
		s := start(t, st, Spec{Shell: "head -c 20000 /dev/zero | tr '\\0' x", LogLimit: 8 << 10})
		got := waitFor(t, st, ForExit, s.Handle)
		if err := os.WriteFile(metaPath(st.jobDir(s.ID), Stdout), garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{}); code(err) != "state_corrupt" {
			t.Fatalf("read: %v", err)
		}
		// A new run rebuilds the sidecar from the recorded total.
		if _, err := st.Restart(ctxT(t, 30*time.Second), s.Handle); err != nil {
			t.Fatal(err)
		}
		waitFor(t, st, ForExit, s.Handle)
		c, err := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{})
		if err != nil || c.Offset < got.StdoutBytes-int64(8<<10) || c.NextOffset != 2*got.StdoutBytes {
			t.Fatalf("after the repair: offset %d next %d (first run %d bytes), %v", c.Offset, c.NextOffset, got.StdoutBytes, err)
		}
	})
}

// TestLogsNeverSplitCharacters reads a log of multibyte characters in
// windows of every small size: no window ends inside a character, the
// pieces join up to the whole text, and nothing is lossy.
func TestLogsNeverSplitCharacters(t *testing.T) {
	st := newStore(t)
	text := "día €uro 😀 漢字\n"
	s := start(t, st, Spec{Argv: []string{"printf", "%s", text}})
	waitFor(t, st, ForExit, s.Handle)
	for size := int64(1); size <= 6; size++ {
		var got []byte
		for off := int64(0); ; {
			c, err := st.ReadLog(s.Handle, Stdout, off, ReadOptions{MaxBytes: size})
			if err != nil {
				t.Fatal(err)
			}
			if c.Lossy || strings.ContainsRune(string(c.Data), '\uFFFD') {
				t.Fatalf("size %d at %d: %q is lossy", size, off, c.Data)
			}
			got = append(got, c.Data...)
			if c.EOF {
				break
			}
			if c.NextOffset <= off {
				t.Fatalf("size %d: no progress at %d", size, off)
			}
			off = c.NextOffset
		}
		if string(got) != text {
			t.Fatalf("size %d: %q", size, got)
		}
	}
}

// TestLogsCleaned: data is cleaned like agentsh's capture unless raw.
func TestLogsCleaned(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"printf", `\033[31mred\033[0m\n10%%\r50%%\r100%%\n`}})
	waitFor(t, st, ForExit, s.Handle)
	c, err := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{})
	if err != nil || string(c.Data) != "red\n100%\n" {
		t.Fatalf("cleaned: %q, %v", c.Data, err)
	}
	r, err := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{Raw: true})
	if err != nil || string(r.Data) != "\x1b[31mred\x1b[0m\n10%\r50%\r100%\n" {
		t.Fatalf("raw: %q, %v", r.Data, err)
	}
	if c.NextOffset != r.NextOffset {
		t.Fatalf("offsets differ: %d, %d", c.NextOffset, r.NextOffset)
	}
}

// TestStopLostJobKillsItsSession: a process the job moved into a group of
// its own, orphaned when its supervisor was SIGKILLed, is neither the
// job's descendant nor in its group any more; stop finds it by the
// supervisor's session and the mark in its environment, and kills it.
func TestStopLostJobKillsItsSession(t *testing.T) {
	st := newStore(t)
	m := marker(t)
	spec := Spec{Shell: "set -m; (sleep 300 &); exec sleep 301", Env: append(os.Environ(), markEnv+"="+m)}
	s := start(t, st, spec)
	// Both sleeps, not any two marked processes: the subshell that forks
	// the first counts too, and it is gone once the sleep is there (whose
	// environment reads empty while it execs).
	waitMarkedCmds(t, m, "sleep\x00300\x00", "sleep\x00301\x00")
	killSupervisor(t, st, s)
	got, _ := st.Status(s.Handle)
	if got.Status != StatusLost || got.OrphanPID == 0 {
		t.Fatalf("status %+v", got)
	}
	var stray proctree.Stat
	for _, p := range markedLive(m) {
		if p.PGID != got.OrphanPID {
			stray = p
		}
	}
	if stray.PID == 0 {
		t.Fatalf("no process outside the job's group: %+v", markedLive(m))
	}
	f, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, time.Second)
	if err != nil || f.Status != StatusLost || f.OrphanPID != 0 {
		t.Fatalf("stop: %+v, %v", f, err)
	}
	noneLive(t, m, "after stop")
}

// TestStopLostJobKillsItsSetsidDaemon: a daemon the job double-forked into
// a session of its own (setsid, its parent gone) is, once the supervisor
// is SIGKILLed, neither the job's descendant nor in the supervisor's
// session; stop still finds it by the mark in its environment and kills
// it, and never answers while it runs.
func TestStopLostJobKillsItsSetsidDaemon(t *testing.T) {
	st := newStore(t)
	m := marker(t)
	spec := Spec{Shell: "setsid sh -c 'sleep 300 &'; exec sleep 301", Env: append(os.Environ(), markEnv+"="+m)}
	s := start(t, st, spec)
	// Both sleeps, not any two processes: the shells on the way count as
	// two as well, and the daemon may not have been forked yet then.
	waitMarkedCmds(t, m, "sleep\x00300\x00", "sleep\x00301\x00")
	killSupervisor(t, st, s)
	got, _ := st.Status(s.Handle)
	if got.Status != StatusLost {
		t.Fatalf("status %+v", got)
	}
	var daemon proctree.Stat
	for _, p := range markedLive(m) {
		if p.SID != got.svPID && p.PID != got.OrphanPID {
			daemon = p
		}
	}
	if daemon.PID == 0 {
		t.Fatalf("no process outside the supervisor's session: %+v", markedLive(m))
	}
	f, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, time.Second)
	if err != nil || f.Status != StatusLost || f.OrphanPID != 0 {
		t.Fatalf("stop: %+v, %v", f, err)
	}
	noneLive(t, m, "after stop")
}

// TestKilledWritesLeaveNoTemps kills a caller of Stop in the middle of
// its atomic write of stop.json: the next stop, which takes the lock every
// writer of it holds, removes the leftover and stops the job.
func TestKilledWritesLeaveNoTemps(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}})
	if _, killed := callProcess(t, st, "state.temp.written", "stop", s.Handle); !killed {
		t.Fatal("caller not killed while writing stop.json")
	}
	temps := func() []string {
		var out []string
		ents, _ := os.ReadDir(st.jobDir(s.ID))
		for _, e := range ents {
			if strings.Contains(e.Name(), ".tmp") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	if len(temps()) == 0 {
		t.Fatal("the kill left no temp file: it came too late to test anything")
	}
	f, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, time.Second)
	if err != nil || f.Status != StatusStopped {
		t.Fatalf("stop: %+v, %v", f, err)
	}
	if left := temps(); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

// TestPlantedSymlinks replaces state files with symlinks to a file outside
// the state directory (what a job that can write there could plant): the
// supervisor and the readers never write or read through them. The event
// log and the logs answer state_corrupt, and the outside file is untouched.
func TestPlantedSymlinks(t *testing.T) {
	st := newStore(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("victim\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := func(name string) {
		t.Helper()
		_ = os.Remove(name)
		if err := os.Symlink(victim, name); err != nil {
			t.Fatal(err)
		}
	}
	untouched := func(when string) {
		t.Helper()
		if b, _ := os.ReadFile(victim); string(b) != "victim\n" {
			t.Fatalf("%s: the outside file was written: %q", when, b)
		}
	}

	s := start(t, st, Spec{Shell: "echo out; echo err >&2"})
	waitFor(t, st, ForExit, s.Handle)
	plant(logPath(st.jobDir(s.ID), "stdout"))
	if c, err := st.ReadLog(s.Handle, "stdout", 0, ReadOptions{}); code(err) != result.CodeStateCorrupt {
		t.Fatalf("logs through a planted link: %+v, %v", c, err)
	}

	// The job itself still runs; its events are not appended anywhere.
	plant(st.dir.Join("events.jsonl"))
	s2 := start(t, st, Spec{Argv: []string{"true"}})
	waitFor(t, st, ForExit, s2.Handle)
	untouched("start")
	if _, err := st.dir.ReadEvents(0, nil); code(err) != result.CodeStateCorrupt {
		t.Fatalf("events through a planted link: %v", err)
	}
}
