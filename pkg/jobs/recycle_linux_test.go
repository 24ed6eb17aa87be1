package jobs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/internal/testkit"
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
	const knob = testkit.NextPIDKnob
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
			stranger := testkit.StrangerAt(t, leader)
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

// TestStopLostJobKillsEnvClearedSetsid: a daemon the job double-forked
// into a session of its own with an empty environment (env -i setsid)
// carries no mark, is in no session of the job's and below no process of
// it once the supervisor is SIGKILLed; stop must still kill it. Where a
// writable cgroup v2 exists the job's cgroup holds it.
func TestStopLostJobKillsEnvClearedSetsid(t *testing.T) {
	cg, err := proctree.MakeTreeCgroup("probe-" + strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	cg.Remove()
	st := newStore(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	spec := Spec{Shell: `(env -i setsid sh -c 'echo $$ > "$0"; exec sleep 302' "$PIDFILE" &); exec sleep 303`,
		Env: append(os.Environ(), "PIDFILE="+pidfile)}
	s := start(t, st, spec)
	var daemon proctree.ID
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(pidfile)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			if id, err := proctree.Identify(pid); err == nil {
				daemon = id
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon never wrote its pid")
		}
		time.Sleep(10 * time.Millisecond) // a file being written has no event to wait on here
	}
	t.Cleanup(func() {
		if daemon.Alive() {
			_ = syscall.Kill(daemon.PID, syscall.SIGKILL)
		}
	})
	killSupervisor(t, st, s)
	got, _ := st.Status(s.Handle)
	if got.Status != StatusLost {
		t.Fatalf("status %+v", got)
	}
	if env, err := proctree.Environ(daemon.PID); err != nil || strings.Contains(strings.Join(env, "\n"), sessionMarkEnv) {
		t.Fatalf("the daemon's environment is %q (%v), with the mark", env, err)
	}
	f, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, time.Second)
	if err != nil || f.Status != StatusLost || f.OrphanPID != 0 {
		t.Fatalf("stop: %+v, %v", f, err)
	}
	if daemon.Alive() {
		t.Fatalf("stop answered %s while the env -i setsid daemon %d runs", f.Status, daemon.PID)
	}
	rec := recordOf(t, st, s)
	if rec.Cgroup == "" {
		t.Fatal("no cgroup recorded")
	}
	if _, err := os.Stat(rec.Cgroup); !os.IsNotExist(err) {
		t.Fatalf("the job's cgroup %s is left: %v", rec.Cgroup, err)
	}
}

// TestStopLostJobNothingLeftRemovesCgroup: a lost job of which nothing
// lives any more (its supervisor SIGKILLed, its process gone since) has
// its empty cgroup removed by stop too (one never stopped is swept once
// empty: proctree's sweep of dead owners' cgroups).
func TestStopLostJobNothingLeftRemovesCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the job's cgroup")
	}
	st := newStore(t)
	m := marker(t)
	s := start(t, st, Spec{Shell: "exec sleep 300", Env: append(os.Environ(), markEnv+"="+m)})
	waitMarkedCmds(t, m, "sleep\x00300\x00")
	killSupervisor(t, st, s)
	rec := recordOf(t, st, s)
	if rec.Cgroup == "" {
		t.Skip("no cgroup v2 for the job here")
	}
	for _, p := range markedLive(m) {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(markedLive(m)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the job's process did not die")
		}
		time.Sleep(10 * time.Millisecond) // polling /proc for the kill
	}
	if _, err := st.Stop(ctxT(t, 30*time.Second), s.Handle, syscall.SIGTERM, time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(rec.Cgroup); !os.IsNotExist(err) {
		t.Fatalf("the job's empty cgroup %s is left: %v", rec.Cgroup, err)
	}
}
