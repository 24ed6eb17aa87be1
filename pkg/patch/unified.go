package patch

import (
	"strconv"
	"strings"
)

const devNull = "/dev/null"

// unifiedParser walks the lines of a unified diff.
type unifiedParser struct {
	lines []string // raw, a CR before the LF kept
	i     int
	strip int // -1: decide per file
}

// fileHeader is what the header lines of one file section said.
type fileHeader struct {
	line                 int    // 1-based patch line of the first header
	gitOld, gitNew       string // from "diff --git", prefixes kept
	oldName, newName     string // from ---/+++, prefixes kept
	oldEpoch, newEpoch   bool   // diff -N marks a missing side with the epoch
	newFile, deletedFile bool
	renameFrom, renameTo string
	copyFrom, copyTo     string
	isGit                bool
}

// parseUnified parses a unified diff: any number of file sections, each
// introduced by "diff --git" or by a ---/+++ pair; other lines between them
// (commit messages, "Index:" lines) are ignored, as patch(1) does.
func parseUnified(lines []string, strip int) (*Patch, error) {
	if strip < -1 {
		return nil, parseError(0, "", "strip must be -1 (automatic) or a count of path components, not %d", strip)
	}
	p := &unifiedParser{lines: lines, strip: strip}
	out := &Patch{Format: FormatUnified}
	for p.i < len(lines) {
		l := trimCR(lines[p.i])
		switch {
		case strings.HasPrefix(l, "diff --git "):
			fp, err := p.section(true)
			if err != nil {
				return nil, err
			}
			out.Files = append(out.Files, fp)
		case strings.HasPrefix(l, "--- ") && p.i+1 < len(lines) && strings.HasPrefix(lines[p.i+1], "+++ "):
			fp, err := p.section(false)
			if err != nil {
				return nil, err
			}
			out.Files = append(out.Files, fp)
		case strings.HasPrefix(l, "Binary files ") || l == "GIT binary patch":
			return nil, p.errAt(p.i, "binary patches are not supported")
		case strings.HasPrefix(l, "@@ -"):
			return nil, p.errAt(p.i, "hunk without a ---/+++ file header before it")
		default:
			p.i++
		}
	}
	if len(out.Files) == 0 {
		if len(lines) == 0 {
			return nil, parseError(0, "", "the patch is empty")
		}
		return nil, p.errAt(0, "no unified diff file header (---/+++ or diff --git) and no %q found", beginMarker)
	}
	return out, nil
}

func trimCR(s string) string { return strings.TrimSuffix(s, "\r") }

// errAt reports a parse error at line index i.
func (p *unifiedParser) errAt(i int, format string, args ...any) error {
	if i >= len(p.lines) {
		i = len(p.lines) - 1
	}
	if i < 0 {
		return parseError(0, "", format, args...)
	}
	return parseError(i+1, trimCR(p.lines[i]), format, args...)
}

// section parses one file: optional git extended headers, the ---/+++ pair
// and the hunks.
func (p *unifiedParser) section(git bool) (FilePatch, error) {
	h := fileHeader{line: p.i + 1, isGit: git}
	if git {
		h.gitOld, h.gitNew = splitGitHeader(trimCR(p.lines[p.i])[len("diff --git "):])
		p.i++
	headers:
		for p.i < len(p.lines) {
			l := trimCR(p.lines[p.i])
			switch {
			case strings.HasPrefix(l, "new file mode "):
				h.newFile = true
			case strings.HasPrefix(l, "deleted file mode "):
				h.deletedFile = true
			case strings.HasPrefix(l, "rename from "):
				h.renameFrom = unquoteName(l[len("rename from "):])
			case strings.HasPrefix(l, "rename to "):
				h.renameTo = unquoteName(l[len("rename to "):])
			case strings.HasPrefix(l, "copy from "):
				h.copyFrom = unquoteName(l[len("copy from "):])
			case strings.HasPrefix(l, "copy to "):
				h.copyTo = unquoteName(l[len("copy to "):])
			case strings.HasPrefix(l, "old mode "), strings.HasPrefix(l, "new mode "),
				strings.HasPrefix(l, "similarity index "), strings.HasPrefix(l, "dissimilarity index "),
				strings.HasPrefix(l, "index "):
				// Modes and blob ids do not change the text; the caller keeps
				// file modes as they are.
			case strings.HasPrefix(l, "Binary files ") || l == "GIT binary patch":
				return FilePatch{}, p.errAt(p.i, "binary patches are not supported")
			default:
				break headers
			}
			p.i++
		}
	}
	if p.i+1 < len(p.lines) && strings.HasPrefix(p.lines[p.i], "--- ") && strings.HasPrefix(p.lines[p.i+1], "+++ ") {
		h.oldName, h.oldEpoch = parseName(trimCR(p.lines[p.i])[4:])
		h.newName, h.newEpoch = parseName(trimCR(p.lines[p.i+1])[4:])
		p.i += 2
	}
	var hunks []Hunk
	oldEmpty, newEmpty := true, true
	for p.i < len(p.lines) && strings.HasPrefix(p.lines[p.i], "@@ ") {
		hk, oldCount, newCount, err := p.hunk()
		if err != nil {
			return FilePatch{}, err
		}
		oldEmpty = oldEmpty && oldCount == 0
		newEmpty = newEmpty && newCount == 0
		hunks = append(hunks, hk)
	}
	if !git && h.oldName == "" {
		return FilePatch{}, p.errAt(h.line-1, "missing ---/+++ file header")
	}
	return p.resolve(h, hunks, oldEmpty && len(hunks) > 0, newEmpty && len(hunks) > 0)
}

