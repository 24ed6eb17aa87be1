package patch

import (
	"bytes"
	"sort"
	"strings"
	"unicode"

	"github.com/agentplane/agentplane/pkg/result"
)

// textLine is one line of a file: its text, and the line ending that followed
// it ("\n", "\r\n", or "" for a last line without one). Keeping each line's own
// ending is what lets untouched lines of a mixed or CRLF file come out exactly
// as they went in.
type textLine struct {
	text string
	eol  string
}

const bom = "\uFEFF"

// splitText cuts content into lines. A CR is part of the line ending only
// right before an LF.
func splitText(s string) []textLine {
	var out []textLine
	for len(s) > 0 {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, textLine{text: s})
			break
		}
		l := textLine{text: s[:i], eol: "\n"}
		if strings.HasSuffix(l.text, "\r") {
			l.text, l.eol = l.text[:len(l.text)-1], "\r\n"
		}
		out = append(out, l)
		s = s[i+1:]
	}
	return out
}

// matchLevel is one step of the context-matching cascade, from strict to
// forgiving. Models and mail clients damage whitespace and typography far
// more often than they invent lines, so a hunk that fails exactly is tried
// again with those differences ignored; the first level that matches wins.
type matchLevel int

const (
	matchExact matchLevel = iota
	matchTrailingSpace
	matchSpace
	matchPunctuation
	matchLevels
)

// key is the form of a line compared at a level.
func (lv matchLevel) key(s string) string {
	switch lv {
	case matchTrailingSpace:
		return strings.TrimRightFunc(s, unicode.IsSpace)
	case matchSpace:
		return strings.TrimSpace(s)
	case matchPunctuation:
		return strings.Map(plainPunctuation, strings.TrimSpace(s))
	}
	return s
}

// plainPunctuation maps typographic look-alikes to their ASCII forms: the
// dashes, quotes and spaces that word processors and models substitute for
// what the source file really holds. A BOM vanishes.
func plainPunctuation(r rune) rune {
	switch r {
	case '\u2010', '\u2011', '\u2012', '\u2013', '\u2014', '\u2015', '\u2212', '\uFE58', '\uFE63', '\uFF0D':
		return '-'
	case '\u2018', '\u2019', '\u201A', '\u201B', '\u2032', '\uFF07':
		return '\''
	case '\u201C', '\u201D', '\u201E', '\u201F', '\u2033', '\u00AB', '\u00BB', '\uFF02':
		return '"'
	case '\u00A0', '\u2002', '\u2003', '\u2004', '\u2005', '\u2006', '\u2007', '\u2008', '\u2009', '\u200A', '\u202F', '\u205F', '\u3000':
		return ' '
	case '\uFEFF':
		return -1
	}
	return r
}

// String names the level as reported in Change.Match.
func (lv matchLevel) String() string {
	switch lv {
	case matchTrailingSpace:
		return MatchTrailingSpace
	case matchSpace:
		return MatchWhitespace
	case matchPunctuation:
		return MatchPunctuation
	}
	return MatchExact
}

// How loosely a patch's context matched, as reported in Change.Match.
const (
	MatchExact         = "exact"
	MatchTrailingSpace = "trailing_whitespace"
	MatchWhitespace    = "whitespace"
	MatchPunctuation   = "punctuation"
)

// matcher finds runs of lines in one file, caching each level's keys.
type matcher struct {
	lines []textLine
	keys  [matchLevels][]string
	// loosest is the loosest level any successful seek needed.
	loosest matchLevel
}

func (m *matcher) keysAt(lv matchLevel) []string {
	if m.keys[lv] == nil {
		k := make([]string, len(m.lines))
		for i, l := range m.lines {
			k[i] = lv.key(l.text)
		}
		m.keys[lv] = k
	}
	return m.keys[lv]
}

