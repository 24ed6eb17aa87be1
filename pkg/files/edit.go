package files

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/agentplane/agentplane/pkg/result"
)

// EditSpec is one string replacement of an Edit.
type EditSpec struct {
	Old        string `json:"old_string"`
	New        string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
	// ExpectedCount, when set, is the number of matches the caller expects:
	// any other number fails with count_mismatch, and that number of
	// matches are all replaced (as with ReplaceAll).
	ExpectedCount *int `json:"expected_count,omitempty"`
}

// Match kinds reported per edit: how old_string was found.
const (
	MatchExact       = "exact"
	MatchLineEndings = "line_endings"
	MatchWhitespace  = "whitespace"
)

// EditReport says what one EditSpec did. StartLine and EndLine are the lines
// the new text occupies in the file as it is after this edit (from the first
// replacement to the last).
type EditReport struct {
	Index        int    `json:"index"`
	Replacements int    `json:"replacements"`
	StartLine    int    `json:"start_line"`
	EndLine      int    `json:"end_line"`
	Match        string `json:"match"`
}

// span is one match: body[start:end] becomes repl.
type span struct {
	start, end int
	repl       []byte
}

// applyEdits applies the edits in order to body (text without BOM, line
// ending eol) and returns the new body. It fails on the first edit that
// cannot apply, so the caller writes nothing.
func applyEdits(path string, body []byte, eol string, edits []EditSpec, fuzzy bool) ([]byte, []EditReport, error) {
	reports := make([]EditReport, 0, len(edits))
	for i, e := range edits {
		next, rep, err := applyEdit(path, body, eol, e, fuzzy)
		if err != nil {
			if re, ok := err.(*result.Error); ok && len(edits) > 1 {
				re.With("edit_index", i)
			}
			return nil, nil, err
		}
		rep.Index = i
		reports = append(reports, rep)
		body = next
	}
	return body, reports, nil
}

func applyEdit(path string, body []byte, eol string, e EditSpec, fuzzy bool) ([]byte, EditReport, error) {
	var rep EditReport
	if e.Old == "" {
		return nil, rep, invalid("old_string is empty")
	}
	if e.Old == e.New {
		return nil, rep, newErr(result.CodeNoChange, "old_string and new_string are the same")
	}
	if !utf8.ValidString(e.Old) || !utf8.ValidString(e.New) {
		return nil, rep, newErr(result.CodeInvalidEncoding, "old_string and new_string must be valid UTF-8")
	}
	newText := []byte(toEOL(e.New, eol))

	rep.Match = MatchExact
	spans := findExact(body, []byte(e.Old), newText)
	if len(spans) == 0 {
		rep.Match = MatchLineEndings
		spans = findLineEndings(body, e.Old, newText)
	}
	if len(spans) == 0 && fuzzy {
		rep.Match = MatchWhitespace
		var err error
		if spans, err = findWhitespace(path, body, e.Old, e.New, eol); err != nil {
			return nil, rep, err
		}
	}
	if len(spans) == 0 {
		return nil, rep, notFound(path, body, e.Old)
	}
	if e.ExpectedCount != nil && *e.ExpectedCount != len(spans) {
		return nil, rep, newErr(result.CodeCountMismatch, "expected %d matches of old_string in %s, found %d",
			*e.ExpectedCount, path, len(spans)).
			With("expected", *e.ExpectedCount).With("actual", len(spans)).With("lines", spanLines(body, spans))
	}
	if len(spans) > 1 && !e.ReplaceAll && e.ExpectedCount == nil {
		lines := spanLines(body, spans)
		return nil, rep, newErr(result.CodeOldStringNotUnique,
			"old_string matches %d times in %s (lines %s); add context to make it unique or use replace_all",
			len(spans), path, joinInts(lines)).
			With("lines", lines).With("count", len(spans))
	}

	out, first, last := splice(body, spans)
	rep.Replacements = len(spans)
	rep.StartLine = lineAt(out, first.start)
	// Count on from the first replacement rather than from the top again:
	// in a huge file each count is a scan.
	lastStart := rep.StartLine + bytes.Count(out[first.start:last.start], []byte{'\n'})
	rep.EndLine = lastStart
	if n := len(last.repl); n > 0 {
		rep.EndLine = lastStart + bytes.Count(last.repl[:n-1], []byte{'\n'})
	}
	return out, rep, nil
}

// splice builds the new body and returns the first and last replacement
// positions in it (start offset and text).
func splice(body []byte, spans []span) ([]byte, span, span) {
	size := len(body)
	for _, s := range spans {
		size += len(s.repl) - (s.end - s.start)
	}
	out := make([]byte, 0, size)
	prev := 0
	var first, last span
	for i, s := range spans {
		out = append(out, body[prev:s.start]...)
		placed := span{start: len(out), repl: s.repl}
		if i == 0 {
			first = placed
		}
		last = placed
		out = append(out, s.repl...)
		prev = s.end
	}
	out = append(out, body[prev:]...)
	return out, first, last
}

