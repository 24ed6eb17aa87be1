package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

func intp(n int) *int { return &n }

func TestEdit(t *testing.T) {
	tests := []struct {
		name    string
		before  string
		edits   []EditSpec
		fuzzy   bool
		want    string // file content after, when no error
		code    string
		match   []string
		lines   [][2]int // start/end line per edit
		details map[string]any
	}{
		{
			name: "exact", before: "a\nb\nc\n", edits: []EditSpec{{Old: "b", New: "B"}},
			want: "a\nB\nc\n", match: []string{MatchExact}, lines: [][2]int{{2, 2}},
		},
		{
			name: "multi-line new text", before: "a\nb\nc\n", edits: []EditSpec{{Old: "b\n", New: "x\ny\nz\n"}},
			want: "a\nx\ny\nz\nc\n", match: []string{MatchExact}, lines: [][2]int{{2, 4}},
		},
		{
			name: "not unique", before: "x\ny\nx\n", edits: []EditSpec{{Old: "x", New: "z"}},
			code: result.CodeOldStringNotUnique, details: map[string]any{"count": 2},
		},
		{
			name: "replace all", before: "x\ny\nx\n", edits: []EditSpec{{Old: "x", New: "z", ReplaceAll: true}},
			want: "z\ny\nz\n", match: []string{MatchExact}, lines: [][2]int{{1, 3}},
		},
		{
			name: "expected count ok", before: "x x x", edits: []EditSpec{{Old: "x", New: "y", ReplaceAll: true, ExpectedCount: intp(3)}},
			want: "y y y", match: []string{MatchExact},
		},
		{
			name: "count mismatch", before: "x x x", edits: []EditSpec{{Old: "x", New: "y", ReplaceAll: true, ExpectedCount: intp(2)}},
			code: result.CodeCountMismatch, details: map[string]any{"expected": 2, "actual": 3},
		},
		{
			name: "no change", before: "a\n", edits: []EditSpec{{Old: "a", New: "a"}}, code: result.CodeNoChange,
		},
		{
			name: "empty old", before: "a\n", edits: []EditSpec{{Old: "", New: "a"}}, code: "invalid_request",
		},
		{
			name: "not found with hint", before: "func main() {\n\tfmt.Println(\"hello\")\n}\n",
			edits: []EditSpec{{Old: "\tfmt.Printn(\"hello\")", New: "x"}},
			code:  result.CodeOldStringNotFound, details: map[string]any{"start_line": 2, "end_line": 2},
		},
		{
			name: "crlf file, lf old", before: "one\r\ntwo\r\nthree\r\n",
			edits: []EditSpec{{Old: "one\ntwo\n", New: "1\n2\n"}},
			want:  "1\r\n2\r\nthree\r\n", match: []string{MatchLineEndings}, lines: [][2]int{{1, 2}},
		},
		{
			name: "crlf file, single line, new lines get crlf", before: "one\r\ntwo\r\n",
			edits: []EditSpec{{Old: "two", New: "2a\n2b"}},
			want:  "one\r\n2a\r\n2b\r\n", match: []string{MatchExact},
		},
		{
			name: "lf file, crlf old", before: "one\ntwo\n",
			edits: []EditSpec{{Old: "one\r\ntwo", New: "x"}},
			want:  "x\n", match: []string{MatchLineEndings},
		},
		{
			name: "mixed endings", before: "a\r\nb\nc\r\n",
			edits: []EditSpec{{Old: "a\nb\nc", New: "x"}},
			want:  "x\r\n", match: []string{MatchLineEndings},
		},
		{
			name: "bom kept", before: "\uFEFFa\nb\n", edits: []EditSpec{{Old: "a", New: "A"}},
			want: "\uFEFFA\nb\n", match: []string{MatchExact},
		},
		{
			name: "missing final newline kept", before: "a\nb", edits: []EditSpec{{Old: "a", New: "A"}},
			want: "A\nb",
		},
		{
			name: "tabs stay tabs", before: "\tif x {\n\t\ty()\n\t}\n", edits: []EditSpec{{Old: "y()", New: "z()"}},
			want: "\tif x {\n\t\tz()\n\t}\n",
		},
		{
			name: "fuzzy reindents", before: "func f() {\n\t\tif x {\n\t\t\ty()\n\t\t}\n}\n", fuzzy: true,
			edits: []EditSpec{{Old: "if x {\n    y()\n}", New: "if x {\n    z()\n    w()\n}"}},
			want:  "func f() {\n\t\tif x {\n\t\t\tz()\n\t\t\tw()\n\t\t}\n}\n", match: []string{MatchWhitespace}, lines: [][2]int{{2, 5}},
		},
		{
			// Python raises TabError on mixed indentation: tabs stay tabs.
			name: "fuzzy keeps a tab file's tabs", before: "def f():\n\tif x:\n\t\ty()\n", fuzzy: true,
			edits: []EditSpec{{Old: "    if x:\n        y()", New: "    if x:\n        z()\n        if w:\n            v()"}},
			want:  "def f():\n\tif x:\n\t\tz()\n\t\tif w:\n\t\t\tv()\n", match: []string{MatchWhitespace}, lines: [][2]int{{2, 5}},
		},
		{
			name: "fuzzy writes spaces into a space file", before: "def f():\n  if x:\n    y()\n", fuzzy: true,
			edits: []EditSpec{{Old: "\tif x:\n\t\ty()", New: "\tif x:\n\t\tz()\n\tw()"}},
			want:  "def f():\n  if x:\n    z()\n  w()\n", match: []string{MatchWhitespace}, lines: [][2]int{{2, 4}},
		},
		{
			name: "fuzzy converts 4-space levels to the file's 2", before: "a:\n  b:\n    c\n", fuzzy: true,
			edits: []EditSpec{{Old: "    b:\n        c", New: "    b:\n        c\n        d:\n            e"}},
			want:  "a:\n  b:\n    c\n    d:\n      e\n", match: []string{MatchWhitespace}, lines: [][2]int{{2, 5}},
		},
		{
			name: "fuzzy refuses new text that mixes tabs and spaces", before: "f() {\n\tx()\n}\n", fuzzy: true,
			edits: []EditSpec{{Old: "    x()", New: "    y()\n\tz()"}},
			code:  result.CodeIndentationConflict,
		},
		{
			name: "fuzzy refuses to indent left of column 0", before: "x()\n", fuzzy: true,
			edits: []EditSpec{{Old: "    x()", New: "y()"}},
			code:  result.CodeIndentationConflict,
		},
		{
			name: "whitespace differs without fuzzy", before: "  a  b\n", edits: []EditSpec{{Old: "a b", New: "x"}},
			code: result.CodeOldStringNotFound,
		},
		{
			name: "fuzzy not unique", before: " a\n  a\n", fuzzy: true, edits: []EditSpec{{Old: "a ", New: "x"}},
			code: result.CodeOldStringNotUnique,
		},
		{
			name: "fuzzy delete lines", before: "keep\n  drop me\nkeep2\n", fuzzy: true,
			edits: []EditSpec{{Old: "drop  me\n", New: ""}},
			want:  "keep\nkeep2\n", match: []string{MatchWhitespace},
		},
		{
			name: "several edits in order", before: "a\nb\nc\n",
			edits: []EditSpec{{Old: "a", New: "b"}, {Old: "b\nb", New: "x"}},
			want:  "x\nc\n", match: []string{MatchExact, MatchExact},
		},
		{
			name: "several edits, second fails, nothing written", before: "a\nb\n",
			edits: []EditSpec{{Old: "a", New: "A"}, {Old: "zzz", New: "y"}},
			code:  result.CodeOldStringNotFound, details: map[string]any{"edit_index": 1},
		},
		{
			name: "binary", before: "ab\x00cd", edits: []EditSpec{{Old: "ab", New: "x"}}, code: result.CodeBinaryFile,
		},
		{
			name: "invalid utf-8", before: "caf\xe9\n", edits: []EditSpec{{Old: "caf", New: "x"}}, code: result.CodeInvalidEncoding,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys, root := newTestFS(t)
			p := filepath.Join(root, "f.txt")
			put(t, p, tt.before)
			m, err := fsys.Edit("f.txt", tt.edits, EditOptions{Fuzzy: tt.fuzzy})
			if code(err) != tt.code {
				t.Fatalf("error %q (%v), want %q", code(err), err, tt.code)
			}
			for k, v := range tt.details {
				if got := details(err)[k]; got != v {
					t.Errorf("details[%s] = %v, want %v (all: %v)", k, got, v, details(err))
				}
			}
			if tt.code != "" {
				if got := get(t, p); got != tt.before {
					t.Fatalf("failed edit changed the file: %q", got)
				}
				noSideFiles(t, root)
				return
			}
			if got := get(t, p); got != tt.want {
				t.Fatalf("file %q, want %q", got, tt.want)
			}
			if m.NewFile != tt.want || m.OriginalFile != tt.before || !m.Changed || m.Created {
				t.Fatalf("bad mutation %+v", m)
			}
			if m.SHA256Before != sha([]byte(tt.before)) || m.SHA256After != sha([]byte(tt.want)) {
				t.Fatalf("bad hashes")
			}
			for i, k := range tt.match {
				if m.Edits[i].Match != k {
					t.Errorf("edit %d match %s, want %s", i, m.Edits[i].Match, k)
				}
			}
			for i, l := range tt.lines {
				if m.Edits[i].StartLine != l[0] || m.Edits[i].EndLine != l[1] {
					t.Errorf("edit %d lines %d-%d, want %d-%d", i, m.Edits[i].StartLine, m.Edits[i].EndLine, l[0], l[1])
				}
			}
			if m.Diff == "" || m.DiffStats.Added+m.DiffStats.Removed == 0 {
				t.Errorf("no diff: %+v", m)
			}
			noSideFiles(t, root)
		})
	}
}

