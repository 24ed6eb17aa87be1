package proctree

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The processes of TestShutdownAtParentExit, this test binary re-executed.
const (
	heldParentArg = "__held_parent"
	heldChildArg  = "__held_child"
)

// runHeldParent is the parent whose end of a stream another process
// holds: it starts the reader (heldChildArg) with the other end as fd 3
// and, once the reader watches it, a holder (sleep) with a copy of its own end, writes "hello" to the
// stream, prints the two pids and waits to be killed.
func runHeldParent() {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		os.Exit(3)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "mine"), os.NewFile(uintptr(fds[1]), "theirs")
	child := exec.Command(os.Args[0], heldChildArg)
	child.ExtraFiles = []*os.File{theirs}
	child.Stdout = os.Stdout
	ready, err := child.StderrPipe()
	if err != nil {
		os.Exit(3)
	}
	if err := child.Start(); err != nil {
		os.Exit(3)
	}
	theirs.Close()
	// As the keeper starts its command only after it watches its parent,
	// the holder is started only then.
	if _, err := ready.Read(make([]byte, 1)); err != nil {
		os.Exit(3)
	}
	holder := exec.Command("sleep", "7521")
	holder.ExtraFiles = []*os.File{mine}
	if err := holder.Start(); err != nil {
		os.Exit(3)
	}
	if _, err := mine.WriteString("hello"); err != nil {
		os.Exit(3)
	}
	os.Stdout.WriteString(strconv.Itoa(child.Process.Pid) + " " + strconv.Itoa(holder.Process.Pid) + "\n")
	for {
		time.Sleep(time.Hour) // until killed (a bare select{} is a deadlock to the runtime)
	}
}

// runHeldChild reads fd 3 to end of file, learning of its parent's exit
// from shutdownAtParentExit (it says so on stderr once it watches), and
// prints what it read.
func runHeldChild() {
	shutdownAtParentExit(3)
	os.Stderr.WriteString("w")
	b, err := io.ReadAll(os.NewFile(3, "stream"))
	if err != nil {
		os.Exit(3)
	}
	os.Stdout.WriteString("eof " + string(b) + "\n")
	os.Exit(0)
}

// TestShutdownAtParentExit: a helper reading its parent's end of a stream
// reads what the parent wrote and then end of file when the parent is
// SIGKILLed, though another process (as root could, with pidfd_getfd)
// holds a copy of the parent's end and keeps the stream open.
func TestShutdownAtParentExit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parent := exec.Command(os.Args[0], heldParentArg)
	parent.Stdout = f
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	var child, holder int
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(out)
		if line, ok := strings.CutSuffix(string(b), "\n"); ok {
			p := strings.Fields(line)
			child, _ = strconv.Atoi(p[0])
			holder, _ = strconv.Atoi(p[1])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parent never started its processes: %q", b)
		}
		time.Sleep(5 * time.Millisecond) // polling a file another process writes
	}
	t.Cleanup(func() { _ = syscall.Kill(holder, syscall.SIGKILL); _ = syscall.Kill(child, syscall.SIGKILL) })
	id, err := Identify(child)
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Wait(ctx, id); err != nil {
		t.Fatal("the reader never saw the end of its killed parent's stream")
	}
	b, _ := os.ReadFile(out)
	if !strings.HasSuffix(string(b), "eof hello\n") {
		t.Fatalf("the reader printed %q, want what its parent wrote, then end of file", b)
	}
}