// findExact returns every non-overlapping occurrence of old.
func findExact(body, old, repl []byte) []span {
	var spans []span
	for off := 0; ; {
		i := bytes.Index(body[off:], old)
		if i < 0 {
			return spans
		}
		spans = append(spans, span{start: off + i, end: off + i + len(old), repl: repl})
		off += i + len(old)
	}
}

// findLineEndings matches with every line ending taken as "\n" on both
// sides, and maps the matches back to the original bytes, so an LF
// old_string finds its text in a CRLF (or mixed) file and vice versa.
func findLineEndings(body []byte, old string, repl []byte) []span {
	oldLF := strings.ReplaceAll(old, "\r\n", "\n")
	hasCR := bytes.Contains(body, []byte("\r\n"))
	if !hasCR && oldLF == old {
		return nil // nothing to normalise: the exact search already failed
	}
	norm := body
	var dropped []int // offsets in norm of each "\n" whose "\r" was dropped
	if hasCR {
		norm = make([]byte, 0, len(body))
		for i := 0; i < len(body); i++ {
			if body[i] == '\r' && i+1 < len(body) && body[i+1] == '\n' {
				dropped = append(dropped, len(norm))
				continue
			}
			norm = append(norm, body[i])
		}
	}
	// orig maps an offset in norm to body: add the "\r"s dropped before it.
	orig := func(n int) int { return n + sort.SearchInts(dropped, n) }
	var spans []span
	for _, s := range findExact(norm, []byte(oldLF), repl) {
		spans = append(spans, span{start: orig(s.start), end: orig(s.end), repl: repl})
	}
	return spans
}

// lineSpan is one line of a body: body[start:end] is its text without the
// line ending, next is where the following line starts.
type lineSpan struct{ start, end, next int }

func splitLineSpans(body []byte) []lineSpan {
	var out []lineSpan
	for off := 0; off < len(body); {
		i := bytes.IndexByte(body[off:], '\n')
		if i < 0 {
			out = append(out, lineSpan{off, len(body), len(body)})
			break
		}
		end := off + i
		if end > off && body[end-1] == '\r' {
			end--
		}
		out = append(out, lineSpan{off, end, off + i + 1})
		off += i + 1
	}
	return out
}

// wsKey is a line with its whitespace normalised: runs collapsed to one
// space, ends trimmed. Two lines with the same key differ only in
// indentation or spacing.
func wsKey(s string) string { return strings.Join(strings.Fields(s), " ") }

func leadingWS(s string) string { return s[:len(s)-len(strings.TrimLeft(s, " \t"))] }