func TestEditNotUniqueLines(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "f"), "x\n\nx\n\nx\n")
	_, err := fsys.Edit("f", []EditSpec{{Old: "x", New: "y"}}, EditOptions{})
	lines, _ := details(err)["lines"].([]int)
	if code(err) != result.CodeOldStringNotUnique || len(lines) != 3 || lines[0] != 1 || lines[1] != 3 || lines[2] != 5 {
		t.Fatalf("%v %v", err, details(err))
	}
}

func TestEditNearMissText(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "f"), "alpha\nbeta\ngamma\ndelta\n")
	_, err := fsys.Edit("f", []EditSpec{{Old: "beta\ngamna\n", New: "x"}}, EditOptions{})
	d := details(err)
	if code(err) != result.CodeOldStringNotFound || d["closest_match"] != "beta\ngamma" || d["start_line"] != 2 || d["end_line"] != 3 {
		t.Fatalf("%v %v", err, d)
	}
	if _, ok := d["hint"].(string); !ok {
		t.Fatalf("no hint: %v", d)
	}
}

func TestEditExpectSHA(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "f"), "a\n")
	r, err := fsys.Read("f", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	put(t, filepath.Join(root, "f"), "a\nb\n")
	_, err = fsys.Edit("f", []EditSpec{{Old: "a", New: "c"}}, EditOptions{ExpectSHA256: r.SHA256})
	if code(err) != result.CodeFileChanged {
		t.Fatalf("got %v", err)
	}
	r, _ = fsys.Read("f", ReadOptions{})
	if _, err := fsys.Edit("f", []EditSpec{{Old: "a", New: "c"}}, EditOptions{ExpectSHA256: strings.ToUpper(r.SHA256)}); err != nil {
		t.Fatal(err)
	}
}

