package patch

import (
	"strings"
)

// Markers of the agent format. Marker lines are recognised with surrounding
// whitespace trimmed, because models pad them; hunk body lines are not
// trimmed, since their leading character is their meaning.
const (
	beginMarker  = "*** Begin Patch"
	endMarker    = "*** End Patch"
	addMarker    = "*** Add File: "
	deleteMarker = "*** Delete File: "
	updateMarker = "*** Update File: "
	moveMarker   = "*** Move to: "
	eofMarker    = "*** End of File"
)

// agentParser walks the lines of an agent-format patch.
type agentParser struct {
	lines []string // without trailing CRs
	cr    []bool   // whether each line ended in CRLF
	i     int      // index of the next line
	end   int      // index of the *** End Patch line
}

// parseAgent parses a `*** Begin Patch` patch. lines are the raw lines of the
// whole input, so that reported line numbers match what the caller sent.
func parseAgent(raw []string) (*Patch, error) {
	p := &agentParser{lines: make([]string, len(raw)), cr: make([]bool, len(raw))}
	for i, l := range raw {
		p.lines[i], p.cr[i] = strings.CutSuffix(l, "\r")
	}
	first, last := 0, len(p.lines)-1
	for first <= last && strings.TrimSpace(p.lines[first]) == "" {
		first++
	}
	for last >= first && strings.TrimSpace(p.lines[last]) == "" {
		last--
	}
	// Models sometimes hand over the shell heredoc they would have run:
	// <<'EOF' … EOF around the patch. The wrapper carries no meaning.
	if first <= last && strings.HasPrefix(strings.TrimSpace(p.lines[first]), "<<") {
		word := strings.Trim(strings.TrimSpace(p.lines[first])[2:], `-'" `)
		first++
		if first < last && strings.TrimSpace(p.lines[last]) == word {
			last--
			for last >= first && strings.TrimSpace(p.lines[last]) == "" {
				last--
			}
		}
	}
	if first > last || strings.TrimSpace(p.lines[first]) != beginMarker {
		return nil, p.errAt(first, "the first line of the patch must be %q", beginMarker)
	}
	if last == first || strings.TrimSpace(p.lines[last]) != endMarker {
		return nil, p.errAt(last, "the last line of the patch must be %q", endMarker)
	}
	p.i, p.end = first+1, last

	out := &Patch{Format: FormatAgent}
	for p.i < p.end {
		t := strings.TrimSpace(p.lines[p.i])
		if t == "" {
			p.i++
			continue
		}
		fp, err := p.fileOp(t)
		if err != nil {
			return nil, err
		}
		out.Files = append(out.Files, fp)
	}
	if len(out.Files) == 0 {
		return nil, p.errAt(p.end, "the patch contains no file operations")
	}
	return out, nil
}

// errAt reports a parse error at line index i (clamped into the input).
func (p *agentParser) errAt(i int, format string, args ...any) error {
	if i >= len(p.lines) {
		i = len(p.lines) - 1
	}
	if i < 0 {
		return parseError(0, "", format, args...)
	}
	return parseError(i+1, p.lines[i], format, args...)
}

// fileOp parses one Add, Delete or Update section starting at p.i, whose
// trimmed text is t.
func (p *agentParser) fileOp(t string) (FilePatch, error) {
	start := p.i
	header := p.lines[start]
	mkpath := func(name string) (string, error) {
		return cleanPath(strings.TrimSpace(name), start+1, header)
	}
	switch {
	case strings.HasPrefix(t, addMarker):
		name, err := mkpath(t[len(addMarker):])
		if err != nil {
			return FilePatch{}, err
		}
		p.i++
		return FilePatch{Action: ActionAdd, Path: name, Overwrite: true, Line: start + 1, Hunks: p.addLines(start + 1)}, nil

	case strings.HasPrefix(t, deleteMarker):
		name, err := mkpath(t[len(deleteMarker):])
		if err != nil {
			return FilePatch{}, err
		}
		p.i++
		return FilePatch{Action: ActionDelete, Path: name, Line: start + 1}, nil

	case strings.HasPrefix(t, updateMarker):
		name, err := mkpath(t[len(updateMarker):])
		if err != nil {
			return FilePatch{}, err
		}
		fp := FilePatch{Action: ActionUpdate, Path: name, Line: start + 1}
		p.i++
		if p.i < p.end {
			if mt := strings.TrimSpace(p.lines[p.i]); strings.HasPrefix(mt, moveMarker) {
				dest, err := cleanPath(strings.TrimSpace(mt[len(moveMarker):]), p.i+1, p.lines[p.i])
				if err != nil {
					return FilePatch{}, err
				}
				fp.Action, fp.MoveTo, fp.Overwrite = ActionMove, dest, true
				p.i++
			}
		}
		for p.i < p.end {
			t := strings.TrimSpace(p.lines[p.i])
			if t == "" {
				p.i++
				continue
			}
			if strings.HasPrefix(t, "***") {
				break
			}
			h, err := p.chunk(len(fp.Hunks) == 0)
			if err != nil {
				return FilePatch{}, err
			}
			fp.Hunks = append(fp.Hunks, h)
		}
		// A move with no chunks is a plain rename, which is useful; an
		// update with none says nothing and is most likely a truncated patch.
		if len(fp.Hunks) == 0 && fp.Action != ActionMove {
			return FilePatch{}, p.errAt(start, "update of %s contains no hunks", name)
		}
		return fp, nil
	}
	return FilePatch{}, p.errAt(start, "%q is not a valid file operation; expected %q, %q or %q followed by a path",
		t, strings.TrimSpace(addMarker), strings.TrimSpace(deleteMarker), strings.TrimSpace(updateMarker))
}

