package ctlfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A ".." after a link goes up from the link's target, as the kernel goes:
// Abs and Read agree with what open reads, where a lexical clean would
// name another file.
func TestDotDotAfterALink(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "real/sub", "real/pol", "pol"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../real/sub", filepath.Join(dir, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "real/pol/r"), []byte("planted"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pol/r"), []byte("operator's"), 0o644); err != nil {
		t.Fatal(err)
	}
	named := filepath.Join(dir, "a") + "/link/../pol/r"
	want := filepath.Join(dir, "real/pol/r")
	if got := Abs(named); got != want {
		t.Errorf("Abs(%s) = %s, want %s", named, got, want)
	}
	f, err := Read(named)
	if err != nil {
		t.Fatal(err)
	}
	if string(f.Data) != "planted" || f.Real != want || f.Links != 1 {
		t.Errorf("Read = %q from %s (%d links), want planted from %s", f.Data, f.Real, f.Links, want)
	}
	t.Chdir(filepath.Join(dir, "a"))
	if got := Abs("link/../pol/r"); got != want {
		t.Errorf("relative: Abs = %s, want %s", got, want)
	}
	if got := Abs("x/y/../z"); got != filepath.Join(dir, "a", "x", "z") {
		t.Errorf("missing: Abs = %s", got)
	}
}

// Read through a link reports the target; a second name shows in Links;
// what is not a regular file is refused.
func TestReadTellsTheFile(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	f, err := Read(filepath.Join(dir, "link"))
	if err != nil || f.Real != target {
		t.Fatalf("Read(link) = %+v, %v; want real %s", f, err, target)
	}
	if err := os.Link(target, filepath.Join(dir, "other")); err != nil {
		t.Fatal(err)
	}
	if f, _ := Read(target); f.Links != 2 {
		t.Errorf("links %d, want 2", f.Links)
	}
	if _, err := Read(dir); err == nil {
		t.Error("a directory was read")
	}
	if f, err := Read(os.DevNull); err != nil || len(f.Data) != 0 {
		t.Errorf("the null device: %+v, %v", f, err)
	}
}

// A FIFO in a control file's place is refused at once, not waited on.
func TestFIFOIsNoControlFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip(err)
	}
	if _, err := Read(p); err == nil {
		t.Fatal("a FIFO was read")
	}
}

// A file read has the identity its path gives; a new file at the path has
// another, also when it gets the freed inode's number.
func TestIdentity(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Read(p)
	if err != nil || f.ID == "" || f.ID != IdentityOf(p) {
		t.Fatalf("Read %q, IdentityOf %q (%v)", f.ID, IdentityOf(p), err)
	}
	if err := os.WriteFile(p, []byte("edited in place"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := IdentityOf(p); got != f.ID {
		t.Errorf("in place: %q, want %q", got, f.ID)
	}
	for range 20 {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("new"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := IdentityOf(p); got == f.ID {
			t.Fatalf("a new file has the old identity %q", got)
		}
	}
}
