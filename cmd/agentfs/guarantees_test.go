package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/internal/testkit"
)

// agentfsCmd runs this test binary as agentfs in dir.
func agentfsCmd(t *testing.T, dir string, stdin []byte, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	state := t.TempDir()
	cmd.Env = append(os.Environ(), "AGENTFS_TEST_MAIN=1", "XDG_STATE_HOME="+state, "XDG_CONFIG_HOME="+state)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	return cmd, &out
}

// stateRun returns a runner of agentfs in dir with the state directory
// state, the rule's flags first, and a fault point armed when one is given.
func stateRun(t *testing.T, dir, state string, rule ...string) func(stdin []byte, fault string, args ...string) (string, error) {
	return func(stdin []byte, fault string, args ...string) (string, error) {
		cmd, out := agentfsCmd(t, dir, stdin, append(slices.Clone(rule), args...)...)
		cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+state)
		if fault != "" {
			cmd.Env = append(cmd.Env, "AGENTPLANE_FAULTPOINT="+fault)
		}
		err := cmd.Run()
		return out.String(), err
	}
}

// TestConcurrentEdits runs several agentfs processes at once, each
// replacing its own line of one file after reading its hash. No update may
// be lost silently: every edit either landed or reported file_changed, and
// the file holds exactly the edits that reported success.
func TestConcurrentEdits(t *testing.T) {
	const n = 8
	dir := t.TempDir()
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	path := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, guarded := range []bool{false, true} {
		t.Run(fmt.Sprintf("expect_sha256=%v", guarded), func(t *testing.T) {
			before, _ := os.ReadFile(path)
			hash := sha256Hex(before)
			var wg sync.WaitGroup
			outs := make([]string, n)
			codes := make([]int, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					old := fmt.Sprintf("line %d\n", i)
					if guarded {
						old = fmt.Sprintf("line %d x\n", i)
					}
					args := []string{"edit", "f.txt", "--old", old, "--new", strings.TrimSuffix(old, "\n") + " x\n"}
					if guarded {
						args = append(args, "--expect-sha256", hash)
					}
					cmd, out := agentfsCmd(t, dir, nil, args...)
					err := cmd.Run()
					codes[i] = cmd.ProcessState.ExitCode()
					if err != nil && codes[i] != 1 {
						t.Errorf("edit %d: %v", i, err)
					}
					outs[i] = out.String()
				}()
			}
			wg.Wait()
			got, _ := os.ReadFile(path)
			landed := 0
			for i, o := range outs {
				want := fmt.Sprintf("line %d x\n", i)
				if guarded {
					want = fmt.Sprintf("line %d x x\n", i)
				}
				ok := gjson.Get(o, "success").Bool()
				if ok {
					landed++
					if !bytes.Contains(got, []byte(want)) {
						t.Errorf("edit %d reported success but its line is missing:\n%s", i, got)
					}
					continue
				}
				if code := gjson.Get(o, "error.code").String(); code != "file_changed" || codes[i] != 1 {
					t.Errorf("edit %d failed with %q (exit %d), want file_changed: %s", i, code, codes[i], o)
				}
				if bytes.Contains(got, []byte(want)) {
					t.Errorf("edit %d reported file_changed but its line is in the file", i)
				}
			}
			if !guarded && landed != n {
				t.Errorf("%d of %d unguarded edits landed; each edits its own line, so all must", landed, n)
			}
			if guarded && landed != 1 {
				t.Errorf("%d edits guarded by the same sha256 landed, want exactly 1", landed)
			}
		})
	}
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestConformanceCodexApplyPatch runs agentfs patch on every case of the
// Codex apply-patch suite and compares the whole tree with the expected
// one. A case whose expected tree equals its input must be rejected; 015
// expects a partial application that agentfs, being all or nothing, must
// refuse (the tree stays as the input was).
func TestConformanceCodexApplyPatch(t *testing.T) {
	wd, _ := os.Getwd()
	shared, ok := testkit.SharedDir(wd)
	if !ok {
		t.Skip("../shared (the conformance suites) not found beside the module root")
	}
	suite := filepath.Join(shared, "conformance", "codex-apply-patch")
	cases, err := os.ReadDir(suite)
	if err != nil {
		t.Skipf("conformance suite missing: %v", err)
	}
	ran := 0
	for _, c := range cases {
		if !c.IsDir() {
			continue
		}
		ran++
		name := c.Name()
		t.Run(name, func(t *testing.T) {
			cdir := filepath.Join(suite, name)
			patchText, err := os.ReadFile(filepath.Join(cdir, "patch.txt"))
			if err != nil {
				t.Fatal(err)
			}
			input := readTree(t, filepath.Join(cdir, "input"))
			expected := readTree(t, filepath.Join(cdir, "expected"))
			mustFail := equalTrees(input, expected)
			if strings.HasPrefix(name, "015_") {
				expected, mustFail = input, true
			}
			work := t.TempDir()
			writeTree(t, work, input)
			cmd, out := agentfsCmd(t, work, patchText, "patch")
			_ = cmd.Run()
			code := cmd.ProcessState.ExitCode()
			res := out.String()
			if !gjson.Valid(res) {
				t.Fatalf("not one JSON object: %q", res)
			}
			success := gjson.Get(res, "success").Bool()
			if mustFail {
				if success || code == 0 {
					t.Errorf("patch accepted (exit %d), want an error result: %s", code, res)
				} else {
					t.Logf("refused: %s", gjson.Get(res, "error.code"))
				}
			} else if !success || code != 0 {
				t.Errorf("patch failed (exit %d): %s", code, res)
			}
			got := readTree(t, work)
			if !equalTrees(got, expected) {
				t.Errorf("tree after patch:\n%s\nwant:\n%s", describe(got), describe(expected))
			}
		})
	}
	if ran == 0 {
		t.Fatal("no conformance cases found")
	}
}

