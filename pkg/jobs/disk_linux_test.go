package jobs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
	"golang.org/x/sys/unix"
)

// mountOrSkip mounts as root and skips the test elsewhere: these tests
// need mount(2), which CI has (it runs as root).
func mountOrSkip(t *testing.T, source, target, fstype string, flags uintptr, data string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs or a read-only bind mount (CI runs as root)")
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		t.Skipf("mount %s on %s: %v (no mount namespace privileges here)", fstype, target, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
}

// storeAt is newStore on an existing directory.
func storeAt(t *testing.T, dir string) *Store {
	t.Helper()
	d, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return NewStore(d, []string{exe, superviseArg, d.Path()})
}

// fillDisk writes a file in dir until the filesystem is full, and returns
// the function that frees it again.
func fillDisk(t *testing.T, dir string) func() {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{'x'}, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// Byte by byte into the last page, then small files into any page
	// left, so that no write of any size fits.
	for {
		if _, err := f.Write([]byte{'x'}); err != nil {
			break
		}
	}
	for i := 0; ; i++ {
		if os.WriteFile(path+"."+strconv.Itoa(i), []byte{'x'}, 0o600) != nil {
			break
		}
	}
	return func() {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "filler") {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// TestFullDisk runs the state directory on a 256 KiB tmpfs and fills it:
// a start says no_space, a running job can still be stopped, and a job
// that ends while the disk is full is recorded as it ended (not lost),
// with the output that could not be kept counted.
func TestFullDisk(t *testing.T) {
	dir := t.TempDir()
	mountOrSkip(t, "tmpfs", dir, "tmpfs", 0, "size=256k,mode=0700")
	st := storeAt(t, dir)
	fifo := filepath.Join(t.TempDir(), "gate")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ends := start(t, st, Spec{Shell: "read x < " + fifo + "; echo written-on-a-full-disk"})
	stops := start(t, st, Spec{Argv: []string{"sleep", "300"}})
	free := fillDisk(t, dir)
	defer free()

	if _, err := st.Start(ctxT(t, 30*time.Second), Spec{Argv: []string{"true"}, Cwd: t.TempDir()}); code(err) != result.CodeNoSpace {
		t.Fatalf("start on a full disk: %v", err)
	}
	// The refused start removed what it had made (its job directory and
	// files): fill that space too, or the job's output may land in it.
	fillDisk(t, dir)

	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("go\n"))
	w.Close()
	got := waitFor(t, st, ForExit, ends.Handle)
	if got.Status != StatusExited || got.StdoutLostBytes == 0 {
		t.Fatalf("a job that ended on a full disk: %+v", got)
	}

	// Its supervisor gave its reserve back as it exited: fill that too,
	// so that the stop request cannot be written.
	sv, svStart := svOf(t, st, ends)
	_ = proctree.Wait(ctxT(t, 20*time.Second), proctree.ID{PID: sv, Start: svStart})
	fillDisk(t, dir)
	f, err := st.Stop(ctxT(t, 30*time.Second), stops.Handle, syscall.SIGTERM, time.Second)
	if err != nil || f.Status != StatusStopped {
		out, _ := exec.Command("sh", "-c", "df -k "+dir+"; ls -la "+st.jobDir(stops.ID)+"; cat "+st.jobDir(stops.ID)+"/supervisor.log "+st.jobDir(stops.ID)+"/status.json").CombinedOutput()
		t.Fatalf("stop on a full disk: %+v, %v\n%s", f, err, out)
	}
	if _, err := os.Stat(filepath.Join(st.jobDir(stops.ID), stopFile)); !os.IsNotExist(err) {
		t.Fatalf("the stop request was written after all: %v", err)
	}

	// The supervisor of a restart cannot record its run: its reason is
	// told, not swallowed. (The ended supervisors gave their reserves
	// back as they exited: fill that too.)
	sv, svStart = svOf(t, st, stops)
	_ = proctree.Wait(ctxT(t, 20*time.Second), proctree.ID{PID: sv, Start: svStart})
	fillDisk(t, dir)
	if r, err := st.Restart(ctxT(t, 30*time.Second), stops.Handle); code(err) != result.CodeNoSpace {
		out, _ := exec.Command("sh", "-c", "df -k "+dir+"; ls -la "+st.jobDir(stops.ID)+"; cat "+st.jobDir(stops.ID)+"/supervisor.log").CombinedOutput()
		t.Fatalf("restart on a full disk: %+v %v\n%s", r, err, out)
	}
	free()
	again, err := st.Restart(ctxT(t, 30*time.Second), stops.Handle)
	if err != nil || again.Status != StatusRunning {
		t.Fatalf("restart once there is space: %+v, %v", again, err)
	}
}

// TestReadOnlyState reads a state directory through a read-only bind
// mount: status, logs at an offset, tail, list and events work; what
// records something says state_read_only; stop still stops.
func TestReadOnlyState(t *testing.T) {
	rw := storeAt(t, t.TempDir())
	running := start(t, rw, Spec{Shell: "echo hello; exec sleep 300"})
	ended := start(t, rw, Spec{Shell: "echo done"})
	waitFor(t, rw, ForExit, ended.Handle)
	// The first line is out before the view is taken.
	for {
		c, _ := rw.ReadLog(running.Handle, Stdout, 0, ReadOptions{})
		if string(c.Data) == "hello\n" {
			break
		}
		w, err := rw.Watch(ctxT(t, 10*time.Second), running.Handle)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := rw.ReadLog(running.Handle, Stdout, 0, ReadOptions{}); string(c.Data) == "hello\n" {
			break
		}
		<-w
	}

	view := t.TempDir()
	mountOrSkip(t, rw.dir.Path(), view, "", unix.MS_BIND, "")
	if err := unix.Mount("", view, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Skipf("remount read-only: %v", err)
	}
	ro := storeAt(t, view)

	if s, err := ro.Status(running.Handle); err != nil || s.Status != StatusRunning {
		t.Fatalf("status: %+v, %v", s, err)
	}
	if c, err := ro.ReadLog(running.Handle, Stdout, 2, ReadOptions{}); err != nil || string(c.Data) != "llo\n" {
		t.Fatalf("logs --offset: %+v, %v", c, err)
	}
	if c, err := ro.Tail(ended.Handle, Stdout, 1, ReadOptions{}); err != nil || string(c.Data) != "done\n" {
		t.Fatalf("logs --tail: %+v, %v", c, err)
	}
	if l, err := ro.List(); err != nil || len(l) != 2 {
		t.Fatalf("list: %+v, %v", l, err)
	}
	if evs, err := ro.Events(0, ""); err != nil || len(evs) < 3 {
		t.Fatalf("events: %+v, %v", evs, err)
	}
	if _, err := ro.ReadSince(running.Handle, Stdout, "r", ReadOptions{}); code(err) != result.CodeStateReadOnly {
		t.Fatalf("logs --since-last moves a cursor: %v", err)
	}
	if _, err := ro.Start(ctxT(t, 30*time.Second), Spec{Argv: []string{"true"}, Cwd: t.TempDir()}); code(err) != result.CodeStateReadOnly {
		t.Fatalf("start: %v", err)
	}
	if _, err := ro.Remove(ctxT(t, 30*time.Second), ended.Handle, false); code(err) != result.CodeStateReadOnly {
		t.Fatalf("rm: %v", err)
	}
	f, err := ro.Stop(ctxT(t, 30*time.Second), running.Handle, syscall.SIGTERM, time.Second)
	if err != nil || f.Status != StatusStopped {
		t.Fatalf("stop: %+v, %v", f, err)
	}
}