// resolve turns the headers of a section into an action and paths.
func (p *unifiedParser) resolve(h fileHeader, hunks []Hunk, oldEmpty, newEmpty bool) (FilePatch, error) {
	fp := FilePatch{Hunks: hunks, Line: h.line}
	errText := trimCR(p.lines[h.line-1])
	oldName, newName := h.oldName, h.newName
	if oldName == "" && newName == "" {
		oldName, newName = h.gitOld, h.gitNew
		if h.newFile {
			oldName = devNull
		}
		if h.deletedFile {
			newName = devNull
		}
	}
	oldNull := oldName == devNull || (h.oldEpoch && oldEmpty) || h.newFile
	newNull := newName == devNull || (h.newEpoch && newEmpty) || h.deletedFile
	if oldNull && newNull {
		return FilePatch{}, parseError(h.line, errText, "file section has neither an old nor a new file")
	}

	n := p.strip
	if n < 0 {
		n = 0
		// git's default prefixes; --no-prefix diffs and plain diff -u of
		// two files have none.
		if (oldNull || strings.HasPrefix(oldName, "a/")) && (newNull || strings.HasPrefix(newName, "b/")) {
			n = 1
		}
	}
	name := func(raw string) (string, error) {
		if raw == "" {
			return "", parseError(h.line, errText, "file section does not name its file")
		}
		s, ok := stripComponents(raw, n)
		if !ok {
			return "", parseError(h.line, errText, "cannot strip %d leading components from %q", n, raw)
		}
		return cleanPath(s, h.line, errText)
	}
	// git writes rename and copy paths without the a/ b/ prefixes, and git
	// apply strips one component less from them.
	literal := func(raw string) (string, error) {
		s, ok := stripComponents(raw, max(n-1, 0))
		if !ok {
			return "", parseError(h.line, errText, "cannot strip %d leading components from %q", n-1, raw)
		}
		return cleanPath(s, h.line, errText)
	}

	var err error
	switch {
	case oldNull:
		fp.Action = ActionAdd
		fp.Path, err = name(newName)
	case newNull:
		fp.Action = ActionDelete
		fp.Path, err = name(oldName)
	case h.renameFrom != "" || h.renameTo != "":
		fp.Action = ActionMove
		if fp.Path, err = literal(h.renameFrom); err == nil {
			fp.MoveTo, err = literal(h.renameTo)
		}
	case h.copyFrom != "" || h.copyTo != "":
		fp.Action = ActionCopy
		if fp.Path, err = literal(h.copyFrom); err == nil {
			fp.MoveTo, err = literal(h.copyTo)
		}
	default:
		fp.Action = ActionUpdate
		var o, nw string
		if o, err = name(oldName); err != nil {
			return FilePatch{}, err
		}
		if nw, err = name(newName); err != nil {
			return FilePatch{}, err
		}
		// Outside git, differing names are two copies of one file
		// (`diff -u f.orig f`): the shorter is the one to patch, as with
		// patch(1) when both exist.
		fp.Path = nw
		if len(o) < len(nw) {
			fp.Path = o
		}
	}
	if err != nil {
		return FilePatch{}, err
	}
	if fp.Action == ActionDelete {
		for _, hk := range hunks {
			for _, l := range hk.Lines {
				if l.Kind != Delete {
					return FilePatch{}, parseError(hk.Line, trimCR(p.lines[hk.Line-1]), "a hunk deleting %s must contain only removed lines", fp.Path)
				}
			}
		}
	}
	if fp.Action == ActionAdd {
		for _, hk := range hunks {
			for _, l := range hk.Lines {
				if l.Kind != Insert {
					return FilePatch{}, parseError(hk.Line, trimCR(p.lines[hk.Line-1]), "a hunk creating %s must contain only added lines", fp.Path)
				}
			}
		}
	}
	return fp, nil
}

