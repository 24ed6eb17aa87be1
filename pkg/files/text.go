package files

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"unicode/utf8"

	"github.com/agentplane/agentplane/pkg/result"
)

// binarySniffLen is how much of a file is searched for a NUL byte, the
// heuristic git and grep use to call a file binary.
const binarySniffLen = 8 << 10

const utf8BOM = "\xEF\xBB\xBF"

// text is a file's content split into what the editing code works on (body)
// and the framing that must survive an edit unchanged.
type text struct {
	bom  bool   // a UTF-8 byte order mark precedes body
	body []byte // content without the BOM
	eol  string // the file's line ending: "\r\n" when its first line ends so, else "\n"
}

// isBinary reports whether b looks binary: a NUL byte early on, or a UTF-16
// or UTF-32 byte order mark.
func isBinary(b []byte) bool {
	head := b[:min(len(b), binarySniffLen)]
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	return bytes.HasPrefix(b, []byte{0xFF, 0xFE}) || bytes.HasPrefix(b, []byte{0xFE, 0xFF})
}

// parseText checks that content is text and splits off its framing. path is
// only for messages.
func parseText(path string, content []byte) (text, error) {
	if isBinary(content) {
		return text{}, newErr(result.CodeBinaryFile, "%s is a binary file", path)
	}
	if !utf8.Valid(content) {
		off := firstInvalidUTF8(content)
		return text{}, newErr(result.CodeInvalidEncoding, "%s is not valid UTF-8 (first bad byte at offset %d)", path, off).
			With("offset", off)
	}
	t := text{body: content, eol: "\n"}
	if bytes.HasPrefix(content, []byte(utf8BOM)) {
		t.bom = true
		t.body = content[len(utf8BOM):]
	}
	if i := bytes.IndexByte(t.body, '\n'); i > 0 && t.body[i-1] == '\r' {
		t.eol = "\r\n"
	}
	return t, nil
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// bytes returns the full content with the framing put back.
func (t text) bytes(body []byte) []byte {
	if !t.bom {
		return body
	}
	out := make([]byte, 0, len(utf8BOM)+len(body))
	return append(append(out, utf8BOM...), body...)
}

// toEOL rewrites every line ending of s to eol, so text the caller typed
// with "\n" lands in a CRLF file as CRLF.
func toEOL(s, eol string) string {
	if !bytes.Contains([]byte(s), []byte{'\n'}) {
		return s
	}
	lf := bytes.ReplaceAll([]byte(s), []byte("\r\n"), []byte("\n"))
	if eol == "\n" {
		return string(lf)
	}
	return string(bytes.ReplaceAll(lf, []byte("\n"), []byte(eol)))
}

// lineAt returns the 1-based line number of byte offset off in b.
func lineAt(b []byte, off int) int {
	return bytes.Count(b[:off], []byte{'\n'}) + 1
}

// countLines is the number of lines in b: a final line without a newline
// counts, an empty file has none.
func countLines(b []byte) int {
	n := bytes.Count(b, []byte{'\n'})
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// sha returns the hex SHA-256 of b.
func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func validUTF8(b []byte) bool { return utf8.Valid(b) }

// kindOf names a file type for results and messages.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "other"
}