// findWhitespace matches old line by line with whitespace normalised. A match
// covers whole lines; its replacement is new re-indented by the difference
// between the file's indentation and old_string's, in the file's style.
func findWhitespace(path string, body []byte, old, new, eol string) ([]span, error) {
	oldLines := strings.Split(strings.TrimSuffix(strings.ReplaceAll(old, "\r\n", "\n"), "\n"), "\n")
	keys := make([]string, len(oldLines))
	for i, l := range oldLines {
		keys[i] = wsKey(l)
	}
	lines := splitLineSpans(body)
	var spans []span
	for i := 0; i+len(keys) <= len(lines); i++ {
		ok := true
		for j, k := range keys {
			l := lines[i+j]
			if wsKey(string(body[l.start:l.end])) != k {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		first, last := lines[i], lines[i+len(keys)-1]
		sp := span{start: first.start, end: last.end}
		newLF := strings.ReplaceAll(new, "\r\n", "\n")
		if newLF == "" {
			// Remove the lines entirely rather than leave an empty one.
			sp.end = last.next
			if sp.end == last.end && first.start > 0 {
				sp.start = first.start - len(eol)
			}
		} else {
			repl, err := reindent(strings.TrimSuffix(newLF, "\n"), oldLines, body, lines, i, eol)
			if err != nil {
				return nil, err.With("line", lineAt(body, first.start))
			}
			sp.repl = []byte(repl)
		}
		spans = append(spans, sp)
		i += len(keys) - 1
	}
	return spans, nil
}

// indentStyle is one way of indenting: a tab per level, or width spaces.
type indentStyle struct {
	tab   bool
	width int // spaces per level; 0 when unknown (no indented line seen)
}

func (st indentStyle) String() string {
	if st.tab {
		return "tabs"
	}
	return fmt.Sprintf("%d spaces", st.width)
}

// levels reads leading whitespace as indentation levels of st; ok is false
// when it mixes tabs and spaces or is not a whole number of levels.
func (st indentStyle) levels(ws string) (int, bool) {
	switch {
	case ws == "":
		return 0, true
	case st.tab:
		return len(ws), strings.Trim(ws, "\t") == ""
	case strings.Trim(ws, " ") != "" || st.width == 0:
		return 0, false
	case len(ws)%st.width != 0:
		return 0, false
	}
	return len(ws) / st.width, true
}

func (st indentStyle) indent(levels int) string {
	if st.tab {
		return strings.Repeat("\t", levels)
	}
	return strings.Repeat(" ", levels*st.width)
}

// styleOf finds the indentation style of a set of lines: tabs when the
// indented lines start with a tab, else spaces in the greatest common
// width. ok is false when they mix the two.
func styleOf(lines []string) (indentStyle, bool) {
	var tabs, spaces bool
	width := 0
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ws := leadingWS(l)
		switch {
		case ws == "":
		case strings.HasPrefix(ws, "\t"):
			tabs = true
		default:
			spaces = true
			n := len(ws) - len(strings.TrimLeft(ws, " "))
			width = gcd(width, n)
		}
	}
	if tabs && spaces {
		return indentStyle{}, false
	}
	return indentStyle{tab: tabs, width: width}, true
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// reindent moves new's lines from old_string's indentation to the file's,
// in the file's style: each line keeps its depth relative to old_string's
// first non-blank line, counted in levels of the text's own style and
// written in levels of the file's (tabs stay tabs, a 2-space file gets 2
// spaces per level). The file's style is that of the matched lines, else
// of the whole file. When a depth cannot be expressed (tabs mixed with
// spaces, uneven widths, a line left of the file's column 0) it refuses
// with indentation_conflict: it never writes mixed indentation.
func reindent(newText string, oldLines []string, body []byte, lines []lineSpan, at int, eol string) (string, *result.Error) {
	lineText := func(l lineSpan) string { return string(body[l.start:l.end]) }
	base := -1
	for j, l := range oldLines {
		if strings.TrimSpace(l) != "" {
			base = j
			break
		}
	}
	out := strings.Split(newText, "\n")
	if base < 0 {
		return strings.Join(out, eol), nil
	}
	from, to := leadingWS(oldLines[base]), leadingWS(lineText(lines[at+base]))

	conflict := func(format string, args ...any) *result.Error {
		return newErr(result.CodeIndentationConflict, format, args...).
			With("hint", "give old_string and new_string with the file's own indentation, or edit without fuzzy")
	}
	// The text's style, from old_string and new_string together.
	textStyle, ok := styleOf(append(append([]string(nil), oldLines...), out...))
	if !ok {
		return "", conflict("new_string mixes tabs and spaces in its indentation")
	}
	// The file's style: of the matched lines, else of the whole file.
	var matched, all []string
	for j := range oldLines {
		matched = append(matched, lineText(lines[at+j]))
	}
	fileStyle, ok := styleOf(matched)
	if !ok {
		return "", conflict("the matched lines mix tabs and spaces in their indentation")
	}
	if !fileStyle.tab && fileStyle.width == 0 {
		for _, l := range lines {
			all = append(all, lineText(l))
		}
		if st, ok := styleOf(all); ok {
			fileStyle = st
		}
	}
	if !fileStyle.tab && fileStyle.width == 0 {
		fileStyle = textStyle // nothing is indented: no style to keep
	}
	fromLevels, ok1 := textStyle.levels(from)
	toLevels, ok2 := fileStyle.levels(to)
	if !ok1 || !ok2 {
		return "", conflict("the indentation of old_string (%q) or of the file (%q) is not whole levels of %s", from, to, fileStyle)
	}
	for i, l := range out {
		if strings.TrimSpace(l) == "" {
			out[i] = ""
			continue
		}
		n, ok := textStyle.levels(leadingWS(l))
		if !ok {
			return "", conflict("line %d of new_string is not indented in whole levels of %s", i+1, textStyle)
		}
		depth := toLevels + n - fromLevels
		if depth < 0 {
			return "", conflict("line %d of new_string is indented left of the file's first column", i+1)
		}
		out[i] = fileStyle.indent(depth) + strings.TrimLeft(l, " \t")
	}
	return strings.Join(out, eol), nil
}

// spanLines returns the 1-based line of each span's start, counting
// incrementally so many matches in a big file stay linear.
func spanLines(body []byte, spans []span) []int {
	lines := make([]int, len(spans))
	line, off := 1, 0
	for i, s := range spans {
		line += bytes.Count(body[off:s.start], []byte{'\n'})
		off = s.start
		lines[i] = line
	}
	return lines
}

func joinInts(v []int) string {
	const show = 10
	var parts []string
	for i, n := range v {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(v)-show))
			break
		}
		parts = append(parts, fmt.Sprint(n))
	}
	return strings.Join(parts, ", ")
}
