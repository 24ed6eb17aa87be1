package jobs

import (
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
)

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
