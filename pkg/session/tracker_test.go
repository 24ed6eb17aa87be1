package session

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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

// TestTrackerQuiet: the scan that reads only the known processes and the
// kernel's children lists answers when nothing new is below the root, and
// gives way to the scan by ids whenever something is: a known process's new
// child, an orphan reparented to the root (a subreaper, as the server is),
// a child whose parent exits between two scans. It runs in a process of its
// own, since a subreaper collects orphans that the test binary would not reap.
func TestTrackerQuiet(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("children lists are Linux's")
	}
	if os.Getenv("AGENTPLANE_TRACKER_QUIET") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTrackerQuiet$", "-test.v")
		cmd.Env = append(os.Environ(), "AGENTPLANE_TRACKER_QUIET=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestTrackerQuiet") {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		return
	}
	if err := proctree.SetSubreaper(); err != nil {
		t.Skip("no subreaper:", err)
	}
	root := os.Getpid()
	tr := newTracker(root)
	check := func(step string, wantQuiet bool) {
		t.Helper()
		before := tr.quiets
		got := ids(tr.scan())
		want := ids(proctree.Descendants(mustSnap(t), root))
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
		if quiet := tr.quiets > before; quiet != wantQuiet {
			t.Errorf("%s: quiet scan %v, want %v", step, quiet, wantQuiet)
		}
	}
	// A shell that runs what it is sent, like the session's.
	sh := exec.Command("sh")
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	tr.started()
	t.Cleanup(func() {
		in.Close()
		_ = sh.Process.Kill()
		_ = sh.Wait()
		proctree.KillAllDescendants(5 * time.Second)
	})
	tmp := t.TempDir()
	run := func(line string) {
		t.Helper()
		if _, err := in.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	// count waits until n live processes are below the root.
	count := func(n int) {
		t.Helper()
		waitFor(t, func() bool {
			live := 0
			for _, p := range proctree.Descendants(mustSnap(t), root) {
				if !p.Dead() {
					live++
				}
			}
			return live == n
		})
	}
	check("first", false) // a full one
	check("nothing new", true)
	check("still nothing new", true)
	run("sleep 60 &")
	count(2)
	check("a child of a known process", false)
	check("then nothing new", true)
	// A double fork: the middle process exits, its child is reparented to
	// the root and put on its main thread's list.
	run("sh -c 'sleep 61 & exit 0'")
	count(3)
	check("an orphan", false)
	check("the orphan known", true)
	// A known process that exits leaves its known child to the root.
	run("sh -c 'sleep 62 & echo $$ > " + tmp + "/mid; wait' &")
	count(5)
	check("a process and its child", false)
	b, err := os.ReadFile(tmp + "/mid")
	if err != nil {
		t.Fatal(err)
	}
	mid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(mid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	count(4)
	check("its parent gone", true)
	// A thread of a known process starts nothing: the scan stays quiet.
	check("once more", true)
}
