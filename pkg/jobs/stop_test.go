package jobs

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
)

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
	c, _ := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{MaxBytes: 0})
	pid, _ := strconv.Atoi(strings.TrimSpace(string(c.Data)))
	if s, err := proctree.ReadStat(pid); err == nil && !s.Dead() && s.SID == pid {
		t.Fatalf("background process %d outlived its job", pid)
	}
}
