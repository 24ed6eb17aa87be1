package session

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// The incremental scan finds what a full snapshot finds below the root,
// scan after scan, as processes come and go below it (children,
// grandchildren, ones started between scans) and elsewhere.
func TestTrackerAgreesWithSnapshot(t *testing.T) {
	root := os.Getpid()
	tr := newTracker(root)
	check := func(step string) {
		t.Helper()
		// Processes may exit between the two reads: compare only those
		// that are alive in both.
		got := ids(tr.scan())
		snap, err := proctree.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		want := ids(proctree.Descendants(snap, root))
		for pid := range want {
			if _, ok := got[pid]; !ok && proctree.Alive(pid, want[pid]) {
				t.Errorf("%s: scan misses %d", step, pid)
			}
		}
		for pid := range got {
			if _, ok := want[pid]; !ok && proctree.Alive(pid, got[pid]) {
				t.Errorf("%s: scan has %d, which is not below the root", step, pid)
			}
		}
	}
	start := func(args ...string) *exec.Cmd {
		c := exec.Command(args[0], args[1:]...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		tr.started() // as the server does for the shell it starts
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	check("empty")
	a := start("sleep", "60")
	check("child")
	// A grandchild, started by a child that existed at the last scan.
	b := start("sh", "-c", "sleep 60 & sleep 60 & wait")
	waitFor(t, func() bool { return len(proctree.Descendants(mustSnap(t), b.Process.Pid)) == 2 })
	check("grandchildren")
	// Processes that are not below the root, created in between: a
	// grandchild's orphan is reparented to the init process or a
	// subreaper above us, so it is not below the root.
	out, err := exec.Command("sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("kill", string(out[:len(out)-1])).Run() })
	check("orphan elsewhere")
	// A process that was there at the last scan starts a child after it.
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	c := start("sh", "-c", "read x < "+fifo+"; sleep 60")
	check("waiting parent")
	if runtime.GOOS == "linux" && tr.last == 0 {
		t.Fatal("the scans are not incremental")
	}
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(proctree.Descendants(mustSnap(t), c.Process.Pid)) == 1 })
	check("late child of an old parent")
	_ = a.Process.Kill()
	_ = a.Wait()
	check("child gone")
	for i := 0; i < 3; i++ {
		start("sleep", "60")
		check("more")
	}
}

func ids(ps []proctree.Stat) map[int]uint64 {
	m := map[int]uint64{}
	for _, p := range ps {
		if !p.Dead() {
			m[p.PID] = p.StartTime
		}
	}
	return m
}

func mustSnap(t *testing.T) []proctree.Stat {
	s, err := proctree.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