// addLines collects the + lines of an Add File section as one hunk of
// insertions. A blank line between + lines is taken as an empty added line,
// because models drop the lone "+" of an empty line.
func (p *agentParser) addLines(headerLine int) []Hunk {
	h := Hunk{Line: headerLine}
	for p.i < p.end {
		l := p.lines[p.i]
		if strings.HasPrefix(l, "+") {
			h.Lines = append(h.Lines, HunkLine{Kind: Insert, Text: l[1:], CR: p.cr[p.i]})
			p.i++
			continue
		}
		if strings.TrimSpace(l) == "" {
			j := p.i
			for j < p.end && strings.TrimSpace(p.lines[j]) == "" {
				j++
			}
			if j < p.end && strings.HasPrefix(p.lines[j], "+") {
				for ; p.i < j; p.i++ {
					h.Lines = append(h.Lines, HunkLine{Kind: Insert, CR: p.cr[p.i]})
				}
				continue
			}
		}
		break
	}
	return []Hunk{h}
}

// isFileMarker reports whether l starts a new file section even when padded
// with whitespace, which would otherwise read as a context line.
func isFileMarker(l string) bool {
	t := strings.TrimSpace(l)
	return t == endMarker || strings.HasPrefix(t, addMarker) || strings.HasPrefix(t, deleteMarker) || strings.HasPrefix(t, updateMarker)
}

// chunk parses one @@ chunk of an Update File section. The first chunk of a
// file may omit its @@ line.
func (p *agentParser) chunk(first bool) (Hunk, error) {
	h := Hunk{Line: p.i + 1}
	sawHeader := false
	for p.i < p.end {
		l := p.lines[p.i]
		tr := strings.TrimRight(l, " \t")
		if tr == "@@" {
			sawHeader = true
			p.i++
			continue
		}
		if rest, ok := strings.CutPrefix(l, "@@ "); ok {
			// Several anchors in a row (class, then method) narrow the search
			// step by step.
			if a := strings.TrimSpace(rest); a != "" {
				h.Anchors = append(h.Anchors, a)
			}
			sawHeader = true
			p.i++
			continue
		}
		break
	}
	if !sawHeader && !first {
		return Hunk{}, p.errAt(p.i, "expected an @@ line to start the next chunk")
	}
	for p.i < p.end {
		l := p.lines[p.i]
		if strings.TrimSpace(l) == eofMarker {
			if len(h.Lines) == 0 {
				return Hunk{}, p.errAt(p.i, "%q before any line of the chunk", eofMarker)
			}
			h.EndOfFile = true
			p.i++
			break
		}
		if isFileMarker(l) {
			break
		}
		if l == "" {
			// An empty context line whose single space was stripped.
			h.Lines = append(h.Lines, HunkLine{Kind: Context})
			p.i++
			continue
		}
		switch l[0] {
		case ' ', '-', '+':
			h.Lines = append(h.Lines, HunkLine{Kind: LineKind(l[0]), Text: l[1:], CR: p.cr[p.i]})
			p.i++
			continue
		}
		if len(h.Lines) == 0 {
			return Hunk{}, p.errAt(p.i, "unexpected line in update chunk: every line must start with ' ' (context), '-' (removed) or '+' (added)")
		}
		break
	}
	if len(h.Lines) == 0 {
		return Hunk{}, p.errAt(p.i, "update chunk contains no lines")
	}
	return h, nil
}
