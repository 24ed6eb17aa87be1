package capture

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	tests := []struct {
		name, in, want string
		lossy          bool
	}{
		{"plain", "hello\nworld\n", "hello\nworld\n", false},
		{"plain unicode", "héllo €😀\n", "héllo €😀\n", false},
		{"empty", "", "", false},
		{"sgr", "\x1b[31mred\x1b[0m\n", "red\n", false},
		{"sgr many params", "\x1b[38;2;255;0;0mX\x1b[38:5:1mY\x1b[mZ", "XYZ", false},
		{"private mode", "\x1b[?25lhidden\x1b[?25h", "hidden", false},
		{"osc bel", "\x1b]0;title\x07text", "text", false},
		{"osc st hyperlink", "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ after", "link after", false},
		{"osc unterminated ends at newline", "\x1b]0;title\nnext", "\nnext", false},
		{"osc broken by another escape", "\x1b]0;t\x1b[1mX", "X", false},
		{"dcs", "\x1bPq#0;2;0;0;0\x1b\\after", "after", false},
		{"apc", "\x1b_Gf=100;AAAA\x1b\\x", "x", false},
		{"charset", "\x1b(Babc\x1b)0d", "abcd", false},
		{"two-byte", "\x1b7a\x1b8b\x1b=c\x1bMd", "abcd", false},
		{"c1 csi as utf-8", "\u009b31mx", "x", false},
		{"c1 osc as utf-8 with c1 st", "\u009d0;t\u009cy", "y", false},
		{"other c1 dropped", "a\u0085b", "ab", false},
		{"esc before non-ascii", "\x1bé", "é", false},
		{"esc before control", "\x1b\nx", "\nx", false},
		{"partial esc at end", "abc\x1b", "abc", false},
		{"partial csi at end", "abc\x1b[3", "abc", false},
		{"partial osc at end", "abc\x1b]0;ti", "abc", false},
		{"malformed csi", "\x1b[31\nX", "\nX", false},
		{"cr progress", "10%\r50%\r100%\n", "100%\n", false},
		{"cr overwrite keeps rest", "abcdef\rXY\n", "XYcdef\n", false},
		{"crlf", "a\r\nb\r\n", "a\nb\n", false},
		{"cr cr lf", "a\r\r\nb", "a\nb", false},
		{"trailing cr", "abc\r", "abc", false},
		{"progress bar with erase", "downloading 100%\r\x1b[Kdone\n", "done\n", false},
		{"erase whole line", "step 1\r\x1b[2Kstep 2\n", "step 2\n", false},
		{"erase to start", "abcdef\x1b[3D\x1b[1K", "    ef", false},
		{"tqdm style", " 10%|#         | 1/10\r 20%|##        | 2/10\r100%|##########| 10/10\n",
			"100%|##########| 10/10\n", false},
		{"cursor forward", "abcdef\r\x1b[3CX", "abcXef", false},
		{"cursor back", "x\x1b[1Dy", "y", false},
		{"cursor column", "abcdef\x1b[2GX", "aXcdef", false},
		{"huge cursor param", "ab\x1b[99999999999999999999Dc", "cb", false},
		{"backspace erase idiom", "ab\b \bc", "ac", false},
		{"backspace at end erases", "abc\b\n", "ab\n", false},
		{"backspaces at end erase one each", "abc\b\bX", "aX", false},
		{"overstrike bold", "H\bHi", "Hi", false},
		{"overstrike underline", "_\bx", "x", false},
		{"backspace at column 0", "\b\bab", "ab", false},
		{"backspace after cr moves only", "abc\r\bX", "Xbc", false},
		{"spinner", "working |\b/\b-\b\\\bdone\n", "working done\n", false},
		{"controls dropped", "ab\x07c\x7fd\x0ee", "abcde", false},
		{"NUL is binary: dropped, lossy", "a\x00b", "ab", true},
		{"tab kept", "a\tb", "a\tb", false},
		{"invalid byte", "a\xffb", "a\ufffdb", true},
		{"invalid with escape", "\x1b[1ma\xc3(", "a\ufffd(", true},
		{"truncated rune mid text", "a\xe2\x82b", "a\ufffd\ufffdb", true},
		{"real replacement char not lossy", "a\ufffdb\r", "a\ufffdb", false},
		{"invalid overwritten", "\xff\rX", "X", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, lossy := cleanText([]byte(tt.in))
			if string(got) != tt.want || lossy != tt.lossy {
				t.Errorf("cleanText(%q) = %q, %v; want %q, %v", tt.in, got, lossy, tt.want, tt.lossy)
			}
			if s := string(Clean([]byte(tt.in))); s != tt.want {
				t.Errorf("Clean(%q) = %q", tt.in, s)
			}
			r := Render(Captured{Head: []byte(tt.in), Total: int64(len(tt.in))}, RenderOptions{})
			if r.Text != tt.want || r.Lossy != tt.lossy || r.Omitted != 0 || r.Base64 {
				t.Errorf("Render = %+v", r)
			}
		})
	}
}

