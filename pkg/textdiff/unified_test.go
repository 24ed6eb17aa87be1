package textdiff

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestUnified(t *testing.T) {
	tests := []struct {
		name       string
		old, new   string
		want       string
		add, rem   int
		ctx        int
		checkExact bool
	}{
		{name: "equal", old: "a\nb\n", new: "a\nb\n", want: "", checkExact: true, ctx: 3},
		{
			name: "one line changed", old: "a\nb\nc\n", new: "a\nB\nc\n", ctx: 3, checkExact: true,
			want: "--- o\n+++ n\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n", add: 1, rem: 1,
		},
		{
			name: "create", old: "", new: "x\ny\n", ctx: 3, checkExact: true,
			want: "--- o\n+++ n\n@@ -0,0 +1,2 @@\n+x\n+y\n", add: 2,
		},
		{
			name: "delete all", old: "x\n", new: "", ctx: 3, checkExact: true,
			want: "--- o\n+++ n\n@@ -1 +0,0 @@\n-x\n", rem: 1,
		},
		{
			name: "no final newline added", old: "a\nb", new: "a\nb\n", ctx: 3, checkExact: true,
			want: "--- o\n+++ n\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n", add: 1, rem: 1,
		},
		{
			name: "insert with zero context", old: "1\n2\n3\n", new: "1\n2\nx\n3\n", ctx: 0, checkExact: true,
			want: "--- o\n+++ n\n@@ -2,0 +3 @@\n+x\n", add: 1,
		},
		{
			name: "two hunks", ctx: 1, checkExact: true,
			old: "1\n2\n3\n4\n5\n6\n7\n8\n", new: "1\nX\n3\n4\n5\n6\nY\n8\n",
			want: "--- o\n+++ n\n@@ -1,3 +1,3 @@\n 1\n-2\n+X\n 3\n@@ -6,3 +6,3 @@\n 6\n-7\n+Y\n 8\n", add: 2, rem: 2,
		},
		{name: "crlf", old: "a\r\nb\r\n", new: "a\r\nc\r\n", ctx: 3, add: 1, rem: 1},
		{name: "scattered", old: "a\nb\nc\nd\ne\nf\ng\n", new: "b\nc\nX\ne\nf\nY\ng\nh\n", ctx: 2, add: 3, rem: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, add, rem := Unified("o", "n", []byte(tt.old), []byte(tt.new), tt.ctx)
			if tt.checkExact && got != tt.want {
				t.Fatalf("diff:\n%s\nwant:\n%s", got, tt.want)
			}
			if add != tt.add || rem != tt.rem {
				t.Fatalf("stats +%d -%d, want +%d -%d\n%s", add, rem, tt.add, tt.rem, got)
			}
			if a, r := Stats([]byte(tt.old), []byte(tt.new)); a != add || r != rem {
				t.Fatalf("Stats +%d -%d, Unified +%d -%d", a, r, add, rem)
			}
			applied, err := apply([]byte(tt.old), got)
			if err != nil {
				t.Fatalf("apply: %v\n%s", err, got)
			}
			if string(applied) != tt.new {
				t.Fatalf("apply gave %q, want %q", applied, tt.new)
			}
		})
	}
}

// TestUnifiedPatchTool checks that GNU patch accepts the output, which is the
// compatibility promise.
func TestUnifiedPatchTool(t *testing.T) {
	if _, err := exec.LookPath("patch"); err != nil {
		t.Skip("patch not installed")
	}
	cases := [][2]string{
		{"a\nb\nc\n", "a\nB\nc\nd"},
		{"x", "y"},
		{"", "new\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\n2\nthree\n4\n5\n6\n7\n8\n9\nten\n11\n12\n13\n"},
	}
	for i, c := range cases {
		dir := t.TempDir()
		name := "f.txt"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(c[0]), 0o644); err != nil {
			t.Fatal(err)
		}
		d, _, _ := Unified(name, name, []byte(c[0]), []byte(c[1]), 3)
		cmd := exec.Command("patch", "-p0", "--quiet", "--no-backup-if-mismatch")
		cmd.Dir = dir
		cmd.Stdin = strings.NewReader(d)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("case %d: patch: %v\n%s\n%s", i, err, out, d)
		}
		got, _ := os.ReadFile(filepath.Join(dir, name))
		if string(got) != c[1] {
			t.Fatalf("case %d: patched %q, want %q", i, got, c[1])
		}
	}
}

// TestSmallEditInHugeInput checks that the diff of a one-line change in a
// large input is one small hunk with the right line numbers.
func TestSmallEditInHugeInput(t *testing.T) {
	var b bytes.Buffer
	for i := range 200_000 {
		fmt.Fprintf(&b, "line %d\n", i+1)
	}
	old := b.Bytes()
	new := bytes.Replace(old, []byte("line 150000\n"), []byte("changed\n"), 1)
	d, add, rem := Unified("f", "f", old, new, 3)
	if add != 1 || rem != 1 {
		t.Fatalf("+%d -%d", add, rem)
	}
	if !strings.Contains(d, "@@ -149997,7 +149997,7 @@\n") || len(d) > 200 {
		t.Fatalf("unexpected diff:\n%s", d)
	}
}

