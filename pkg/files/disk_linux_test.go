package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
	"golang.org/x/sys/unix"
)

// TestFullDisk runs the workspace and the undo history on small tmpfs
// mounts: a write, an edit and a patch that no longer fit say no_space,
// and leave the original byte for byte as it was, with no temp file
// beside it; a full history is no_space too, and changes nothing.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (CI runs as root)")
	}
	mount := func(size string) string {
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
			t.Skipf("mount tmpfs: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		return dir
	}
	root := mount("64k")
	fsys := &FS{Root: root, Dir: root, HistoryDir: t.TempDir()}
	orig := strings.Repeat("original line\n", 2000) // 28 KB: a second copy does not fit
	p := filepath.Join(root, "f.txt")
	put(t, p, orig)
	bigger := strings.Repeat("a longer replacement line\n", 1500)
	if _, err := fsys.Write("f.txt", []byte(bigger), WriteOptions{}); code(err) != result.CodeNoSpace {
		t.Fatalf("write: %v", err)
	}
	if _, err := fsys.Edit("f.txt", []EditSpec{{Old: "original line\n", New: "original line, now a good deal longer\n", ReplaceAll: true}}, EditOptions{}); code(err) != result.CodeNoSpace {
		t.Fatalf("edit: %v", err)
	}
	if _, err := fsys.Apply([]Change{{Action: ActionUpdate, Path: "f.txt", NewContent: []byte(bigger)}}, ApplyOptions{}); code(err) != result.CodeNoSpace {
		t.Fatalf("patch: %v", err)
	}
	if get(t, p) != orig {
		t.Fatal("the original was damaged")
	}
	if left := entriesOf(t, root); len(left) != 1 {
		t.Fatalf("left behind: %v", left)
	}

	// The history on a full disk of its own.
	hist := mount("16k")
	fsys.HistoryDir = hist
	fill, _ := os.Create(filepath.Join(hist, "filler"))
	fill.Write(make([]byte, 64<<10))
	fill.Close()
	small := filepath.Join(root, "small.txt")
	put(t, small, strings.Repeat("x", 8000))
	if _, err := fsys.Write("small.txt", []byte("y\n"), WriteOptions{}); code(err) != result.CodeNoSpace {
		t.Fatalf("write with a full history: %v", err)
	}
	if get(t, small) != strings.Repeat("x", 8000) {
		t.Fatal("changed although its history could not be kept")
	}
}
