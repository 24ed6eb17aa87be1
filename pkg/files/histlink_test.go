package files

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadDuringCommitOfLinkedHistory: the undo history keeps a large file
// it replaces as a hard link to its inode, made before the rename, in the
// state directory, outside the root. A read of that file by another
// agentfs while the change is being committed opened the inode with two
// names, found only one in the root and was refused as path_denied, though
// the other name was agentfs's own history and the read would have been
// served a moment later. (A change set stops between the history and the
// rename of its second file, where afterRename of its first runs.)
//
// In "history in the root" (a state directory under the workspace) the
// walk finds the history's link: it is the file's own, not a denied name
// of the undo history, and the read is served at once.
func TestReadDuringCommitOfLinkedHistory(t *testing.T) {
	t.Run("history outside", func(t *testing.T) {
		fsys, root := newTestFS(t)
		readDuringCommit(t, fsys, root, &FS{Root: root, Dir: root})
	})
	t.Run("history in the root", func(t *testing.T) {
		root := t.TempDir()
		hist := filepath.Join(root, ".state", "history")
		readDuringCommit(t, &FS{Root: root, Dir: root, HistoryDir: hist}, root, &FS{Root: root, Dir: root, HistoryDir: hist})
	})
}

func readDuringCommit(t *testing.T, fsys *FS, root string, reader *FS) {
	big := strings.Repeat("0123456789abcdef\n", (linkMinSize/17)+10)
	put(t, filepath.Join(root, "a.txt"), big)
	put(t, filepath.Join(root, "b.txt"), "b\n")
	awaiting := make(chan struct{})
	reader.beforeAwait = func() { close(awaiting) }
	var readErr error
	var nlink uint64
	readDone := make(chan struct{})
	fsys.afterRename = func(i int) error {
		if i != 0 {
			return nil
		}
		fi, err := os.Stat(filepath.Join(root, "a.txt"))
		if err != nil {
			t.Fatal(err)
		}
		nlink = uint64(fi.Sys().(*syscall.Stat_t).Nlink)
		go func() {
			defer close(readDone)
			r, err := reader.Read("a.txt", ReadOptions{})
			readErr = err
			if err == nil && r.Content != big {
				t.Errorf("the read returned %d bytes, want the %d of the file as it was", len(r.Content), len(big))
			}
		}()
		// The read has opened the file and counted its names, and
		// either gave up or waits for this commit to end.
		select {
		case <-readDone:
		case <-awaiting:
		}
		return nil
	}
	_, err := fsys.Apply([]Change{
		{Action: ActionUpdate, Path: "b.txt", NewContent: []byte("b2\n")},
		{Action: ActionUpdate, Path: "a.txt", NewContent: []byte("a2\n")},
	}, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-readDone
	if nlink < 2 {
		t.Skip("the history copied the file rather than linking it (another file system, or no /proc)")
	}
	if readErr != nil {
		t.Fatalf("a read while another agentfs commits: %v", readErr)
	}
}

// TestLinkedHistoryHeldOpen: the undo history keeps a large file it
// replaces as a hard link to its inode, on the ground that nothing writes
// that inode after the commit. A program that has the file open (a logger,
// a process a model started) still writes it through its descriptor after
// the rename, into the history: the undo then fails as damaged and the
// version before the change, which only the history kept, is lost.
func TestLinkedHistoryHeldOpen(t *testing.T) {
	fsys, root := newTestFS(t)
	name := filepath.Join(root, "app.log")
	old := strings.Repeat("an old line of the log\n", (linkMinSize/23)+10)
	put(t, name, old)
	held, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := fsys.Write("app.log", []byte("rotated\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := held.WriteString("a line the program wrote after\n"); err != nil {
		t.Fatal(err)
	}
	m, err := fsys.Undo("app.log")
	if err != nil {
		t.Fatalf("undo after a write through a descriptor opened before the change: %v", err)
	}
	if m.NewFile != old || get(t, name) != old {
		t.Fatalf("undo restored %d bytes, want the %d before the change", len(get(t, name)), len(old))
	}
}

// TestDryRunUndoLeavesLiveHistory: a dry-run undo takes no lock (it is a
// preview) and must leave the undo history as it is. It swept as debris
// the saved content of a change another agentfs was committing at that
// moment (its .data written, its .json not yet): the change landed with a
// history entry whose content was gone, and the undo of it failed, the
// version before the change lost.
func TestDryRunUndoLeavesLiveHistory(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "f.txt"), "before\n")
	preview := *fsys
	preview.DryRun = true
	fsys.afterHistoryData = func() {
		// Nothing recorded yet for the file as far as the preview can
		// tell; what it says does not matter, only what it leaves.
		_, _ = preview.Undo("f.txt")
	}
	if _, err := fsys.Write("f.txt", []byte("after\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	fsys.afterHistoryData = nil
	if _, err := fsys.Undo("f.txt"); err != nil {
		t.Fatalf("undo of a change committed during a dry-run undo: %v", err)
	}
	if got := get(t, filepath.Join(root, "f.txt")); got != "before\n" {
		t.Fatalf("undo left %q", got)
	}
}