// readTree maps each regular file's slash path to its content; directories
// are implied. A missing root is an empty tree.
func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == root {
				return filepath.SkipDir
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		tree[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func writeTree(t *testing.T, root string, tree map[string]string) {
	t.Helper()
	for rel, content := range tree {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func equalTrees(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func describe(tree map[string]string) string {
	var b strings.Builder
	for k, v := range tree {
		fmt.Fprintf(&b, "  %s: %q\n", k, v)
	}
	return b.String()
}

// TestKilledWriteLeavesNoPartialFile SIGKILLs agentfs at each step of a
// write of a large file (half of the temp file written, all of it staged,
// renamed): the file is whole under its real name, old or new, never
// partial; the next write in the directory removes the killed one's temp
// file, and a live writer's is never touched.
func TestKilledWriteLeavesNoPartialFile(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16) // 4 MiB
	old := []byte("old content\n")
	for _, step := range []string{"agentfs.stage.half", "agentfs.staged", "agentfs.recorded", "agentfs.renamed"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.txt")
			if err := os.WriteFile(path, old, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd, _ := agentfsCmd(t, dir, big, "write", "f.txt")
			cmd.Env = append(cmd.Env, "AGENTPLANE_FAULTPOINT="+step)
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || !ee.ProcessState.Sys().(interface{ Signaled() bool }).Signaled() {
				t.Fatalf("agentfs was not killed at %s: %v", step, err)
			}
			got, _ := os.ReadFile(path)
			if !bytes.Equal(got, old) && !bytes.Equal(got, big) {
				t.Fatalf("f.txt holds %d bytes, neither the old nor the new content", len(got))
			}
			if step != "agentfs.renamed" && !bytes.Equal(got, old) {
				t.Fatal("the file changed before the rename")
			}
			if n := sideFiles(t, dir); n == 0 && step != "agentfs.renamed" {
				t.Fatal("no temp file was left to clean up: the kill came too late")
			}
			// A temp file of a live agentfs (this test process) stays.
			live := fmt.Sprintf(".g.txt.agentfs-%d-%d-%s-abcdef.tmp", os.Getpid(), selfStart(t), bootPrefix(t))
			if err := os.WriteFile(filepath.Join(dir, live), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd, out := agentfsCmd(t, dir, []byte("next\n"), "write", "other.txt")
			if err := cmd.Run(); err != nil {
				t.Fatalf("next write: %v %s", err, out)
			}
			if n := sideFiles(t, dir); n != 1 {
				t.Fatalf("%d side files left, want only the live writer's", n)
			}
			if _, err := os.Stat(filepath.Join(dir, live)); err != nil {
				t.Fatalf("a live writer's temp file was removed: %v", err)
			}
		})
	}
}

// sideFiles counts the agentfs temp files in dir. (A backup left by a kill
// after the rename is the old version, kept: see package files.)
func sideFiles(t *testing.T, dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.Contains(e.Name(), ".agentfs-") && strings.HasSuffix(e.Name(), ".tmp") {
			n++
		}
	}
	return n
}

func selfStart(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	var n uint64
	fmt.Sscan(f[19], &n)
	return n
}

func bootPrefix(t *testing.T) string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(strings.TrimSpace(string(b)), "-", "")[:12]
}

// TestKilledWriteThenUndo SIGKILLs agentfs at each step of a write whose
// file agentfs changed once before, then undoes: a change cut off before
// its rename never happened (undo goes back past the earlier change, its
// entry, if recorded, dropped as stale), one cut off after its rename
// happened (undo restores the version before it, then the one before
// that). No step leaves an undo that fails or restores the wrong version.
func TestKilledWriteThenUndo(t *testing.T) {
	// A large version is kept in the history by a hard link to its inode.
	large := string(bytes.Repeat([]byte("one\n"), 1<<15))
	for _, c := range []struct{ step, one string }{
		{"agentfs.stage.half", "one\n"}, {"agentfs.staged", "one\n"}, {"agentfs.recorded", "one\n"}, {"agentfs.renamed", "one\n"},
		{"agentfs.recorded", large}, {"agentfs.renamed", large},
	} {
		step, one := c.step, c.one
		t.Run(fmt.Sprintf("%s/%d", step, len(one)), func(t *testing.T) {
			dir, state := t.TempDir(), t.TempDir()
			run := stateRun(t, dir, state)
			path := filepath.Join(dir, "f.txt")
			if err := os.WriteFile(path, []byte("zero\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := run([]byte(one), "", "write", "f.txt"); err != nil {
				t.Fatalf("write: %v %s", err, out)
			}
			big := bytes.Repeat([]byte("two\n"), 1<<20) // large enough to stage in halves
			if _, err := run(big, step, "write", "f.txt"); err == nil {
				t.Fatalf("agentfs was not killed at %s", step)
			}
			want := []string{"zero\n"}
			if step == "agentfs.renamed" {
				want = []string{one, "zero\n"}
			}
			for _, w := range want {
				if out, err := run(nil, "", "undo", "f.txt"); err != nil {
					t.Fatalf("undo after a kill at %s: %v %s", step, err, out)
				}
				if got, _ := os.ReadFile(path); string(got) != w {
					t.Fatalf("undo after a kill at %s left %d bytes, want %d", step, len(got), len(w))
				}
			}
			if out, _ := run(nil, "", "undo", "f.txt"); !strings.Contains(out, "nothing_to_undo") {
				t.Fatalf("a further undo: %s, want nothing_to_undo", out)
			}
		})
	}
}

// TestKilledUndoThenUndo SIGKILLs an undo at each step, then undoes on:
// an undo cut off before its rename never happened (the next undo does
// it), one cut off after its rename happened, and its entry, which it
// drops only once the rename is made, is stale then, never a conflict
// that would block the versions before it for good.
func TestKilledUndoThenUndo(t *testing.T) {
	one := string(bytes.Repeat([]byte("one\n"), 1<<20)) // large enough to stage in halves
	for _, step := range []string{"agentfs.stage.half", "agentfs.staged", "agentfs.recorded", "agentfs.renamed"} {
		t.Run(step, func(t *testing.T) {
			dir, state := t.TempDir(), t.TempDir()
			run := stateRun(t, dir, state)
			path := filepath.Join(dir, "f.txt")
			if err := os.WriteFile(path, []byte("zero\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, c := range []string{one, "two\n"} {
				if out, err := run([]byte(c), "", "write", "f.txt"); err != nil {
					t.Fatalf("write: %v %s", err, out)
				}
			}
			if _, err := run(nil, step, "undo", "f.txt"); err == nil {
				t.Fatalf("agentfs undo was not killed at %s", step)
			}
			want := []string{one, "zero\n"}
			if step == "agentfs.renamed" {
				if got, _ := os.ReadFile(path); string(got) != one {
					t.Fatalf("after an undo killed past its rename the file holds %d bytes, want the version before", len(got))
				}
				want = want[1:]
			}
			for _, w := range want {
				if out, err := run(nil, "", "undo", "f.txt"); err != nil {
					t.Fatalf("undo after an undo killed at %s: %v %s", step, err, out)
				}
				if got, _ := os.ReadFile(path); string(got) != w {
					t.Fatalf("undo after an undo killed at %s left %d bytes, want %d", step, len(got), len(w))
				}
			}
			if out, _ := run(nil, "", "undo", "f.txt"); !strings.Contains(out, "nothing_to_undo") {
				t.Fatalf("a further undo: %s, want nothing_to_undo", out)
			}
		})
	}
}

// TestKilledWriteUnderRoot: a large file's earlier version is kept in the
// undo history by a hard link; a write SIGKILLed after that link and
// before its rename leaves the file with two names, one in the history
// (outside the root). Under --root that name is agentfs's own: the file
// is still read, written and undone, not path_denied for good.
func TestKilledWriteUnderRoot(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	run := stateRun(t, dir, state, "--root", ".")
	a, b := bytes.Repeat([]byte("a"), 100000), bytes.Repeat([]byte("b"), 100000)
	if out, err := run(a, "", "write", "L"); err != nil {
		t.Fatalf("write: %v %s", err, out)
	}
	if _, err := run(b, "agentfs.recorded", "write", "L"); err == nil {
		t.Fatal("agentfs was not killed")
	}
	if fi, err := os.Stat(filepath.Join(dir, "L")); err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Fatalf("the kill left %v (%v), want the file with its history link", fi, err)
	}
	for _, args := range [][]string{{"read", "L"}, {"undo", "--dry-run", "L"}} {
		if out, err := run(nil, "", args...); err != nil {
			t.Fatalf("agentfs --root . %q after the kill: %v %s", args, err, out)
		}
	}
	if out, err := run(b, "", "write", "L"); err != nil {
		t.Fatalf("write after the kill: %v %s", err, out)
	}
	if out, err := run(nil, "", "undo", "L"); err != nil {
		t.Fatalf("undo after the kill: %v %s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "L")); !bytes.Equal(got, a) {
		t.Fatalf("undo left %d bytes, want the version before", len(got))
	}
}

// TestKilledPatchIsPutBack SIGKILLs a patch of five files (an add, an
// update, a delete and a move, which is two) before its renames and after
// each of them: the next change made with the same state directory puts
// every file back as it was (the journal of the cut-off set), no side
// file stays, and undo has nothing of the set left to undo. A patch is
// all or nothing, also when its process dies half-way.
func TestKilledPatchIsPutBack(t *testing.T) {
	patch := "*** Begin Patch\n*** Add File: n\n+new\n*** Update File: u\n@@\n-u0\n+u1\n*** Delete File: d\n*** Update File: m\n*** Move to: m2\n@@\n-m0\n+m1\n*** End Patch\n"
	original := map[string]string{"u": "u0\n", "d": "d0\n", "m": "m0\n"}
	for _, c := range []struct {
		step string
		rule []string
	}{
		{"agentfs.recorded", nil}, {"agentfs.renamed#1", nil}, {"agentfs.renamed#2", nil}, {"agentfs.renamed#3", nil},
		{"agentfs.renamed#4", nil}, {"agentfs.renamed#5", nil},
		// Under a rule, by a call under the same rule.
		{"agentfs.renamed#3", []string{"--root", ".", "--deny", "**/.env"}},
	} {
		step, rule := c.step, c.rule
		t.Run(fmt.Sprintf("%s%q", step, rule), func(t *testing.T) {
			dir, state := t.TempDir(), t.TempDir()
			run := stateRun(t, dir, state, rule...)
			for name, content := range original {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := run([]byte(patch), step, "patch"); err == nil {
				t.Fatalf("agentfs patch was not killed at %s", step)
			}
			if step == "agentfs.renamed#4" {
				// The putting back is cut off too, after its second file.
				if _, err := run([]byte("x\n"), "agentfs.putback#2", "write", "other"); err == nil {
					t.Fatal("the putting back was not killed")
				}
			}
			if out, err := run([]byte("x\n"), "", "write", "other"); err != nil {
				t.Fatalf("the next change: %v %s", err, out)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, e := range ents {
				if e.Name() == "other" {
					continue
				}
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				got[e.Name()] = string(b)
			}
			if !reflect.DeepEqual(got, original) {
				t.Fatalf("after a patch killed at %s and the next change: %q, want every file as it was: %q", step, got, original)
			}
			for name := range original {
				if out, _ := run(nil, "", "undo", name); !strings.Contains(out, "nothing_to_undo") {
					t.Errorf("undo %s after the put-back set: %s, want nothing_to_undo", name, out)
				}
			}
		})
	}
}

// TestPutBackLeavesOthersAlone attacks the putting back of a killed change
// set (a red team's cases): it must put back only what provably is the
// set's, never a file someone made or changed since, never through a
// directory that moved or a link that now leads elsewhere, and never on a
// journal that is not one.
func TestPutBackLeavesOthersAlone(t *testing.T) {
	const patch = "*** Begin Patch\n*** Add File: d1/n1/n2/new\n+n\n*** Update File: d2/b\n@@\n-b1\n+b2\n*** End Patch\n"
	setup := func(t *testing.T, fault string, rule ...string) (dir, state string, run func([]byte, string, ...string) (string, error)) {
		dir, state = t.TempDir(), t.TempDir()
		run = stateRun(t, dir, state, rule...)
		for _, d := range []string{"d1", "d2"} {
			if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "d2", "b"), []byte("b1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := run([]byte(patch), fault, "patch"); err == nil {
			t.Fatalf("agentfs patch was not killed at %s", fault)
		}
		return dir, state, run
	}
	read := func(t *testing.T, p string) string {
		b, _ := os.ReadFile(p)
		return string(b)
	}
	journals := func(t *testing.T, state string) int {
		m, _ := filepath.Glob(filepath.Join(state, "agentplane", "history", ".journal", "*.json"))
		return len(m)
	}
	t.Run("a file made by hand since", func(t *testing.T) {
		dir, _, run := setup(t, "agentfs.recorded")
		// git clean, then the change applied by hand.
		side, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*", ".*agentfs-*"))
		side2, _ := filepath.Glob(filepath.Join(dir, "*", ".*agentfs-*"))
		for _, p := range append(side, side2...) {
			os.Remove(p)
		}
		if err := os.WriteFile(filepath.Join(dir, "d1", "n1", "n2", "new"), []byte("n\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run([]byte("x\n"), "", "write", "other"); err != nil {
			t.Fatalf("next change: %v %s", err, out)
		}
		if got := read(t, filepath.Join(dir, "d1", "n1", "n2", "new")); got != "n\n" {
			t.Fatalf("the file made by hand is %q after the putting back", got)
		}
	})
	t.Run("a directory moved away and back", func(t *testing.T) {
		dir, state, run := setup(t, "agentfs.renamed#2")
		if err := os.Rename(filepath.Join(dir, "d2"), filepath.Join(dir, "d2moved")); err != nil {
			t.Fatal(err)
		}
		if out, err := run([]byte("x\n"), "", "write", "other"); err != nil {
			t.Fatalf("next change: %v %s", err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "d1", "n1", "n2", "new")); err != nil || journals(t, state) != 1 {
			t.Fatalf("a set with a directory gone was put back in part (%v) or its journal dropped (%d)", err, journals(t, state))
		}
		if err := os.Rename(filepath.Join(dir, "d2moved"), filepath.Join(dir, "d2")); err != nil {
			t.Fatal(err)
		}
		out, err := run([]byte("x\n"), "", "write", "other")
		if err != nil || !strings.Contains(out, `"put_back"`) {
			t.Fatalf("next change: %v %s, want the put-back files reported", err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "d1", "n1")); !os.IsNotExist(err) || read(t, filepath.Join(dir, "d2", "b")) != "b1\n" || journals(t, state) != 0 {
			t.Fatalf("after the directory came back: n1 %v, b %q, %d journals; want all put back", err, read(t, filepath.Join(dir, "d2", "b")), journals(t, state))
		}
	})
	t.Run("a directory moved outside the root, a link in its place", func(t *testing.T) {
		dir, _, run := setup(t, "agentfs.renamed#2", "--root", ".")
		outside := filepath.Join(t.TempDir(), "d2")
		if err := os.Rename(filepath.Join(dir, "d2"), outside); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dir, "d2")); err != nil {
			t.Fatal(err)
		}
		if out, err := run([]byte("x\n"), "", "write", "other"); err != nil {
			t.Fatalf("next change: %v %s", err, out)
		}
		if got := read(t, filepath.Join(outside, "b")); got != "b2\n" {
			t.Fatalf("the file outside the root is %q: put back through a link, outside the root", got)
		}
	})
	t.Run("a refusal says what was put back", func(t *testing.T) {
		dir, _, run := setup(t, "agentfs.renamed#2")
		// The torn set's content, read before the putting back.
		out, err := run([]byte("b3\n"), "", "write", "d2/b", "--expect-sha256", fmt.Sprintf("%x", sha256.Sum256([]byte("b2\n"))))
		if err == nil || !strings.Contains(out, "file_changed") || !strings.Contains(out, `"put_back"`) {
			t.Fatalf("a write expecting the torn content: %v %s, want file_changed naming what was put back", err, out)
		}
		if read(t, filepath.Join(dir, "d2", "b")) != "b1\n" {
			t.Fatal("not put back")
		}
	})
	t.Run("a rule that denies dotfiles", func(t *testing.T) {
		dir, _, run := setup(t, "agentfs.renamed#2", "--root", ".", "--deny", "**/.*")
		if out, err := run([]byte("x\n"), "", "write", "other"); err != nil {
			t.Fatalf("next change: %v %s", err, out)
		}
		if read(t, filepath.Join(dir, "d2", "b")) != "b1\n" {
			t.Fatal("a set whose side files the rule denies was not put back")
		}
	})
	t.Run("what is not a journal", func(t *testing.T) {
		dir, state := t.TempDir(), t.TempDir()
		run := stateRun(t, dir, state)
		if out, err := run([]byte("x\n"), "", "write", "victim"); err != nil {
			t.Fatalf("write: %v %s", err, out)
		}
		jdir := filepath.Join(state, "agentplane", "history", ".journal")
		if err := os.MkdirAll(jdir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(jdir, "fifo.json"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/zero", filepath.Join(jdir, "zero.json")); err != nil {
			t.Fatal(err)
		}
		// A forged journal of a dead owner whose "temp file" is an
		// ordinary file of the user's.
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		forged := fmt.Sprintf(`{"owner":"1-1-%s","entries":[{"dir":%q,"dev":%d,"ino":%d,"name":"zz","tmp":"victim","existed":false,"new_sha256":"00"},{"dir":%q,"dev":%d,"ino":%d,"name":"yy","existed":true}]}`,
			bootPrefix(t), dir, st.Dev, st.Ino, dir, st.Dev, st.Ino)
		if err := os.WriteFile(filepath.Join(jdir, "forged.json"), []byte(forged), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd, out := agentfsCmd(t, dir, []byte("y\n"), "write", "other")
		cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+state)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("a change beside what is not a journal: %v %s", err, out)
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatal("a change hung on what is not a journal")
		}
		if read(t, filepath.Join(dir, "victim")) != "x\n" {
			t.Fatal("a forged journal removed an ordinary file")
		}
	})
}