// hunk parses one @@ header and its body, checking the line counts.
func (p *unifiedParser) hunk() (Hunk, int, int, error) {
	headerIdx := p.i
	header := trimCR(p.lines[p.i])
	oldStart, oldCount, newCount, ok := parseHunkHeader(header)
	if !ok {
		return Hunk{}, 0, 0, p.errAt(p.i, "invalid hunk header; expected @@ -a,b +c,d @@")
	}
	h := Hunk{Line: headerIdx + 1, OldStart: oldStart}
	if oldCount == 0 {
		// "-5,0" means "after line 5": the old side is empty and begins at 6.
		h.OldStart = oldStart + 1
	}
	p.i++
	oldLeft, newLeft := oldCount, newCount
	var last LineKind
	for oldLeft > 0 || newLeft > 0 {
		if p.i >= len(p.lines) {
			return Hunk{}, 0, 0, p.errAt(headerIdx, "the patch ends inside this hunk: %d old and %d new lines missing", oldLeft, newLeft)
		}
		raw := p.lines[p.i]
		l, cr := strings.CutSuffix(raw, "\r")
		kind := Context
		text := ""
		switch {
		case l == "":
			// An empty context line whose single space was stripped by an
			// editor or a mail client; git apply accepts it too.
		case l[0] == ' ' || l[0] == '-' || l[0] == '+':
			kind, text = LineKind(l[0]), l[1:]
		case l[0] == '\\':
			if !h.markNoEOL(last) {
				return Hunk{}, 0, 0, p.errAt(p.i, "no-newline marker before any line of the hunk")
			}
			p.i++
			continue
		default:
			return Hunk{}, 0, 0, p.errAt(p.i, "unexpected line in hunk (the @@ header promised %d more old and %d more new lines)", oldLeft, newLeft)
		}
		if (kind != Insert && oldLeft == 0) || (kind != Delete && newLeft == 0) {
			return Hunk{}, 0, 0, p.errAt(p.i, "hunk has more lines than its @@ header says")
		}
		if kind != Insert {
			oldLeft--
		}
		if kind != Delete {
			newLeft--
		}
		h.Lines = append(h.Lines, HunkLine{Kind: kind, Text: text, CR: cr})
		last = kind
		p.i++
	}
	if p.i < len(p.lines) && strings.HasPrefix(p.lines[p.i], `\`) {
		if !h.markNoEOL(last) {
			return Hunk{}, 0, 0, p.errAt(p.i, "no-newline marker before any line of the hunk")
		}
		p.i++
	}
	// A hunk whose header undercounts would otherwise lose its last lines
	// silently; a line that can only be a change line right after the
	// counted body means the counts are wrong.
	if p.i < len(p.lines) {
		l := trimCR(p.lines[p.i])
		overlong := (strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++ ")) ||
			(strings.HasPrefix(l, "-") && l != "--" && l != "-- " &&
				!(strings.HasPrefix(l, "--- ") && p.i+1 < len(p.lines) && strings.HasPrefix(p.lines[p.i+1], "+++ ")))
		if overlong {
			return Hunk{}, 0, 0, p.errAt(p.i, "hunk has more lines than its @@ header says")
		}
	}
	return h, oldCount, newCount, nil
}

// markNoEOL applies a "\ No newline at end of file" line to the side(s) of
// the line before it; it reports false when there is no line before it.
func (h *Hunk) markNoEOL(last LineKind) bool {
	switch last {
	case Context:
		h.OldNoEOL, h.NewNoEOL = true, true
	case Delete:
		h.OldNoEOL = true
	case Insert:
		h.NewNoEOL = true
	default:
		return false
	}
	return true
}

// parseHunkHeader reads "@@ -a[,b] +c[,d] @@ anything".
func parseHunkHeader(s string) (oldStart, oldCount, newCount int, ok bool) {
	rest, ok := strings.CutPrefix(s, "@@ -")
	if !ok {
		return 0, 0, 0, false
	}
	oldPart, rest, ok := strings.Cut(rest, " +")
	if !ok {
		return 0, 0, 0, false
	}
	newPart, rest, ok := strings.Cut(rest, " @@")
	if !ok {
		return 0, 0, 0, false
	}
	_ = rest // the function name git appends is not needed
	oldStart, oldCount, ok1 := parseRange(oldPart)
	_, newCount, ok2 := parseRange(newPart)
	return oldStart, oldCount, newCount, ok1 && ok2
}

// parseRange reads "a" or "a,b"; a missing count means 1.
func parseRange(s string) (start, count int, ok bool) {
	a, b, hasCount := strings.Cut(s, ",")
	start, err := strconv.Atoi(a)
	if err != nil || start < 0 || a[0] == '+' || a[0] == '-' {
		return 0, 0, false
	}
	count = 1
	if hasCount {
		count, err = strconv.Atoi(b)
		if err != nil || count < 0 || b[0] == '+' || b[0] == '-' {
			return 0, 0, false
		}
	}
	// Bound the counts so that a corrupt header cannot ask for absurd work.
	if start > maxLines || count > maxLines {
		return 0, 0, false
	}
	return start, count, true
}

// maxLines bounds line numbers and counts in hunk headers.
const maxLines = 1 << 30

// parseName reads a file name from a ---/+++ line: C-quoted by git when it
// holds special characters, otherwise ended by a tab before the timestamp
// that diff -u writes. It reports whether the timestamp is the epoch, which
// diff -N uses for a file that does not exist.
func parseName(s string) (name string, epoch bool) {
	var ts string
	if strings.HasPrefix(s, `"`) {
		if q, err := strconv.QuotedPrefix(s); err == nil {
			if u, err := strconv.Unquote(q); err == nil {
				name, ts = u, s[len(q):]
				return name, isEpoch(strings.TrimSpace(ts))
			}
		}
	}
	name, ts, _ = strings.Cut(s, "\t")
	return strings.TrimRight(name, " "), isEpoch(ts)
}

