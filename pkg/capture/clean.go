package capture

import (
	"bytes"
	"unicode/utf8"
)

// Clean returns b as a model should read it: valid UTF-8 (invalid bytes become
// U+FFFD), without ANSI escape sequences or control characters other than tab
// and newline, and with carriage-return and backspace redraws collapsed.
//
// The rules follow a terminal, one line at a time:
//   - "\r\n" is a line ending and becomes "\n".
//   - A lone "\r" moves to column 0 and later text overwrites the line cell by
//     cell, so "10%\r50%\r100%\n" becomes "100%\n" and "abcdef\rXY\n" becomes
//     "XYcdef\n", as a terminal would show them.
//   - "\b" at the end of a line erases the last character (so "ab\b \b" is
//     "a", and overstrike "_\bx" is "x"); inside a line, after a "\r", it only
//     moves left, as on a terminal.
//   - CSI K (erase in line) is honoured, because progress bars pair it with
//     "\r"; CSI 2K clears the line and returns to column 0. CSI C, D and G move
//     within the line. Other sequences (colours, cursor up, modes like
//     ESC[?25l, OSC titles and hyperlinks, DCS, two-byte ESC sequences, C1
//     controls) are removed without effect: multi-line redraws are not
//     replayed, the text is kept instead.
//   - A cell is one code point; wide characters are not given two columns.
//   - An escape sequence cut off by the end of b is dropped. An OSC or other
//     string sequence ends at BEL, ST or, as a safety net, at the next newline,
//     so one stray ESC ] cannot swallow the rest of the output.
//
// The result may share memory with b when nothing needed cleaning. Clean is
// stateless: applied to separate chunks, a sequence, character or "\r" redraw
// that spans two of them is not joined up. Stream does that.
func Clean(b []byte) []byte {
	out, _ := cleanText(b)
	return out
}

// cleaner holds the line being drawn. Text before the current line is final
// and sits in out; only the current line can still be overwritten.
type cleaner struct {
	out   []byte
	line  []rune
	col   int // cursor; always <= len(line), which bounds the output size
	lossy bool

	// stream makes run stop before a character cut off by the end of its
	// input instead of replacing it, so the next chunk can complete it.
	stream bool
	// seqStart is where the escape sequence being parsed began; cut is where
	// an escape sequence or character cut off by the end of the input began,
	// or -1. An incomplete sequence has no effect, so a Stream can drop it
	// from this chunk and parse it again, whole, with the next one.
	seqStart int
	cut      int
}

// cleanText is Clean that also reports whether invalid UTF-8 was replaced.
func cleanText(b []byte) ([]byte, bool) {
	if plain(b) {
		return b, false
	}
	c := cleaner{out: make([]byte, 0, len(b))}
	c.run(b)
	c.flush()
	return c.out, c.lossy
}

// run draws b: finished lines go to out, the last line stays in line.
func (c *cleaner) run(b []byte) {
	c.cut = -1
	start := 0
	if len(c.line) == 0 && plain(b) {
		// Whole lines of plain text need no cell-by-cell drawing.
		start = bytes.LastIndexByte(b, '\n') + 1
		c.out = append(c.out, b[:start]...)
	}
	for i := start; i < len(b); {
		ch := b[i]
		switch {
		case ch == '\n':
			c.flush()
			c.out = append(c.out, '\n')
			i++
		case ch == '\r':
			if i+1 >= len(b) || b[i+1] != '\n' {
				c.col = 0
			}
			i++
		case ch == '\b':
			c.backspace()
			i++
		case ch == '\t':
			c.put('\t')
			i++
		case ch == 0x1b:
			c.seqStart = i
			i = c.escape(b, i+1)
		case ch < 0x20 || ch == 0x7f:
			// BEL, NUL and the other controls carry nothing for a reader.
			// NUL is no terminal's text, though: it marks binary data,
			// whose bytes are lost here, so the text says it is lossy.
			if ch == 0 {
				c.lossy = true
			}
			i++
		case ch < utf8.RuneSelf:
			c.put(rune(ch))
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				if c.stream && !utf8.FullRune(b[i:]) {
					c.cut = i
					return
				}
				c.lossy = true
				c.put(utf8.RuneError)
			case r >= 0x80 && r <= 0x9f:
				c.seqStart = i
				i = c.c1(b, r, i+size)
				continue
			default:
				c.put(r)
			}
			i += size
		}
	}
}

// ranOff records that the sequence being parsed was cut off by the end of
// the input.
func (c *cleaner) ranOff() { c.cut = c.seqStart }

// plain reports whether b needs no cleaning at all, the common case, which
// then costs one scan and no allocation.
func plain(b []byte) bool {
	high := false
	for i, ch := range b {
		switch {
		case ch < 0x20 && ch != '\n' && ch != '\t', ch == 0x7f:
			return false
		case ch == 0xc2 && i+1 < len(b) && b[i+1] < 0xa0:
			return false // a C1 control encoded in UTF-8, or invalid
		case ch >= utf8.RuneSelf:
			high = true
		}
	}
	return !high || utf8.Valid(b)
}

