package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// lockedFS is an unconfined FS (no Root, as agentfs runs under the
// sandbox lock) that may change files only beneath ws, with hidden hidden.
func lockedFS(t *testing.T, ws string, hidden ...string) *FS {
	return &FS{Dir: ws, HistoryDir: t.TempDir(), Hidden: hidden, MayChange: func(p string) error {
		if !strings.HasPrefix(p, ws+"/") {
			return newErr(result.CodeSandboxLocked, "%s is outside %s", p, ws)
		}
		return nil
	}}
}

// TestMayChange: every file a change touches is asked about by its
// resolved path, a link out of the allowed directory and a move's
// destination included, and a refusal leaves everything as it was.
func TestMayChange(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	put(t, filepath.Join(ws, "in"), "in\n")
	put(t, filepath.Join(outside, "f"), "outside\n")
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	fsys := lockedFS(t, ws)
	if _, err := fsys.Write("new", []byte("x\n"), WriteOptions{}); err != nil {
		t.Fatalf("write inside: %v", err)
	}
	for _, c := range []struct {
		name string
		do   func() error
	}{
		{"write outside", func() error {
			_, err := fsys.Write(filepath.Join(outside, "g"), []byte("x"), WriteOptions{})
			return err
		}},
		{"write through a link", func() error { _, err := fsys.Write("out/f", []byte("x"), WriteOptions{}); return err }},
		{"edit outside", func() error {
			_, err := fsys.Edit(filepath.Join(outside, "f"), []EditSpec{{Old: "outside", New: "taken"}}, EditOptions{})
			return err
		}},
		{"move out", func() error {
			_, err := fsys.Apply([]Change{{Path: "in", Action: ActionMove, MoveTo: "out/moved"}}, ApplyOptions{})
			return err
		}},
	} {
		if err := c.do(); code(err) != result.CodeSandboxLocked {
			t.Errorf("%s: %v, want sandbox_locked", c.name, err)
		}
	}
	if got := entriesOf(t, outside); len(got) != 1 || get(t, filepath.Join(outside, "f")) != "outside\n" {
		t.Fatalf("outside changed: %v", got)
	}
	if get(t, filepath.Join(ws, "in")) != "in\n" {
		t.Fatal("the refused move touched its source")
	}
}

// TestMayChangeSwapped: a directory checked inside the allowed one and
// swapped for a link out before the change lands is not followed.
func TestMayChangeSwapped(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	put(t, filepath.Join(ws, "sub", "f"), "inside\n")
	fsys := lockedFS(t, ws)
	s, err := fsys.open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	tg, err := s.resolve(filepath.Join(ws, "sub", "f"), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.mayChange(tg); err != nil {
		t.Fatalf("mayChange inside: %v", err)
	}
	if err := os.Rename(filepath.Join(ws, "sub"), filepath.Join(ws, "sub.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "sub")); err != nil {
		t.Fatal(err)
	}
	p := &plan{t: tg, cur: current{}, data: []byte("pwned\n")}
	if err := s.commit([]*plan{p}, false); err == nil {
		t.Fatal("commit through the swapped directory succeeded")
	}
	if got := entriesOf(t, outside); len(got) != 0 {
		t.Fatalf("outside touched: %v", got)
	}
}

// TestHidden: a hidden path and everything beneath it is path_denied for
// reading and changing, also through a link.
func TestHidden(t *testing.T) {
	ws, secret := t.TempDir(), t.TempDir()
	put(t, filepath.Join(secret, "key"), "s3cret\n")
	if err := os.Symlink(secret, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	fsys := lockedFS(t, ws, secret)
	for _, p := range []string{filepath.Join(secret, "key"), "link/key"} {
		if _, err := fsys.Read(p, ReadOptions{}); code(err) != result.CodePathDenied {
			t.Errorf("read %s: %v, want path_denied", p, err)
		}
	}
	if _, err := fsys.Write("link/key", []byte("x"), WriteOptions{}); code(err) != result.CodePathDenied {
		t.Errorf("write through a link: %v, want path_denied", err)
	}
}
