package capture

import (
	"encoding/base64"
	"fmt"
	"unicode/utf8"
)

// RenderOptions selects how Render turns captured bytes into text.
type RenderOptions struct {
	// Raw keeps ANSI escapes, carriage returns and other controls (--raw);
	// invalid UTF-8 is still replaced because the text goes into JSON.
	Raw bool
	// Binary is "" for text or "base64" for the raw bytes in base64
	// (--binary base64). Other values are treated as "".
	Binary string
}

// Text is captured output ready to put in a result.
type Text struct {
	Text string
	// Lossy reports that invalid UTF-8 was replaced with U+FFFD, or that
	// NUL bytes (binary data) were dropped.
	Lossy bool
	// Base64 reports that Text is the base64 of the raw bytes.
	Base64 bool
	// Omitted is the number of bytes the marker says were left out. It can
	// exceed Captured.Omitted by the few bytes of a character or escape
	// sequence cut in two, which Render drops rather than show broken.
	Omitted int64
}

// Render turns captured bytes into text for a model. Without truncation it is
// Clean (or, with Raw, only UTF-8 repair) of the whole stream. With truncation,
// head and tail are cleaned separately and joined by the line
// "… [N bytes omitted] …"; a character or escape sequence cut in two at either
// edge of the gap is dropped and counted in N, so neither half starts or ends
// with garbage.
func Render(c Captured, opt RenderOptions) Text {
	if opt.Binary == "base64" {
		raw := make([]byte, 0, len(c.Head)+len(c.Tail))
		raw = append(append(raw, c.Head...), c.Tail...)
		return Text{Text: base64.StdEncoding.EncodeToString(raw), Base64: true, Omitted: c.Omitted}
	}
	clean := cleanText
	if opt.Raw {
		clean = validText
	}
	if c.Omitted <= 0 {
		// Head and Tail are one stream here: clean them together so a line or
		// character spanning the two is not treated as a cut.
		whole := c.Head
		if len(c.Tail) > 0 {
			whole = append(append(make([]byte, 0, len(c.Head)+len(c.Tail)), c.Head...), c.Tail...)
		}
		out, lossy := clean(whole)
		return Text{Text: string(out), Lossy: lossy}
	}

	head, tail, omitted := c.Head, c.Tail, c.Omitted
	n := partialRuneAtEnd(head)
	head, omitted = head[:len(head)-n], omitted+int64(n)
	n = partialRuneAtStart(tail)
	tail, omitted = tail[n:], omitted+int64(n)
	if !opt.Raw {
		// A partial escape at the end of the head is dropped by the cleaner;
		// one at the start of the tail has lost its ESC and would look like text.
		n = escapeRemainder(tail)
		tail, omitted = tail[n:], omitted+int64(n)
	}
	h, hl := clean(head)
	t, tl := clean(tail)

	out := make([]byte, 0, len(h)+len(t)+48)
	out = append(out, h...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = fmt.Appendf(out, "… [%d bytes omitted] …\n", omitted)
	out = append(out, t...)
	return Text{Text: string(out), Lossy: hl || tl, Omitted: omitted}
}

// partialRuneAtEnd returns how many bytes at the end of b are the start of a
// UTF-8 character whose remaining bytes were cut off.
func partialRuneAtEnd(b []byte) int {
	for n := 1; n < utf8.UTFMax && n <= len(b); n++ {
		if utf8.RuneStart(b[len(b)-n]) {
			if !utf8.FullRune(b[len(b)-n:]) {
				return n
			}
			return 0
		}
	}
	return 0
}

// partialRuneAtStart returns how many continuation bytes open b, when there
// are few enough (at most three) to be the rest of one cut character; a longer
// run is plain invalid input and is left to be reported as lossy.
func partialRuneAtStart(b []byte) int {
	n := 0
	for n < len(b) && !utf8.RuneStart(b[n]) {
		n++
		if n == utf8.UTFMax {
			return 0
		}
	}
	return n
}

// csiFinals are the final bytes of the control sequences programs commonly
// emit. escapeRemainder only trusts these, so that "[0x41]" stays text.
const csiFinals = "@ABCDEFGHJKLMPSTXdfhlmnrstu"

// escapeRemainder returns how many bytes at the start of a tail are the rest
// of an escape sequence whose beginning was omitted. It cannot be certain, so
// it is conservative: a CSI body after a lost ESC ("[31m", "[?25l", "[2K"), or
// an OSC/DCS body on the first line that ends in its terminator (BEL or ESC \)
// before any other ESC.
func escapeRemainder(b []byte) int {
	if len(b) > 1 && b[0] == '[' {
		i := 1
		for i < len(b) && b[i] >= 0x30 && b[i] <= 0x3f {
			i++
		}
		if i < len(b) && containsByte(csiFinals, b[i]) {
			// Without parameters "[K" could begin a word such as "[KEY]";
			// only take it when no letter follows.
			if i > 1 || i+1 == len(b) || !isLetter(b[i+1]) {
				return i + 1
			}
		}
	}
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '\n':
			return 0
		case 0x07:
			return i + 1
		case 0x1b:
			if i+1 < len(b) && b[i+1] == '\\' {
				return i + 2
			}
			return 0
		}
	}
	return 0
}

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
