package files

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

func TestRead(t *testing.T) {
	tests := []struct {
		name    string
		content string
		opt     ReadOptions
		want    ReadResult // Path, SHA256 and Size are checked separately
		code    string
	}{
		{name: "whole", content: "a\nb\nc\n", want: ReadResult{Content: "a\nb\nc\n", TotalLines: 3, LineStart: 1, LineEnd: 3}},
		{name: "no final newline", content: "a\nb", want: ReadResult{Content: "a\nb", TotalLines: 2, LineStart: 1, LineEnd: 2}},
		{name: "range", content: "1\n2\n3\n4\n5\n", opt: ReadOptions{Offset: 2, Limit: 2},
			want: ReadResult{Content: "2\n3\n", TotalLines: 5, LineStart: 2, LineEnd: 3}},
		{name: "numbered", content: "a\r\nb\r\n", opt: ReadOptions{Numbered: true, Offset: 2},
			want: ReadResult{Content: "     2\tb\n", TotalLines: 2, LineStart: 2, LineEnd: 2}},
		{name: "max bytes at line end", content: "aaa\nbbb\nccc\n", opt: ReadOptions{MaxBytes: 9},
			want: ReadResult{Content: "aaa\nbbb\n", TotalLines: 3, LineStart: 1, LineEnd: 2, Truncated: true}},
		{name: "max bytes inside a line keeps utf-8 whole", content: "héllo\n", opt: ReadOptions{MaxBytes: 2},
			want: ReadResult{Content: "h", TotalLines: 1, LineStart: 1, LineEnd: 1, Truncated: true}},
		{name: "bom not shown", content: "\uFEFFx\n", want: ReadResult{Content: "x\n", TotalLines: 1, LineStart: 1, LineEnd: 1, BOM: true}},
		{name: "empty", content: "", want: ReadResult{}},
		{name: "binary", content: "\x00\x01\x02", want: ReadResult{Binary: true}},
		{name: "offset past end", content: "a\n", opt: ReadOptions{Offset: 3}, code: result.CodeLineOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys, root := newTestFS(t)
			put(t, filepath.Join(root, "f"), tt.content)
			r, err := fsys.Read("f", tt.opt)
			if code(err) != tt.code {
				t.Fatalf("error %v, want %s", err, tt.code)
			}
			if err != nil {
				return
			}
			want := tt.want
			want.Path, want.SHA256, want.Size = "f", sha([]byte(tt.content)), int64(len(tt.content))
			if *r != want {
				t.Fatalf("got  %+v\nwant %+v", *r, want)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	fsys, root := newTestFS(t)
	if _, err := fsys.Read("missing", ReadOptions{}); code(err) != result.CodeFileNotFound {
		t.Fatalf("got %v", err)
	}
	os.Mkdir(filepath.Join(root, "d"), 0o755)
	if _, err := fsys.Read("d", ReadOptions{}); code(err) != result.CodeIsDirectory {
		t.Fatalf("got %v", err)
	}
	if err := mkfifo(filepath.Join(root, "fifo")); err != nil {
		t.Skip(err)
	}
	if _, err := fsys.Read("fifo", ReadOptions{}); code(err) != result.CodeNotRegularFile {
		t.Fatalf("got %v", err)
	}
	if _, err := fsys.Write("fifo", []byte("x"), WriteOptions{}); code(err) != result.CodeNotRegularFile {
		t.Fatalf("got %v", err)
	}
}

func TestReadPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads everything")
	}
	fsys, root := newTestFS(t)
	p := filepath.Join(root, "f")
	put(t, p, "x")
	os.Chmod(p, 0)
	if _, err := fsys.Read("f", ReadOptions{}); code(err) != result.CodePermissionDenied {
		t.Fatalf("got %v", err)
	}
}

func TestWrite(t *testing.T) {
	fsys, root := newTestFS(t)

	m, err := fsys.Write("sub/dir/new.txt", []byte("hello\n"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "sub/dir/new.txt")
	if !m.Created || !m.Changed || m.SHA256Before != "" || m.NewFile != "hello\n" || get(t, p) != "hello\n" {
		t.Fatalf("bad create: %+v", m)
	}
	if m.Diff != "--- /dev/null\n+++ sub/dir/new.txt\n@@ -0,0 +1 @@\n+hello\n" || m.DiffStats != (DiffStats{Added: 1}) {
		t.Fatalf("diff %q %+v", m.Diff, m.DiffStats)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", fi.Mode())
	}

	// The same content again changes nothing.
	m, err = fsys.Write("sub/dir/new.txt", []byte("hello\n"), WriteOptions{})
	if err != nil || m.Changed || m.Created {
		t.Fatalf("rewrite: %+v %v", m, err)
	}

	if _, err := fsys.Write("sub/dir/new.txt", []byte("x"), WriteOptions{ExpectAbsent: true}); code(err) != result.CodeFileExists {
		t.Fatalf("expect absent: %v", err)
	}
	if _, err := fsys.Write("sub/dir/new.txt", []byte("x"), WriteOptions{ExpectSHA256: sha([]byte("other"))}); code(err) != result.CodeFileChanged {
		t.Fatalf("expect sha: %v", err)
	}
	if _, err := fsys.Write("gone.txt", []byte("x"), WriteOptions{ExpectSHA256: sha([]byte("other"))}); code(err) != result.CodeFileChanged {
		t.Fatalf("expect sha of missing: %v", err)
	}
	if _, err := fsys.Write("nodir/x.txt", []byte("x"), WriteOptions{NoMkdir: true}); code(err) != result.CodeFileNotFound {
		t.Fatalf("no mkdir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "nodir")); !os.IsNotExist(err) {
		t.Fatalf("nodir created")
	}

	// Append, and mode kept across a rewrite.
	os.Chmod(p, 0o600)
	m, err = fsys.Write("sub/dir/new.txt", []byte("more\n"), WriteOptions{Append: true, ExpectSHA256: sha([]byte("hello\n"))})
	if err != nil || get(t, p) != "hello\nmore\n" || m.DiffStats != (DiffStats{Added: 1}) {
		t.Fatalf("append: %+v %v", m, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode not kept: %v", fi.Mode())
	}
	if _, err := fsys.Write("sub/dir/new.txt", []byte("x"), WriteOptions{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode not set: %v", fi.Mode())
	}

	// Binary content is written as is and reported without texts.
	m, err = fsys.Write("bin", []byte{0, 1, 2, 0xff}, WriteOptions{})
	if err != nil || !m.Binary || !m.ContentOmitted || get(t, filepath.Join(root, "bin")) != "\x00\x01\x02\xff" {
		t.Fatalf("binary: %+v %v", m, err)
	}
	if _, err := fsys.Write(".", []byte("x"), WriteOptions{}); code(err) != result.CodeIsDirectory {
		t.Fatalf("root dir: %v", err)
	}
	noSideFiles(t, root)
}

func TestWriteContentOmitted(t *testing.T) {
	fsys, _ := newTestFS(t)
	fsys.MaxContent = 4
	m, err := fsys.Write("f", []byte("12345\n"), WriteOptions{})
	if err != nil || !m.ContentOmitted || m.NewFile != "" || m.Diff == "" {
		t.Fatalf("%+v %v", m, err)
	}
}

func TestWriteThroughSymlink(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "real/target.txt"), "old\n")
	os.Chmod(filepath.Join(root, "real/target.txt"), 0o640)
	// A relative link and an absolute one, both inside the root.
	if err := os.Symlink("real/target.txt", filepath.Join(root, "rel-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "real/target.txt"), filepath.Join(root, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Write("rel-link", []byte("new\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Edit("abs-link", []EditSpec{{Old: "new", New: "newer"}}, EditOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"rel-link", "abs-link"} {
		fi, err := os.Lstat(filepath.Join(root, l))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s is no longer a symlink", l)
		}
	}
	if get(t, filepath.Join(root, "real/target.txt")) != "newer\n" {
		t.Fatal("target not updated")
	}
	if fi, _ := os.Stat(filepath.Join(root, "real/target.txt")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", fi.Mode())
	}
	noSideFiles(t, root)
}

func TestInsert(t *testing.T) {
	tests := []struct {
		name, before string
		line         int
		text         string
		want, code   string
	}{
		{name: "before first", before: "a\nb\n", line: 0, text: "x", want: "x\na\nb\n"},
		{name: "middle", before: "a\nb\n", line: 1, text: "x\ny\n", want: "a\nx\ny\nb\n"},
		{name: "end", before: "a\nb\n", line: 2, text: "x", want: "a\nb\nx\n"},
		{name: "end without final newline", before: "a\nb", line: 2, text: "x\n", want: "a\nb\nx"},
		{name: "crlf", before: "a\r\nb\r\n", line: 1, text: "x\ny", want: "a\r\nx\r\ny\r\nb\r\n"},
		{name: "bom", before: "\uFEFFa\n", line: 0, text: "x", want: "\uFEFFx\na\n"},
		{name: "empty file", before: "", line: 0, text: "x", want: "x\n"},
		{name: "tabs", before: "a\n", line: 1, text: "\tx", want: "a\n\tx\n"},
		{name: "out of range", before: "a\n", line: 2, text: "x", code: result.CodeLineOutOfRange},
		{name: "negative", before: "a\n", line: -1, text: "x", code: result.CodeLineOutOfRange},
		{name: "nothing", before: "a\n", line: 0, text: "", code: result.CodeNoChange},
		{name: "binary", before: "\x00", line: 0, text: "x", code: result.CodeBinaryFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys, root := newTestFS(t)
			p := filepath.Join(root, "f")
			put(t, p, tt.before)
			m, err := fsys.Insert("f", tt.line, tt.text, InsertOptions{})
			if code(err) != tt.code {
				t.Fatalf("error %v, want %s", err, tt.code)
			}
			if err != nil {
				if get(t, p) != tt.before {
					t.Fatal("changed on failure")
				}
				return
			}
			if got := get(t, p); got != tt.want || m.NewFile != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	fsys, _ := newTestFS(t)
	if _, err := fsys.Insert("missing", 0, "x", InsertOptions{}); code(err) != result.CodeFileNotFound {
		t.Fatalf("missing: %v", err)
	}
}

func TestStatAndList(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "a.txt"), "one\ntwo\n")
	put(t, filepath.Join(root, "src/main.go"), "package main\n")
	put(t, filepath.Join(root, "src/deep/x.go"), "package deep\n")
	put(t, filepath.Join(root, ".env"), "SECRET=1\n")
	os.Symlink("a.txt", filepath.Join(root, "link"))
	fsys.Deny = []string{"**/.env"}

	st, err := fsys.Stat("a.txt")
	if err != nil || st.Kind != "file" || st.Size != 8 || st.Mode != "0644" || st.TotalLines != 2 || st.SHA256 != sha([]byte("one\ntwo\n")) {
		t.Fatalf("%+v %v", st, err)
	}
	st, err = fsys.Stat("link")
	if err != nil || st.Kind != "symlink" || st.LinkTarget != "a.txt" {
		t.Fatalf("%+v %v", st, err)
	}
	st, err = fsys.Stat("src")
	if err != nil || st.Kind != "directory" {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := fsys.Stat("nope"); code(err) != result.CodeFileNotFound {
		t.Fatalf("%v", err)
	}

	l, err := fsys.List(".", ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Path+":"+e.Kind)
	}
	if strings.Join(names, " ") != "a.txt:file link:symlink src:directory" {
		t.Fatalf("list: %v", names)
	}
	l, err = fsys.List(".", ListOptions{Depth: 3, Glob: "**/*.go"})
	if err != nil {
		t.Fatal(err)
	}
	names = nil
	for _, e := range l.Entries {
		names = append(names, e.Path)
	}
	if strings.Join(names, " ") != "src/deep/x.go src/main.go" {
		t.Fatalf("glob list: %v", names)
	}
	l, _ = fsys.List(".", ListOptions{Depth: 5, MaxEntries: 2})
	if len(l.Entries) != 2 || !l.Truncated {
		t.Fatalf("limit: %+v", l)
	}
	if _, err := fsys.List("a.txt", ListOptions{}); code(err) != result.CodeNotRegularFile {
		t.Fatalf("list a file: %v", err)
	}
}

func TestUndo(t *testing.T) {
	fsys, root := newTestFS(t)
	p := filepath.Join(root, "f")

	if _, err := fsys.Undo("f"); code(err) != result.CodeNothingToUndo {
		t.Fatalf("empty: %v", err)
	}
	for _, v := range []string{"v1\n", "v2\n", "v3\n"} {
		if _, err := fsys.Write("f", []byte(v), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(p, 0o600)
	if _, err := fsys.Edit("f", []EditSpec{{Old: "v3", New: "v4"}}, EditOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"v3\n", "v2\n", "v1\n"} {
		m, err := fsys.Undo("f")
		if err != nil {
			t.Fatal(err)
		}
		if got := get(t, p); got != want || m.NewFile != want {
			t.Fatalf("undo gave %q, want %q", got, want)
		}
		// Each version comes back with the mode it had.
		wantMode := os.FileMode(0o644)
		if want == "v3\n" {
			wantMode = 0o600
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != wantMode {
			t.Fatalf("undo to %q: mode %v", want, fi.Mode())
		}
	}
	// Undoing the creation deletes the file.
	m, err := fsys.Undo("f")
	if err != nil || !m.Deleted {
		t.Fatalf("undo create: %+v %v", m, err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatal("file still there")
	}
	if _, err := fsys.Undo("f"); code(err) != result.CodeNothingToUndo {
		t.Fatalf("end of chain: %v", err)
	}
	noSideFiles(t, root)
}

func TestUndoConflict(t *testing.T) {
	fsys, root := newTestFS(t)
	p := filepath.Join(root, "f")
	put(t, p, "base\n")
	if _, err := fsys.Write("f", []byte("agent\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	put(t, p, "human\n")
	_, err := fsys.Undo("f")
	if code(err) != result.CodeUndoConflict || details(err)["current_sha256"] != sha([]byte("human\n")) {
		t.Fatalf("got %v %v", err, details(err))
	}
	if get(t, p) != "human\n" {
		t.Fatal("conflicting undo changed the file")
	}
	os.Remove(p)
	if _, err := fsys.Undo("f"); code(err) != result.CodeUndoConflict {
		t.Fatalf("deleted file: %v", err)
	}
}

func TestUndoWithoutHistory(t *testing.T) {
	fsys, _ := newTestFS(t)
	fsys.HistoryDir = ""
	if _, err := fsys.Write("f", []byte("x"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Undo("f"); code(err) != result.CodeNothingToUndo {
		t.Fatalf("got %v", err)
	}
}

func TestUndoHistoryBounded(t *testing.T) {
	fsys, _ := newTestFS(t)
	fsys.HistoryVersions = 3
	for i := range 6 {
		if _, err := fsys.Write("f", []byte(strings.Repeat("x", i+1)), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for {
		if _, err := fsys.Undo("f"); err != nil {
			if code(err) != result.CodeNothingToUndo {
				t.Fatal(err)
			}
			break
		}
		n++
	}
	if n != 3 {
		t.Fatalf("%d undos, want 3", n)
	}

	// The byte cap drops old versions but keeps the newest.
	fsys, _ = newTestFS(t)
	fsys.HistoryBytes = 10
	for i := range 4 {
		if _, err := fsys.Write("g", []byte(strings.Repeat("y", 8+i)), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fsys.Undo("g"); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Undo("g"); code(err) != result.CodeNothingToUndo {
		t.Fatalf("got %v", err)
	}
}

func TestApply(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "upd.txt"), "a\nb\n")
	put(t, filepath.Join(root, "del.txt"), "bye\n")
	put(t, filepath.Join(root, "mv.txt"), "moving\n")
	os.Chmod(filepath.Join(root, "mv.txt"), 0o600)

	changes := []Change{
		{Action: ActionAdd, Path: "new/added.txt", NewContent: []byte("hi\n")},
		{Action: ActionUpdate, Path: "upd.txt", Transform: func(old []byte) ([]byte, error) {
			return []byte(strings.Replace(string(old), "b", "B", 1)), nil
		}, ExpectSHA256: sha([]byte("a\nb\n"))},
		{Action: ActionDelete, Path: "del.txt"},
		{Action: ActionMove, Path: "mv.txt", MoveTo: "moved/mv.txt"},
	}
	before := entriesOf(t, root)
	ms, err := fsys.Apply(changes, ApplyOptions{DryRun: true})
	if err != nil || len(ms) != 4 || ms[1].DiffStats != (DiffStats{1, 1}) {
		t.Fatalf("dry run: %v %+v", err, ms)
	}
	if after := entriesOf(t, root); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("dry run wrote: %v", after)
	}

	ms, err = fsys.Apply(changes, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if get(t, filepath.Join(root, "new/added.txt")) != "hi\n" || get(t, filepath.Join(root, "upd.txt")) != "a\nB\n" ||
		get(t, filepath.Join(root, "moved/mv.txt")) != "moving\n" {
		t.Fatal("contents")
	}
	if _, err := os.Stat(filepath.Join(root, "del.txt")); !os.IsNotExist(err) {
		t.Fatal("not deleted")
	}
	if _, err := os.Stat(filepath.Join(root, "mv.txt")); !os.IsNotExist(err) {
		t.Fatal("not moved")
	}
	if fi, _ := os.Stat(filepath.Join(root, "moved/mv.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatal("move lost the mode")
	}
	if ms[0].Action != ActionAdd || !ms[0].Created || !ms[2].Deleted || ms[3].MoveTo != "moved/mv.txt" {
		t.Fatalf("reports %+v %+v %+v", ms[0], ms[2], ms[3])
	}
	noSideFiles(t, root)

	// Every file of a change set has its own undo.
	if _, err := fsys.Undo("del.txt"); err != nil || get(t, filepath.Join(root, "del.txt")) != "bye\n" {
		t.Fatalf("undo delete: %v", err)
	}
	if _, err := fsys.Undo("moved/mv.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Undo("mv.txt"); err != nil || get(t, filepath.Join(root, "mv.txt")) != "moving\n" {
		t.Fatalf("undo move: %v", err)
	}
}

func TestApplyAllOrNothing(t *testing.T) {
	tests := []struct {
		name    string
		changes []Change
		code    string
	}{
		{name: "add existing", code: result.CodeFileExists, changes: []Change{
			{Action: ActionUpdate, Path: "a", NewContent: []byte("A")},
			{Action: ActionAdd, Path: "b", NewContent: []byte("x")},
		}},
		{name: "update missing", code: result.CodeFileNotFound, changes: []Change{
			{Action: ActionAdd, Path: "dir/new", NewContent: []byte("x")},
			{Action: ActionUpdate, Path: "missing", NewContent: []byte("x")},
		}},
		{name: "transform fails", code: "patch_failed", changes: []Change{
			{Action: ActionDelete, Path: "a"},
			{Action: ActionUpdate, Path: "b", Transform: func([]byte) ([]byte, error) {
				return nil, newErr("patch_failed", "hunk 1 does not apply")
			}},
		}},
		{name: "stale", code: result.CodeFileChanged, changes: []Change{
			{Action: ActionUpdate, Path: "a", NewContent: []byte("A"), ExpectSHA256: sha([]byte("old"))},
		}},
		{name: "move onto existing", code: result.CodeFileExists, changes: []Change{
			{Action: ActionMove, Path: "a", MoveTo: "b"},
		}},
		{name: "same file twice", code: "invalid_request", changes: []Change{
			{Action: ActionUpdate, Path: "a", NewContent: []byte("1")},
			{Action: ActionDelete, Path: "./a"},
		}},
		{name: "unknown action", code: "invalid_request", changes: []Change{{Action: "frob", Path: "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys, root := newTestFS(t)
			put(t, filepath.Join(root, "a"), "a\n")
			put(t, filepath.Join(root, "b"), "b\n")
			before := entriesOf(t, root)
			_, err := fsys.Apply(tt.changes, ApplyOptions{})
			if code(err) != tt.code {
				t.Fatalf("got %v, want %s", err, tt.code)
			}
			if after := entriesOf(t, root); strings.Join(after, " ") != strings.Join(before, " ") {
				t.Fatalf("tree changed: %v", after)
			}
			if get(t, filepath.Join(root, "a")) != "a\n" || get(t, filepath.Join(root, "b")) != "b\n" {
				t.Fatal("content changed")
			}
		})
	}
}

func TestOSErrorMapping(t *testing.T) {
	pe := func(err error) error { return &os.PathError{Op: "openat", Path: "/secret/abs/x", Err: err} }
	tests := []struct {
		err  error
		code string
	}{
		{errors.New("boom"), result.CodeIOError},
		{pe(syscall.EIO), result.CodeIOError},
		{pe(syscall.ENOSPC), result.CodeNoSpace},
		{pe(syscall.EDQUOT), result.CodeNoSpace},
		{pe(syscall.ENAMETOOLONG), result.CodeInvalidRequest},
		{pe(syscall.EIO), result.CodeIOError},
		{pe(errors.New("path escapes from parent")), result.CodeOutsideRoot},
		{pe(syscall.ENOENT), result.CodeFileNotFound},
		{pe(syscall.ENOTDIR), result.CodeFileNotFound},
		{pe(syscall.EISDIR), result.CodeIsDirectory},
		{pe(syscall.EACCES), result.CodePermissionDenied},
		{pe(syscall.EPERM), result.CodePermissionDenied},
		{pe(syscall.EROFS), result.CodePermissionDenied},
		{pe(syscall.EEXIST), result.CodeFileExists},
	}
	for _, tt := range tests {
		e := osError(tt.err, "x")
		if e.Code != tt.code {
			t.Errorf("%v: %s, want %s", tt.err, e.Code, tt.code)
		}
		if strings.Contains(e.Message, "/secret/abs") {
			t.Errorf("message leaks the resolved path: %s", e.Message)
		}
	}
}

func TestUndoDamagedHistory(t *testing.T) {
	fsys, _ := newTestFS(t)
	if _, err := fsys.Write("f", []byte("one\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Write("f", []byte("two\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	datas, _ := filepath.Glob(filepath.Join(fsys.HistoryDir, "*", "*.data"))
	if len(datas) != 1 {
		t.Fatalf("history files: %v", datas)
	}
	os.WriteFile(datas[0], []byte("tampered\n"), 0o600)
	if _, err := fsys.Undo("f"); code(err) != result.CodeIOError {
		t.Fatalf("got %v", err)
	}
}

// TestUndoDamagedDescription: an entry whose description (.json) cannot
// be read is io_error for undo, which must not guess past it (dropping it
// made the entry before it read as undo_conflict, and the next call swept
// its saved content, the only copy of that version, as debris). Writes go
// on, and the entry's files stay until someone removes them.
func TestUndoDamagedDescription(t *testing.T) {
	fsys, root := newTestFS(t)
	for _, c := range []string{"zero\n", "one\n", "two\n"} {
		if _, err := fsys.Write("f", []byte(c), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	metas, _ := filepath.Glob(filepath.Join(fsys.HistoryDir, "*", "*.json"))
	slices.Sort(metas)
	if len(metas) != 3 {
		t.Fatalf("history: %v", metas)
	}
	last := metas[len(metas)-1]
	if err := os.WriteFile(last, []byte(`{"seq":3,`), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := fsys.Undo("f")
		if code(err) != result.CodeIOError || !strings.Contains(err.Error(), "damaged at entry 3") {
			t.Fatalf("undo past a damaged entry: %v, want io_error", err)
		}
	}
	if get(t, filepath.Join(root, "f")) != "two\n" {
		t.Fatal("the refused undo changed the file")
	}
	if _, err := os.Stat(strings.TrimSuffix(last, ".json") + ".data"); err != nil {
		t.Fatalf("the damaged entry's saved content is gone: %v", err)
	}
	if _, err := fsys.Write("f", []byte("three\n"), WriteOptions{}); err != nil {
		t.Fatalf("a write beside a damaged entry: %v", err)
	}
	if _, err := fsys.Undo("f"); err != nil || get(t, filepath.Join(root, "f")) != "two\n" {
		t.Fatalf("undo of the change after the damaged entry: %v", err)
	}
}

// TestUndoLargeFile covers history kept by hard link (files from
// linkMinSize up): the replaced inode must hold the old content.
func TestUndoLargeFile(t *testing.T) {
	fsys, root := newTestFS(t)
	p := filepath.Join(root, "big")
	orig := strings.Repeat("0123456789abcdef\n", 2*linkMinSize/17)
	put(t, p, orig)
	if _, err := fsys.Edit("big", []EditSpec{{Old: "0123456789abcdef\n", New: "changed\n"}, {Old: "changed\n0123", New: "x"}}, EditOptions{Fuzzy: false}); code(err) != result.CodeOldStringNotUnique {
		t.Fatalf("got %v", err)
	}
	if _, err := fsys.Edit("big", []EditSpec{{Old: "0123456789abcdef\n", New: "changed\n", ReplaceAll: true}}, EditOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Write("big", []byte("small\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Undo("big"); err != nil {
		t.Fatal(err)
	}
	if get(t, p) != strings.Repeat("changed\n", 2*linkMinSize/17) {
		t.Fatal("first undo")
	}
	if _, err := fsys.Undo("big"); err != nil {
		t.Fatal(err)
	}
	if get(t, p) != orig {
		t.Fatal("second undo")
	}
}

// TestUndoLargeFileWithOtherName: a large file that has another name (a
// hard link elsewhere, as package stores make) is replaced, and the other
// name is then changed in place. The history must not have shared that
// inode: undo still restores what agentfs replaced.
func TestUndoLargeFileWithOtherName(t *testing.T) {
	fsys, root := newTestFS(t)
	// Without a root or deny rules: under them, a name outside the root
	// is refused (TestHardLinkToDenied).
	fsys.Root = ""
	p := filepath.Join(root, "big")
	orig := strings.Repeat("0123456789abcdef\n", 2*linkMinSize/17)
	put(t, p, orig)
	other := filepath.Join(t.TempDir(), "store-copy")
	if err := os.Link(p, other); err != nil {
		t.Skip("no hard links here:", err)
	}
	if _, err := fsys.Write("big", []byte("small\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(other, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("changed behind agentfs's back\n")
	f.Close()
	if _, err := fsys.Undo("big"); err != nil {
		t.Fatal(err)
	}
	if get(t, p) != orig {
		t.Fatal("undo did not restore the replaced content")
	}
}

func TestWriteKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root can give a file away")
	}
	fsys, root := newTestFS(t)
	p := filepath.Join(root, "f")
	put(t, p, "x\n")
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Edit("f", []EditSpec{{Old: "x", New: "y"}}, EditOptions{}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
		t.Fatalf("owner %d:%d", st.Uid, st.Gid)
	}
}

func TestLongFileName(t *testing.T) {
	fsys, root := newTestFS(t)
	name := strings.Repeat("n", 250)
	put(t, filepath.Join(root, name), "a\n")
	if _, err := fsys.Edit(name, []EditSpec{{Old: "a", New: "b"}}, EditOptions{}); err != nil {
		t.Fatal(err)
	}
	noSideFiles(t, root)
}

func TestExpectedCountReplacesAll(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "f"), "x x\n")
	m, err := fsys.Edit("f", []EditSpec{{Old: "x", New: "y", ExpectedCount: intp(2)}}, EditOptions{})
	if err != nil || get(t, filepath.Join(root, "f")) != "y y\n" || m.Edits[0].Replacements != 2 {
		t.Fatalf("%v %+v", err, m)
	}
}

func TestNoRootRelativePaths(t *testing.T) {
	dir := t.TempDir()
	fsys := &FS{Dir: dir}
	if _, err := fsys.Write("a/b.txt", []byte("hi\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if get(t, filepath.Join(dir, "a/b.txt")) != "hi\n" {
		t.Fatal("wrong place")
	}
	r, err := fsys.Read(filepath.Join(dir, "a/../a/b.txt"), ReadOptions{})
	if err != nil || r.Content != "hi\n" {
		t.Fatalf("%v %+v", err, r)
	}
	if _, err := fsys.Read("a/missing/../b.txt", ReadOptions{}); err != nil {
		// filepath.Clean removes "missing/.." lexically, as shells do.
		t.Fatal(err)
	}
	os.Symlink("nodir/../../x", filepath.Join(dir, "odd"))
	if _, err := fsys.Read("odd", ReadOptions{}); code(err) != result.CodeFileNotFound {
		t.Fatalf("got %v", err)
	}
	if _, err := fsys.Undo("a/b.txt"); code(err) != result.CodeNothingToUndo {
		t.Fatalf("got %v", err)
	}
}

// TestReadHugeBinaryFile reads and stats a sparse 256 MiB binary file (a
// disk image, a model's weights): the facts (binary, size, the hash of the
// whole file) come from a streamed pass, never from holding the file in
// memory.
func TestReadHugeBinaryFile(t *testing.T) {
	fsys, root := newTestFS(t)
	p := filepath.Join(root, "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	const size = 256 << 20
	if err := f.Truncate(size); err != nil {
		t.Skip("no sparse files here:", err)
	}
	f.Close()
	want := ""
	{
		h := sha256.New()
		g, _ := os.Open(p)
		io.Copy(h, g)
		g.Close()
		want = hex.EncodeToString(h.Sum(nil))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := fsys.Read("disk.img", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := fsys.Stat("disk.img")
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if !r.Binary || r.Size != size || r.SHA256 != want || !st.Binary || st.SHA256 != want || st.Size != size {
		t.Fatalf("read %+v, stat %+v", r, st)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("reading a %d-byte binary file allocated %d bytes", size, alloc)
	}
}

// TestUndoForgedMode forges a history entry's mode (a history directory
// the model can write): undo restores permission bits only, never the
// setuid, setgid or sticky bit an entry claims.
func TestUndoForgedMode(t *testing.T) {
	fsys, root := newTestFS(t)
	p := filepath.Join(root, "f")
	put(t, p, "one\n")
	if _, err := fsys.Write("f", []byte("two\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	metas, _ := filepath.Glob(filepath.Join(fsys.HistoryDir, "*", "*.json"))
	if len(metas) != 1 {
		t.Fatalf("history files: %v", metas)
	}
	b, err := os.ReadFile(metas[0])
	if err != nil {
		t.Fatal(err)
	}
	forged := uint32(fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky | 0o755)
	b2 := regexp.MustCompile(`"prev_mode":\d+`).ReplaceAll(b, []byte(fmt.Sprintf(`"prev_mode":%d`, forged)))
	if string(b2) == string(b) {
		t.Fatalf("no prev_mode in %s", b)
	}
	if err := os.WriteFile(metas[0], b2, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Undo("f"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o755 || get(t, p) != "one\n" {
		t.Fatalf("restored %v: %q", fi.Mode(), get(t, p))
	}
}

// TestUndoAfterRevertToAnEarlierVersion: someone else put back the
// version agentfs wrote before its last change (an editor's undo, git
// checkout), in place or by a rename. The file is what agentfs wrote at
// the entry before, so undo goes on from there: it restores the version
// before that one. (It cannot be told from a change that never landed,
// whose entry is stale: a file on another inode is also what a killed
// undo, or an editor's re-save, leaves, and refusing those would block
// every older undo for good.)
func TestUndoAfterRevertToAnEarlierVersion(t *testing.T) {
	three := func(t *testing.T) (*FS, string) {
		fsys, root := newTestFS(t)
		p := filepath.Join(root, "f")
		put(t, p, "one\n")
		for _, c := range []string{"two\n", "three\n"} {
			if _, err := fsys.Write("f", []byte(c), WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return fsys, p
	}
	for _, how := range []string{"in place", "by rename"} {
		t.Run(how, func(t *testing.T) {
			fsys, p := three(t)
			if how == "in place" {
				put(t, p, "two\n")
			} else {
				put(t, p+".new", "two\n")
				if err := os.Rename(p+".new", p); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := fsys.Undo("f"); err != nil {
				t.Fatalf("undo after a revert to an earlier version: %v", err)
			}
			if got := get(t, p); got != "one\n" {
				t.Fatalf("undo left %q, want the version before the one put back", got)
			}
		})
	}
	cutOff := func(t *testing.T, again bool) {
		fsys, root := newTestFS(t)
		p := filepath.Join(root, "f")
		put(t, p, "one\n")
		if _, err := fsys.Write("f", []byte("two\n"), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The history as a kill after staging leaves it: the entry of the
		// change recorded, the file untouched.
		saved := filepath.Join(t.TempDir(), "history")
		fsys.afterHistory = func() error {
			if err := os.CopyFS(saved, os.DirFS(fsys.HistoryDir)); err != nil {
				t.Fatal(err)
			}
			return errors.New("cut off")
		}
		if _, err := fsys.Write("f", []byte("three\n"), WriteOptions{}); err == nil {
			t.Fatal("the cut-off write succeeded")
		}
		fsys.afterHistory = nil
		if err := os.RemoveAll(fsys.HistoryDir); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(fsys.HistoryDir, os.DirFS(saved)); err != nil {
			t.Fatal(err)
		}
		if list, _ := fsys.entries(fsys.historyDir(p), false); len(list) != 2 {
			t.Fatalf("%d history entries, want the landed one and the cut-off one", len(list))
		}
		if again {
			// Another change lands on top, and is undone: the file is back
			// to "two", on another inode than when the cut-off change was
			// recorded.
			if _, err := fsys.Write("f", []byte("four\n"), WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Undo("f"); err != nil || get(t, p) != "two\n" {
				t.Fatalf("undo of the change on top: %v, %q", err, get(t, p))
			}
		}
		if _, err := fsys.Undo("f"); err != nil {
			t.Fatalf("undo past a change that never landed: %v", err)
		}
		if got := get(t, p); got != "one\n" {
			t.Fatalf("undo left %q, want the version before the change that landed", got)
		}
	}
	t.Run("a change that never landed", func(t *testing.T) { cutOff(t, false) })
	t.Run("a change that never landed, then one that did", func(t *testing.T) { cutOff(t, true) })
}

// TestFailedSyncLeavesFilesAsTheyWere: every rename of a change set is
// made and the sync of their directories fails (EIO). The commit failed,
// so every file is as it was: the backups were removed before the sync,
// and the rollback could restore none of the files the change had
// replaced, while it dropped their history (an error, files changed, no
// undo).
func TestFailedSyncLeavesFilesAsTheyWere(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "upd.txt"), "a\nb\n")
	put(t, filepath.Join(root, "del.txt"), "bye\n")
	put(t, filepath.Join(root, "mv.txt"), "moving\n")
	tree := func() map[string]string {
		out := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				out[strings.TrimPrefix(p, root)] = get(t, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := tree()
	fsys.failSync = func() error { return syscall.EIO }
	_, err := fsys.Apply([]Change{
		{Action: ActionAdd, Path: "added.txt", NewContent: []byte("hi\n")},
		{Action: ActionUpdate, Path: "upd.txt", Transform: func(old []byte) ([]byte, error) {
			return []byte(strings.Replace(string(old), "b", "B", 1)), nil
		}},
		{Action: ActionDelete, Path: "del.txt"},
		{Action: ActionMove, Path: "mv.txt", MoveTo: "moved.txt"},
	}, ApplyOptions{})
	if code(err) != result.CodeIOError {
		t.Fatalf("a change set whose sync failed: %v, want io_error", err)
	}
	if _, err := fsys.Write("upd.txt", []byte("x\n"), WriteOptions{}); code(err) != result.CodeIOError {
		t.Fatalf("a write whose sync failed: %v, want io_error", err)
	}
	fsys.failSync = nil
	if after := tree(); !maps.Equal(after, before) {
		t.Fatalf("files after the failed commits:\n%v\nwant as before:\n%v", after, before)
	}
	if _, err := fsys.Undo("upd.txt"); code(err) != result.CodeNothingToUndo {
		t.Fatalf("undo after failed commits: %v, want nothing_to_undo", err)
	}
}

// TestChangeInPlaceKeepingTimes: another program rewrites the file in
// place while agentfs commits a change to it, keeping its size and
// setting its modification time back (touch -r). The inode's change time
// still moved: file_changed, the other program's content kept, for small
// files and for large ones (whose earlier version the history keeps by a
// hard link, which changes that time itself).
func TestChangeInPlaceKeepingTimes(t *testing.T) {
	for _, size := range []int{16, 2 * linkMinSize} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			fsys, root := newTestFS(t)
			p := filepath.Join(root, "f")
			before := strings.Repeat("a", size-1) + "\n"
			theirs := strings.Repeat("b", size-1) + "\n"
			put(t, p, before)
			fsys.afterStage = func() error {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte(theirs), 0); err != nil {
					t.Fatal(err)
				}
				f.Close()
				if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
					t.Fatal(err)
				}
				return nil
			}
			if _, err := fsys.Write("f", []byte("ours\n"), WriteOptions{}); code(err) != result.CodeFileChanged {
				t.Fatalf("a write over a change in place made meanwhile: %v, want file_changed", err)
			}
			if get(t, p) != theirs {
				t.Fatal("the other program's change was lost")
			}
		})
	}
}
