package capture

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		final     bool
		raw       bool
		want      string
		skipped   int
		consumed  int
		wantLossy bool
	}{
		{"plain", "hello\n", false, false, "hello\n", 0, 6, false},
		{"cut character", "h\xc3", false, false, "h", 0, 1, false},
		{"cut character raw", "h\xe2\x82", false, true, "h", 0, 1, false},
		{"cut character final", "h\xc3", true, false, "h\uFFFD", 0, 2, true},
		{"continuation at start", "\xa9x", false, false, "x", 1, 1, false},
		{"cut escape", "red \x1b[3", false, false, "red ", 0, 4, false},
		{"escape removed", "\x1b[31mred\x1b[0m\n", false, false, "red\n", 0, 13, false},
		{"escape kept raw", "\x1b[31mred\n", false, true, "\x1b[31mred\n", 0, 9, false},
		{"redraw", "10%\r50%\n", false, false, "50%\n", 0, 8, false},
		{"only a start", "\xe2\x82", false, false, "", 0, 0, false},
		{"invalid inside", "a\xffb", false, false, "a\uFFFDb", 0, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, skipped, consumed, lossy := Window([]byte(tc.in), tc.final, tc.raw)
			if string(out) != tc.want || skipped != tc.skipped || consumed != tc.consumed || lossy != tc.wantLossy {
				t.Fatalf("Window(%q) = %q, %d, %d, %v; want %q, %d, %d, %v", tc.in, out, skipped, consumed, lossy,
					tc.want, tc.skipped, tc.consumed, tc.wantLossy)
			}
		})
	}
}

// TestWindowsNeverSplit reads a multibyte text in windows of every size
// from the positions Window returns: the pieces join to the whole, and
// none is invalid UTF-8.
func TestWindowsNeverSplit(t *testing.T) {
	text := []byte("día €uro 😀 ok\n漢字とかな\n")
	for size := 1; size <= 8; size++ {
		var got []byte
		for pos := 0; pos < len(text); {
			n := min(size, len(text)-pos)
			out, skipped, consumed, lossy := Window(text[pos:pos+n], pos+n == len(text), true)
			for consumed+skipped == 0 {
				n++ // as a reader does: offer a longer window
				out, skipped, consumed, lossy = Window(text[pos:pos+n], pos+n == len(text), true)
			}
			if lossy || !utf8.Valid(out) || skipped != 0 {
				t.Fatalf("size %d at %d: %q lossy=%v skipped=%d", size, pos, out, lossy, skipped)
			}
			got = append(got, out...)
			pos += skipped + consumed
		}
		if !bytes.Equal(got, text) {
			t.Fatalf("size %d: %q", size, got)
		}
	}
}