// seek returns the index where pattern occurs at or after from, or -1. With
// atEnd only a match ending at the last line counts. With hint >= 0 the
// positions nearest the hint are tried first, which is how a unified hunk
// whose line numbers drifted still lands on the intended copy of repeated
// text.
func (m *matcher) seek(pattern []string, from, hint int, atEnd bool) int {
	last := len(m.lines) - len(pattern)
	if len(pattern) == 0 || last < from {
		return -1
	}
	for lv := matchExact; lv < matchLevels; lv++ {
		keys := m.keysAt(lv)
		pat := make([]string, len(pattern))
		for i, p := range pattern {
			pat[i] = lv.key(p)
		}
		found := func(i int) int {
			m.loosest = max(m.loosest, lv)
			return i
		}
		at := func(i int) bool {
			for j, p := range pat {
				if keys[i+j] != p {
					return false
				}
			}
			return true
		}
		switch {
		case atEnd:
			if at(last) {
				return found(last)
			}
		case hint >= 0:
			hint = min(max(hint, from), last)
			for d := 0; hint-d >= from || hint+d <= last; d++ {
				if hint+d <= last && at(hint+d) {
					return found(hint + d)
				}
				if d > 0 && hint-d >= from && at(hint-d) {
					return found(hint - d)
				}
			}
		default:
			for i := from; i <= last; i++ {
				if at(i) {
					return found(i)
				}
			}
		}
	}
	return -1
}

// replacement is the planned effect of one hunk on the original lines.
type replacement struct {
	start, n int
	lines    []textLine
}