func (c *cleaner) put(r rune) {
	if c.col < len(c.line) {
		c.line[c.col] = r
	} else {
		c.line = append(c.line, r)
	}
	c.col++
}

func (c *cleaner) flush() {
	for _, r := range c.line {
		c.out = utf8.AppendRune(c.out, r)
	}
	c.line = c.line[:0]
	c.col = 0
}

func (c *cleaner) backspace() {
	if c.col == 0 {
		return
	}
	if c.col == len(c.line) {
		c.line = c.line[:c.col-1]
	}
	c.col--
}

// escape skips the sequence whose ESC was at i-1 and returns where the text
// resumes.
func (c *cleaner) escape(b []byte, i int) int {
	if i >= len(b) {
		c.ranOff()
		return i
	}
	switch n := b[i]; {
	case n == '[':
		return c.csi(b, i+1)
	case n == ']' || n == 'P' || n == 'X' || n == '^' || n == '_':
		// OSC, DCS, SOS, PM, APC: strings up to a terminator.
		return c.skipString(b, i+1)
	case n >= 0x20 && n <= 0x2f:
		// nF sequences such as ESC ( B (character set): intermediates, then
		// a final byte. A malformed one loses only what was read.
		j := i
		for j < len(b) && b[j] >= 0x20 && b[j] <= 0x2f {
			j++
		}
		if j >= len(b) {
			c.ranOff()
		} else if b[j] >= 0x30 && b[j] <= 0x7e {
			j++
		}
		return j
	case n >= 0x30 && n <= 0x7e:
		// Two-byte sequences: ESC 7, ESC M, ESC =, the 7-bit C1 forms.
		return i + 1
	}
	// A lone ESC before a control or non-ASCII byte: drop just the ESC.
	return i
}

// c1 handles a C1 control written as a UTF-8 code point (U+0080..U+009F).
func (c *cleaner) c1(b []byte, r rune, i int) int {
	switch r {
	case 0x9b:
		return c.csi(b, i)
	case 0x90, 0x98, 0x9d, 0x9e, 0x9f:
		return c.skipString(b, i)
	}
	return i
}

// csi skips a control sequence starting after its introducer and applies the
// few that change the current line.
func (c *cleaner) csi(b []byte, i int) int {
	start := i
	for i < len(b) && b[i] >= 0x30 && b[i] <= 0x3f {
		i++
	}
	params := b[start:i]
	for i < len(b) && b[i] >= 0x20 && b[i] <= 0x2f {
		i++
	}
	if i >= len(b) {
		c.ranOff()
		return i
	}
	final := b[i]
	if final < 0x40 || final > 0x7e {
		return i // malformed: drop what was read, keep the byte that broke it
	}
	if len(params) < i-start {
		return i + 1 // has intermediates: none of the line edits below
	}
	switch final {
	case 'K':
		switch firstParam(params, 0) {
		case 0:
			if c.col < len(c.line) {
				c.line = c.line[:c.col]
			}
		case 1:
			for k := 0; k < c.col+1 && k < len(c.line); k++ {
				c.line[k] = ' '
			}
		case 2:
			c.line = c.line[:0]
			c.col = 0
		}
	case 'D':
		c.col = max(c.col-max(firstParam(params, 1), 1), 0)
	case 'C':
		c.col = min(c.col+max(firstParam(params, 1), 1), len(c.line))
	case 'G':
		c.col = min(max(firstParam(params, 1), 1)-1, len(c.line))
	}
	return i + 1
}

// firstParam returns the first numeric CSI parameter, or def when it is
// absent. Values are capped so that a hostile "ESC[99999999999D" cannot overflow.
func firstParam(params []byte, def int) int {
	n, digits := 0, 0
	for _, ch := range params {
		if ch < '0' || ch > '9' {
			break
		}
		digits++
		n = min(n*10+int(ch-'0'), 1<<20)
	}
	if digits == 0 {
		return def
	}
	return n
}

// skipString skips the body of an OSC/DCS-like string and its terminator.
func (c *cleaner) skipString(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case 0x07:
			return i + 1
		case '\n':
			return i
		case 0x1b:
			if i+1 < len(b) && b[i+1] == '\\' {
				return i + 2
			}
			if i+1 >= len(b) {
				c.ranOff()
				return len(b)
			}
			return i // another sequence starts: this one was never terminated
		case 0xc2:
			if i+1 < len(b) && b[i+1] == 0x9c {
				return i + 2 // ST as a UTF-8 C1 code point
			}
		}
	}
	c.ranOff()
	return i
}

// validText is the --raw rendering: bytes are kept as written, only invalid
// UTF-8 is replaced (one U+FFFD per bad byte), because the result goes into JSON.
func validText(b []byte) ([]byte, bool) {
	if utf8.Valid(b) {
		return b, false
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out, true
}
