package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/run"
)

// privateArea is this run's temp area under a TMPDIR of the test's own.
func privateArea(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	area, _, err := tempAreas("")
	must(t, err)
	return area
}

func countSpares(t *testing.T, area string) int {
	t.Helper()
	return len(spares(area))
}

// Cleanup keeps the emptied private directory as a spare, the next run
// takes it under its own name, and nothing the previous command left in
// its TMPDIR reaches the next one.
func TestPrivateReuse(t *testing.T) {
	requireSandbox(t)
	area := privateArea(t)
	_, ws, _ := dirs(t)
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws}
	res, prep := sandboxed(t, p, ws, "sh", "-c", `echo secret > "$TMPDIR/left"; mkdir -p "$TMPDIR/d/e"; echo x > "$TMPDIR/d/e/f"; chmod 0 "$TMPDIR/d"; echo ok`)
	if out(res) != "ok\n" {
		t.Fatalf("output %q", out(res))
	}
	first := filepath.Dir(prep.TempDir)
	prep.Cleanup()
	if n := countSpares(t, area); n != 1 {
		t.Fatalf("%d spares after one run, want 1", n)
	}
	// The helper's empty status file stays for the next one to open.
	if kept, _ := filepath.Glob(filepath.Join(area, sparePrefix+"*", statusFile)); len(kept) != 1 || !emptyStatus(kept[0]) {
		t.Errorf("the spare's status file: %v", kept)
	}
	res, prep2 := sandboxed(t, p, ws, "sh", "-c", `ls -A "$TMPDIR"; stat -c '%a %u' "$TMPDIR"; echo done`)
	if want := "700 " + strconv.Itoa(os.Geteuid()) + "\ndone\n"; out(res) != want {
		t.Errorf("the next run's TMPDIR: %q, want %q (empty, 0700, the caller's)", out(res), want)
	}
	if n := countSpares(t, area); n != 0 {
		t.Errorf("%d spares while the spare is in use, want 0", n)
	}
	if filepath.Dir(prep2.TempDir) == first {
		t.Errorf("the second run kept the first one's name %s", first)
	}
	if _, ok := nameOwner(filepath.Base(filepath.Dir(prep2.TempDir))); !ok {
		t.Errorf("a claimed spare does not name its owner: %s", prep2.TempDir)
	}
	if err := prep2.Failure(); err != nil {
		t.Errorf("the run in the spare reports a failure: %v", err)
	}
	// A status file that records something is removed, not kept: the
	// next run in the spare must not read this run's failure.
	status := filepath.Join(filepath.Dir(prep2.TempDir), statusFile)
	must(t, os.WriteFile(status, []byte(`{"code":"sandbox_failed","message":"planted"}`), 0o600))
	prep2.Cleanup()
	if kept, _ := filepath.Glob(filepath.Join(area, sparePrefix+"*", statusFile)); len(kept) != 0 {
		t.Errorf("a status file with content was kept: %v", kept)
	}
}

// A spare is used only when it is what Cleanup leaves: a planted symlink,
// a directory with the wrong mode or with something in it is removed
// instead, and the run gets a new directory.
func TestPrivatePlantedSpare(t *testing.T) {
	requireSandbox(t)
	area := privateArea(t)
	elsewhere := t.TempDir()
	must(t, os.Mkdir(filepath.Join(elsewhere, "tmp"), 0o700))
	must(t, os.Chmod(elsewhere, 0o711))
	must(t, os.Symlink(elsewhere, filepath.Join(area, sparePrefix+"link")))
	loose := filepath.Join(area, sparePrefix+"loose")
	must(t, os.MkdirAll(filepath.Join(loose, "tmp"), 0o700))
	must(t, os.Chmod(loose, 0o755))
	full := filepath.Join(area, sparePrefix+"full")
	must(t, os.MkdirAll(filepath.Join(full, "tmp"), 0o700))
	must(t, os.Chmod(full, 0o711))
	must(t, os.WriteFile(filepath.Join(full, "tmp", "planted"), []byte("x"), 0o600))
	// A status file that records a failure, and one linked elsewhere.
	stale := filepath.Join(area, sparePrefix+"stale")
	must(t, os.MkdirAll(filepath.Join(stale, "tmp"), 0o700))
	must(t, os.Chmod(stale, 0o711))
	must(t, os.WriteFile(filepath.Join(stale, statusFile), []byte(`{"code":"sandbox_failed","message":"planted"}`), 0o600))
	linked := filepath.Join(area, sparePrefix+"linked")
	must(t, os.MkdirAll(filepath.Join(linked, "tmp"), 0o700))
	must(t, os.Chmod(linked, 0o711))
	must(t, os.WriteFile(filepath.Join(elsewhere, "status"), nil, 0o600))
	must(t, os.Link(filepath.Join(elsewhere, "status"), filepath.Join(linked, statusFile)))
	for i := 0; i < 5; i++ {
		prep, err := Prepare(Policy{Mode: ModeReadOnly}, self(t))
		must(t, err)
		base := filepath.Dir(prep.TempDir)
		if strings.HasPrefix(base, elsewhere) {
			t.Fatalf("the run took the planted symlink's target %s", base)
		}
		entries, err := os.ReadDir(prep.TempDir)
		must(t, err)
		if len(entries) != 0 {
			t.Fatalf("the run's TMPDIR holds %v", entries)
		}
		if err := prep.Failure(); err != nil {
			t.Fatalf("a fresh run reads a failure: %v", err)
		}
		defer prep.Cleanup()
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "tmp")); err != nil {
		t.Errorf("the symlink's target was touched: %v", err)
	}
	// The spare whose status file has a second name was removed, not used.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(elsewhere, "status"), &st); err != nil || st.Nlink != 1 {
		t.Errorf("the linked status file: %d names (%v)", st.Nlink, err)
	}
}

