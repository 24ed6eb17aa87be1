package session

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// TestTrackerQuiet: the scan that reads only the known processes and the
// kernel's children lists answers when nothing new is below the root, and
// gives way to the scan by ids whenever something is: a known process's new
// child, an orphan reparented to the root (a subreaper, as the server is),
// a child whose parent exits between two scans. It runs in a process of its
// own, since a subreaper collects orphans that the test binary would not reap.
func TestTrackerQuiet(t *testing.T) {
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
	// A shell that runs what it is sent, like the session's. Each line
	// sent ends by printing a line, which the shell does only once it has
	// run what comes before: reading that line is the test's sign that the
	// processes it expects exist, whatever the load.
	sh := exec.Command("sh")
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sh.StdoutPipe()
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
	printed := bufio.NewReader(out)
	run := func(line string) string {
		t.Helper()
		if _, err := in.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		s, err := printed.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return strings.TrimSpace(s)
	}
	// live checks that n live processes are below the root.
	live := func(n int) {
		t.Helper()
		var got []int
		for _, p := range proctree.Descendants(mustSnap(t), root) {
			if !p.Dead() {
				got = append(got, p.PID)
			}
		}
		if len(got) != n {
			t.Fatalf("live below the root: %v, want %d processes", got, n)
		}
	}
	check("first", false) // a full one
	check("nothing new", true)
	check("still nothing new", true)
	run("sleep 60 & echo") // the echo runs once the fork has returned
	live(2)
	check("a child of a known process", false)
	check("then nothing new", true)
	// A double fork: the middle process exits, its child is reparented to
	// the root and put on its main thread's list. The shell waits for the
	// middle one, and the kernel reparents before it reports an exit.
	run("sh -c 'sleep 61 & exit 0'; echo")
	live(3)
	check("an orphan", false)
	check("the orphan known", true)
	// A known process that exits leaves its known child to the root. The
	// middle one prints its pid once it has forked.
	mid, err := strconv.Atoi(run("sh -c 'sleep 62 & echo $$; wait' &"))
	if err != nil {
		t.Fatal(err)
	}
	live(5)
	check("a process and its child", false)
	midID, err := proctree.Identify(mid)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(mid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Its pidfd is readable once it is a zombie, after its child moved.
	if err := proctree.Wait(context.Background(), midID); err != nil {
		t.Fatal(err)
	}
	live(4)
	check("its parent gone", true)
	check("once more", true)
	// A multi-threaded process's child is on the list of the thread that
	// forked it: this one forks from a thread other than its main one.
	mt := exec.Command(os.Args[0], "-test.run=^TestTrackerThreadHelper$")
	mt.Env = append(os.Environ(), "AGENTPLANE_TRACKER_THREADS=1")
	mtIn, err := mt.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	mtOut, err := mt.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := mt.Start(); err != nil {
		t.Fatal(err)
	}
	tr.started()
	t.Cleanup(func() { _ = mt.Process.Kill(); _ = mt.Wait() })
	line := make([]byte, 64)
	if _, err := mtOut.Read(line); err != nil { // "ready": its threads are up
		t.Fatal(err)
	}
	check("a multi-threaded process", false)
	check("its threads start nothing", true)
	if _, err := mtIn.Write([]byte("fork\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := mtOut.Read(line); err != nil { // "forked"
		t.Fatal(err)
	}
	check("a child of one of its threads", false)
	check("that child known", true)
}

// TestTrackerThreadHelper is the multi-threaded process of TestTrackerQuiet:
// it forks a sleep from a locked thread other than its main one when told.
func TestTrackerThreadHelper(t *testing.T) {
	if os.Getenv("AGENTPLANE_TRACKER_THREADS") == "" {
		t.Skip("a helper of TestTrackerQuiet")
	}
	forked := make(chan error)
	var fork func()
	fork = func() {
		runtime.LockOSThread() // never unlocked: the thread stays this goroutine's
		if syscall.Gettid() == os.Getpid() {
			// Holding the main thread, the next goroutine gets another.
			go fork()
			select {}
		}
		if _, err := io.ReadFull(os.Stdin, make([]byte, 5)); err != nil {
			forked <- err
			return
		}
		c := exec.Command("sleep", "60")
		forked <- c.Start()
		select {}
	}
	go fork()
	os.Stdout.WriteString("ready\n")
	if err := <-forked; err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("forked\n")
	select {}
}
