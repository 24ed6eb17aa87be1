package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenNoSymlinks: both ways of opening a path without following a
// symbolic link (openat2, and the component walk a sandboxed caller falls
// back to, whose seccomp filter answers openat2 with ENOSYS) refuse a link
// anywhere on the path, and OpenChecked refuses another directory at the
// checked path.
func TestOpenNoSymlinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "a"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "final")); err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func(string) (int, error){"openat2": openNoSymlinks, "walk": walkNoSymlinks} {
		fd, err := open(real)
		if err != nil {
			t.Fatalf("%s %s: %v", name, real, err)
		}
		got, err := fdID(fd)
		unix.Close(fd)
		var st unix.Stat_t
		if err != nil || unix.Stat(real, &st) != nil || got != (FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}) {
			t.Fatalf("%s: identity %v, %v", name, got, err)
		}
		for _, p := range []string{filepath.Join(dir, "link", "b"), filepath.Join(dir, "final")} {
			if fd, err := open(p); !errors.Is(err, unix.ELOOP) {
				if err == nil {
					unix.Close(fd)
				}
				t.Errorf("%s %s: %v, want ELOOP", name, p, err)
			}
		}
	}
	id, err := Identify(real)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(real, real+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if fd, err := OpenChecked(real, id); err == nil {
		unix.Close(fd)
		t.Fatal("OpenChecked accepted another directory at the checked path")
	}
}

// TestChangedRecorded: OpenChecked's refusal of a path that is another
// file now is a *ChangedError, and the helper's failure names the path
// (Failure.Changed) however the error was wrapped on the way, so that a
// runner can tell an overtaken start from any other failure.
func TestChangedRecorded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	if err := os.WriteFile(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := Identify(path)
	if err != nil {
		t.Fatal(err)
	}
	// Replaced by a rename, as git writes .git/config; the old file kept
	// under another name so that its inode number is not reused.
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, refused := OpenChecked(path, id)
	var ce *ChangedError
	if !errors.As(refused, &ce) || ce.Path != path {
		t.Fatalf("OpenChecked of a replaced file: %v, want a *ChangedError for %s", refused, path)
	}
	status, err := os.Create(filepath.Join(dir, "status"))
	if err != nil {
		t.Fatal(err)
	}
	h := &helper{status: status}
	h.fail(ExitSetupFailed, "sandbox_failed", "cannot protect %s: %v", path, fmt.Errorf("wrapped: %w", refused))
	status.Close()
	data, _ := os.ReadFile(status.Name())
	var f Failure
	if err := json.Unmarshal(data, &f); err != nil || f.Changed != path || f.Code != "sandbox_failed" {
		t.Fatalf("the helper's failure %s (%v), want changed %q", data, err, path)
	}
}