func TestEditMissingAndDirectory(t *testing.T) {
	fsys, root := newTestFS(t)
	if _, err := fsys.Edit("nope", []EditSpec{{Old: "a", New: "b"}}, EditOptions{}); code(err) != result.CodeFileNotFound {
		t.Fatalf("got %v", err)
	}
	if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Edit("d", []EditSpec{{Old: "a", New: "b"}}, EditOptions{}); code(err) != result.CodeIsDirectory {
		t.Fatalf("got %v", err)
	}
}

func TestEditTooLarge(t *testing.T) {
	fsys, root := newTestFS(t)
	fsys.MaxFileSize = 10
	put(t, filepath.Join(root, "f"), strings.Repeat("a", 11))
	if _, err := fsys.Edit("f", []EditSpec{{Old: "a", New: "b"}}, EditOptions{}); code(err) != result.CodeFileTooLarge {
		t.Fatalf("got %v", err)
	}
	if _, err := fsys.Read("f", ReadOptions{}); code(err) != result.CodeFileTooLarge {
		t.Fatalf("got %v", err)
	}
}

// FuzzEdit applies a random edit and, when the match is exact and unique,
// compares the result with strings.Replace.
func FuzzEdit(f *testing.F) {
	f.Add("a\nb\nc\n", "b", "B", false)
	f.Add("x\r\ny\r\n", "x\ny", "z", false)
	f.Add("\uFEFFhello world", "world", "there\nfriend", false)
	f.Add("  a\n    b\n", "a\nb", "c\n d", true)
	f.Fuzz(func(t *testing.T, content, old, new string, fuzzy bool) {
		fsys, root := newTestFS(t)
		p := filepath.Join(root, "f")
		put(t, p, content)
		m, err := fsys.Edit("f", []EditSpec{{Old: old, New: new}}, EditOptions{Fuzzy: fuzzy})
		after := get(t, p)
		if err != nil {
			if after != content {
				t.Fatalf("failed edit (%v) changed the file", err)
			}
			noSideFiles(t, root)
			return
		}
		if after != m.NewFile && !m.ContentOmitted && !m.Binary {
			t.Fatalf("report and file disagree")
		}
		if m.Edits[0].Match == MatchExact && !strings.Contains(new, "\n") {
			want := strings.Replace(content, old, new, 1)
			if strings.HasPrefix(content, utf8BOM) && !strings.HasPrefix(old, utf8BOM) {
				want = utf8BOM + strings.Replace(content[len(utf8BOM):], old, new, 1)
			}
			if after != want {
				t.Fatalf("edit gave %q, strings.Replace %q", after, want)
			}
		}
		if m.Edits[0].Match == MatchExact && strings.Count(content, old) != 1 && !strings.HasPrefix(content, utf8BOM) {
			t.Fatalf("exact edit applied with %d matches", strings.Count(content, old))
		}
		noSideFiles(t, root)
	})
}