// TestMyersFallback forces the cost bound and checks the replace hunk is
// still a correct diff.
func TestMyersFallback(t *testing.T) {
	var a, b bytes.Buffer
	for i := range 6000 {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	d, add, rem := Unified("f", "f", a.Bytes(), b.Bytes(), 3)
	if add != 6000 || rem != 6000 {
		t.Fatalf("+%d -%d", add, rem)
	}
	got, err := apply(a.Bytes(), d)
	if err != nil || !bytes.Equal(got, b.Bytes()) {
		t.Fatalf("apply: %v", err)
	}
}

func FuzzUnified(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nc\n"), 3)
	f.Add([]byte("a\r\nb"), []byte("a\r\nb\r\n"), 1)
	f.Add([]byte(""), []byte("x"), 0)
	f.Add([]byte("1\n2\n3\n4\n5\n6\n7\n8\n9\n"), []byte("1\n2\n3\n4\nX\n6\n7\n8\n9\nY"), 2)
	f.Fuzz(func(t *testing.T, old, new []byte, ctx int) {
		ctx = ctx % 5
		if ctx < 0 {
			ctx = -ctx
		}
		d, add, rem := Unified("o", "n", old, new, ctx)
		got, err := apply(old, d)
		if err != nil {
			t.Fatalf("apply: %v\n%s", err, d)
		}
		if !bytes.Equal(got, new) {
			t.Fatalf("apply gave %q, want %q\n%s", got, new, d)
		}
		if a, r := Stats(old, new); a != add || r != rem {
			t.Fatalf("Stats +%d -%d, Unified +%d -%d", a, r, add, rem)
		}
	})
}

// apply is a deliberately strict unified-diff applier for tests: every
// context and removed line must match at the stated position.
func apply(old []byte, diff string) ([]byte, error) {
	if diff == "" {
		return old, nil
	}
	src := splitLines(old)
	lines := strings.SplitAfter(diff, "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "--- ") || !strings.HasPrefix(lines[1], "+++ ") {
		return nil, fmt.Errorf("bad headers")
	}
	var out []byte
	pos := 0 // next source line (0-based) not yet copied
	i := 2
	for i < len(lines) && lines[i] != "" {
		h := lines[i]
		if !strings.HasPrefix(h, "@@ -") {
			return nil, fmt.Errorf("expected hunk header, got %q", h)
		}
		fields := strings.Fields(h)
		oldStart, oldCount, err := parseRange(fields[1][1:])
		if err != nil {
			return nil, err
		}
		_, newCount, err := parseRange(fields[2][1:])
		if err != nil {
			return nil, err
		}
		first := oldStart - 1
		if oldCount == 0 {
			first = oldStart
		}
		if first < pos || first > len(src) {
			return nil, fmt.Errorf("hunk at %d out of order", oldStart)
		}
		for ; pos < first; pos++ {
			out = append(out, src[pos]...)
		}
		i++
		seenOld, seenNew := 0, 0
		for i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "@@") {
			l := lines[i]
			body := l[1:]
			if i+1 < len(lines) && lines[i+1] == "\\ No newline at end of file\n" {
				body = strings.TrimSuffix(body, "\n")
				i++
			}
			switch l[0] {
			case ' ', '-':
				if pos >= len(src) || string(src[pos]) != body {
					return nil, fmt.Errorf("line %d does not match %q", pos+1, body)
				}
				if l[0] == ' ' {
					out = append(out, body...)
					seenNew++
				}
				pos++
				seenOld++
			case '+':
				out = append(out, body...)
				seenNew++
			default:
				return nil, fmt.Errorf("bad line %q", l)
			}
			i++
		}
		if seenOld != oldCount || seenNew != newCount {
			return nil, fmt.Errorf("hunk counts -%d +%d, saw -%d +%d", oldCount, newCount, seenOld, seenNew)
		}
	}
	for ; pos < len(src); pos++ {
		out = append(out, src[pos]...)
	}
	return out, nil
}

func parseRange(s string) (start, count int, err error) {
	a, b, ok := strings.Cut(s, ",")
	start, err = strconv.Atoi(a)
	if err != nil {
		return 0, 0, err
	}
	count = 1
	if ok {
		count, err = strconv.Atoi(b)
	}
	return start, count, err
}

// BenchmarkUnifiedSmallEditIn100MB measures the diff of a one-line change in
// a 100 MB input: the cost should be the byte-speed prefix/suffix scan.
func BenchmarkUnifiedSmallEditIn100MB(b *testing.B) {
	var buf bytes.Buffer
	for i := 0; buf.Len() < 100<<20; i++ {
		fmt.Fprintf(&buf, "%08d some text on a line of a large file\n", i)
	}
	old := buf.Bytes()
	new := bytes.Replace(old, []byte("01000000 some"), []byte("01000000 SOME"), 1)
	b.SetBytes(int64(len(old)))
	for b.Loop() {
		d, add, rem := Unified("f", "f", old, new, 3)
		if add != 1 || rem != 1 || len(d) > 1000 {
			b.Fatalf("+%d -%d %d bytes", add, rem, len(d))
		}
	}
}
