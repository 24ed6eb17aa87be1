package files

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"**/.env", ".env", true},
		{"**/.env", "a/b/.env", true},
		{"**/.env", "a/.env.example", false},
		{".env", "deep/er/.env", true},
		{"**/.git/**", ".git", true},
		{"**/.git/**", ".git/config", true},
		{"**/.git/**", "sub/.git/objects/ab/cd", true},
		{"**/.git/**", "sub/.gitignore", false},
		{"*.go", "main.go", true},
		{"*.go", "cmd/main.go", true},
		{"src/*.go", "src/main.go", true},
		{"src/*.go", "src/x/main.go", false},
		{"src/**/*.go", "src/main.go", true},
		{"src/**/*.go", "src/a/b/main.go", true},
		{"/etc/**", "etc/passwd", true},
		{"secret?", "secret1", true},
		{"[", "[", false},
		{"", "x", false},
		{"**", "anything/at/all", true},
	}
	for _, tt := range tests {
		if got := MatchGlob(tt.pattern, tt.name); got != tt.want {
			t.Errorf("MatchGlob(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func TestConfinement(t *testing.T) {
	fsys, root := newTestFS(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	put(t, secret, "secret\n")
	put(t, filepath.Join(root, "in.txt"), "inside\n")
	os.Symlink(secret, filepath.Join(root, "abs-out"))
	rel, _ := filepath.Rel(root, secret)
	os.Symlink(rel, filepath.Join(root, "rel-out"))
	os.Symlink(outside, filepath.Join(root, "dir-out"))
	os.Symlink("../../..", filepath.Join(root, "up"))

	paths := []string{
		"../" + filepath.Base(outside) + "/secret.txt",
		secret,
		"abs-out",
		"rel-out",
		"dir-out/secret.txt",
		"dir-out/new.txt",
		"up/etc/passwd",
		"sub/../../x",
	}
	for _, p := range paths {
		if _, err := fsys.Read(p, ReadOptions{}); code(err) != result.CodeOutsideRoot {
			t.Errorf("read %s: %v", p, err)
		}
		if _, err := fsys.Write(p, []byte("pwned\n"), WriteOptions{}); code(err) != result.CodeOutsideRoot {
			t.Errorf("write %s: %v", p, err)
		}
		if _, err := fsys.Edit(p, []EditSpec{{Old: "secret", New: "pwned"}}, EditOptions{}); code(err) != result.CodeOutsideRoot {
			t.Errorf("edit %s: %v", p, err)
		}
	}
	if _, err := fsys.Apply([]Change{{Action: ActionMove, Path: "in.txt", MoveTo: secret + ".moved"}}, ApplyOptions{}); code(err) != result.CodeOutsideRoot {
		t.Errorf("move out: %v", err)
	}
	if get(t, secret) != "secret\n" || len(entriesOf(t, outside)) != 1 {
		t.Fatal("outside touched")
	}
	// An absolute path inside the root is fine.
	if _, err := fsys.Read(filepath.Join(root, "in.txt"), ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	// So is a root given through a symlink.
	alias := filepath.Join(t.TempDir(), "alias")
	os.Symlink(root, alias)
	fsys.Root = alias
	if _, err := fsys.Read(filepath.Join(root, "in.txt"), ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Read(filepath.Join(alias, "in.txt"), ReadOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSymlinkSwappedIn resolves a path, then replaces a directory on it with
// a symlink to outside before the operation runs: os.Root must refuse at
// operation time, whatever the earlier resolution found.
func TestSymlinkSwappedIn(t *testing.T) {
	for _, absolute := range []bool{false, true} {
		t.Run(fmt.Sprint("absolute=", absolute), func(t *testing.T) {
			fsys, root := newTestFS(t)
			outside := t.TempDir()
			put(t, filepath.Join(outside, "f"), "outside\n")
			put(t, filepath.Join(root, "sub/f"), "inside\n")
			s, err := fsys.open()
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			tg, err := s.resolve("sub/f", true)
			if err != nil {
				t.Fatal(err)
			}
			os.Rename(filepath.Join(root, "sub"), filepath.Join(root, "sub.old"))
			dest := outside
			if !absolute {
				dest, _ = filepath.Rel(root, outside)
			}
			if err := os.Symlink(dest, filepath.Join(root, "sub")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.readCurrent(tg); code(err) != result.CodeOutsideRoot {
				t.Fatalf("read after swap: %v", err)
			}
			p := &plan{t: tg, cur: current{}, data: []byte("pwned\n")}
			if err := s.commit([]*plan{p}, false); code(err) != result.CodeOutsideRoot {
				t.Fatalf("commit after swap: %v", err)
			}
			if get(t, filepath.Join(outside, "f")) != "outside\n" || len(entriesOf(t, outside)) != 1 {
				t.Fatal("outside touched")
			}
		})
	}
}

// TestSymlinkSwappedToDenied resolves a path, then replaces a directory on
// it with a symlink to a denied directory inside the root: os.Root alone
// would follow it (it stays inside the root), so every later step must go
// through the directory as checked, never by the path again.
func TestSymlinkSwappedToDenied(t *testing.T) {
	fsys, root := newTestFS(t)
	fsys.Deny = []string{"**/private/**"}
	put(t, filepath.Join(root, "sub/key"), "public\n")
	put(t, filepath.Join(root, "private/key"), "SECRET\n")
	swap := func(t *testing.T) {
		t.Helper()
		if err := os.Rename(filepath.Join(root, "sub"), filepath.Join(root, "sub.old")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("private", filepath.Join(root, "sub")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(filepath.Join(root, "sub"))
			os.Rename(filepath.Join(root, "sub.old"), filepath.Join(root, "sub"))
		})
	}
	for _, step := range []string{"read", "commit", "lock", "mkdir"} {
		t.Run(step, func(t *testing.T) {
			s, err := fsys.open()
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			name := "sub/key"
			if step == "mkdir" {
				name = "sub/new/key"
			}
			tg, err := s.resolve(name, true)
			if err != nil {
				t.Fatal(err)
			}
			swap(t)
			switch step {
			case "read":
				c, err := s.readCurrent(tg)
				if code(err) != result.CodePathDenied {
					t.Fatalf("read after swap: %q, %v", c.content, err)
				}
			case "commit":
				p := &plan{t: tg, cur: current{}, data: []byte("pwned\n")}
				if err := s.commit([]*plan{p}, false); code(err) != result.CodePathDenied {
					t.Fatalf("commit after swap: %v", err)
				}
			case "lock":
				if _, err := s.lockDirs([]target{tg}); code(err) != result.CodePathDenied {
					t.Fatalf("lock after swap: %v", err)
				}
			case "mkdir":
				if _, err := s.prepareDirs([]target{tg}, false); code(err) != result.CodePathDenied {
					t.Fatalf("mkdir after swap: %v", err)
				}
			}
			if get(t, filepath.Join(root, "private/key")) != "SECRET\n" || len(entriesOf(t, filepath.Join(root, "private"))) != 1 {
				t.Fatalf("denied directory touched: %v", entriesOf(t, filepath.Join(root, "private")))
			}
		})
	}
}

// TestFinalSymlinkSwappedIn replaces the file itself with a link to outside
// after resolution: the read refuses it rather than following it.
func TestFinalSymlinkSwappedIn(t *testing.T) {
	fsys, root := newTestFS(t)
	outside := t.TempDir()
	put(t, filepath.Join(outside, "f"), "outside\n")
	put(t, filepath.Join(root, "f"), "inside\n")
	s, _ := fsys.open()
	defer s.close()
	tg, _ := s.resolve("f", true)
	os.Remove(filepath.Join(root, "f"))
	os.Symlink(filepath.Join(outside, "f"), filepath.Join(root, "f"))
	if _, err := s.readCurrent(tg); code(err) != result.CodeNotRegularFile {
		t.Fatalf("got %v", err)
	}
}

// TestChangedBehindItsBack has another program (not agentfs, so not held
// off by the directory lock) change the file after agentfs read it and
// while it staged the new content: in place, replaced by rename, or
// created where agentfs creates. The commit must not rename over that
// change: it fails with file_changed and the other program's file stays.
func TestChangedBehindItsBack(t *testing.T) {
	for _, how := range []string{"in place", "replaced", "created"} {
		t.Run(how, func(t *testing.T) {
			fsys, root := newTestFS(t)
			p := filepath.Join(root, "f.txt")
			if how != "created" {
				put(t, p, "one\n")
			}
			fsys.afterStage = func() error {
				switch how {
				case "in place":
					f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					_, err = f.WriteString("theirs\n")
					return err
				default:
					tmp := filepath.Join(root, "editor-tmp")
					put(t, tmp, "theirs\n")
					return os.Rename(tmp, p)
				}
			}
			var err error
			if how == "created" {
				_, err = fsys.Write("f.txt", []byte("mine\n"), WriteOptions{})
			} else {
				_, err = fsys.Edit("f.txt", []EditSpec{{Old: "one", New: "mine"}}, EditOptions{})
			}
			if code(err) != result.CodeFileChanged {
				t.Fatalf("commit over a change made behind its back: %v (file: %q)", err, get(t, p))
			}
			want := "theirs\n"
			if how == "in place" {
				want = "one\ntheirs\n"
			}
			if got := get(t, p); got != want {
				t.Fatalf("the other program's change is gone: %q", got)
			}
			if left := entriesOf(t, root); len(left) != 1 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

func TestDeny(t *testing.T) {
	fsys, root := newTestFS(t)
	fsys.Deny = []string{"**/.env", "**/.git/**"}
	put(t, filepath.Join(root, ".env"), "KEY=1\n")
	put(t, filepath.Join(root, "app/.env"), "KEY=2\n")
	put(t, filepath.Join(root, ".git/config"), "[core]\n")
	os.Symlink(".env", filepath.Join(root, "innocent"))
	os.Symlink(".git", filepath.Join(root, "g"))
	for _, p := range []string{".env", "app/.env", ".git/config", ".git", ".git/new", "innocent", "g/config", filepath.Join(root, ".env")} {
		if _, err := fsys.Read(p, ReadOptions{}); code(err) != result.CodePathDenied {
			t.Errorf("read %s: %v", p, err)
		}
		if _, err := fsys.Write(p, []byte("x"), WriteOptions{}); code(err) != result.CodePathDenied {
			t.Errorf("write %s: %v", p, err)
		}
		// Stat describes a final symlink itself, which reveals no content.
		if _, err := fsys.Stat(p); p != "innocent" && code(err) != result.CodePathDenied {
			t.Errorf("stat %s: %v", p, err)
		}
	}
	if _, err := fsys.Apply([]Change{{Action: ActionMove, Path: "app/.env", MoveTo: "app/env.txt"}}, ApplyOptions{}); code(err) != result.CodePathDenied {
		t.Errorf("move: %v", err)
	}
	l, err := fsys.List(".", ListOptions{Depth: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Entries {
		if strings.Contains(e.Path, ".env") || strings.HasPrefix(e.Path, ".git") {
			t.Errorf("listed %s", e.Path)
		}
	}
	// Without a root the globs see the absolute path.
	fsys.Root = ""
	if _, err := fsys.Read(filepath.Join(root, "app/.env"), ReadOptions{}); code(err) != result.CodePathDenied {
		t.Errorf("no root: %v", err)
	}
	if _, err := fsys.Read(filepath.Join(root, "innocent"), ReadOptions{}); code(err) != result.CodePathDenied {
		t.Errorf("no root, link: %v", err)
	}
}

// TestCrashAfterStaging fails a commit after the temp files are written, as
// a crash at that point would: the original stays, no temp file remains,
// and no undo entry is left.
func TestCrashAfterStaging(t *testing.T) {
	fsys, root := newTestFS(t)
	p := filepath.Join(root, "f")
	put(t, p, "original\n")
	crash := errors.New("simulated crash")
	fsys.afterStage = func() error {
		// The staged file really exists at this point.
		found := false
		for _, e := range entriesOf(t, root) {
			found = found || strings.HasSuffix(e, ".tmp")
		}
		if !found {
			t.Error("no staged temp file seen")
		}
		return crash
	}
	_, err := fsys.Edit("f", []EditSpec{{Old: "original", New: "changed"}}, EditOptions{})
	if !errors.Is(err, crash) {
		t.Fatalf("got %v", err)
	}
	if get(t, p) != "original\n" {
		t.Fatal("original damaged")
	}
	noSideFiles(t, root)
	if _, err := fsys.Write("new/dir/file", []byte("x"), WriteOptions{}); !errors.Is(err, crash) {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "new")); !os.IsNotExist(err) {
		t.Fatal("created directories left behind")
	}
	fsys.afterStage = nil
	if _, err := fsys.Undo("f"); code(err) != result.CodeNothingToUndo {
		t.Fatalf("undo after failed edit: %v", err)
	}
}

// TestCrashMidCommit fails a multi-file change after some files were
// already renamed into place: every file comes back from its backup.
func TestCrashMidCommit(t *testing.T) {
	for fail := 0; fail < 4; fail++ {
		t.Run(fmt.Sprint("after rename ", fail), func(t *testing.T) {
			fsys, root := newTestFS(t)
			put(t, filepath.Join(root, "a"), "a\n")
			put(t, filepath.Join(root, "b"), "b\n")
			put(t, filepath.Join(root, "c"), "c\n")
			before := entriesOf(t, root)
			fsys.afterRename = func(i int) error {
				if i == fail {
					return errors.New("simulated crash")
				}
				return nil
			}
			_, err := fsys.Apply([]Change{
				{Action: ActionUpdate, Path: "a", NewContent: []byte("A\n")},
				{Action: ActionAdd, Path: "d/new", NewContent: []byte("new\n")},
				{Action: ActionDelete, Path: "b"},
				{Action: ActionMove, Path: "c", MoveTo: "e"},
			}, ApplyOptions{})
			if err == nil {
				t.Fatal("no error")
			}
			if after := entriesOf(t, root); strings.Join(after, " ") != strings.Join(before, " ") {
				t.Fatalf("tree %v, want %v", after, before)
			}
			for _, n := range []string{"a", "b", "c"} {
				if get(t, filepath.Join(root, n)) != n+"\n" {
					t.Fatalf("%s damaged", n)
				}
			}
			fsys.afterRename = nil
			if _, err := fsys.Undo("a"); code(err) != result.CodeNothingToUndo {
				t.Fatalf("history of a failed change: %v", err)
			}
		})
	}
}

// TestConcurrentEdits runs editors in parallel on one file, each through
// its own FS, as separate agentfs processes would. Each inserts a distinct
// line with a plain edit (read-modify-write under the lock); none may be
// lost.
func TestConcurrentEdits(t *testing.T) {
	_, root := newTestFS(t)
	hist := t.TempDir()
	p := filepath.Join(root, "f")
	put(t, p, "BEGIN\nEND\n")
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			fsys := &FS{Root: root, Dir: root, HistoryDir: hist}
			line := fmt.Sprintf("line %d\nEND", i)
			if _, err := fsys.Edit("f", []EditSpec{{Old: "END", New: line}}, EditOptions{}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkAllLines(t, get(t, p), n, "line %d\n")
}

// TestConcurrentExpectSHA has editors use the read-then-edit-with-hash
// protocol an agent follows: a stale hash must fail with file_changed (and
// the editor re-reads), never overwrite silently.
func TestConcurrentExpectSHA(t *testing.T) {
	_, root := newTestFS(t)
	p := filepath.Join(root, "f")
	put(t, p, "END\n")
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := 0
	for i := range n {
		wg.Go(func() {
			fsys := &FS{Root: root, Dir: root}
			for {
				r, err := fsys.Read("f", ReadOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				// Rewrite the whole file, which would lose concurrent
				// updates without the hash check.
				next := strings.Replace(r.Content, "END\n", fmt.Sprintf("w%d\nEND\n", i), 1)
				_, err = fsys.Write("f", []byte(next), WriteOptions{ExpectSHA256: r.SHA256})
				if err == nil {
					return
				}
				if code(err) != result.CodeFileChanged {
					t.Error(err)
					return
				}
				mu.Lock()
				conflicts++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	checkAllLines(t, get(t, p), n, "w%d\n")
	t.Logf("%d stale writes refused", conflicts)
}

func checkAllLines(t *testing.T, content string, n int, format string) {
	t.Helper()
	for i := range n {
		if !strings.Contains(content, fmt.Sprintf(format, i)) {
			t.Fatalf("update %d lost:\n%s", i, content)
		}
	}
	if got := strings.Count(content, "\n"); got < n+1 {
		t.Fatalf("%d lines", got)
	}
}

// TestConcurrentProcesses runs real separate processes (this test binary in
// helper mode) editing one file at once.
func TestConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	_, root := newTestFS(t)
	p := filepath.Join(root, "f")
	put(t, p, "END\n")
	const procs, each = 4, 10
	var cmds []*exec.Cmd
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
		cmd.Env = append(os.Environ(), "AGENTFS_HELPER_ROOT="+root, "AGENTFS_HELPER_ID="+strconv.Itoa(i),
			"AGENTFS_HELPER_N="+strconv.Itoa(each))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(out.String())
			}
		})
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper: %v", err)
		}
	}
	content := get(t, p)
	for i := range procs {
		for j := range each {
			if !strings.Contains(content, fmt.Sprintf("p%d-%d\n", i, j)) {
				t.Fatalf("update p%d-%d lost", i, j)
			}
		}
	}
}

// TestHelperProcess is the child of TestConcurrentProcesses.
func TestHelperProcess(t *testing.T) {
	root := os.Getenv("AGENTFS_HELPER_ROOT")
	if root == "" {
		t.Skip("helper for TestConcurrentProcesses")
	}
	id := os.Getenv("AGENTFS_HELPER_ID")
	n, _ := strconv.Atoi(os.Getenv("AGENTFS_HELPER_N"))
	fsys := &FS{Root: root, Dir: root}
	for j := range n {
		if _, err := fsys.Edit("f", []EditSpec{{Old: "END\n", New: fmt.Sprintf("p%s-%d\nEND\n", id, j)}}, EditOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEditLargeFileSmallDiff checks that a small edit in a big file gives a
// small diff and line numbers from the right place.
func TestEditLargeFileSmallDiff(t *testing.T) {
	fsys, root := newTestFS(t)
	fsys.HistoryDir = ""
	var b bytes.Buffer
	for i := range 500_000 {
		fmt.Fprintf(&b, "line number %d of the big file\n", i+1)
	}
	put(t, filepath.Join(root, "big"), b.String())
	m, err := fsys.Edit("big", []EditSpec{{Old: "line number 250000 of", New: "LINE 250000 OF"}}, EditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.ContentOmitted || m.OriginalFile != "" || len(m.Diff) > 600 || m.DiffStats != (DiffStats{1, 1}) {
		t.Fatalf("diff %d bytes: %s", len(m.Diff), m.Diff)
	}
	if !strings.Contains(m.Diff, "@@ -249997,7 +249997,7 @@") || m.Edits[0].StartLine != 250000 {
		t.Fatalf("%s %+v", m.Diff, m.Edits)
	}
}

// TestMatchGlobPathological: a glob is a request value (list's glob, a
// request's deny rules), so a model can choose one like "**/a/**/a/…/b"
// and a path of many "a" segments. Matching must stay polynomial: the naive
// backtracking match of this one takes longer than the test's deadline.
func TestMatchGlobPathological(t *testing.T) {
	pat := strings.Repeat("**/a/", 20) + "b"
	name := strings.TrimSuffix(strings.Repeat("a/", 80), "/")
	if MatchGlob(pat, name) {
		t.Fatal("matched a path without b")
	}
	if !MatchGlob(pat, name+"/b") || !MatchGlob(strings.Repeat("**/a/", 20)+"**", name) {
		t.Fatal("did not match")
	}
}

// TestDenySideFiles reads the side files a killed commit leaves beside a
// denied file: each holds the file's content, old or new, and is denied
// as the file is, whoever signed it; a side name whose file's name was cut
// is refused whenever there are deny rules, and the file's neighbours stay
// readable.
func TestDenySideFiles(t *testing.T) {
	fsys, root := newTestFS(t)
	fsys.Deny = []string{"**/.env", "**/*.pem"}
	long := strings.Repeat("k", maxSideBase)
	for _, name := range []string{
		"..env.agentfs-1-2-3-abcd.bak",
		"app/..env.agentfs-1-2-3-abcd.tmp",
		".server.pem.agentfs-9-9-9-ffff.bak",
		".server.pem.agentfs-ffff.tmp",                         // an unsigned look-alike
		"...env.agentfs-1-2-3-abcd.bak.agentfs-4-5-6-ef01.tmp", // a temp file of a backup
		"." + long + ".agentfs-1-2-3-abcd.bak",
	} {
		put(t, filepath.Join(root, name), "KEY=secret\n")
		if _, err := fsys.Read(name, ReadOptions{}); code(err) != result.CodePathDenied {
			t.Errorf("read %s: %v", name, err)
		}
	}
	for _, name := range []string{".notes.agentfs-1-2-3-abcd.bak", "..env.agentfs-notes.txt", "env.agentfs-1-2-3-abcd.bak"} {
		put(t, filepath.Join(root, name), "open\n")
		if _, err := fsys.Read(name, ReadOptions{}); err != nil {
			t.Errorf("read %s: %v", name, err)
		}
	}
	l, err := fsys.List(".", ListOptions{Depth: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Entries {
		if strings.Contains(e.Path, "..env.agentfs-1") || strings.Contains(e.Path, "pem.agentfs") {
			t.Errorf("listed %s", e.Path)
		}
	}
	fsys.Deny = nil
	if _, err := fsys.Read("."+long+".agentfs-1-2-3-abcd.bak", ReadOptions{}); err != nil {
		t.Errorf("cut name without deny rules: %v", err)
	}
}

// TestDenyHistory reads and writes the undo history through agentfs while
// a rule is in force: it holds the earlier content of a file that is
// denied now (changed before the rule, or by an agentfs without it), and
// writing an entry would forge an undo. Both are refused, inside a root
// and without one; without any rule agentfs stays unrestricted.
func TestDenyHistory(t *testing.T) {
	root := t.TempDir()
	hist := filepath.Join(root, ".state", "history")
	open := &FS{Dir: root, HistoryDir: hist}
	put(t, filepath.Join(root, ".env"), "KEY=old-secret\n")
	if _, err := open.Write(".env", []byte("KEY=new\n"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	datas, _ := filepath.Glob(filepath.Join(hist, "*", "*.data"))
	if len(datas) != 1 {
		t.Fatalf("history files: %v", datas)
	}
	for _, f := range []*FS{
		{Dir: root, HistoryDir: hist, Deny: []string{"**/.env"}},
		{Root: root, Dir: root, HistoryDir: hist},
		{Root: root, Dir: root, HistoryDir: filepath.Join(root, ".state", "x", "..", "history")},
		{Root: root, Dir: root, Histories: []string{filepath.Join(root, "elsewhere"), hist}}, // a read: no history of its own
	} {
		if _, err := f.Read(datas[0], ReadOptions{}); code(err) != result.CodePathDenied || !strings.Contains(err.Error(), "undo history") {
			t.Errorf("read %s (root %q, deny %v): %v", datas[0], f.Root, f.Deny, err)
		}
		if _, err := f.Write(filepath.Join(filepath.Dir(datas[0]), "999999999999.json"), []byte("{}"), WriteOptions{}); code(err) != result.CodePathDenied {
			t.Errorf("write into the history: %v", err)
		}
		if _, err := f.Read(".gitignore", ReadOptions{}); code(err) != result.CodeFileNotFound && err != nil {
			t.Errorf("read beside the history: %v", err)
		}
	}
	if r, err := open.Read(datas[0], ReadOptions{}); err != nil || r.Content != "KEY=old-secret\n" {
		t.Errorf("without rules: %v", err)
	}
	// Undo still works through the history under a rule.
	if _, err := (&FS{Root: root, Dir: root, HistoryDir: hist}).Undo(".env"); err != nil {
		t.Fatal(err)
	}
	if get(t, filepath.Join(root, ".env")) != "KEY=old-secret\n" {
		t.Fatal("undo")
	}
}
