package patch

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// run parses and plans patch against tree, commits the plan to a copy and
// returns it with the change set.
func run(t *testing.T, tree memTree, patch string, strip int) (memTree, []Change, error) {
	t.Helper()
	p, err := Parse([]byte(patch), strip)
	if err != nil {
		return tree, nil, err
	}
	changes, err := Plan(p, tree.read)
	if err != nil {
		if changes != nil {
			t.Errorf("Plan returned changes with an error")
		}
		return tree, nil, err
	}
	out := tree.clone()
	if err := out.commit(changes); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return out, changes, nil
}

type patchCase struct {
	name    string
	tree    memTree
	patch   string
	strip   int
	want    memTree           // nil when an error is expected
	code    string            // expected error code
	details map[string]any    // expected subset of error details
	actions map[string]Action // expected action per Change.Path
}

func (tc patchCase) check(t *testing.T) {
	t.Helper()
	got, changes, err := run(t, tc.tree, tc.patch, tc.strip)
	if tc.code != "" {
		if err == nil {
			t.Fatalf("no error; want %s; tree %v", tc.code, got)
		}
		e := result.AsError(err)
		if e.Code != tc.code {
			t.Fatalf("error %s (%v); want %s", e.Code, err, tc.code)
		}
		for k, v := range tc.details {
			if !reflect.DeepEqual(e.Details[k], v) {
				t.Errorf("details[%q] = %#v; want %#v (all: %v)", k, e.Details[k], v, e.Details)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v (details %v)", err, result.AsError(err).Details)
	}
	if d := diffTrees(got, tc.want); d != "" {
		t.Errorf("tree differs:\n%s", d)
	}
	for _, c := range changes {
		if want, ok := tc.actions[c.Path]; ok && c.Action != want {
			t.Errorf("%s: action %s; want %s", c.Path, c.Action, want)
		}
	}
}

const gitDiff = `commit message lines are ignored
diff --git a/del.txt b/del.txt
deleted file mode 100644
index 286c5f5..0000000
--- a/del.txt
+++ /dev/null
@@ -1 +0,0 @@
-gone
diff --git a/r.txt b/r2.txt
similarity index 85%
rename from r.txt
rename to r2.txt
index 2019eda..4d3ab13 100644
--- a/r.txt
+++ b/r2.txt
@@ -1,7 +1,7 @@
 one
 two
 three
-four
+FOUR
 five
 six
 seven
diff --git a/sp ace.txt b/sp ace.txt
new file mode 100644
index 0000000..3e75765
--- /dev/null
+++ b/sp ace.txt	
@@ -0,0 +1 @@
+new
diff --git "a/t\tab.txt" "b/t\tab.txt"
new file mode 100644
index 0000000..8cc35a3
--- /dev/null
+++ "b/t\tab.txt"
@@ -0,0 +1 @@
+tab
diff --git a/x.txt b/x.txt
index de98044..f8f7a32 100644
--- a/x.txt
+++ b/x.txt
@@ -1,3 +1,4 @@
 a
-b
+B
 c
+d
\ No newline at end of file
`

func TestUnified(t *testing.T) {
	cases := []patchCase{
		{
			name: "git diff with delete, rename, adds, quoted name, no newline",
			tree: memTree{
				"x.txt": []byte("a\nb\nc\n"), "del.txt": []byte("gone\n"),
				"r.txt": []byte("one\ntwo\nthree\nfour\nfive\nsix\nseven\n"), "old.txt": []byte("keep\n"),
			},
			patch: gitDiff, strip: -1,
			want: memTree{
				"x.txt": []byte("a\nB\nc\nd"), "old.txt": []byte("keep\n"),
				"r2.txt":     []byte("one\ntwo\nthree\nFOUR\nfive\nsix\nseven\n"),
				"sp ace.txt": []byte("new\n"),
				"t\tab.txt":  []byte("tab\n"),
			},
			actions: map[string]Action{"del.txt": ActionDelete, "r.txt": ActionMove, "sp ace.txt": ActionAdd, "x.txt": ActionUpdate},
		},
		{
			name:  "pure rename without hunks",
			tree:  memTree{"a.txt": []byte("x\n")},
			patch: "diff --git a/a.txt b/dir/b.txt\nsimilarity index 100%\nrename from a.txt\nrename to dir/b.txt\n",
			strip: -1, want: memTree{"dir/b.txt": []byte("x\n")},
			actions: map[string]Action{"a.txt": ActionMove},
		},
		{
			name: "empty new file and mode change",
			tree: memTree{"s.sh": []byte("echo\n")},
			patch: "diff --git a/e b/e\nnew file mode 100644\nindex 0000000..e69de29\n" +
				"diff --git a/s.sh b/s.sh\nold mode 100644\nnew mode 100755\n",
			strip: -1, want: memTree{"e": []byte{}, "s.sh": []byte("echo\n")},
		},
		{
			name:  "copy",
			tree:  memTree{"a": []byte("1\n2\n")},
			patch: "diff --git a/a b/c\nsimilarity index 50%\ncopy from a\ncopy to c\n--- a/a\n+++ b/c\n@@ -1,2 +1,2 @@\n 1\n-2\n+3\n",
			strip: -1, want: memTree{"a": []byte("1\n2\n"), "c": []byte("1\n3\n")},
		},
		{
			name:  "multiple hunks with drifted line numbers",
			tree:  memTree{"f": []byte("new0\nnew1\nl1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\n")},
			patch: "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n l1\n-l2\n+L2\n l3\n@@ -8,3 +8,4 @@\n l8\n l9\n+l9b\n l10\n",
			strip: -1, want: memTree{"f": []byte("new0\nnew1\nl1\nL2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl9b\nl10\n")},
		},
		{
			name:  "nearest copy of repeated context wins",
			tree:  memTree{"f": []byte("x\ny\nz\nx\ny\nz\nx\ny\nz\n")},
			patch: "--- f\n+++ f\n@@ -4,3 +4,3 @@\n x\n-y\n+Y\n z\n",
			strip: -1, want: memTree{"f": []byte("x\ny\nz\nx\nY\nz\nx\ny\nz\n")},
		},
		{
			name:  "counts omitted",
			tree:  memTree{"f": []byte("a\n")},
			patch: "--- f\n+++ f\n@@ -1 +1 @@\n-a\n+b\n",
			strip: -1, want: memTree{"f": []byte("b\n")},
		},
		{
			name:  "pure insertion by line number",
			tree:  memTree{"f": []byte("a\nb\nc\n")},
			patch: "--- f\n+++ f\n@@ -2,0 +3,1 @@\n+after b\n",
			strip: -1, want: memTree{"f": []byte("a\nb\nafter b\nc\n")},
		},
		{
			name:  "diff -u with timestamps, strip 0 chosen, shorter name patched",
			tree:  memTree{"f.c": []byte("int x;\n")},
			patch: "--- f.c.orig\t2024-01-01 10:00:00.000000000 +0000\n+++ f.c\t2024-01-02 10:00:00.000000000 +0000\n@@ -1 +1 @@\n-int x;\n+int y;\n",
			strip: -1, want: memTree{"f.c": []byte("int y;\n")},
		},
		{
			name:  "diff -N epoch means absent",
			tree:  memTree{},
			patch: "--- n.txt\t1970-01-01 00:00:00.000000000 +0000\n+++ n.txt\t2024-01-02 10:00:00.000000000 +0000\n@@ -0,0 +1 @@\n+hi\n",
			strip: -1, want: memTree{"n.txt": []byte("hi\n")},
		},
		{
			name:  "explicit strip 2",
			tree:  memTree{"src/f": []byte("a\n")},
			patch: "--- x/y/src/f\n+++ x/y/src/f\n@@ -1 +1 @@\n-a\n+b\n",
			strip: 2, want: memTree{"src/f": []byte("b\n")},
		},
		{
			name:  "git --no-prefix keeps strip 0",
			tree:  memTree{"a/f": []byte("a\n")},
			patch: "diff --git a/f a/f\n--- a/f\n+++ a/f\n@@ -1 +1 @@\n-a\n+b\n",
			strip: -1, want: memTree{"a/f": []byte("b\n")},
		},
		{
			name:  "CRLF file stays CRLF with an LF patch",
			tree:  memTree{"w.txt": []byte("one\r\ntwo\r\nthree\r\n")},
			patch: "--- a/w.txt\n+++ b/w.txt\n@@ -1,3 +1,4 @@\n one\n-two\n+TWO\n+2.5\n three\n",
			strip: -1, want: memTree{"w.txt": []byte("one\r\nTWO\r\n2.5\r\nthree\r\n")},
		},
		{
			name:  "CRLF patch of an LF file",
			tree:  memTree{"u.txt": []byte("one\ntwo\n")},
			patch: "--- a/u.txt\r\n+++ b/u.txt\r\n@@ -1,2 +1,2 @@\r\n one\r\n-two\r\n+2\r\n",
			strip: -1, want: memTree{"u.txt": []byte("one\n2\n")},
		},
		{
			name:  "new CRLF file keeps the patch's CRLF",
			tree:  memTree{},
			patch: "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+a\r\n+b\r\n",
			strip: -1, want: memTree{"n.txt": []byte("a\r\nb\r\n")},
		},
		{
			name:  "missing final newline stays missing when the diff does not mention it",
			tree:  memTree{"f": []byte("a\nb")},
			patch: "--- f\n+++ f\n@@ -1,2 +1,3 @@\n a\n+a2\n b\n",
			strip: -1, want: memTree{"f": []byte("a\na2\nb")},
		},
		{
			name:  "no newline marker adds the newline back",
			tree:  memTree{"f": []byte("a\nb")},
			patch: "--- f\n+++ f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n",
			strip: -1, want: memTree{"f": []byte("a\nb\n")},
		},
		{
			name:  "context marker on both sides",
			tree:  memTree{"f": []byte("a\nb")},
			patch: "--- f\n+++ f\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n\\ No newline at end of file\n",
			strip: -1, want: memTree{"f": []byte("A\nb")},
		},
		{
			name:  "fuzzy: trailing whitespace in file",
			tree:  memTree{"f": []byte("a  \nb\t\nc\n")},
			patch: "--- f\n+++ f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
			strip: -1, want: memTree{"f": []byte("a  \nB\nc\n")},
		},
		{
			name:  "fuzzy: indentation differs",
			tree:  memTree{"f": []byte("\tif x {\n\t\treturn\n\t}\n")},
			patch: "--- f\n+++ f\n@@ -1,3 +1,3 @@\n     if x {\n-        return\n+\t\treturn nil\n     }\n",
			strip: -1, want: memTree{"f": []byte("\tif x {\n\t\treturn nil\n\t}\n")},
		},
		{
			name:  "fuzzy: typographic quotes and dashes",
			tree:  memTree{"f": []byte("say(\u201chi\u201d) \u2014 ok\nnext\n")},
			patch: "--- f\n+++ f\n@@ -1,2 +1,2 @@\n say(\"hi\") - ok\n-next\n+NEXT\n",
			strip: -1, want: memTree{"f": []byte("say(\u201chi\u201d) \u2014 ok\nNEXT\n")},
		},
		{
			name:  "BOM stays",
			tree:  memTree{"f": []byte("\uFEFFa\nb\n")},
			patch: "--- f\n+++ f\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n",
			strip: -1, want: memTree{"f": []byte("\uFEFFA\nb\n")},
		},
		{
			name:  "git format-patch mail with signature",
			tree:  memTree{"f": []byte("a\n")},
			patch: "From x\nSubject: y\n---\n f | 2 +-\n\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n-- \n2.43.0\n",
			strip: -1, want: memTree{"f": []byte("b\n")},
		},
		{
			name:  "git log -p with several commits' messages",
			tree:  memTree{"f": []byte("x\na\n"), "g": []byte("1\n")},
			patch: "commit 1\n\n    msg\n\ndiff --git a/f b/f\nindex 1..2\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-a\n+b\ncommit 2\n\n    +not a hunk line\n\ndiff --git a/g b/g\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-1\n+2\n",
			strip: -1, want: memTree{"f": []byte("x\nb\n"), "g": []byte("2\n")},
		},
		{
			name: "context mismatch", tree: memTree{"f": []byte("a\nb\n")},
			patch: "--- f\n+++ f\n@@ -1,2 +1,2 @@\n a\n-c\n+C\n", strip: -1,
			code: result.CodePatchFailed, details: map[string]any{"path": "f", "hunk": 1, "context": []string{"a", "c"}},
		},
		{
			name: "second hunk fails, nothing changes", tree: memTree{"f": []byte("a\nb\n"), "g": []byte("x\n")},
			patch: "--- g\n+++ g\n@@ -1 +1 @@\n-x\n+y\n--- f\n+++ f\n@@ -1 +1 @@\n-a\n+A\n@@ -2 +2 @@\n-q\n+Q\n", strip: -1,
			code: result.CodePatchFailed, details: map[string]any{"path": "f", "hunk": 2},
		},
		{
			name: "update of missing file", tree: memTree{},
			patch: "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n", strip: -1, code: result.CodeFileNotFound,
		},
		{
			name: "create over existing file", tree: memTree{"f": []byte("x\n")},
			patch: "--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+a\n", strip: -1, code: result.CodeFileExists,
		},
		{
			name: "delete checks content", tree: memTree{"f": []byte("x\ny\n")},
			patch: "--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n", strip: -1, code: result.CodePatchFailed,
		},
		{
			name: "invalid hunk header", patch: "--- f\n+++ f\n@@ -x +1 @@\n-a\n", strip: -1,
			code: result.CodePatchParse, details: map[string]any{"line": 3, "text": "@@ -x +1 @@"},
		},
		{
			name: "truncated hunk", patch: "--- f\n+++ f\n@@ -1,3 +1,3 @@\n a\n-b\n", strip: -1,
			code: result.CodePatchParse, details: map[string]any{"line": 3},
		},
		{
			name: "hunk longer than header", patch: "--- f\n+++ f\n@@ -1 +1 @@\n-a\n+b\n+c\n", strip: -1,
			code: result.CodePatchParse, details: map[string]any{"line": 6},
		},
		{
			name: "absolute path", patch: "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", strip: 0,
			code: result.CodeOutsideRoot,
		},
		{
			name: "escaping path", patch: "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", strip: -1,
			code: result.CodeOutsideRoot,
		},
		{
			name: "strip too deep", patch: "--- f\n+++ f\n@@ -1 +1 @@\n-a\n+b\n", strip: 3, code: result.CodePatchParse,
		},
		{
			name: "binary", patch: "diff --git a/b.png b/b.png\nindex 1..2 100644\nBinary files a/b.png and b/b.png differ\n", strip: -1,
			code: result.CodePatchParse,
		},
		{name: "no diff at all", patch: "hello\nworld\n", strip: -1, code: result.CodePatchParse, details: map[string]any{"line": 1}},
		{name: "empty", patch: "", strip: -1, code: result.CodePatchParse},
		{name: "hunk without header", patch: "@@ -1 +1 @@\n-a\n+b\n", strip: -1, code: result.CodePatchParse},
	}
	for _, tc := range cases {
		t.Run(tc.name, tc.check)
	}
}

func TestParseUnifiedStructure(t *testing.T) {
	p, err := Parse([]byte(gitDiff), -1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Format != FormatUnified {
		t.Fatalf("format %v", p.Format)
	}
	var got []string
	for _, f := range p.Files {
		got = append(got, string(f.Action)+" "+f.Path+" "+f.MoveTo)
	}
	want := []string{"delete del.txt ", "move r.txt r2.txt", "add sp ace.txt ", "add t\tab.txt ", "update x.txt "}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("files %q; want %q", got, want)
	}
	x := p.Files[4].Hunks[0]
	if x.OldStart != 1 || !x.NewNoEOL || x.OldNoEOL || len(x.Lines) != 5 {
		t.Fatalf("x.txt hunk %+v", x)
	}
}

func TestSplitGitHeader(t *testing.T) {
	for _, tc := range []struct{ in, a, b string }{
		{"a/x b/x", "a/x", "b/x"},
		{"a/sp ace b/sp ace", "a/sp ace", "b/sp ace"},
		{`"a/t\tb" "b/t\tb"`, "a/t\tb", "b/t\tb"},
		{"a/x b/y", "a/x", "b/y"},
	} {
		a, b := splitGitHeader(tc.in)
		if a != tc.a || b != tc.b {
			t.Errorf("splitGitHeader(%q) = %q, %q", tc.in, a, b)
		}
	}
	if !strings.Contains(gitDiff, "\\ No newline") {
		t.Fatal("fixture lost its marker")
	}
}
