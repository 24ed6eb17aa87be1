package agentfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/files"
	"github.com/agentplane/agentplane/pkg/patch"
	"github.com/agentplane/agentplane/pkg/result"
)

// TestPatchRefusesFileChangedAfterPlan: a file that changes between the
// plan (hunks checked) and the commit is refused with file_changed, and no
// file of the change set is written.
func TestPatchRefusesFileChangedAfterPlan(t *testing.T) {
	for _, action := range []string{"update", "delete", "move"} {
		t.Run(action, func(t *testing.T) {
			dir := t.TempDir()
			fsys := &files.FS{Dir: dir, Root: dir}
			write := func(name, content string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("a.txt", "one\n")
			write("b.txt", "two\n")
			body := map[string]string{
				"update": "*** Update File: b.txt\n@@\n-two\n+TWO\n",
				"delete": "*** Delete File: b.txt\n",
				"move":   "*** Update File: b.txt\n*** Move to: c.txt\n@@\n-two\n+TWO\n",
			}[action]
			p, err := patch.Parse([]byte("*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+ONE\n"+body+"*** End Patch\n"), -1)
			if err != nil {
				t.Fatal(err)
			}
			planned, err := patch.Plan(p, func(path string) ([]byte, error) { return readForPatch(fsys, path) })
			if err != nil {
				t.Fatal(err)
			}
			write("b.txt", "two, changed by someone else\n")
			changes, _ := commitChanges(planned)
			_, err = fsys.Apply(changes, files.ApplyOptions{})
			if code := result.AsError(err).Code; code != result.CodeFileChanged {
				t.Fatalf("Apply after a concurrent change: %v (code %q), want file_changed", err, code)
			}
			for name, want := range map[string]string{"a.txt": "one\n", "b.txt": "two, changed by someone else\n"} {
				if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "c.txt")); err == nil {
				t.Error("c.txt was created")
			}
		})
	}
}

// TestReadForPatch: the exact bytes, BOM included; absence is
// fs.ErrNotExist for Plan; binary files are refused.
func TestReadForPatch(t *testing.T) {
	dir := t.TempDir()
	fsys := &files.FS{Dir: dir}
	raw := "\uFEFFa\r\nb"
	if err := os.WriteFile(filepath.Join(dir, "bom.txt"), []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin"), []byte("a\x00b"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readForPatch(fsys, "bom.txt")
	if err != nil || string(got) != raw {
		t.Fatalf("readForPatch = %q, %v; want %q", got, err, raw)
	}
	if _, err := readForPatch(fsys, "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := readForPatch(fsys, "bin"); result.AsError(err).Code != result.CodeBinaryFile {
		t.Errorf("binary file: %v, want binary_file", err)
	}
}

// TestPatchLargeFile: a patch to a text file from 16 MiB on, which read
// returns cut at 16 MiB, was planned from the cut text and refused with
// file_changed ("changed while it was being read") though nothing changed
// it: a model told to read it again and retry got the same answer for
// ever. edit changes the same file.
func TestPatchLargeFile(t *testing.T) {
	dir := t.TempDir()
	fsys := &files.FS{Dir: dir, Root: dir}
	line := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n"
	big := "first\n" + strings.Repeat(line, (files.DefaultReadMax/len(line))+1024)
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := patch.Parse([]byte("*** Begin Patch\n*** Update File: big.txt\n@@\n-first\n+FIRST\n*** End Patch\n"), -1)
	if err != nil {
		t.Fatal(err)
	}
	planned, err := patch.Plan(p, func(path string) ([]byte, error) { return readForPatch(fsys, path) })
	if err != nil {
		t.Fatalf("plan of a patch to a %d-byte file: %v", len(big), err)
	}
	changes, _ := commitChanges(planned)
	if _, err := fsys.Apply(changes, files.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "big.txt"))
	if string(got) != "FIRST\n"+big[len("first\n"):] {
		t.Fatalf("big.txt is %d bytes after the patch, want %d", len(got), len(big))
	}
}