func TestRender(t *testing.T) {
	marker := func(n int) string { return fmt.Sprintf("… [%d bytes omitted] …\n", n) }
	tests := []struct {
		name       string
		head, tail string
		omitted    int64
		opt        RenderOptions
		want       string
		wantOmit   int64
		lossy      bool
	}{
		{"not truncated joins", "a\xe2", "\x82\xacb", 0, RenderOptions{}, "a€b", 0, false},
		{"not truncated cr across split", "10%\r5", "0%\n", 0, RenderOptions{}, "50%\n", 0, false},
		{"head ends in newline", "abc\n", "xyz\n", 10, RenderOptions{}, "abc\n" + marker(10) + "xyz\n", 10, false},
		{"head without newline", "abc", "xyz", 10, RenderOptions{}, "abc\n" + marker(10) + "xyz", 10, false},
		{"keep end", "", "xyz", 5, RenderOptions{}, marker(5) + "xyz", 5, false},
		{"keep start", "abc", "", 5, RenderOptions{}, "abc\n" + marker(5), 5, false},
		{"head cleans to empty", "\x1b[1m", "x", 5, RenderOptions{}, marker(5) + "x", 5, false},
		{"2-byte rune cut in head", "ab\xc3", "x", 5, RenderOptions{}, "ab\n" + marker(6) + "x", 6, false},
		{"2-byte rune cut in tail", "a", "\xa9x", 5, RenderOptions{}, "a\n" + marker(6) + "x", 6, false},
		{"3-byte rune cut in head after 2", "a\xe2\x82", "x", 5, RenderOptions{}, "a\n" + marker(7) + "x", 7, false},
		{"3-byte rune cut in head after 1", "a\xe2", "x", 5, RenderOptions{}, "a\n" + marker(6) + "x", 6, false},
		{"3-byte rune cut in tail", "a", "\x82\xacb", 5, RenderOptions{}, "a\n" + marker(7) + "b", 7, false},
		{"4-byte rune cut both sides", "a\xf0\x9f\x98", "\x9f\x98\x80b", 5, RenderOptions{}, "a\n" + marker(11) + "b", 11, false},
		{"4-byte rune cut after 1", "a\xf0", "\x80b", 5, RenderOptions{}, "a\n" + marker(7) + "b", 7, false},
		{"whole runes at the cut kept", "a€", "😀b", 5, RenderOptions{}, "a€\n" + marker(5) + "😀b", 5, false},
		{"four continuation bytes are not a cut rune", "a", "\x80\x80\x80\x80b", 5, RenderOptions{},
			"a\n" + marker(5) + "\ufffd\ufffd\ufffd\ufffdb", 5, true},
		{"invalid leader at head end", "a\xff", "b", 5, RenderOptions{}, "a\ufffd\n" + marker(5) + "b", 5, true},
		{"lossy in tail", "a", "b\xfe", 5, RenderOptions{}, "a\n" + marker(5) + "b\ufffd", 5, true},
		{"partial csi at head end", "abc\x1b[3", "x", 5, RenderOptions{}, "abc\n" + marker(5) + "x", 5, false},
		{"partial osc at head end", "abc\x1b]0;ti", "x", 5, RenderOptions{}, "abc\n" + marker(5) + "x", 5, false},
		{"csi rest at tail start", "a", "[31mred", 5, RenderOptions{}, "a\n" + marker(9) + "red", 9, false},
		{"private mode rest at tail start", "a", "[?25lx", 5, RenderOptions{}, "a\n" + marker(10) + "x", 10, false},
		{"erase rest at tail start", "a", "[K\rx", 5, RenderOptions{}, "a\n" + marker(7) + "x", 7, false},
		{"osc rest at tail start", "a", "]0;title\x07rest", 5, RenderOptions{}, "a\n" + marker(14) + "rest", 14, false},
		{"hyperlink rest at tail start", "a", ";http://x\x1b\\link", 5, RenderOptions{}, "a\n" + marker(16) + "link", 16, false},
		{"bracketed word kept", "a", "[KEY] x", 5, RenderOptions{}, "a\n" + marker(5) + "[KEY] x", 5, false},
		{"bracketed hex kept", "a", "[0x41] x", 5, RenderOptions{}, "a\n" + marker(5) + "[0x41] x", 5, false},
		{"list index kept", "a", "[1] x", 5, RenderOptions{}, "a\n" + marker(5) + "[1] x", 5, false},
		{"bel on a later line kept", "a", "x\ny\x07z", 5, RenderOptions{}, "a\n" + marker(5) + "x\nyz", 5, false},
		{"tail starting with a whole escape", "a", "\x1b[1mb", 5, RenderOptions{}, "a\n" + marker(5) + "b", 5, false},
		{"raw keeps escapes and cr", "\x1b[31mred\r\n", "", 0, RenderOptions{Raw: true}, "\x1b[31mred\r\n", 0, false},
		{"raw replaces invalid", "a\xffb", "", 0, RenderOptions{Raw: true}, "a\ufffdb", 0, true},
		{"raw still trims runes at the cut", "a\xe2\x82", "\xacb[31m", 5, RenderOptions{Raw: true},
			"a\n" + marker(8) + "b[31m", 8, false},
		{"raw keeps tail escape rest", "a", "[31mx", 5, RenderOptions{Raw: true}, "a\n" + marker(5) + "[31mx", 5, false},
		{"unknown binary mode is text", "a\x1b[1m", "", 0, RenderOptions{Binary: "hex"}, "a", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Captured{Head: []byte(tt.head), Tail: []byte(tt.tail), Omitted: tt.omitted}
			c.Total = int64(len(c.Head)+len(c.Tail)) + c.Omitted
			got := Render(c, tt.opt)
			want := Text{Text: tt.want, Lossy: tt.lossy, Omitted: tt.wantOmit}
			if got != want {
				t.Errorf("Render(%q, %q, %d) =\n %#v\nwant\n %#v", tt.head, tt.tail, tt.omitted, got, want)
			}
		})
	}
}

