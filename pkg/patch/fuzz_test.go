package patch

import (
	"bytes"
	"errors"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// addConformanceSeeds adds every conformance patch.txt as a seed, so the
// fuzzers start from what real agents send. Missing cases are no error: the
// seeds in testdata/fuzz still run.
func addConformanceSeeds(f *testing.F, add func(data []byte)) {
	matches, _ := filepath.Glob(filepath.Join(conformanceDir(), "*", "patch.txt"))
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil {
			add(b)
		}
	}
}

// checkParsed holds Parse to its contract whatever the input: a typed error
// with a known code, or a patch whose paths are all clean and relative.
func checkParsed(t *testing.T, data []byte, p *Patch, err error) {
	t.Helper()
	if err != nil {
		if p != nil {
			t.Fatalf("Parse returned a patch and an error")
		}
		var re *result.Error
		if !errors.As(err, &re) {
			t.Fatalf("untyped error %T: %v", err, err)
		}
		switch re.Code {
		case result.CodePatchParse:
			line, ok := re.Details["line"].(int)
			if !ok || line < 0 || line > bytes.Count(data, []byte("\n"))+1 {
				t.Fatalf("parse error line %v out of range: %v", re.Details["line"], err)
			}
		case result.CodeOutsideRoot:
		default:
			t.Fatalf("unexpected code %s: %v", re.Code, err)
		}
		return
	}
	if len(p.Files) == 0 {
		t.Fatalf("Parse succeeded with no files")
	}
	for _, fp := range p.Files {
		names := []string{fp.Path}
		if fp.Action == ActionMove || fp.Action == ActionCopy {
			names = append(names, fp.MoveTo)
		} else if fp.MoveTo != "" {
			t.Fatalf("MoveTo on a %s", fp.Action)
		}
		for _, name := range names {
			if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
				t.Fatalf("unclean path %q in %+v", name, fp)
			}
		}
	}
}

func FuzzParseUnified(f *testing.F) {
	f.Add([]byte(gitDiff), -1)
	f.Add([]byte("--- f\n+++ f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"), 0)
	f.Add([]byte("--- a/x y\t2020-01-01\n+++ b/x y\t2020-01-01\n@@ -0,0 +1 @@\n+z\n"), 1)
	f.Add([]byte("diff --git a/a b/c\ncopy from a\ncopy to c\n"), -1)
	f.Add([]byte("--- /dev/null\r\n+++ b/n\r\n@@ -0,0 +1,2 @@\r\n+a\r\n\r\n"), -1)
	f.Fuzz(func(t *testing.T, data []byte, strip int) {
		if strip > 8 {
			strip %= 8
		}
		p, err := Parse(data, strip)
		checkParsed(t, data, p, err)
		if err == nil && p.Format == FormatUnified {
			for _, fp := range p.Files {
				for _, h := range fp.Hunks {
					if h.OldStart < 0 {
						t.Fatalf("negative start %+v", h)
					}
				}
			}
		}
	})
}

func FuzzParseAgent(f *testing.F) {
	addConformanceSeeds(f, func(b []byte) { f.Add(b) })
	f.Add([]byte(agentPatch("*** Update File: m.py\n@@ class B:\n@@     def f(self):\n-        return 1\n+        return 2\n*** End of File\n")))
	f.Add([]byte("<<'EOF'\n*** Begin Patch\n*** Add File: n\n+x\n\n+y\n*** End Patch\nEOF\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, -1)
		checkParsed(t, data, p, err)
		if err == nil && p.Format == FormatAgent {
			for _, fp := range p.Files {
				if fp.Action == ActionUpdate && len(fp.Hunks) == 0 {
					t.Fatalf("update without hunks parsed: %+v", fp)
				}
			}
		}
	})
}

// fuzzTree is the tree FuzzPlan plans against: a few fixed files plus a
// file built from the fuzzer's bytes, and a directory.
func fuzzTree(content []byte) memTree {
	return memTree{
		"f":          content,
		"a/b.txt":    []byte("one\ntwo\nthree\n"),
		"crlf.txt":   []byte("one\r\ntwo\r\nthree"),
		"dir/inside": []byte("x\n"),
	}
}

