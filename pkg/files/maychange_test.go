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

// TestMayChangeAttacks: the ways a model that chooses every path, or a
// sandboxed command that prepared the workspace before the call, could
// make a change land outside the allowed directory: an absolute path and
// "..", a link as the file itself (followed for an edit, replaced for a
// write), a link in a parent, a patch that adds, deletes or moves a file
// outside, and an undo of a file outside whose history was recorded before
// the lock. Each is refused, or lands inside, and nothing outside changes.
func TestMayChangeAttacks(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	put(t, victim, "outside\n")
	put(t, filepath.Join(ws, "in"), "in\n")
	if err := os.Symlink(victim, filepath.Join(ws, "filelink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+filepath.Base(outside)+"/victim", filepath.Join(ws, "rellink")); err != nil {
		t.Fatal(err)
	}
	history := t.TempDir()
	// A change of the victim recorded before the lock: its undo would
	// restore the file outside.
	free := &FS{Dir: ws, HistoryDir: history}
	if _, err := free.Write(victim, []byte("changed\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	put(t, victim, "outside\n")
	if _, err := free.Write(victim, []byte("outside2\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	fsys := lockedFS(t, ws)
	fsys.HistoryDir = history
	rel := func(p string) string { r, _ := filepath.Rel(ws, p); return r }
	for _, c := range []struct {
		name string
		do   func() error
	}{
		{"absolute", func() error {
			_, err := fsys.Write(filepath.Join(outside, "new"), []byte("x"), WriteOptions{})
			return err
		}},
		{"dot-dot", func() error {
			_, err := fsys.Write(rel(filepath.Join(outside, "new")), []byte("x"), WriteOptions{})
			return err
		}},
		{"dot-dot after a name", func() error {
			_, err := fsys.Write("in/../../"+filepath.Base(outside)+"/new", []byte("x"), WriteOptions{})
			return err
		}},
		{"edit through a file link", func() error {
			_, err := fsys.Edit("filelink", []EditSpec{{Old: "outside2", New: "taken"}}, EditOptions{})
			return err
		}},
		{"insert through a relative link", func() error { _, err := fsys.Insert("rellink", 1, "taken\n", InsertOptions{}); return err }},
		{"write through a directory link", func() error {
			_, err := fsys.Write("dirlink/victim", []byte("x"), WriteOptions{})
			return err
		}},
		{"patch adds outside", func() error {
			_, err := fsys.Apply([]Change{{Path: "in", Action: ActionUpdate, NewContent: []byte("in2\n")},
				{Path: "dirlink/added", Action: ActionAdd, NewContent: []byte("x")}}, ApplyOptions{})
			return err
		}},
		{"patch deletes outside", func() error {
			_, err := fsys.Apply([]Change{{Path: victim, Action: ActionDelete}}, ApplyOptions{})
			return err
		}},
		{"patch moves a file in from outside", func() error {
			_, err := fsys.Apply([]Change{{Path: victim, Action: ActionMove, MoveTo: "stolen"}}, ApplyOptions{})
			return err
		}},
		{"patch moves out by dot-dot", func() error {
			_, err := fsys.Apply([]Change{{Path: "in", Action: ActionMove, MoveTo: rel(filepath.Join(outside, "moved"))}}, ApplyOptions{})
			return err
		}},
		{"undo outside", func() error { _, err := fsys.Undo(victim); return err }},
		{"undo through a link", func() error { _, err := fsys.Undo("filelink"); return err }},
	} {
		if err := c.do(); code(err) != result.CodeSandboxLocked {
			t.Errorf("%s: %v, want sandbox_locked", c.name, err)
		}
	}
	if got := entriesOf(t, outside); len(got) != 1 || get(t, victim) != "outside2\n" {
		t.Fatalf("outside changed: %v, victim %q", got, get(t, victim))
	}
	if get(t, filepath.Join(ws, "in")) != "in\n" {
		t.Fatal("a refused change set changed a file inside")
	}
	// A write to the link itself replaces the link, inside, and leaves
	// what it pointed at alone.
	if _, err := fsys.Write("filelink", []byte("x"), WriteOptions{}); code(err) != result.CodeSandboxLocked {
		if err != nil {
			t.Fatalf("write of a link: %v", err)
		}
	}
	if get(t, victim) != "outside2\n" {
		t.Fatal("a write of a link in the workspace changed its target outside")
	}
}

// TestMayChangeFinalSwapped: the file itself, checked inside, swapped for a
// link out before the change lands: the change replaces the link (the
// rename does not follow it), so nothing outside is written.
func TestMayChangeFinalSwapped(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	put(t, victim, "outside\n")
	put(t, filepath.Join(ws, "f"), "inside\n")
	fsys := lockedFS(t, ws)
	s, err := fsys.open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	tg, err := s.resolve("f", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.mayChange(tg); err != nil {
		t.Fatalf("mayChange inside: %v", err)
	}
	if err := os.Remove(filepath.Join(ws, "f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(ws, "f")); err != nil {
		t.Fatal(err)
	}
	p := &plan{t: tg, cur: current{}, data: []byte("pwned\n")}
	_ = s.commit([]*plan{p}, false)
	if get(t, victim) != "outside\n" {
		t.Fatal("the commit wrote through the swapped-in link")
	}
}

// TestMayChangeHardLink: a hard link in the workspace to a file outside
// (made before the lock, or by the user) is written by replacing the name
// inside: the other name, outside, keeps its content.
func TestMayChangeHardLink(t *testing.T) {
	ws := t.TempDir()
	outside := filepath.Join(filepath.Dir(ws), filepath.Base(ws)+"-out")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	victim := filepath.Join(outside, "victim")
	put(t, victim, "outside\n")
	if err := os.Link(victim, filepath.Join(ws, "hard")); err != nil {
		t.Skipf("no hard link across the directories: %v", err)
	}
	fsys := lockedFS(t, ws)
	// Either may be refused; neither may reach the other name.
	_, _ = fsys.Edit("hard", []EditSpec{{Old: "outside", New: "taken"}}, EditOptions{})
	_, _ = fsys.Write("hard", []byte("x\n"), WriteOptions{})
	if get(t, victim) != "outside\n" {
		t.Fatal("a change through a hard link in the workspace changed the file outside")
	}
}