// At most maxSpares are kept, however many runs end together.
func TestPrivateSparesBounded(t *testing.T) {
	requireSandbox(t)
	area := privateArea(t)
	var preps []*Prepared
	for i := 0; i < maxSpares+3; i++ {
		prep, err := Prepare(Policy{Mode: ModeReadOnly}, self(t))
		must(t, err)
		preps = append(preps, prep)
	}
	for _, p := range preps {
		p.Cleanup()
	}
	if n := countSpares(t, area); n != maxSpares {
		t.Errorf("%d spares, want %d", n, maxSpares)
	}
	entries, err := os.ReadDir(area)
	must(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), runPrefix) {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// A --user run's TMPDIR belongs to its target; the spare it leaves goes
// back to the caller, 0700, before another run gets it.
func TestPrivateReuseAfterUser(t *testing.T) {
	requireRoot(t)
	area := privateArea(t)
	spare := filepath.Join(area, sparePrefix+"user")
	must(t, os.MkdirAll(filepath.Join(spare, "tmp"), 0o700))
	must(t, os.Chmod(spare, 0o711))
	must(t, os.Chown(filepath.Join(spare, "tmp"), 65534, 65534))
	must(t, os.Chmod(filepath.Join(spare, "tmp"), 0o755))
	dir, err := claimPrivate(area)
	must(t, err)
	defer releasePrivate(dir)
	var st syscall.Stat_t
	must(t, syscall.Lstat(filepath.Join(dir, "tmp"), &st))
	if int(st.Uid) != os.Geteuid() || st.Mode&0o7777 != 0o700 {
		t.Errorf("claimed TMPDIR: uid %d mode %o, want %d 0700", st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	if _, err := os.Stat(spare); err == nil {
		t.Error("the spare was not taken")
	}
}

// BenchmarkPrivateDir is a run's private directory taken and given back
// (a spare renamed twice), against making and removing one, on the temp
// dir's filesystem.
func BenchmarkPrivateDir(b *testing.B) {
	tmp := b.TempDir()
	b.Setenv("TMPDIR", tmp)
	area, _, err := tempAreas("")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("spare", func(b *testing.B) {
		for b.Loop() {
			dir, err := claimPrivate(area)
			if err != nil {
				b.Fatal(err)
			}
			releasePrivate(dir)
		}
	})
	b.Run("mkdir-rmdir", func(b *testing.B) {
		for b.Loop() {
			dir, err := makePrivate(area, 0o711)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
				b.Fatal(err)
			}
			if err := os.RemoveAll(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTempAreas lists a directory of 1,500 entries for other uids'
// areas, as a long-lived machine's temp dir: the raw listing tempAreas
// makes against os.ReadDir (a DirEntry per entry, sorted).
func BenchmarkTempAreas(b *testing.B) {
	dir := b.TempDir()
	for i := 0; i < 1500; i++ {
		if err := os.Mkdir(filepath.Join(dir, "entry-"+strconv.Itoa(i)), 0o700); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("scandir", func(b *testing.B) {
		for b.Loop() {
			n := 0
			if err := scanDir(dir, func(name []byte, _ byte) {
				if strings.HasPrefix(string(name), areaPrefix) {
					n++
				}
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("readdir", func(b *testing.B) {
		for b.Loop() {
			n := 0
			entries, err := os.ReadDir(dir)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), areaPrefix) && e.IsDir() {
					n++
				}
			}
		}
	})
}

// The helper opens the status file it is handed without truncating an
// empty one, and still empties one that holds something: a failure
// recorded there before the run is never read as the run's.
func TestHelperEmptiesStatus(t *testing.T) {
	requireSandbox(t)
	privateArea(t)
	prep, err := Prepare(Policy{Mode: ModeReadOnly}, self(t))
	must(t, err)
	t.Cleanup(prep.Cleanup)
	status := filepath.Join(filepath.Dir(prep.TempDir), statusFile)
	must(t, os.WriteFile(status, []byte(`{"code":"sandbox_failed","message":"planted"}`), 0o600))
	files, started, err := prep.Launch()
	must(t, err)
	res, err := run.Run(context.Background(), run.Request{
		Argv: prep.Argv([]string{"true"}), Dir: "/", Env: append(os.Environ(), prep.Env...),
		Timeout: time.Minute, SysProcAttr: prep.SysProcAttr, ExtraFiles: files,
	})
	started()
	must(t, err)
	if res.ExitCode != 0 || prep.Failure() != nil {
		t.Fatalf("exit %d, failure %v", res.ExitCode, prep.Failure())
	}
	if !emptyStatus(status) {
		t.Errorf("the status file was not emptied")
	}
}

// BenchmarkTempAreasValid is tempAreas on the common path: the caller's
// areas in the temp dir and in /tmp (1,500 entries each, their listings
// cached) already there and valid. (/tmp is one of the benchmark's own:
// the machine's changes all the time.)
func BenchmarkTempAreasValid(b *testing.B) {
	dir, sys := b.TempDir(), b.TempDir()
	for _, d := range []string{dir, sys} {
		for i := 0; i < 1500; i++ {
			if err := os.Mkdir(filepath.Join(d, "entry-"+strconv.Itoa(i)), 0o700); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Setenv("TMPDIR", dir)
	defer func(old string) { systemTmp = old }(systemTmp)
	systemTmp = sys
	if _, _, err := tempAreas(""); err != nil {
		b.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	for _, d := range []string{dir, sys} {
		if err := os.Chtimes(d, past, past); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, _, err := tempAreas(""); err != nil {
			b.Fatal(err)
		}
	}
}
