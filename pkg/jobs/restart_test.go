package jobs

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

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
	c, _ := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{MaxBytes: 0})
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
	waitLogBytes(t, st, s.Handle, Stdout, 6)
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

// TestRestartAdmit: Admit decides the saved spec before anything stops, and
// the new supervisor runs the spec Admit decided: one rewritten after the
// decision (while the job is being stopped, say) is refused, not run.
func TestRestartAdmit(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}})
	refused := result.Errorf(result.CodeSandboxLocked, "not admitted")
	st.Admit = func(Spec) error { return refused }
	if _, err := st.Restart(ctxT(t, 30*time.Second), s.Handle); code(err) != result.CodeSandboxLocked {
		t.Fatalf("refused restart: %v", err)
	}
	if got, _ := st.Status(s.Handle); got.Status != StatusRunning || got.PID != s.PID {
		t.Fatalf("a refused restart stopped the job: %+v", got)
	}
	path := filepath.Join(st.jobDir(s.ID), specFile)
	st.Admit = func(spec Spec) error {
		spec.Argv = []string{"sh", "-c", "echo rewritten; exec sleep 300"}
		return state.WriteJSONAtomic(path, spec, 0o600)
	}
	if _, err := st.Restart(ctxT(t, 30*time.Second), s.Handle); code(err) != result.CodeStateCorrupt {
		t.Fatalf("a spec rewritten after the decision: %v, want state_corrupt", err)
	}
	c, _ := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{MaxBytes: 0})
	if strings.Contains(string(c.Data), "rewritten") {
		t.Fatalf("the rewritten spec ran: %q", c.Data)
	}
}