func TestRenderBase64(t *testing.T) {
	c := Captured{Head: []byte("ab"), Tail: []byte("\xff\x1b"), Omitted: 3, Total: 7}
	got := Render(c, RenderOptions{Binary: "base64", Raw: true})
	want := Text{Text: "YWL/Gw==", Base64: true, Omitted: 3}
	if got != want {
		t.Fatalf("Render base64 = %+v, want %+v", got, want)
	}
}

// TestRenderFromHeadTail runs a long progress-bar stream through the whole
// path, cut in the middle of multi-byte characters and escape sequences.
func TestRenderFromHeadTail(t *testing.T) {
	var b strings.Builder
	b.WriteString("start €\n")
	for i := 0; i <= 1000; i++ {
		fmt.Fprintf(&b, "\r\x1b[32m%4d/1000 ████\x1b[0m", i)
	}
	b.WriteString("\nend €\n")
	stream := b.String()

	h := NewHeadTail(100, KeepBoth)
	for i := 0; i < len(stream); i += 7 {
		h.Write([]byte(stream[i:min(i+7, len(stream))]))
	}
	c := h.Snapshot()
	got := Render(c, RenderOptions{})
	if !utf8.ValidString(got.Text) || got.Lossy {
		t.Fatalf("invalid or lossy text %q", got.Text)
	}
	// The tail is the last 80 bytes: the end of the final redraw, then "end €".
	if !strings.HasPrefix(got.Text, "start €\n") || !strings.HasSuffix(got.Text, "1000 ████\nend €\n") {
		t.Fatalf("text = %q", got.Text)
	}
	if strings.ContainsAny(got.Text, "\x1b\r") || strings.Contains(got.Text, "[0m") || strings.Contains(got.Text, "[32m") {
		t.Fatalf("escape residue in %q", got.Text)
	}
	shown := int64(len(c.Head)+len(c.Tail)) - (got.Omitted - c.Omitted)
	if got.Omitted < c.Omitted || shown+got.Omitted != int64(len(stream)) {
		t.Fatalf("omitted %d (captured %d), total %d", got.Omitted, c.Omitted, len(stream))
	}
	if want := fmt.Sprintf("… [%d bytes omitted] …\n", got.Omitted); !strings.Contains(got.Text, want) {
		t.Fatalf("no marker %q in %q", want, got.Text)
	}
}
