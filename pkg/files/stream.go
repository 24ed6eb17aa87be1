package files

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"unicode/utf8"
)

// readStreamMin is the size from which Read and Stat stream a file rather
// than hold it whole: past it a read holds one chunk and the lines it
// returns, never the file, so a multi-gigabyte log costs the time of one
// pass (for its sha256 and line count) and no more memory than its answer.
// (A variable for the tests, which compare both paths on small files.)
var readStreamMin int64 = DefaultReadMax

// DefaultReadMax is the content a read returns at most when it is given
// no MaxBytes: a larger selection is cut, at a line end, with Truncated.
const DefaultReadMax = 16 << 20

// streamChunk is how much of a streamed file is read at a time (a
// variable for the tests, which cut runes and lines across chunks).
var streamChunk = 256 << 10

// lines selects and formats the lines Read returns, fed one line at a
// time (each with its newline, the last one perhaps without).
type lines struct {
	first, limit int // 1-based first line; 0: no limit
	numbered     bool
	maxBytes     int

	out       strings.Builder
	lineStart int
	lineEnd   int
	truncated bool
	done      bool
}

func newLines(opt ReadOptions) *lines {
	l := &lines{first: max(opt.Offset, 1), limit: opt.Limit, numbered: opt.Numbered, maxBytes: opt.MaxBytes}
	if l.maxBytes <= 0 {
		l.maxBytes = DefaultReadMax
	}
	// streamFacts takes up to a rune past the bound, which must not wrap.
	l.maxBytes = min(l.maxBytes, math.MaxInt-utf8.UTFMax)
	l.lineStart, l.lineEnd = l.first, l.first-1
	return l
}

// wants reports whether line n is still to be taken.
func (l *lines) wants(n int) bool {
	return !l.done && n >= l.first && (l.limit <= 0 || n < l.first+l.limit)
}

// add takes line n (its bytes, newline included when it has one).
func (l *lines) add(n int, line []byte) {
	if !l.wants(n) {
		return
	}
	hasNL := len(line) > 0 && line[len(line)-1] == '\n'
	piece := string(line)
	if l.numbered {
		piece = fmt.Sprintf("%6d\t%s", n, strings.TrimSuffix(strings.TrimSuffix(piece, "\n"), "\r"))
		if hasNL {
			piece += "\n"
		}
	}
	if l.out.Len()+len(piece) > l.maxBytes {
		l.truncated, l.done = true, true
		if l.out.Len() == 0 {
			// Not even one line fits: cut inside it, on a character boundary.
			cut := l.maxBytes
			for cut > 0 && !utf8.RuneStart(piece[cut]) {
				cut--
			}
			l.out.WriteString(piece[:cut])
			l.lineEnd = n
		}
		return
	}
	l.out.WriteString(piece)
	l.lineEnd = n
}

// validChunk checks the UTF-8 of chunk, which follows carry (the
// incomplete sequence the previous chunk ended with), and returns the
// incomplete sequence chunk ends with, in carry's array. Nothing of the
// chunk is copied but those few bytes.
func validChunk(carry, chunk []byte) (bool, []byte) {
	if len(carry) > 0 {
		need := min(len(chunk), utf8.UTFMax)
		joined := append(carry, chunk[:need]...)
		if !utf8.FullRune(joined) {
			if len(joined) >= utf8.UTFMax {
				return false, carry[:0]
			}
			return true, joined // still incomplete: a tiny chunk
		}
		r, size := utf8.DecodeRune(joined)
		if r == utf8.RuneError && size <= 1 {
			return false, carry[:0]
		}
		chunk = chunk[size-len(carry):]
		carry = carry[:0]
	}
	cut := len(chunk)
	for i := 1; i < utf8.UTFMax && i <= len(chunk); i++ {
		if utf8.RuneStart(chunk[len(chunk)-i]) {
			if !utf8.FullRune(chunk[len(chunk)-i:]) {
				cut = len(chunk) - i
			}
			break
		}
	}
	if !utf8.Valid(chunk[:cut]) {
		return false, carry[:0]
	}
	return true, append(carry[:0], chunk[cut:]...)
}

// streamed is what one pass over a large file found.
type streamed struct {
	text  bool // no NUL early on, no UTF-16 mark, valid UTF-8
	bom   bool
	lines int
}

// streamFacts reads f to its end in chunks: the sha256 and size of the
// whole, whether it is text, its lines, and through l (when not nil) the
// lines Read returns. A line is held only while l takes it, and only up
// to what l can still return.
func streamFacts(f *os.File, l *lines) (current, streamed, error) {
	h := sha256.New()
	buf := make([]byte, max(streamChunk, len(utf8BOM)))
	var (
		size    int64
		st      = streamed{text: true}
		carryB  [2 * utf8.UTFMax]byte
		carry   = carryB[:0] // an incomplete UTF-8 sequence at a chunk's end
		line    []byte       // the part of the current line l takes
		n       = 1          // the current line's number
		partial bool         // the current line has bytes
		head    []byte       // the first binarySniffLen bytes
	)
	take := func(b []byte) {
		if l != nil && l.wants(n) && len(line) < l.maxBytes+utf8.UTFMax {
			line = append(line, b[:min(len(b), l.maxBytes+utf8.UTFMax-len(line))]...)
		}
	}
	for {
		var k int
		var err error
		if size == 0 {
			// The first read fills the buffer, so a BOM is seen whole.
			if k, err = io.ReadFull(f, buf); err == io.ErrUnexpectedEOF {
				err = io.EOF
			}
		} else {
			k, err = f.Read(buf[:streamChunk])
		}
		chunk := buf[:k]
		if k > 0 {
			h.Write(chunk)
			if size < binarySniffLen {
				head = append(head, chunk[:min(k, binarySniffLen-int(size))]...)
			}
			if size == 0 && bytes.HasPrefix(chunk, []byte(utf8BOM)) {
				st.bom = true
				chunk = chunk[len(utf8BOM):]
			}
			size += int64(k)
			if st.text {
				st.text, carry = validChunk(carry, chunk)
			}
			if l != nil && (!st.text || len(head) >= binarySniffLen && isBinary(head)) {
				// Not text: Read returns no lines of it.
				l, line = nil, nil
			}
			for len(chunk) > 0 {
				i := bytes.IndexByte(chunk, '\n')
				if i < 0 {
					take(chunk)
					partial = true
					break
				}
				take(chunk[:i+1])
				if l != nil {
					l.add(n, line)
				}
				line, partial = line[:0], false
				n++
				st.lines++
				chunk = chunk[i+1:]
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return current{}, st, err
		}
	}
	if partial {
		if l != nil {
			l.add(n, line)
		}
		st.lines++
	}
	st.text = st.text && len(carry) == 0 && !isBinary(head)
	return current{exists: true, factsOnly: !st.text, size: size, sha: hex.EncodeToString(h.Sum(nil))}, st, nil
}