func isEpoch(ts string) bool {
	return strings.HasPrefix(ts, "1970-01-01 00:00:00") || strings.HasSuffix(ts, " 1970")
}

// unquoteName reads a name from a "rename from" style line.
func unquoteName(s string) string {
	if strings.HasPrefix(s, `"`) {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}

// splitGitHeader splits the "a/x b/y" of a "diff --git" line. Names with
// spaces make that ambiguous; git resolves it by the two names being equal
// after their prefixes, which holds for everything but renames and copies,
// whose names come from their own header lines anyway.
func splitGitHeader(s string) (string, string) {
	if strings.HasPrefix(s, `"`) {
		if q, err := strconv.QuotedPrefix(s); err == nil {
			first, _ := strconv.Unquote(q)
			return first, unquoteName(strings.TrimSpace(s[len(q):]))
		}
	}
	if i := strings.Index(s, ` "`); i >= 0 && strings.HasSuffix(s, `"`) {
		return s[:i], unquoteName(s[i+1:])
	}
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' {
			continue
		}
		a, b := s[:i], s[i+1:]
		if _, ra, ok := strings.Cut(a, "/"); ok {
			if _, rb, ok := strings.Cut(b, "/"); ok && ra == rb {
				return a, b
			}
		}
		if a == b {
			return a, b
		}
	}
	if a, b, ok := strings.Cut(s, " "); ok {
		return a, b
	}
	return s, ""
}

// stripComponents removes n leading slash-separated components, treating
// runs of slashes as one, as patch -pN does.
func stripComponents(s string, n int) (string, bool) {
	for ; n > 0; n-- {
		i := strings.IndexByte(s, '/')
		if i < 0 {
			return "", false
		}
		s = strings.TrimLeft(s[i+1:], "/")
	}
	return s, true
}
