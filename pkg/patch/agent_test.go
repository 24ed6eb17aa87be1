package patch

import (
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

func agentPatch(body string) string { return "*** Begin Patch\n" + body + "*** End Patch\n" }

func TestAgent(t *testing.T) {
	src := memTree{"m.py": []byte("class A:\n    def f(self):\n        return 1\n\nclass B:\n    def f(self):\n        return 1\n")}
	cases := []patchCase{
		{
			name:  "anchors pick the second of two identical bodies",
			tree:  src,
			patch: agentPatch("*** Update File: m.py\n@@ class B:\n@@     def f(self):\n-        return 1\n+        return 2\n"),
			want:  memTree{"m.py": []byte("class A:\n    def f(self):\n        return 1\n\nclass B:\n    def f(self):\n        return 2\n")},
		},
		{
			name:  "without anchors the first occurrence is taken",
			tree:  src,
			patch: agentPatch("*** Update File: m.py\n@@\n-        return 1\n+        return 2\n"),
			want:  memTree{"m.py": []byte("class A:\n    def f(self):\n        return 2\n\nclass B:\n    def f(self):\n        return 1\n")},
		},
		{
			name:  "pure addition after an anchor",
			tree:  memTree{"f": []byte("a\nb\nc\n")},
			patch: agentPatch("*** Update File: f\n@@ a\n+a2\n"),
			want:  memTree{"f": []byte("a\na2\nb\nc\n")},
		},
		{
			name:  "first chunk may omit @@",
			tree:  memTree{"f": []byte("a\nb\n")},
			patch: agentPatch("*** Update File: f\n-b\n+B\n"),
			want:  memTree{"f": []byte("a\nB\n")},
		},
		{
			name:  "end of file anchors at the last copy",
			tree:  memTree{"f": []byte("x\ny\nx\n")},
			patch: agentPatch("*** Update File: f\n@@\n-x\n+z\n*** End of File\n"),
			want:  memTree{"f": []byte("x\ny\nz\n")},
		},
		{
			name:  "CRLF file keeps CRLF",
			tree:  memTree{"w": []byte("a\r\nb\r\nc\r\n")},
			patch: agentPatch("*** Update File: w\n@@\n a\n-b\n+B\n+B2\n c\n"),
			want:  memTree{"w": []byte("a\r\nB\r\nB2\r\nc\r\n")},
		},
		{
			name:  "CRLF patch",
			tree:  memTree{"f": []byte("a\nb\n")},
			patch: "*** Begin Patch\r\n*** Update File: f\r\n@@\r\n-b\r\n+c\r\n*** End Patch\r\n",
			want:  memTree{"f": []byte("a\nc\n")},
		},
		{
			name:  "heredoc wrapper",
			tree:  memTree{},
			patch: "<<'EOF'\n*** Begin Patch\n*** Add File: n\n+x\n*** End Patch\nEOF\n",
			want:  memTree{"n": []byte("x\n")},
		},
		{
			name:  "trailing blank context line is forgiven",
			tree:  memTree{"f": []byte("a\nb")},
			patch: agentPatch("*** Update File: f\n@@\n a\n-b\n+c\n\n"),
			want:  memTree{"f": []byte("a\nc\n")},
		},
		{
			name:  "blank line in a chunk is an empty context line",
			tree:  memTree{"f": []byte("a\n\nb\n")},
			patch: agentPatch("*** Update File: f\n@@\n a\n\n-b\n+B\n"),
			want:  memTree{"f": []byte("a\n\nB\n")},
		},
		{
			name:    "two updates of one file apply in sequence",
			tree:    memTree{"f": []byte("a\nb\n")},
			patch:   agentPatch("*** Update File: f\n@@\n-a\n+A\n*** Update File: f\n@@\n-A\n+AA\n"),
			want:    memTree{"f": []byte("AA\nb\n")},
			actions: map[string]Action{"f": ActionUpdate},
		},
		{
			name:    "add then update then move",
			tree:    memTree{},
			patch:   agentPatch("*** Add File: n\n+1\n*** Update File: n\n*** Move to: m\n@@\n-1\n+2\n"),
			want:    memTree{"m": []byte("2\n")},
			actions: map[string]Action{"m": ActionAdd},
		},
		{
			name:    "move chain is one move",
			tree:    memTree{"a": []byte("1\n")},
			patch:   agentPatch("*** Update File: a\n*** Move to: b\n*** Update File: b\n*** Move to: c\n@@\n-1\n+3\n"),
			want:    memTree{"c": []byte("3\n")},
			actions: map[string]Action{"a": ActionMove},
		},
		{
			name:    "add over existing file is an update",
			tree:    memTree{"f": []byte("old\n")},
			patch:   agentPatch("*** Add File: f\n+new\n"),
			want:    memTree{"f": []byte("new\n")},
			actions: map[string]Action{"f": ActionUpdate},
		},
		{
			name:  "add with a blank line between + lines",
			tree:  memTree{},
			patch: agentPatch("*** Add File: f\n+a\n\n+b\n"),
			want:  memTree{"f": []byte("a\n\nb\n")},
		},
		{
			name:  "empty add",
			tree:  memTree{},
			patch: agentPatch("*** Add File: f\n"),
			want:  memTree{"f": []byte{}},
		},
		{
			name:  "fuzzy: fancy quotes in the patch",
			tree:  memTree{"f": []byte("msg = \"don't\"\nx\n")},
			patch: agentPatch("*** Update File: f\n@@\n msg = \u201cdon\u2019t\u201d\n-x\n+y\n"),
			want:  memTree{"f": []byte("msg = \"don't\"\ny\n")},
		},
		{
			name:  "fuzzy: whitespace-only differences",
			tree:  memTree{"f": []byte("  a  \n\tb\n")},
			patch: agentPatch("*** Update File: f\n@@\n a\n-b\n+\tB\n"),
			want:  memTree{"f": []byte("  a  \n\tB\n")},
		},
		{
			name:  "unicode",
			tree:  memTree{"f": []byte("日本\n語\n")},
			patch: agentPatch("*** Update File: f\n@@\n 日本\n-語\n+語✓\n"),
			want:  memTree{"f": []byte("日本\n語✓\n")},
		},
		{
			name: "missing anchor", tree: memTree{"f": []byte("a\n")},
			patch: agentPatch("*** Update File: f\n@@ nothere\n-a\n+b\n"),
			code:  result.CodePatchFailed, details: map[string]any{"path": "f", "hunk": 1, "context": []string{"nothere"}},
		},
		{
			name: "second chunk fails", tree: memTree{"f": []byte("a\nb\n")},
			patch: agentPatch("*** Update File: f\n@@\n-a\n+A\n@@\n-zz\n+b\n"),
			code:  result.CodePatchFailed, details: map[string]any{"path": "f", "hunk": 2, "context": []string{"zz"}},
		},
		{
			name: "chunks are found in order", tree: memTree{"f": []byte("a\nb\n")},
			patch: agentPatch("*** Update File: f\n@@\n-b\n+B\n@@\n-a\n+A\n"),
			code:  result.CodePatchFailed, details: map[string]any{"hunk": 2},
		},
		{
			name: "delete of a file deleted earlier in the patch", tree: memTree{"f": []byte("a\n")},
			patch: agentPatch("*** Delete File: f\n*** Delete File: f\n"), code: result.CodeFileNotFound,
		},
		{
			name: "bad line in chunk", patch: agentPatch("*** Update File: f\n@@\nnope\n"),
			code: result.CodePatchParse, details: map[string]any{"line": 4, "text": "nope"},
		},
		{
			name: "@@ missing between chunks", patch: agentPatch("*** Update File: f\n@@\n-a\n+b\n*** End of File\n-c\n"),
			code: result.CodePatchParse,
		},
		{name: "no begin", patch: "*** Update File: f\n", code: result.CodePatchParse},
		{name: "no end", patch: "*** Begin Patch\n*** Add File: f\n+x\n", code: result.CodePatchParse, details: map[string]any{"line": 3}},
		{name: "absolute", patch: agentPatch("*** Add File: /tmp/x\n+x\n"), code: result.CodeOutsideRoot},
		{name: "escaping", patch: agentPatch("*** Delete File: a/../../x\n"), code: result.CodeOutsideRoot},
		{name: "escaping move", patch: agentPatch("*** Update File: a\n*** Move to: ../b\n"), code: result.CodeOutsideRoot},
		{name: "windows absolute", patch: agentPatch("*** Add File: C:\\x\n+x\n"), code: result.CodeOutsideRoot},
		{name: "empty path", patch: agentPatch("*** Add File: \n+x\n"), code: result.CodePatchParse},
	}
	for _, tc := range cases {
		t.Run(tc.name, tc.check)
	}
}

func TestParseAgentStructure(t *testing.T) {
	p, err := Parse([]byte("\n  *** Begin Patch\n*** Update File: a/b.go\n*** Move to: c.go\n@@ func f() {\n-\treturn\n+\treturn nil\n*** End of File\n*** Delete File: ./d\n*** End Patch  \n\n"), 5)
	if err != nil {
		t.Fatal(err)
	}
	if p.Format != FormatAgent || len(p.Files) != 2 {
		t.Fatalf("got %+v", p)
	}
	u, d := p.Files[0], p.Files[1]
	if u.Action != ActionMove || u.Path != "a/b.go" || u.MoveTo != "c.go" || len(u.Hunks) != 1 {
		t.Fatalf("update %+v", u)
	}
	h := u.Hunks[0]
	if len(h.Anchors) != 1 || h.Anchors[0] != "func f() {" || !h.EndOfFile || len(h.Lines) != 2 || h.Line != 5 {
		t.Fatalf("hunk %+v", h)
	}
	if d.Action != ActionDelete || d.Path != "d" || d.Line != 9 {
		t.Fatalf("delete %+v", d)
	}
}

func TestMatchReported(t *testing.T) {
	tree := memTree{"e": []byte("a\nb\n"), "t": []byte("a  \nb\n"), "w": []byte("  a\nb\n"), "p": []byte("\u201ca\u201d\nb\n")}
	for _, tc := range []struct{ path, ctx, want string }{
		{"e", "a", MatchExact},
		{"t", "a", MatchTrailingSpace},
		{"w", "a", MatchWhitespace},
		{"p", `"a"`, MatchPunctuation},
	} {
		_, changes, err := run(t, tree, agentPatch("*** Update File: "+tc.path+"\n@@\n "+tc.ctx+"\n-b\n+c\n"), -1)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if len(changes) != 1 || changes[0].Match != tc.want {
			t.Errorf("%s: match %q; want %q", tc.path, changes[0].Match, tc.want)
		}
	}
}
