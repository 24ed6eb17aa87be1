package files

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// linkOps are the operations that read or change a file, each tried
// through a hard link: every one must refuse with path_denied and leave
// the linked file as it was.
var linkOps = []struct {
	name string
	op   func(fsys *FS, p string) error
}{
	{"read", func(f *FS, p string) error { _, err := f.Read(p, ReadOptions{}); return err }},
	{"stat", func(f *FS, p string) error {
		r, err := f.Stat(p)
		if err == nil && r.SHA256 != "" {
			return nil // the hash of the linked file would be told
		}
		if err == nil {
			return newErr(result.CodePathDenied, "no hash")
		}
		return err
	}},
	{"write", func(f *FS, p string) error { _, err := f.Write(p, []byte("pwned\n"), WriteOptions{}); return err }},
	{"append", func(f *FS, p string) error {
		_, err := f.Write(p, []byte("pwned\n"), WriteOptions{Append: true})
		return err
	}},
	{"edit", func(f *FS, p string) error {
		_, err := f.Edit(p, []EditSpec{{Old: "SECRET", New: "pwned"}}, EditOptions{})
		return err
	}},
	{"insert", func(f *FS, p string) error { _, err := f.Insert(p, 1, "pwned\n", InsertOptions{}); return err }},
	{"patch", func(f *FS, p string) error {
		_, err := f.Apply([]Change{{Action: ActionUpdate, Path: p, NewContent: []byte("pwned\n")}}, ApplyOptions{})
		return err
	}},
	{"patch-delete", func(f *FS, p string) error {
		_, err := f.Apply([]Change{{Action: ActionDelete, Path: p}}, ApplyOptions{})
		return err
	}},
	{"undo", func(f *FS, p string) error { _, err := f.Undo(p); return err }},
}

// TestHardLinkToDenied: a hard link inside the root to a denied file, or
// to a file outside the root, is the same file under an allowed name;
// every operation through it is refused, and the file stays as it was.
func TestHardLinkToDenied(t *testing.T) {
	const secret = "SECRET=1\n"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, fsys *FS, root string) (target string)
	}{
		{"denied", func(t *testing.T, fsys *FS, root string) string {
			fsys.Deny = []string{"**/.env"}
			put(t, filepath.Join(root, "app/.env"), secret)
			return filepath.Join(root, "app/.env")
		}},
		{"outside", func(t *testing.T, fsys *FS, root string) string {
			out := filepath.Join(t.TempDir(), "secret")
			put(t, out, secret)
			return out
		}},
		{"no-root", func(t *testing.T, fsys *FS, root string) string {
			fsys.Deny = []string{"**/.env"}
			fsys.Root = ""
			put(t, filepath.Join(root, ".env"), secret)
			return filepath.Join(root, ".env")
		}},
	} {
		for _, op := range linkOps {
			t.Run(tc.name+"/"+op.name, func(t *testing.T) {
				fsys, root := newTestFS(t)
				target := tc.setup(t, fsys, root)
				link := filepath.Join(root, "notes.txt")
				if op.name == "undo" {
					// A change agentfs made to the name, which then became a
					// link to the secret.
					put(t, link, "mine\n")
					if _, err := fsys.Write(link, []byte("mine too\n"), WriteOptions{}); err != nil {
						t.Fatal(err)
					}
					if err := os.Remove(link); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Link(target, link); err != nil {
					t.Fatal(err)
				}
				err := op.op(fsys, link)
				if code(err) != result.CodePathDenied {
					t.Fatalf("%s through a hard link: %v", op.name, err)
				}
				if got := get(t, target); got != secret {
					t.Fatalf("the linked file changed: %q", got)
				}
				if got := get(t, link); got != secret {
					t.Fatalf("the link changed: %q", got)
				}
			})
		}
	}
}

// TestHardLinksInsideRoot: a file whose every name is inside the root and
// outside the deny rules is read and changed as usual, through any name.
func TestHardLinksInsideRoot(t *testing.T) {
	fsys, root := newTestFS(t)
	fsys.Deny = []string{"**/.env"}
	put(t, filepath.Join(root, "a/one.txt"), "hello\n")
	if err := os.Link(filepath.Join(root, "a/one.txt"), filepath.Join(root, "b.txt")); err != nil {
		t.Fatal(err)
	}
	r, err := fsys.Read("b.txt", ReadOptions{})
	if err != nil || r.Content != "hello\n" {
		t.Fatalf("read: %+v %v", r, err)
	}
	if _, err := fsys.Edit("b.txt", []EditSpec{{Old: "hello", New: "bye"}}, EditOptions{}); err != nil {
		t.Fatalf("edit: %v", err)
	}
	if got := get(t, filepath.Join(root, "b.txt")); got != "bye\n" {
		t.Fatalf("b.txt: %q", got)
	}
	// A third name outside the root makes both refused.
	put(t, filepath.Join(root, "c.txt"), "x\n")
	if err := os.Link(filepath.Join(root, "c.txt"), filepath.Join(t.TempDir(), "c")); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Read("c.txt", ReadOptions{}); code(err) != result.CodePathDenied {
		t.Fatalf("read of a file with a name outside the root: %v", err)
	}
}

// TestHardLinkCountMoves: the link count is trusted only when it held for
// the whole walk of the root. A name that goes while the walk runs (as
// another agentfs's backup side file does around its commit) leaves the
// file readable; one that comes outside the root is seen by a new walk;
// a count that never settles is refused.
func TestHardLinkCountMoves(t *testing.T) {
	fsys, root := newTestFS(t)
	f := filepath.Join(root, "f")
	put(t, f, "hello\n")
	side := filepath.Join(root, ".f.side")
	if err := os.Link(f, side); err != nil {
		t.Fatal(err)
	}
	walks := 0
	fsys.beforeLinkScan = func() {
		if walks++; walks == 1 {
			if err := os.Remove(side); err != nil {
				t.Error(err)
			}
		}
	}
	if r, err := fsys.Read("f", ReadOptions{}); err != nil || r.Content != "hello\n" {
		t.Fatalf("a side name gone during the walk: %+v %v", r, err)
	}
	if walks != 1 {
		t.Fatalf("%d walks, want 1 (the count fell to 1 after it)", walks)
	}

	outside := t.TempDir()
	walks = 0
	if err := os.Link(f, side); err != nil {
		t.Fatal(err)
	}
	fsys.beforeLinkScan = func() {
		if walks++; walks == 1 {
			if err := os.Link(f, filepath.Join(outside, "x")); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := fsys.Read("f", ReadOptions{}); code(err) != result.CodePathDenied {
		t.Fatalf("a name outside the root made during the walk: %v", err)
	}
	if walks != 2 {
		t.Fatalf("%d walks, want 2", walks)
	}

	walks = 0
	fsys.beforeLinkScan = func() {
		walks++
		if err := os.Link(f, filepath.Join(outside, fmt.Sprint("y", walks))); err != nil {
			t.Error(err)
		}
	}
	if _, err := fsys.Read("f", ReadOptions{}); code(err) != result.CodePathDenied {
		t.Fatalf("a count that never settles: %v", err)
	}
	if walks != linkScanTries {
		t.Fatalf("%d walks, want %d", walks, linkScanTries)
	}
}
