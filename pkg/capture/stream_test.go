package capture

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// streamAll feeds input to a Stream in chunks of the given sizes (cycled)
// and returns each piece it emitted, the last being Flush's.
func streamAll(input []byte, sizes []int, opt RenderOptions) ([]string, bool) {
	s := NewStream(opt)
	var pieces []string
	for i, k := 0, 0; i < len(input); k++ {
		end := min(i+max(sizes[k%len(sizes)], 1), len(input))
		pieces = append(pieces, string(s.Next(input[i:end])))
		i = end
	}
	pieces = append(pieces, string(s.Flush()))
	return pieces, s.Lossy()
}

func TestStream(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		sizes  []int
		pieces []string
	}{
		{"lines emitted when finished", "ab\ncd\nef", []int{4}, []string{"ab\n", "cd\n", "ef"}},
		{"progress collapses across chunks", "10%\r50%\r100%\ndone\n", []int{3}, []string{"", "", "", "", "100%\n", "done\n", ""}},
		{"csi split", "a\x1b[3", []int{4}, []string{"", "a"}},
		{"csi split completed", "a\x1b[31mb\n", []int{3, 2, 9}, []string{"", "", "ab\n", ""}},
		{"osc split", "\x1b]0;ti\x07x\n", []int{5}, []string{"", "x\n", ""}},
		{"rune split", "€\n", []int{1}, []string{"", "", "", "€\n", ""}},
		{"crlf split", "a\r\nb", []int{2}, []string{"", "a\n", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, lossy := streamAll([]byte(tt.input), tt.sizes, RenderOptions{})
			if strings.Join(got, "|") != strings.Join(tt.pieces, "|") || lossy {
				t.Errorf("pieces = %q (lossy %v), want %q", got, lossy, tt.pieces)
			}
		})
	}
}

func TestStreamRaw(t *testing.T) {
	got, lossy := streamAll([]byte("\x1b[1m€\r\xff"), []int{5}, RenderOptions{Raw: true})
	want := []string{"\x1b[1m", "€\r\ufffd", ""}
	if strings.Join(got, "|") != strings.Join(want, "|") || !lossy {
		t.Errorf("pieces = %q (lossy %v), want %q", got, lossy, want)
	}
}

func TestStreamLongLineLetGo(t *testing.T) {
	s := NewStream(RenderOptions{})
	line := bytes.Repeat([]byte("x\b"), maxPendingLine) // forces the slow path
	line = append(line, bytes.Repeat([]byte("y"), maxPendingLine+1)...)
	if out := s.Next(line); len(out) != maxPendingLine+1 {
		t.Fatalf("emitted %d bytes of a %d-cell line", len(out), maxPendingLine+1)
	}
}

// FuzzStream: however the input is chunked, the streamed text is exactly
// what Clean gives for the whole input, so a --stream reader and the final
// result agree.
func FuzzStream(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), uint8(i+1), uint8(i*5), false)
	}
	f.Fuzz(func(t *testing.T, input []byte, a, b uint8, raw bool) {
		if len(input) > maxPendingSeq {
			input = input[:maxPendingSeq] // longer sequences are let go by design
		}
		pieces, lossy := streamAll(input, []int{int(a), int(b)}, RenderOptions{Raw: raw})
		for _, p := range pieces {
			if !utf8.ValidString(p) {
				t.Fatalf("invalid piece %q", p)
			}
		}
		want, wantLossy := cleanText(input)
		if raw {
			want, wantLossy = validText(input)
		}
		if got := strings.Join(pieces, ""); got != string(want) || lossy != wantLossy {
			t.Fatalf("streamed %q (lossy %v), whole %q (lossy %v)", got, lossy, want, wantLossy)
		}
	})
}
