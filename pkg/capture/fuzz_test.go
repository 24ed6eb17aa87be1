package capture

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// fuzzSeeds are streams that exercise the awkward paths: escapes, redraws,
// multi-byte characters and invalid bytes, so a cut can fall inside each.
var fuzzSeeds = []string{
	"",
	"hello\n",
	"\x1b[31mred\x1b[0m\n",
	"\x1b]0;title\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n",
	"10%\r50%\r100%\n",
	"ab\b \bc\r\n",
	"€😀é\xff\xe2\x82",
	"\u009b31m\u009d0;t\u009cx",
	"\x1bP\x1b_\x1b(B\x1b7\x1b[?25l\x1b[2K\x1b[99999D",
}

// FuzzHeadTail checks HeadTail against the keep-everything reference for
// arbitrary streams split into arbitrary writes, and that Render of any
// snapshot is valid UTF-8 of bounded size.
func FuzzHeadTail(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), uint16(i*3), uint8(i%3), uint8(i+1))
	}
	f.Fuzz(func(t *testing.T, stream []byte, limit uint16, keep, chunk uint8) {
		k := Keep(keep % 3)
		h := NewHeadTail(int(limit), k)
		step := int(chunk) + 1
		for i := 0; i < len(stream); {
			end := min(i+step, len(stream))
			h.Write(stream[i:end])
			i = end
			step = step*7%257 + 1 // vary the write sizes within one run
		}
		got, want := h.Snapshot(), reference(stream, int(limit), k)
		if !bytes.Equal(got.Head, want.Head) || !bytes.Equal(got.Tail, want.Tail) ||
			got.Omitted != want.Omitted || got.Total != want.Total {
			t.Fatalf("got %+v, want %+v", got, want)
		}
		for _, opt := range []RenderOptions{{}, {Raw: true}} {
			checkRendered(t, got, Render(got, opt))
		}
	})
}

// FuzzRender renders arbitrary head/tail pairs, truncated or not.
func FuzzRender(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), []byte(fuzzSeeds[(i+1)%len(fuzzSeeds)]), int64(i%2), false)
	}
	f.Fuzz(func(t *testing.T, head, tail []byte, omitted int64, raw bool) {
		omitted = max(omitted, 0) % (1 << 40)
		c := Captured{Head: head, Tail: tail, Omitted: omitted, Total: int64(len(head)+len(tail)) + omitted}
		r := Render(c, RenderOptions{Raw: raw})
		checkRendered(t, c, r)
		if !raw {
			if bytes.ContainsAny([]byte(r.Text), "\x1b\r\x00\x07\b") {
				t.Fatalf("control left in %q", r.Text)
			}
			if cl := Clean(append(append([]byte(nil), head...), tail...)); !utf8.Valid(cl) {
				t.Fatalf("Clean gave invalid UTF-8 %q", cl)
			}
		}
		b := Render(c, RenderOptions{Binary: "base64"})
		if !b.Base64 || b.Omitted != omitted || len(b.Text) != (len(head)+len(tail)+2)/3*4 {
			t.Fatalf("base64 render %+v", b)
		}
	})
}

func checkRendered(t *testing.T, c Captured, r Text) {
	t.Helper()
	if !utf8.ValidString(r.Text) {
		t.Fatalf("invalid UTF-8 %q", r.Text)
	}
	// Each kept byte yields at most one U+FFFD (3 bytes); the marker line
	// adds at most a newline before it plus its own ~40 bytes.
	if limit := 3*(len(c.Head)+len(c.Tail)) + 64; len(r.Text) > limit {
		t.Fatalf("rendered %d bytes from %d kept", len(r.Text), len(c.Head)+len(c.Tail))
	}
	if c.Omitted == 0 && r.Omitted != 0 {
		t.Fatalf("omitted %d for an untruncated capture", r.Omitted)
	}
	if c.Omitted > 0 {
		dropped := r.Omitted - c.Omitted
		if dropped < 0 || dropped > int64(len(c.Head)+len(c.Tail)) {
			t.Fatalf("omitted %d from %d", r.Omitted, c.Omitted)
		}
	}
	if r.Lossy && c.Omitted == 0 && utf8.Valid(append(append([]byte(nil), c.Head...), c.Tail...)) {
		t.Fatalf("lossy for valid input")
	}
}
