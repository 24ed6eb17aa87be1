package jobs

import (
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
)

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
