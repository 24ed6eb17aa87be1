package confine

import (
	"errors"
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