func FuzzPlan(f *testing.F) {
	addConformanceSeeds(f, func(b []byte) { f.Add(b, []byte("line1\nline2\n")) })
	f.Add([]byte(gitDiff), []byte("a\nb\nc\n"))
	f.Add([]byte("--- f\n+++ f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"), []byte("a\nb"))
	f.Add([]byte(agentPatch("*** Update File: f\n@@ a\n+x\n*** Update File: crlf.txt\n@@\n-two\n+2\n*** End of File\n")), []byte("a\r\nb\r\n"))
	f.Add([]byte(agentPatch("*** Update File: f\n*** Move to: a/b.txt\n*** Delete File: dir\n")), []byte("\uFEFFx\n"))
	f.Add([]byte(agentPatch("*** Add File: g\n+1\n*** Update File: g\n*** Move to: h\n@@\n-1\n+2\n*** Update File: h\n*** Move to: f\n")), []byte{})
	f.Fuzz(func(t *testing.T, data, content []byte) {
		p, err := Parse(data, -1)
		if err != nil {
			return
		}
		tree := fuzzTree(content)
		reads := map[string]int{}
		read := func(name string) ([]byte, error) {
			reads[name]++
			return tree.read(name)
		}
		changes, err := Plan(p, read)
		for name, n := range reads {
			if n > 1 {
				t.Fatalf("%s read %d times: a plan must see one consistent state", name, n)
			}
		}
		if err != nil {
			if changes != nil {
				t.Fatalf("Plan returned %d changes with error %v", len(changes), err)
			}
			var re *result.Error
			if !errors.As(err, &re) || re.Code == "" {
				t.Fatalf("untyped error %v", err)
			}
			if re.Code == result.CodePatchFailed {
				if _, ok := re.Details["path"].(string); !ok {
					t.Fatalf("patch_failed without path: %v", re.Details)
				}
			}
			return
		}
		// The plan must describe the tree exactly as read, and commit
		// cleanly; planning again must give the same answer.
		seen := map[string]bool{}
		for _, c := range changes {
			for _, name := range []string{c.Path, c.MoveTo} {
				if name == "" {
					continue
				}
				if seen[name] {
					t.Fatalf("%s appears in two changes: %+v", name, changes)
				}
				seen[name] = true
			}
			if (c.Action == ActionAdd) != (c.OldContent == nil) || (c.Action == ActionDelete) != (c.NewContent == nil) {
				t.Fatalf("nil-ness of contents does not match action: %+v", c)
			}
		}
		got := tree.clone()
		if err := got.commit(changes); err != nil {
			t.Fatalf("plan does not commit: %v\n%+v", err, changes)
		}
		again, err := Plan(p, tree.read)
		if err != nil || !reflect.DeepEqual(again, changes) {
			t.Fatalf("second plan differs: %v", err)
		}
		if !reflect.DeepEqual(tree, fuzzTree(content)) {
			t.Fatalf("Plan modified what read returned")
		}
	})
}

// unifiedDiff writes a one-hunk unified diff from old to new with every line
// as context, using a plain LCS. It is the test's independent reference for
// what a diff of two texts looks like, `\ No newline` markers included.
func unifiedDiff(old, new string) string {
	a, b := splitText(old), splitText(new)
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var body strings.Builder
	emit := func(prefix byte, l textLine) {
		body.WriteByte(prefix)
		body.WriteString(l.text)
		body.WriteString("\n")
		if l.eol == "" {
			body.WriteString("\\ No newline at end of file\n")
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			emit(' ', a[i])
			i, j = i+1, j+1
		case j < len(b) && (i == len(a) || lcs[i][j+1] >= lcs[i+1][j]):
			emit('+', b[j])
			j++
		default:
			emit('-', a[i])
			i++
		}
	}
	oldStart, newStart := 1, 1
	if len(a) == 0 {
		oldStart = 0
	}
	if len(b) == 0 {
		newStart = 0
	}
	return "--- a/f\n+++ b/f\n@@ -" + strconv.Itoa(oldStart) + "," + strconv.Itoa(len(a)) +
		" +" + strconv.Itoa(newStart) + "," + strconv.Itoa(len(b)) + " @@\n" + body.String()
}

// FuzzRoundTrip checks the unified applier against the reference diff: the
// diff of old to new, applied to old, must give new byte for byte.
func FuzzRoundTrip(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nB\nc\nd")
	f.Add("x", "x\n")
	f.Add("", "new\n")
	f.Add("one\ntwo\n", "")
	f.Add("\n\n\n", "\n \n")
	f.Fuzz(func(t *testing.T, old, new string) {
		// CR and BOM are normalised on purpose (new lines take the file's
		// line ending), so the byte-exact property holds only without them.
		if strings.ContainsAny(old+new, "\r\uFEFF") || strings.Count(old, "\n") > 200 || strings.Count(new, "\n") > 200 {
			return
		}
		diff := unifiedDiff(old, new)
		p, err := Parse([]byte(diff), -1)
		if err != nil {
			t.Fatalf("parse of generated diff: %v\n%s", err, diff)
		}
		changes, err := Plan(p, memTree{"f": []byte(old)}.read)
		if err != nil {
			t.Fatalf("plan: %v\n%s", err, diff)
		}
		if len(changes) != 1 || string(changes[0].NewContent) != new {
			t.Fatalf("got %q, want %q\n%s", changes[0].NewContent, new, diff)
		}
	})
}

// FuzzAgentRoundTrip is FuzzRoundTrip for the agent format: one chunk
// rewriting the whole file must give the new text, with the final newline
// the format always leaves.
func FuzzAgentRoundTrip(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nB\nc\nd")
	f.Add("x", "x\n")
	f.Add("one\ntwo\n", "")
	f.Add("\n\n", "\n \n\n")
	f.Fuzz(func(t *testing.T, old, new string) {
		if strings.ContainsAny(old+new, "\r\uFEFF") || strings.Contains(old+new, "***") ||
			strings.Count(old, "\n") > 200 || strings.Count(new, "\n") > 200 || old == "" {
			return
		}
		// Every line as context or change, so the chunk can only match at
		// the top of the file.
		var body strings.Builder
		d := unifiedDiff(old, new)
		_, hunk, _ := strings.Cut(d, " @@\n")
		for _, l := range strings.Split(strings.TrimSuffix(hunk, "\n"), "\n") {
			if strings.HasPrefix(l, `\`) {
				continue
			}
			body.WriteString(l + "\n")
		}
		patch := agentPatch("*** Update File: f\n@@\n" + body.String())
		p, err := Parse([]byte(patch), -1)
		if err != nil {
			t.Fatalf("parse: %v\n%s", err, patch)
		}
		changes, err := Plan(p, memTree{"f": []byte(old)}.read)
		if err != nil {
			t.Fatalf("plan: %v\n%s", err, patch)
		}
		want := new
		if want != "" && !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		if got := string(changes[0].NewContent); got != want {
			t.Fatalf("got %q, want %q\n%s", got, want, patch)
		}
	})
}