// FuzzFuzzyIndentation attacks the promise that a fuzzy edit indents the
// way the file is indented or refuses: whatever the new text's indentation,
// a file indented with tabs only (or spaces only) never gains a line whose
// indentation has the other character, and a refusal leaves it unchanged.
func FuzzFuzzyIndentation(f *testing.F) {
	f.Add("def f():\n\tif x:\n\t\ty()\n", "    if x:\n        y()", "    if x:\n        z()\n  w()")
	f.Add("a:\n  b:\n    c\n", "\tb:\n\t\tc", "\tb:\n\t\tc\n\t\t\td")
	f.Add("func f() {\n\tx()\n}\n", "  x()", "  y()\n \t z()")
	f.Fuzz(func(t *testing.T, content, old, new string) {
		tabs := strings.Contains(content, "\n\t")
		spaces := strings.Contains(content, "\n ")
		if tabs == spaces || strings.Contains(content, "\r") {
			return // only files with one indentation style
		}
		fsys, root := newTestFS(t)
		p := filepath.Join(root, "f")
		put(t, p, content)
		m, err := fsys.Edit("f", []EditSpec{{Old: old, New: new}}, EditOptions{Fuzzy: true})
		after := get(t, p)
		if err != nil {
			if after != content {
				t.Fatalf("failed edit (%v) changed the file", err)
			}
			return
		}
		if m.Edits[0].Match != MatchWhitespace {
			return // exact matches write new_string as given
		}
		bad := "\t"
		if tabs {
			bad = " "
		}
		for _, l := range strings.Split(after, "\n") {
			if ws := leadingWS(l); strings.Contains(ws, bad) && strings.TrimSpace(l) != "" {
				t.Fatalf("fuzzy edit of a %s file wrote the line %q:\n%s", map[bool]string{true: "tab", false: "space"}[tabs], l, after)
			}
		}
	})
}