// applyHunks applies the hunks of one file to content and returns the new
// content, and the loosest match level it needed. Every hunk is located in
// the original text, in order; nothing is modified until all of them have
// been found.
func applyHunks(content []byte, fp *FilePatch, format Format) ([]byte, matchLevel, error) {
	if len(fp.Hunks) == 0 {
		return append([]byte{}, content...), matchExact, nil
	}
	s := string(content)
	hadBOM := strings.HasPrefix(s, bom)
	s = strings.TrimPrefix(s, bom)
	m := &matcher{lines: splitText(s)}
	lines := m.lines

	// New lines take the file's own line ending; a file with none yet takes
	// what the patch line itself ended with.
	fileEOL := ""
	for _, l := range lines {
		if l.eol != "" {
			fileEOL = l.eol
			break
		}
	}
	newEOL := func(hl HunkLine) string {
		if fileEOL != "" {
			return fileEOL
		}
		if hl.CR {
			return "\r\n"
		}
		return "\n"
	}

	var reps []replacement
	cursor, offset := 0, 0
	// lastEOL decides the ending of the final line when a unified hunk
	// reaches the end of the file: "keep" leaves what assembly produced.
	const keep = "keep"
	lastEOL := keep
	for hi := range fp.Hunks {
		h := &fp.Hunks[hi]
		for _, a := range h.Anchors {
			i := m.seek([]string{a}, cursor, -1, false)
			if i < 0 {
				return nil, 0, hunkFailed(fp.Path, hi, h, []string{a}, "cannot find the @@ context line of hunk %d in %s", hi+1, fp.Path)
			}
			cursor = i + 1
		}
		hl := h.Lines
		old := oldSide(hl)
		var pos int
		switch {
		case len(old) > 0:
			hint := -1
			if h.OldStart > 0 {
				hint = h.OldStart - 1 + offset
			}
			pos = m.seek(old, cursor, hint, h.EndOfFile)
			// A blank context line at the end of an agent chunk is usually
			// the blank line before the next marker, not part of the file.
			for pos < 0 && format == FormatAgent && len(hl) > 0 && hl[len(hl)-1].Kind == Context && hl[len(hl)-1].Text == "" {
				hl = hl[:len(hl)-1]
				old = oldSide(hl)
				if len(old) == 0 {
					pos = -1
					break
				}
				pos = m.seek(old, cursor, hint, h.EndOfFile)
			}
			if pos < 0 {
				return nil, 0, hunkFailed(fp.Path, hi, h, oldSide(h.Lines), "hunk %d of %s does not match the file: the lines it expects are not there", hi+1, fp.Path)
			}
		case h.OldStart > 0:
			// A pure insertion in a unified diff goes where its header says.
			pos = h.OldStart - 1 + offset
			if pos < cursor || pos > len(lines) {
				return nil, 0, hunkFailed(fp.Path, hi, h, nil, "hunk %d of %s inserts at line %d, beyond the end of the file", hi+1, fp.Path, h.OldStart)
			}
		case len(h.Anchors) > 0 && !h.EndOfFile:
			// A pure insertion under an @@ anchor goes right after it.
			pos = cursor
		default:
			pos = len(lines)
		}

		r := replacement{start: pos, n: len(old)}
		j := pos
		for _, l := range hl {
			switch l.Kind {
			case Context:
				// The file's own line is kept: a context line is meant to be
				// unchanged even when it only matched loosely.
				r.lines = append(r.lines, lines[j])
				j++
			case Delete:
				j++
			case Insert:
				t := l.Text
				if hadBOM {
					t = strings.TrimPrefix(t, bom)
				}
				r.lines = append(r.lines, textLine{text: t, eol: newEOL(l)})
			}
		}
		if format == FormatUnified && h.OldStart > 0 {
			offset = pos - (h.OldStart - 1)
		}
		if pos+r.n == len(lines) {
			switch {
			case h.NewNoEOL:
				lastEOL = ""
			case h.OldNoEOL:
				lastEOL = newEOL(HunkLine{})
			case len(lines) > 0 && lines[len(lines)-1].eol == "":
				// The diff does not mention the missing final newline:
				// keep it missing rather than add one behind its back.
				lastEOL = ""
			default:
				lastEOL = keep
			}
		}
		reps = append(reps, r)
		cursor = pos + r.n
	}

	// Pure insertions at the end of the file do not advance the cursor, so
	// a later hunk may land before them.
	sort.SliceStable(reps, func(a, b int) bool { return reps[a].start < reps[b].start })
	var out []textLine
	prev := 0
	for k, r := range reps {
		if k > 0 && r.start < reps[k-1].start+reps[k-1].n {
			return nil, 0, result.Errorf(result.CodePatchFailed, "hunks %d and %d of %s overlap", k, k+1, fp.Path).With("path", fp.Path).With("hunk", k+1)
		}
		out = append(out, lines[prev:r.start]...)
		out = append(out, r.lines...)
		prev = r.start + r.n
	}
	out = append(out, lines[prev:]...)

	if len(out) > 0 {
		for i := range out[:len(out)-1] {
			if out[i].eol == "" {
				out[i].eol = newEOL(HunkLine{})
			}
		}
		lastLine := &out[len(out)-1]
		switch {
		case format == FormatAgent:
			// The agent format always leaves a final newline.
			if lastLine.eol == "" {
				lastLine.eol = newEOL(HunkLine{})
			}
		case lastEOL != keep:
			lastLine.eol = lastEOL
		}
	}
	// Never nil: nil content means "no file" to a Change.
	b := bytes.NewBuffer([]byte{})
	if hadBOM && len(out) > 0 {
		b.WriteString(bom)
	}
	for _, l := range out {
		b.WriteString(l.text)
		b.WriteString(l.eol)
	}
	return b.Bytes(), m.loosest, nil
}

// oldSide returns the texts a hunk expects to find: its context and removed
// lines.
func oldSide(hl []HunkLine) []string {
	var old []string
	for _, l := range hl {
		if l.Kind != Insert {
			old = append(old, l.Text)
		}
	}
	return old
}

// hunkFailed builds the patch_failed error for hunk index hi of path.
func hunkFailed(path string, hi int, h *Hunk, context []string, format string, args ...any) *result.Error {
	if context == nil {
		context = []string{}
	}
	return result.Errorf(result.CodePatchFailed, format, args...).
		With("path", path).
		With("hunk", hi+1).
		With("context", context).
		With("patch_line", h.Line)
}
